// A strategy's options as data (docs/strategies.md, "The registry"): each strategy declares its
// options (key, type, default, range, help) beside its code; the parser, `to_json`, the
// Strategy tab's form and the file-format page are all made from these declarations.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace paralab::config {

enum class OptionKind {
    boolean,     // true / false
    integer,     // a whole number in [min, max]
    number,      // a number in [min, max] (or (min, max] when !min_inclusive)
    choice,      // one of `choices`
    index_list,  // an array of non-negative integers (layer indices)
};

// The value of one option: bool, int64_t, double, std::string or a list of indices, by kind.
using OptionValue = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>>;

struct OptionSpec {
    std::string key{};  // "bucket_mb": the JSON key under "strategy"
    OptionKind kind = OptionKind::boolean;
    OptionValue fallback{};  // the default; an index_list's is empty and means "automatic"
    double min = 0, max = INFINITY;
    bool min_inclusive = true;
    std::vector<std::string> choices{};
    std::string label{};  // the form's label: "Bucket size"
    std::string unit{};   // "MiB", "ms" or ""
    std::string help{};   // one sentence: the form's tooltip and the file-format page
    // The form shows the option only while option `shown_when_key` is `shown_when_value`
    // (param_server's staleness: only in async mode). The file may give it at any time.
    std::string shown_when_key{}, shown_when_value{};
};

// The options of a strategy file's `strategy` object. The parser fills in every option of the
// type, defaults included (an index_list only when the file gives it).
using OptionValues = std::map<std::string, OptionValue>;

// The kind's name as the file-format page writes it: "boolean", "integer", ...
const char* option_kind_name(OptionKind kind);

}  // namespace paralab::config
