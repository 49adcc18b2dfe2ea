// Reading a JSON object field by field with the errors docs/experiment-format.md promises: every error
// names the JSON path and what was expected ("model.layers[3].out: expected a positive integer,
// got -4"), and a key nobody read is refused with the nearest valid key suggested.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace paralab::run {

class JsonObjectReader {
public:
    // Throws ConfigError when `value` is not an object.
    JsonObjectReader(const nlohmann::json& value, std::string path);

    const std::string& path() const { return m_path; }
    std::string path_of(const std::string& key) const;
    bool has(const std::string& key) const;
    const nlohmann::json& raw(const std::string& key);  // marks the key as read

    std::optional<int64_t> integer(const std::string& key, int64_t min, int64_t max = INT64_MAX);
    int64_t integer(const std::string& key, int64_t fallback, int64_t min, int64_t max);
    std::optional<double> number(const std::string& key, double min, double max,
                                 bool min_inclusive = true);
    double number(const std::string& key, double fallback, double min, double max,
                  bool min_inclusive = true);
    bool boolean(const std::string& key, bool fallback);
    std::string string(const std::string& key, const std::string& fallback);
    // A string that must be one of `allowed`.
    std::string choice(const std::string& key, const std::string& fallback,
                       const std::vector<std::string>& allowed);
    std::optional<std::string> required_choice(const std::string& key,
                                               const std::vector<std::string>& allowed);

    // Refuses keys that were never read, suggesting the nearest of the keys that were. A key in
    // `other_variants` (valid for another type of this object) is refused as "not an option of
    // <variant>", e.g. "model.layers[0].kernel: not an option of a linear layer".
    void finish(const std::vector<std::string>& other_variants = {},
                const std::string& variant = "") const;

    [[noreturn]] void fail(const std::string& key, const std::string& message) const;

private:
    const nlohmann::json& m_value;
    std::string m_path;
    std::set<std::string> m_read;
};

// How deep arrays and objects may nest in a JSON text ParaLab reads: an experiment's deepest
// model (residual blocks 64 deep) takes about 130 levels. Deeper text is refused before a
// value is built, so that nothing that walks a value recursively (dump, comparison) can
// overflow the stack.
constexpr size_t kMaxJsonDepth = 512;

// The JSON value of `text`, read from `where` (a file's path, "run 3's config"). Refused with a
// ConfigError: text that is not JSON ("WHERE:LINE:COL: not valid JSON (...)"), a number beyond a
// double ("WHERE:LINE:COL: number out of range (...)"), nesting deeper than `max_depth`
// ("WHERE:LINE:COL: nested deeper than 512 levels"), and a key that appears twice in one object
// ("WHERE: model.layers[0].out: duplicate key; a key appears once in an object"). Linear in
// the text's length.
nlohmann::json parse_json_text(const std::string& text, const std::string& where,
                               size_t max_depth = kMaxJsonDepth);

// The JSON of the file at `path` (an experiment, a cluster: `kind` names it in messages), at
// most 16 MiB, read by parse_json_text. Throws ConfigError "PATH: cannot open the KIND",
// "PATH: larger than 16 MiB ..." or one of parse_json_text's.
nlohmann::json read_json_file(const std::string& path, const std::string& kind);


// A short description of a JSON value for messages: -4, "abc", an array, an object, null.
std::string describe_json(const nlohmann::json& v);

// The candidate closest to `word` by edit distance, or "" when none is reasonably close.
std::string nearest_word(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace paralab::run
