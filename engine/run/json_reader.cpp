#include "engine/run/json_reader.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <unordered_set>

#include "engine/util/error.h"
#include "engine/util/printable.h"

namespace paralab::run {

using nlohmann::json;

std::string describe_json(const json& v) {
    switch (v.type()) {
        case json::value_t::null: return "null";
        case json::value_t::object: return "an object";
        case json::value_t::array: return "an array";
        case json::value_t::string: {
            std::string s = v.get<std::string>();
            if (s.size() > 40) s = s.substr(0, 40) + "...";
            return "\"" + printable(s) + "\"";
        }
        default: return v.dump();
    }
}

std::string nearest_word(const std::string& word, const std::vector<std::string>& candidates) {
    // No key or value is this long: a suggestion would cost time (the distance is quadratic)
    // and help no one.
    if (word.size() > 64) return "";
    auto distance = [](const std::string& a, const std::string& b) {
        std::vector<size_t> row(b.size() + 1);
        for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
        for (size_t i = 1; i <= a.size(); ++i) {
            size_t diag = row[0];
            row[0] = i;
            for (size_t j = 1; j <= b.size(); ++j) {
                const size_t up = row[j];
                row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                                   diag + (std::tolower(a[i - 1]) == std::tolower(b[j - 1]) ? 0 : 1)});
                diag = up;
            }
        }
        return row[b.size()];
    };
    std::string best;
    size_t best_d = SIZE_MAX;
    for (const auto& c : candidates) {
        const size_t d = distance(word, c);
        if (d < best_d) best_d = d, best = c;
    }
    // Close enough to be a typo: at most a third of the word changed.
    return best_d <= std::max<size_t>(2, word.size() / 3) ? best : "";
}

JsonObjectReader::JsonObjectReader(const json& value, std::string path)
    : m_value(value), m_path(std::move(path)) {
    if (!value.is_object())
        throw ConfigError(m_path, "expected an object, got " + describe_json(value));
}

std::string JsonObjectReader::path_of(const std::string& key) const {
    return m_path.empty() ? key : m_path + "." + key;
}

bool JsonObjectReader::has(const std::string& key) const {
    return m_value.contains(key) && !m_value.at(key).is_null();
}

const json& JsonObjectReader::raw(const std::string& key) {
    m_read.insert(key);
    static const json null_value;
    return m_value.contains(key) ? m_value.at(key) : null_value;
}

void JsonObjectReader::fail(const std::string& key, const std::string& message) const {
    throw ConfigError(path_of(key), message);
}

std::optional<int64_t> JsonObjectReader::integer(const std::string& key, int64_t min, int64_t max) {
    const json& v = raw(key);
    if (v.is_null()) return std::nullopt;
    const bool integral = v.is_number_integer() ||
                          (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
                           std::abs(v.get<double>()) < 9e15);
    std::string expected = min == 1     ? "a positive integer"
                           : min == 0   ? "a non-negative integer"
                                        : "an integer";
    // A small range is said whole ("from 1 to 2"); a size's bound only to a value above it.
    const bool above = v.is_number() && v.get<double>() > static_cast<double>(max);
    if (max != INT64_MAX && (max - min < (int64_t{1} << 20) || above))
        expected = "an integer from " + std::to_string(min) + " to " + std::to_string(max);
    // An integer beyond int64 (2^64 - 1 as a seed) is refused, not clamped.
    if (!integral || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
        fail(key, "expected " + expected + ", got " + describe_json(v));
    const int64_t value = v.is_number_float() ? static_cast<int64_t>(v.get<double>()) : v.get<int64_t>();
    if (value < min || value > max) fail(key, "expected " + expected + ", got " + describe_json(v));
    return value;
}

int64_t JsonObjectReader::integer(const std::string& key, int64_t fallback, int64_t min, int64_t max) {
    return integer(key, min, max).value_or(fallback);
}

std::optional<double> JsonObjectReader::number(const std::string& key, double min, double max,
                                               bool min_inclusive) {
    const json& v = raw(key);
    if (v.is_null()) return std::nullopt;
    auto range = [&] {
        auto text = [](double x) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%g", x);
            return std::string(buf);
        };
        // Built with += : GCC 12 warns (-Wrestrict, a false positive) on char* + std::string.
        std::string lo = min_inclusive ? "[" : "(";
        lo += text(min);
        std::string hi = std::isinf(max) ? "inf)" : text(max);
        if (!std::isinf(max)) hi += "]";
        if (min == 0 && !min_inclusive && std::isinf(max)) return std::string("a positive number");
        if (min == 0 && min_inclusive && std::isinf(max)) return std::string("a non-negative number");
        return "a number in " + lo + ", " + hi;
    };
    if (!v.is_number()) fail(key, "expected " + range() + ", got " + describe_json(v));
    const double value = v.get<double>();
    if (!std::isfinite(value) || value < min || (!min_inclusive && value == min) || value > max)
        fail(key, "expected " + range() + ", got " + describe_json(v));
    return value;
}

