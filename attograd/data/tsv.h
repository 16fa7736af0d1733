// Tab-separated text tables: the on-disk format of the parallel corpora
// (data/numbers/*.tsv), one example per line.
//
// Format: UTF-8 text; each line holds exactly `columns` fields separated by a
// single '\t'. A first line starting with '#' is a header and is returned
// separately. "\r\n" line ends are accepted; a missing final newline is fine.
// Empty lines, empty fields, NUL bytes, invalid UTF-8 and a wrong number of
// fields are errors: an IOError naming the source, the line and what was found.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attograd {

// A parsed tab-separated file.
struct TsvTable {
  std::vector<std::string> header;              // fields of the '#' line, '#' removed; empty if none
  std::vector<std::vector<std::string>> rows;  // [rows][columns]
  std::vector<int64_t> line_numbers;           // 1-based line of each row, for error messages
};

// `name` only labels errors ("data/numbers/fr.train.tsv:12: ...").
TsvTable parse_tsv(std::string_view text, int64_t columns, std::string_view name = "<tsv>");
// Reads the file (IOError if unreadable) and parses it.
TsvTable read_tsv(const std::string& path, int64_t columns);

}  // namespace attograd
