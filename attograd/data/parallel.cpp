#include <attograd/data/parallel.h>

#include <algorithm>

#include <fmt/format.h>

#include <attograd/autograd/error.h>
#include <attograd/autograd/io/safetensors.h>
#include <attograd/data/tsv.h>

namespace attograd {

ParallelText parse_parallel_tsv(std::string_view text, std::string_view source_column, std::string_view target_column,
                                std::string_view name) {
  const std::string_view first = text.substr(0, text.find('\n'));
  if (first.empty() || first.front() != '#')
    fail<IOError>("parallel_tsv", "{}:1: expected a '#' header naming the columns (e.g. '#number\\ten\\tfr'), got '{}'",
                  name, first.substr(0, 40));
  const int64_t columns = 1 + static_cast<int64_t>(std::count(first.begin(), first.end(), '\t'));
  TsvTable table = parse_tsv(text, columns, name);
  auto column = [&](std::string_view wanted) {
    for (size_t i = 0; i < table.header.size(); ++i)
      if (table.header[i] == wanted) return i;
    fail<IOError>("parallel_tsv", "{}: no column '{}'; the header has {}", name, wanted, fmt::join(table.header, ", "));
  };
  const size_t s = column(source_column), t = column(target_column);
  ParallelText out;
  out.name = std::string(name);
  out.sources.reserve(table.rows.size());
  out.targets.reserve(table.rows.size());
  for (auto& row : table.rows) {
    out.sources.push_back(std::move(row[s]));
    out.targets.push_back(std::move(row[t]));
  }
  out.line_numbers = std::move(table.line_numbers);
  return out;
}

ParallelText read_parallel_tsv(const std::string& path, std::string_view source_column, std::string_view target_column) {
  return parse_parallel_tsv(read_file_bytes(path), source_column, target_column, path);
}

VectorDataset encode_parallel(const ParallelText& text, const Tokenizer& source_tokenizer, const Vocab& source_vocab,
                              const Tokenizer& target_tokenizer, const Vocab& target_vocab) {
  VectorDataset data;
  for (int64_t i = 0; i < text.size(); ++i)
    data.add({source_vocab.encode(source_tokenizer.split(text.sources[i])),
              target_vocab.encode(target_tokenizer.split(text.targets[i]))});
  return data;
}

std::string number_target_tokenizer(std::string_view language) {
  if (language == "fr" || language == "es") return "hyphen";
  if (language == "de") return "char";
  fail<ValueError>("numbers", "unknown target language '{}'; expected fr, de or es", language);
}

}  // namespace attograd
