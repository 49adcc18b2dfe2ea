#include "engine/data/csv.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <unordered_set>

#include "engine/util/error.h"

namespace paralab::data {
namespace {

std::string trim(const std::string& s) {
    size_t b = 0, e = s.size();
    while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
    while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
    return s.substr(b, e - b);
}

bool is_blank(const std::string& line) {
    return line.find_first_not_of(" \t") == std::string::npos;
}

// Reads lines one by one, counting physical lines for messages and dropping a '\r' ending.
class LineReader {
public:
    LineReader(const std::string& path, const StopCheck& stop) : m_path(path), m_stop(stop) {
        std::error_code ec;
        // An ifstream opens a directory without complaint and then reads nothing.
        if (std::filesystem::is_directory(path, ec))
            throw Error(path + ": is a directory, expected a CSV file");
        // Nor may it be a pipe (opening one waits for a writer, forever) or a device (/dev/zero
        // reads without end): refused before it is opened.
        if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
            throw Error(path + ": is not a regular file (a pipe, a device or a socket); expected a CSV file");
        errno = 0;
        m_in.open(path, std::ios::binary);
        if (!m_in)
            throw Error(path +
                        ": cannot open: " + (errno != 0 ? std::strerror(errno) : "unknown error"));
    }
    bool next(std::string& line) {
        // A line is read in pieces up to a bound, not grown without one (a 1 GB line ended in
        // std::bad_alloc): no CSV row of a data set comes near it.
        constexpr size_t kMaxLine = size_t{64} << 20;
        line.clear();
        char piece[1 << 16];
        bool any = false;
        for (;;) {
            if (m_stop && m_stop()) throw LoadStopped();
            m_in.get(piece, sizeof piece, '\n');  // stops before the '\n' or when the piece is full
            const auto n = static_cast<size_t>(m_in.gcount());
            if (n > 0) {
                any = true;
                // Text has no NUL byte: a binary file is refused at its first piece instead of
                // being read to its end.
                if (std::memchr(piece, 0, n) != nullptr)
                    throw Error(m_path + ":" + std::to_string(m_line_number + 1) +
                                ": a NUL byte: this is a binary file, not CSV text");
                if (line.size() + n > kMaxLine)
                    throw Error(m_path + ":" + std::to_string(m_line_number + 1) + ": a line longer than 64 MiB");
                line.append(piece, n);
            }
            if (m_in.eof()) break;
            if (m_in.bad()) throw Error(m_path + ": read error: " + std::strerror(errno));
            if (m_in.fail()) m_in.clear();  // nothing extracted: at the '\n' itself
            if (m_in.peek() == '\n') {
                m_in.get();
                any = true;
                break;
            }
        }
        if (!any) return false;
        ++m_line_number;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        // A UTF-8 byte-order mark is not part of the first column's name.
        if (m_line_number == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
        return true;
    }
    int64_t line_number() const { return m_line_number; }

private:
    std::string m_path;
    const StopCheck& m_stop;
    std::ifstream m_in;
    int64_t m_line_number = 0;
};

struct Header {
    std::vector<std::string> columns;
    size_t label = 0;  // index of the label column
};

Header read_header(LineReader& reader, const std::string& path, const std::string& label_column) {
    std::string line;
    bool found = false;
    while (reader.next(line))
        if (!is_blank(line)) {
            found = true;
            break;
        }
    if (!found) throw Error(path + ": empty file (expected a header row)");
    Header header;
    header.columns = split_csv_record(line);
    if (header.columns.size() < 2)
        throw Error(path + ":" + std::to_string(reader.line_number()) + ": the header names " +
                    std::to_string(header.columns.size()) +
                    " column; a data set needs at least one feature and a label");
    // Duplicates found in one pass (a pairwise check took 37 s for 100,000 columns).
    std::unordered_set<std::string_view> seen;
    for (const std::string& c : header.columns)
        if (!seen.insert(c).second)
            throw Error(path + ":" + std::to_string(reader.line_number()) + ": duplicate column '" + c + "'");
    if (label_column.empty()) {
        header.label = header.columns.size() - 1;
        return header;
    }
    for (size_t i = 0; i < header.columns.size(); ++i)
        if (header.columns[i] == label_column) {
            header.label = i;
            return header;
        }
    std::string names;
    for (const auto& c : header.columns) names += (names.empty() ? "" : ", ") + c;
    throw Error(path + ": no column '" + label_column + "' (columns: " + names + ")");
}

double parse_number(const std::string& field, const std::string& path, int64_t line,
                    const std::string& column) {
    const char* begin = field.data();
    const char* end = begin + field.size();
    if (begin != end && *begin == '+') ++begin;  // from_chars rejects an explicit '+'
    double value = 0.0;
    const auto [ptr, ec] = std::from_chars(begin, end, value);
    const std::string where = path + ":" + std::to_string(line) + ": column '" + column + "': '";
    if (field.empty() || ec != std::errc() || ptr != end)
        throw Error(where + field + "' is not a number");
    if (!std::isfinite(value)) throw Error(where + field + "' is not a finite number");
    return value;
}

}  // namespace

std::vector<std::string> split_csv_record(const std::string& line) {
    std::vector<std::string> fields;
    std::string field;
    bool quoted = false, was_quoted = false;
    for (size_t i = 0; i < line.size(); ++i) {
        const char c = line[i];
        if (quoted) {
            if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
                field += '"';
                ++i;
            } else if (c == '"') {
                quoted = false;
            } else {
                field += c;
            }
        } else if (c == '"' && trim(field).empty()) {
            quoted = was_quoted = true;
            field.clear();
        } else if (c == ',') {
            fields.push_back(was_quoted ? field : trim(field));
            field.clear();
            was_quoted = false;
        } else if (!(was_quoted && (c == ' ' || c == '\t'))) {
            field += c;
        }
    }
    fields.push_back(was_quoted ? field : trim(field));
    return fields;
}

// rows -> inputs [N, columns - 1] (header order, label removed), targets [N].
Dataset read_csv(const std::string& path, const std::string& label_column, const StopCheck& stop) {
    LineReader reader(path, stop);
    const Header header = read_header(reader, path, label_column);
    const size_t columns = header.columns.size();
    Dataset ds;
    ds.name = "csv";
    ds.sample_shape = {static_cast<int64_t>(columns - 1)};
    std::vector<double> labels;
    std::string line;
    while (reader.next(line)) {
        if (is_blank(line)) continue;
        const std::vector<std::string> fields = split_csv_record(line);
        if (fields.size() != columns)
            throw Error(path + ":" + std::to_string(reader.line_number()) + ": expected " +
                        std::to_string(columns) + " columns, got " + std::to_string(fields.size()));
        for (size_t c = 0; c < columns; ++c) {
            const double v = parse_number(fields[c], path, reader.line_number(), header.columns[c]);
            if (c == header.label)
                labels.push_back(v);
            else
                ds.inputs.push_back(static_cast<float>(v));
        }
    }
    if (labels.empty()) throw Error(path + ": no data rows after the header");

    bool integral = true;
    double max_label = 0.0;
    for (double v : labels) {
        // Class ids are stored as floats: beyond 2^24 they would no longer be exact.
        if (v < 0.0 || v != std::floor(v) || v >= 16777216.0) integral = false;
        max_label = std::max(max_label, v);
    }
    if (integral) {
        ds.num_classes = static_cast<int64_t>(max_label) + 1;
    } else {
        ds.target_shape = {1};
    }
    ds.targets.assign(labels.begin(), labels.end());
    return ds;
}

void check_csv_file(const std::string& path, const std::string& label_column) {
    const StopCheck never;
    LineReader reader(path, never);
    read_header(reader, path, label_column);
}

}  // namespace paralab::data
