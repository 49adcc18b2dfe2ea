// What the fuzz targets share: a fuzz input as a file for readers that take a path.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace paralab::fuzz {

// The bytes in an anonymous in-memory file (memfd), named by "/proc/self/fd/N": a regular
// file that every open of the path reads from its start, with nothing left on disk.
class InputFile {
public:
    InputFile(const uint8_t* data, size_t size) {
        m_fd = ::memfd_create("paralab-fuzz", MFD_CLOEXEC);
        if (m_fd < 0) std::abort();
        size_t done = 0;
        while (done < size) {
            const ssize_t n = ::write(m_fd, data + done, size - done);
            if (n <= 0) std::abort();
            done += static_cast<size_t>(n);
        }
        m_path = "/proc/self/fd/" + std::to_string(m_fd);
    }
    ~InputFile() { ::close(m_fd); }
    InputFile(const InputFile&) = delete;
    InputFile& operator=(const InputFile&) = delete;

    const std::string& path() const { return m_path; }

private:
    int m_fd = -1;
    std::string m_path;
};

}  // namespace paralab::fuzz