double JsonObjectReader::number(const std::string& key, double fallback, double min, double max,
                                bool min_inclusive) {
    return number(key, min, max, min_inclusive).value_or(fallback);
}

bool JsonObjectReader::boolean(const std::string& key, bool fallback) {
    const json& v = raw(key);
    if (v.is_null()) return fallback;
    if (!v.is_boolean()) fail(key, "expected true or false, got " + describe_json(v));
    return v.get<bool>();
}

std::string JsonObjectReader::string(const std::string& key, const std::string& fallback) {
    const json& v = raw(key);
    if (v.is_null()) return fallback;
    if (!v.is_string()) fail(key, "expected a string, got " + describe_json(v));
    return v.get<std::string>();
}

std::optional<std::string> JsonObjectReader::required_choice(const std::string& key,
                                                             const std::vector<std::string>& allowed) {
    const json& v = raw(key);
    if (v.is_null()) return std::nullopt;
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    if (!v.is_string()) fail(key, "expected one of " + list + ", got " + describe_json(v));
    const std::string s = v.get<std::string>();
    if (std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
        const std::string near = nearest_word(s, allowed);
        fail(key, "unknown value " + describe_json(v) +
                      (near.empty() ? "" : " (did you mean \"" + near + "\"?)") +
                      "; expected one of " + list);
    }
    return s;
}

std::string JsonObjectReader::choice(const std::string& key, const std::string& fallback,
                                     const std::vector<std::string>& allowed) {
    return required_choice(key, allowed).value_or(fallback);
}

void JsonObjectReader::finish(const std::vector<std::string>& other_variants,
                              const std::string& variant) const {
    const std::vector<std::string> valid(m_read.begin(), m_read.end());
    for (const auto& [key, value] : m_value.items()) {
        if (m_read.count(key)) continue;
        if (std::find(other_variants.begin(), other_variants.end(), key) != other_variants.end())
            throw ConfigError(path_of(key), "not an option of " +
                              (variant.empty() ? "this " + m_path : variant));
        const std::string near = nearest_word(key, valid);
        std::string list;
        for (const auto& k : m_read) list += (list.empty() ? "" : ", ") + k;
        // A key is named in the path: a long one shortened as describe_json shortens strings.
        const std::string shown = printable(key.size() > 40 ? key.substr(0, 40) + "..." : key);
        throw ConfigError(m_path.empty() ? shown : m_path + "." + shown, "unknown key" +
                          (near.empty() ? "" : " (did you mean \"" + near + "\"?)") +
                          "; valid keys here: " + list);
    }
}

namespace {

// nlohmann's DOM builder, keeping where and why parsing failed (its number overflow, error 406
// "1e99999", carries no position; its SAX call does), refusing duplicate keys and nesting past
// a depth. Each open array or object is a frame: the path of a value is read off the frames.
struct JsonDomWithPosition {
    JsonDomWithPosition(json& result, size_t max_depth) : dom(result, false), max_depth(max_depth) {}
    nlohmann::detail::json_sax_dom_parser<json> dom;
    size_t max_depth;
    bool failed = false;
    size_t position = 0;
    std::string token, message;
    int error_id = 0;
    std::string refusal;  // a duplicate key or a depth: the message, after the place

    struct Frame {
        bool object = false;
        std::unordered_set<std::string> keys;  // an object's keys so far
        std::string key;                       // an object's current key
        size_t next = 0;                       // an array's next index
    };
    std::vector<Frame> frames;

