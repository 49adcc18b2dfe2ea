// Numbers on the command line read strictly: the whole argument one integer (or one finite
// number) within the option's range, else refused with that range ("--steps: expected an
// integer from 1 to 9223372036854775807, got '1e20'"). Nothing is clamped, wrapped or rounded:
// "-1" is no seed, "1e20" no step count, "nan" no timeout.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace paralab::app {

// The value of `text` for option `name`, or CLI::ValidationError naming the accepted range.
int64_t parse_integer_argument(const std::string& name, const std::string& text, int64_t min, int64_t max);
uint64_t parse_unsigned_argument(const std::string& name, const std::string& text, uint64_t max);
double parse_number_argument(const std::string& name, const std::string& text, double min, double max);

// Options whose argument is read by the functions above into `into`.
CLI::Option* add_integer_option(CLI::App* app, const std::string& name, int64_t& into, int64_t min, int64_t max,
                                const std::string& help);
CLI::Option* add_integer_option(CLI::App* app, const std::string& name, int& into, int min, int max,
                                const std::string& help);
CLI::Option* add_unsigned_option(CLI::App* app, const std::string& name, uint64_t& into, uint64_t max,
                                 const std::string& help);
CLI::Option* add_number_option(CLI::App* app, const std::string& name, double& into, double min, double max,
                               const std::string& help);

}  // namespace paralab::app
