// Parallel corpora for translation: sentence pairs read from two named
// columns of a TSV table (attograd/data/tsv.h) whose '#' header names the columns,
// e.g. data/numbers/*.tsv ("#number en fr de es"), then tokenized and mapped
// to id examples (attograd/data/dataset.h) for the loader.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <attograd/data/dataset.h>
#include <attograd/data/tokenizer.h>
#include <attograd/data/vocab.h>

namespace attograd {

// Sentence pairs read from a TSV file, with their line numbers.
struct ParallelText {
  std::string name;                   // file name, for messages
  std::vector<std::string> sources;   // one sentence per pair
  std::vector<std::string> targets;   // the translation of sources[i]
  std::vector<int64_t> line_numbers;  // 1-based file line of each pair
  // Number of pairs.
  int64_t size() const { return static_cast<int64_t>(sources.size()); }
};

// The columns are found by name in the header, whose width sets the number of
// fields every row must have. IOError (naming `name`) for a missing header, a
// column not in it (listing the ones that are) or a malformed row.
ParallelText parse_parallel_tsv(std::string_view text, std::string_view source_column, std::string_view target_column,
                                std::string_view name = "<tsv>");
// parse_parallel_tsv on the file at path (IOError if unreadable).
ParallelText read_parallel_tsv(const std::string& path, std::string_view source_column, std::string_view target_column);

// Tokenized pairs -> examples (no BOS/EOS). Tokens missing from a vocab become
// <unk>, as in an unseen test sentence.
VectorDataset encode_parallel(const ParallelText& text, const Tokenizer& source_tokenizer, const Vocab& source_vocab,
                              const Tokenizer& target_tokenizer, const Vocab& target_vocab);

// The number-words corpus (data/numbers): English source words with hyphens
// split off; French and Spanish targets the same way; German number words are
// single compounds ("einundzwanzigtausend"), so German targets are characters.
inline constexpr std::string_view kNumberSourceLanguage = "en";
inline constexpr std::string_view kNumberSourceTokenizer = "hyphen";  // make_tokenizer name for the source
// "hyphen" for fr and es, "char" for de; ValueError for any other language.
std::string number_target_tokenizer(std::string_view language);

}  // namespace attograd
