// The error every CUDA-backend call throws: a failed CUDA runtime, cuBLAS, cuDNN or NCCL call,
// with the statement that failed, where, and the library's own words for the status. Free of
// CUDA types, so that the engine and the GUI can catch it without the toolkit's headers.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace paralab::kernels::gpu {

class GpuError : public std::runtime_error {
public:
    // library: "CUDA", "cuBLAS", "cuDNN", "NCCL"; status: the library's numeric code;
    // status_text: its name and description ("cudaErrorMemoryAllocation: out of memory").
    GpuError(std::string library, int status, std::string status_text, std::string statement,
             std::string file, int line)
        : std::runtime_error(library + " error " + std::to_string(status) + " (" + status_text +
                             ") in `" + statement + "` at " + file + ":" + std::to_string(line)),
          m_library(std::move(library)),
          m_status(status),
          m_status_text(std::move(status_text)),
          m_statement(std::move(statement)),
          m_file(std::move(file)),
          m_line(line) {}

    const std::string& library() const { return m_library; }
    int status() const { return m_status; }
    const std::string& status_text() const { return m_status_text; }
    const std::string& statement() const { return m_statement; }
    const std::string& file() const { return m_file; }
    int line() const { return m_line; }

private:
    std::string m_library;
    int m_status;
    std::string m_status_text;
    std::string m_statement;
    std::string m_file;
    int m_line;
};

}  // namespace paralab::kernels::gpu
