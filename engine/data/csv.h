// CSV data sets: a header row, then one example per row. The label column is chosen by its
// header name (default: the last column); every other column is a numeric feature.
//
// Fields are separated by commas; surrounding spaces are ignored; a field may be quoted
// ("a,b", with "" for a quote). Blank lines are skipped. A label column holding only
// non-negative integers makes a classification set (num_classes = max + 1, class ids);
// anything else a regression set with target {1}.
#pragma once

#include <string>
#include <vector>

#include "engine/data/dataset.h"

namespace paralab::data {

// Reads every row, in file order. Errors name the file and line:
// "file.csv:17: expected 5 columns, got 4", "file.csv:9: column 'x2': 'abc' is not a number",
// "file.csv: no column 'y' (columns: a, b, c)". Refused without reading on: a path that is not
// a regular file ("is not a regular file": a pipe would wait for a writer, a device read
// forever), a NUL byte ("a NUL byte: this is a binary file"), a line over 64 MiB, a duplicate
// column name. `stop` is asked before each 64 KiB piece; LoadStopped when it says so.
Dataset read_csv(const std::string& path, const std::string& label_column, const StopCheck& stop = {});

// Opens the file and checks its header (the label column exists, at least one feature);
// the rows are not read.
void check_csv_file(const std::string& path, const std::string& label_column);

// One CSV record split into trimmed, unquoted fields (exposed for the tests).
std::vector<std::string> split_csv_record(const std::string& line);

}  // namespace paralab::data
