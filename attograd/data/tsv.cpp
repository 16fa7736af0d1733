#include <attograd/data/tsv.h>

#include <attograd/autograd/error.h>
#include <attograd/autograd/io/safetensors.h>
#include <attograd/data/tokenizer.h>

namespace attograd {
namespace {

// Splits one line (no line end) at tabs and checks every field.
std::vector<std::string> split_fields(std::string_view line, int64_t columns, std::string_view name, int64_t lineno) {
  std::vector<std::string> fields;
  size_t start = 0;
  while (true) {
    const size_t tab = line.find('\t', start);
    fields.emplace_back(line.substr(start, tab == std::string_view::npos ? std::string_view::npos : tab - start));
    if (tab == std::string_view::npos) break;
    start = tab + 1;
  }
  if (static_cast<int64_t>(fields.size()) != columns)
    fail<IOError>("tsv", "{}:{}: expected {} tab-separated fields, found {}; hint: fields may not contain tabs", name,
                  lineno, columns, fields.size());
  for (size_t i = 0; i < fields.size(); ++i)
    if (fields[i].empty()) fail<IOError>("tsv", "{}:{}: field {} is empty", name, lineno, i + 1);
  return fields;
}

}  // namespace

TsvTable parse_tsv(std::string_view text, int64_t columns, std::string_view name) {
  if (columns < 1) fail<ValueError>("tsv", "columns must be at least 1, got {}", columns);
  TsvTable table;
  int64_t lineno = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    ++lineno;
    const size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) fail<IOError>("tsv", "{}:{}: empty line", name, lineno);
    for (size_t i = 0; i < line.size();) {
      size_t len = 0;
      try {
        len = utf8_char_length(line, i, "tsv");
      } catch (const ValueError&) {
        fail<IOError>("tsv", "{}:{}: invalid UTF-8 at column {}", name, lineno, i + 1);
      }
      if (line[i] == '\0') fail<IOError>("tsv", "{}:{}: NUL byte at column {}", name, lineno, i + 1);
      if (line[i] == '\r') fail<IOError>("tsv", "{}:{}: stray carriage return at column {}", name, lineno, i + 1);
      i += len;
    }
    if (lineno == 1 && line.front() == '#') {
      table.header = split_fields(line.substr(1), columns, name, lineno);
      continue;
    }
    table.rows.push_back(split_fields(line, columns, name, lineno));
    table.line_numbers.push_back(lineno);
  }
  return table;
}

TsvTable read_tsv(const std::string& path, int64_t columns) {
  return parse_tsv(read_file_bytes(path), columns, path);
}

}  // namespace attograd
