#include "cli_numbers.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "engine/util/printable.h"

namespace paralab::app {

namespace {

// The argument as it is quoted back: shortened, control characters escaped.
std::string quoted(const std::string& text) {
    return "'" + printable(text.size() > 40 ? text.substr(0, 40) + "..." : text) + "'";
}

std::string option_name(const std::string& name) {
    // CLI11 names an option by its first name ("--steps"); a positional one by itself.
    return name.substr(0, name.find(','));
}

template <class T>
bool read_whole(const std::string& text, T& value) {
    const char* end = text.data() + text.size();
    const auto [at, ec] = std::from_chars(text.data(), end, value);
    return ec == std::errc() && at == end;
}

std::string number_text(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return buf;
}

}  // namespace

int64_t parse_integer_argument(const std::string& name, const std::string& text, int64_t min, int64_t max) {
    int64_t value = 0;
    if (!read_whole(text, value) || value < min || value > max)
        throw CLI::ValidationError(option_name(name), "expected an integer from " + std::to_string(min) + " to " +
                                                          std::to_string(max) + ", got " + quoted(text));
    return value;
}

uint64_t parse_unsigned_argument(const std::string& name, const std::string& text, uint64_t max) {
    uint64_t value = 0;
    // from_chars into an unsigned type refuses a sign: "-1" is not 2^64 - 1.
    if (!read_whole(text, value) || value > max)
        throw CLI::ValidationError(option_name(name),
                                   "expected an integer from 0 to " + std::to_string(max) + ", got " + quoted(text));
    return value;
}

double parse_number_argument(const std::string& name, const std::string& text, double min, double max) {
    double value = 0;
    if (!read_whole(text, value) || !std::isfinite(value) || value < min || value > max)
        throw CLI::ValidationError(option_name(name), "expected a number from " + number_text(min) + " to " +
                                                          number_text(max) + ", got " + quoted(text));
    return value;
}

CLI::Option* add_integer_option(CLI::App* app, const std::string& name, int64_t& into, int64_t min, int64_t max,
                                const std::string& help) {
    return app
        ->add_option_function<std::string>(
            name, [&into, name, min, max](const std::string& text) { into = parse_integer_argument(name, text, min, max); },
            help + " (" + std::to_string(min) + " to " + std::to_string(max) + ")")
        ->type_name("INT");
}

CLI::Option* add_integer_option(CLI::App* app, const std::string& name, int& into, int min, int max,
                                const std::string& help) {
    return app
        ->add_option_function<std::string>(
            name,
            [&into, name, min, max](const std::string& text) {
                into = static_cast<int>(parse_integer_argument(name, text, min, max));
            },
            help + " (" + std::to_string(min) + " to " + std::to_string(max) + ")")
        ->type_name("INT");
}

CLI::Option* add_unsigned_option(CLI::App* app, const std::string& name, uint64_t& into, uint64_t max,
                                 const std::string& help) {
    return app
        ->add_option_function<std::string>(
            name, [&into, name, max](const std::string& text) { into = parse_unsigned_argument(name, text, max); },
            help + " (0 to " + std::to_string(max) + ")")
        ->type_name("UINT");
}

CLI::Option* add_number_option(CLI::App* app, const std::string& name, double& into, double min, double max,
                               const std::string& help) {
    return app
        ->add_option_function<std::string>(
            name, [&into, name, min, max](const std::string& text) { into = parse_number_argument(name, text, min, max); },
            help + " (" + number_text(min) + " to " + number_text(max) + ")")
        ->type_name("NUMBER");
}

}  // namespace paralab::app
