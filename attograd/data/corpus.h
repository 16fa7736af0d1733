// A user's own parallel corpus: sentence pairs read from files in the two
// common layouts, checked line by line, and carved into train/valid/test.
//
// Layouts:
//  - TSV: one pair per line, "source<TAB>target". A first line starting with
//    '#' is a header naming the two columns ("#en\tfr"); it is skipped and
//    returned on request so a program can check it against its languages.
//    Because of that rule, a first sentence that really starts with '#' needs
//    a header line above it.
//  - Aligned files (Moses style): two files with one sentence per line, line i
//    of the source file translated by line i of the target file.
//
// Every line of either layout must pass these checks, or the reader throws an
// IOError naming the file, the 1-based line and what was wrong, with a hint:
//  - valid UTF-8; the message gives the 0-based byte offset in the file of the
//    first byte of the invalid sequence (as `cmp` or `xxd -s` would use it);
//  - no control characters (bytes 0x00-0x1F and 0x7F: NUL, a stray '\r', form
//    feeds, ...), except the single tab that separates a TSV row. A tab in an
//    aligned file is refused too: it usually means a TSV was passed as one.
//    Unicode's C1 controls (U+0080-U+009F) are valid UTF-8 and pass;
//  - at most limits.max_line_bytes bytes, line end excluded (for a TSV row,
//    both sentences and the tab together): a longer sentence could never fit
//    the translator's max_len, and the bound keeps a file without line breaks
//    from becoming one huge sentence;
//  - no empty or spaces-only sentence on either side (a blank line in the
//    middle of a file is such a sentence). Blank lines at the very end of a
//    file are ignored, as editors leave them.
// "\r\n" line ends are accepted, a missing final newline is fine, and a UTF-8
// byte order mark at the start of a file is skipped (offsets still count it).
// Sentences are kept byte for byte: no trimming, no Unicode normalization.
// A file with no pairs (empty, or a header only) reads as an empty
// ParallelText; read_corpus_dir refuses one.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <attograd/data/parallel.h>

namespace attograd {

// read_file_bytes' bound for one corpus file by default: ample for a corpus a
// CPU translator trains on. Programs pass text_input_limit() instead.
inline constexpr uint64_t kCorpusFileLimit = uint64_t{1} << 30;  // 1 GiB
// The longest line accepted by default, in bytes.
inline constexpr int64_t kCorpusLineLimit = 4096;

// The bounds a corpus reader enforces; a file or line beyond them is an IOError.
struct CorpusLimits {
  uint64_t max_file_bytes = kCorpusFileLimit;  // per file, read_file_bytes' max_bytes
  int64_t max_line_bytes = kCorpusLineLimit;   // per line, line end excluded; at least 1
};

// The pairs of a "source<TAB>target" text. `name` labels messages ("x.tsv:12:
// ..."). When the first line is a '#' header, it must name exactly two
// non-empty columns; they are stored in *header if given (cleared when there
// is no header). A row with no tab or more than one is an IOError naming the
// line and the number of fields found; see the file comment for the other
// checks. ValueError for limits.max_line_bytes < 1.
ParallelText parse_tsv_pairs(std::string_view text, std::string_view name = "<tsv>", const CorpusLimits& limits = {},
                             std::vector<std::string>* header = nullptr);
// parse_tsv_pairs on the file at path (at most limits.max_file_bytes; IOError
// if unreadable or larger). The result's name is path.
ParallelText read_tsv_pairs(const std::string& path, const CorpusLimits& limits = {},
                            std::vector<std::string>* header = nullptr);

// The pairs of two aligned texts: line i of source_text with line i of
// target_text, line_numbers[i] = i + 1 in both. Different line counts are an
// IOError naming both texts, their counts and the first line without a
// partner. The result's name is "<source_name> + <target_name>".
ParallelText parse_aligned_texts(std::string_view source_text, std::string_view target_text,
                                 std::string_view source_name, std::string_view target_name,
                                 const CorpusLimits& limits = {});
// parse_aligned_texts on two files (each at most limits.max_file_bytes).
ParallelText read_aligned_files(const std::string& source_path, const std::string& target_path,
                                const CorpusLimits& limits = {});

// A corpus in its three parts.
struct CorpusSplits {
  ParallelText train;  // the pairs to train on
  ParallelText valid;  // the pairs to pick checkpoints and stop early on
  ParallelText test;   // the pairs to report the final score on
};

// Carves valid and test out of `all`, the rest being train; each part keeps
// the input's order, name and line numbers, so messages still name the lines
// of the original file.
//
// The carve never leaks: pairs are grouped by source sentence (byte equal)
// and a group goes whole to one part, so no source of valid or test appears
// in train, and valid and test share none either (identical pairs, being in
// one group, stay together). Groups are taken in an order shuffled by
// Generator(seed) (Fisher-Yates over the groups in order of first
// appearance), test filled first, then valid; a group larger than what is
// left to fill is passed over, to train. So the same input and seed give the
// same parts on every machine, and valid and test hold exactly the sizes
// asked unless only sources repeated too often are left to fill them, in
// which case they hold fewer. ValueError for a negative size, or for sizes
// that leave train without a pair (valid_size + test_size >= all.size()).
CorpusSplits split_corpus(ParallelText all, int64_t valid_size, int64_t test_size, uint64_t seed);

// The corpus in directory `dir` for src_lang -> tgt_lang, in one of two
// layouts (both present, or a half-present aligned pair, is an IOError):
//  - train.tsv, with optional valid.tsv and test.tsv. A file's '#' header, if
//    any, must be "#<src_lang>\t<tgt_lang>" (a swapped one is called so).
//  - train.<src_lang> + train.<tgt_lang>, with optional valid.* and test.*
//    pairs (Moses style).
// A missing valid or test part is carved from train with split_corpus(train,
// valid_size or 0, test_size or 0, seed), each size used only for a part
// that is carved; a part read from its own file is used as it is (its
// sources may appear in train: the user chose them). A carved part keeps
// train's name. IOError listing the names looked for when neither layout is
// there, and for a file with no pairs; ValueError for a negative size, and
// for a language that is empty, not made of letters, digits, '-' and '_', or
// the same on both sides.
CorpusSplits read_corpus_dir(const std::string& dir, std::string_view src_lang, std::string_view tgt_lang,
                             int64_t valid_size, int64_t test_size, uint64_t seed, const CorpusLimits& limits = {});

}  // namespace attograd
