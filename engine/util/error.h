// Error types thrown by the engine. Libraries throw; main() and the GUI decide what to do.
#pragma once

#include <stdexcept>
#include <string>

namespace paralab {

// Base of every error the engine raises on purpose.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A model whose shapes do not fit: the message names the layer and both shapes; `path` is the
// layer's JSON path ("model.layers[3]") when the model knows it.
class ShapeError : public Error {
public:
    explicit ShapeError(const std::string& message) : Error(message) {}
    ShapeError(std::string path, const std::string& message) : Error(message), m_path(std::move(path)) {}

    const std::string& path() const { return m_path; }

private:
    std::string m_path;
};

// Bad configuration value (experiment file, layer option, optimizer option). An error about
// one value carries its JSON path as data ("strategy.split[1]"), so that the GUI places the
// message under that field; what() is "path: reason".
class ConfigError : public Error {
public:
    explicit ConfigError(const std::string& message) : Error(message), m_reason(message) {}
    ConfigError(std::string path, const std::string& reason)
        : Error(path.empty() ? reason : path + ": " + reason), m_path(std::move(path)), m_reason(reason) {}

    const std::string& path() const { return m_path; }      // "" when it names no value
    const std::string& reason() const { return m_reason; }  // the message without the path

private:
    std::string m_path;
    std::string m_reason;
};

// A device ran out of memory or could not provide an allocation.
class OutOfMemoryError : public Error {
public:
    using Error::Error;
};

// A GPU graph being recorded needed memory that only the system allocator could give
// (Allocator::begin_pool): the recording is abandoned and the work runs eagerly.
class PoolMissError : public Error {
public:
    using Error::Error;
};

namespace detail {
[[noreturn]] void throw_check_failure(const char* expr, const char* file, int line,
                                      const std::string& message);
}  // namespace detail

}  // namespace paralab

// Internal invariant check: throws paralab::Error with the statement, file and line.
#define PARALAB_CHECK(cond, msg)                                                    \
    do {                                                                            \
        if (!(cond)) ::paralab::detail::throw_check_failure(#cond, __FILE__, __LINE__, (msg)); \
    } while (0)