    std::string path() const {
        std::string p;
        for (const Frame& f : frames) {
            if (f.object) {
                if (!p.empty()) p += '.';
                p += f.key.size() > 40 ? f.key.substr(0, 40) + "..." : f.key;
            } else if (f.next > 0) {
                p += "[" + std::to_string(f.next - 1) + "]";
            }
        }
        return printable(p);
    }
    // A value starts: an array counts its element.
    void value() {
        if (!frames.empty() && !frames.back().object) ++frames.back().next;
    }
    bool open(bool object) {
        value();
        if (frames.size() >= max_depth) {
            failed = true;
            refusal = "nested deeper than " + std::to_string(max_depth) + " levels of arrays and objects";
            return false;
        }
        frames.push_back(Frame{object, {}, {}, 0});
        return true;
    }

    bool null() { return value(), dom.null(); }
    bool boolean(bool v) { return value(), dom.boolean(v); }
    bool number_integer(json::number_integer_t v) { return value(), dom.number_integer(v); }
    bool number_unsigned(json::number_unsigned_t v) { return value(), dom.number_unsigned(v); }
    bool number_float(json::number_float_t v, const std::string& text) { return value(), dom.number_float(v, text); }
    bool string(std::string& v) { return value(), dom.string(v); }
    bool binary(json::binary_t& v) { return value(), dom.binary(v); }
    bool start_object(size_t n) { return open(true) && dom.start_object(n); }
    bool key(std::string& v) {
        Frame& f = frames.back();
        f.key = v;
        if (!f.keys.insert(v).second) {
            failed = true;
            refusal = path() + ": duplicate key; a key appears once in an object";
            return false;
        }
        return dom.key(v);
    }
    bool end_object() {
        frames.pop_back();
        return dom.end_object();
    }
    bool start_array(size_t n) { return open(false) && dom.start_array(n); }
    bool end_array() {
        frames.pop_back();
        return dom.end_array();
    }
    template <class Exception>
    bool parse_error(size_t at, const std::string& last_token, const Exception& ex) {
        failed = true;
        position = at;
        token = last_token;
        message = ex.what();
        error_id = ex.id;
        return false;
    }
};

}  // namespace

nlohmann::json parse_json_text(const std::string& s, const std::string& where, size_t max_depth) {
    json j;
    JsonDomWithPosition sax(j, max_depth);
    json::sax_parse(s, &sax);
    if (!sax.failed) return j;
    if (!sax.refusal.empty()) throw ConfigError(where + ": " + sax.refusal);
    // nlohmann reports a byte offset; turn it into line and column for people. A syntax
    // error is placed where the parser stopped, a number too large for a double (1e99999) at
    // its first digit.
    const size_t at = sax.error_id == 406 && sax.position >= sax.token.size() ? sax.position - sax.token.size()
                                                                                : (sax.position > 0 ? sax.position - 1 : 0);
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < s.size(); ++i) {
        if (s[i] == '\n') ++line, col = 1;
        else ++col;
    }
    std::string place = where;
    place += ":" + std::to_string(line) + ":" + std::to_string(col) + ": ";
    if (sax.error_id == 406) {
        const std::string token = sax.token.size() > 40 ? sax.token.substr(0, 40) + "..." : sax.token;
        throw ConfigError(place + "number out of range (" + printable(token) + " is beyond a double)");
    }
    std::string what = sax.message;
    if (const auto pos = what.find("syntax error"); pos != std::string::npos) what = what.substr(pos);
    // nlohmann quotes the text it last read: an unclosed 10 MB string is not echoed whole.
    if (what.size() > 160) what = what.substr(0, 160) + "...";
    throw ConfigError(place + "not valid JSON (" + printable(what) + ")");
}

nlohmann::json read_json_file(const std::string& path, const std::string& kind) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw ConfigError(path + ": cannot open the " + kind);
    // A file of settings is a few kilobytes: read in pieces, and refuse what passes the limit
    // (a device, a huge or endless file) before parsing any of it.
    constexpr size_t kMaxBytes = 16 << 20;
    std::string s;
    char piece[1 << 16];
    while (in.read(piece, sizeof piece) || in.gcount() > 0) {
        s.append(piece, static_cast<size_t>(in.gcount()));
        if (s.size() > kMaxBytes)
            throw ConfigError(path + ": larger than 16 MiB; an " + kind + " is at most 16 MiB");
    }
    return parse_json_text(s, path);
}

}  // namespace paralab::run
