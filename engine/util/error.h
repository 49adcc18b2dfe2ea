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

// A model whose shapes do not fit: the message names the layer and both shapes.
class ShapeError : public Error {
public:
    using Error::Error;
};

// Bad configuration value (experiment file, layer option, optimizer option).
class ConfigError : public Error {
public:
    using Error::Error;
};

// A device ran out of memory or could not provide an allocation.
class OutOfMemoryError : public Error {
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
