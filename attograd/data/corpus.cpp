#include <attograd/data/corpus.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <attograd/autograd/error.h>
#include <attograd/autograd/generator.h>
#include <attograd/autograd/io/safetensors.h>
#include <attograd/data/tokenizer.h>

namespace attograd {
namespace {

constexpr std::string_view kOp = "corpus";

// One line of a file, line end removed.
struct Line {
  std::string_view text;
  int64_t number = 0;  // 1-based
  size_t offset = 0;   // byte offset of text[0] in the file, for encoding errors
};

// Walks a file's lines, checking each one (length, UTF-8, control characters)
// before handing it out. Blank lines at the end of the file are not lines.
class LineCursor {
 public:
  LineCursor(std::string_view text, std::string_view name, const CorpusLimits& limits, bool tab_is_separator)
      : text_(text), name_(name), limits_(limits), tab_is_separator_(tab_is_separator) {
    if (text_.starts_with("\xEF\xBB\xBF")) pos_ = 3;  // a byte order mark is not part of the first sentence
  }

  // The next line in `line`; false at the end.
  bool next(Line& line) {
    if (at_trailing_blanks()) {
      pos_ = text_.size();
      return false;
    }
    const size_t end = std::min(text_.find('\n', pos_), text_.size());
    line.text = text_.substr(pos_, end - pos_);
    if (line.text.ends_with('\r')) line.text.remove_suffix(1);
    line.number = ++lines_;
    line.offset = pos_;
    pos_ = end + 1;
    check(line);
    return true;
  }

  // The lines not read yet, unchecked: the other file of an aligned pair is
  // counted for the message even if a later line of it is malformed.
  int64_t count_rest() const {
    if (at_trailing_blanks()) return 0;
    std::string_view rest = text_.substr(pos_);
    rest = rest.substr(0, rest.find_last_not_of("\r\n") + 1);
    return 1 + static_cast<int64_t>(std::count(rest.begin(), rest.end(), '\n'));
  }

  // Lines handed out so far.
  int64_t lines_read() const { return lines_; }

 private:
  bool at_trailing_blanks() const {
    return pos_ >= text_.size() || text_.find_first_not_of("\r\n", pos_) == std::string_view::npos;
  }

  void check(const Line& line) const {
    if (static_cast<int64_t>(line.text.size()) > limits_.max_line_bytes)
      fail<IOError>(kOp, "{}:{}: line of {} bytes, longer than the limit of {}; hint: a sentence this long would "
                    "not fit the translator's max_len: split it, drop it, or raise the line limit",
                    name_, line.number, line.text.size(), limits_.max_line_bytes);
    for (size_t i = 0; i < line.text.size();) {
      const auto byte = static_cast<unsigned char>(line.text[i]);
      if (byte >= 0x80) {
        try {
          i += utf8_char_length(line.text, i, "corpus");
        } catch (const ValueError&) {
          fail<IOError>(kOp, "{}:{}: invalid UTF-8 at byte offset {} of the file (column {}, byte 0x{:02X}); hint: "
                        "the corpus must be UTF-8 (iconv -f <its encoding> -t UTF-8 converts it)",
                        name_, line.number, line.offset + i, i + 1, byte);
        }
        continue;
      }
      if (byte == '\t' && !tab_is_separator_)
        fail<IOError>(kOp, "{}:{}: tab at column {}; hint: an aligned file holds one sentence per line; rows of "
                      "source<TAB>target are a TSV corpus", name_, line.number, i + 1);
      if ((byte < 0x20 && byte != '\t') || byte == 0x7F)
        fail<IOError>(kOp, "{}:{}: control character 0x{:02X} at column {}; hint: a sentence may hold no control "
                      "characters (NUL, a carriage return inside a line, ...)", name_, line.number, byte, i + 1);
      ++i;
    }
  }

  std::string_view text_, name_;
  CorpusLimits limits_;
  bool tab_is_separator_;
  size_t pos_ = 0;
  int64_t lines_ = 0;
};

void check_limits(const CorpusLimits& limits) {
  if (limits.max_line_bytes < 1)
    fail<ValueError>(kOp, "max_line_bytes must be at least 1, got {}", limits.max_line_bytes);
}

// An empty sentence would train the model to translate nothing into nothing.
void check_sentence(std::string_view sentence, std::string_view name, int64_t line, std::string_view side) {
  if (sentence.empty())
    fail<IOError>(kOp, "{}:{}: the {} sentence is empty; hint: every pair needs a sentence on both sides: remove "
                  "the line (from both files of an aligned pair)", name, line, side);
  if (sentence.find_first_not_of(' ') == std::string_view::npos)
    fail<IOError>(kOp, "{}:{}: the {} sentence is only spaces; hint: every pair needs a sentence on both sides: "
                  "remove the line (from both files of an aligned pair)", name, line, side);
}

// A header "#a\tb" -> {a, b}; it must name two columns.
std::vector<std::string> parse_header(std::string_view line, std::string_view name) {
  std::vector<std::string> columns;
  for (size_t start = 1;;) {
    const size_t tab = line.find('\t', start);
    columns.emplace_back(line.substr(start, tab == std::string_view::npos ? std::string_view::npos : tab - start));
    if (tab == std::string_view::npos) break;
    start = tab + 1;
  }
  const auto blank = [](const std::string& c) { return c.find_first_not_of(' ') == std::string::npos; };
  if (columns.size() != 2 || std::any_of(columns.begin(), columns.end(), blank))
    fail<IOError>(kOp, "{}:1: header '#{}' does not name two columns; expected '#<source>\\t<target>' (e.g. "
                  "'#en\\tfr'); hint: a first line starting with '#' is a header, so a first sentence starting "
                  "with '#' needs a header line above it", name, fmt::join(columns, "\\t"));
  return columns;
}

std::string count_lines(int64_t n) { return fmt::format("{} line{}", n, n == 1 ? "" : "s"); }

// The number of '\n' in text plus one: enough room for every pair.
size_t line_bound(std::string_view text) {
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
}

void reserve(ParallelText& out, size_t n) {
  out.sources.reserve(n);
  out.targets.reserve(n);
  out.line_numbers.reserve(n);
}

}  // namespace

ParallelText parse_tsv_pairs(std::string_view text, std::string_view name, const CorpusLimits& limits,
                             std::vector<std::string>* header) {
  check_limits(limits);
  if (header) header->clear();
  ParallelText out;
  out.name = std::string(name);
  reserve(out, line_bound(text));
  LineCursor cursor(text, name, limits, true);
  for (Line line; cursor.next(line);) {
    if (line.number == 1 && line.text.starts_with('#')) {
      std::vector<std::string> columns = parse_header(line.text, name);
      if (header) *header = std::move(columns);
      continue;
    }
    const size_t tab = line.text.find('\t');
    if (line.text.find_first_not_of(' ') == std::string_view::npos)
      fail<IOError>(kOp, "{}:{}: blank line, expected source<TAB>target; hint: every line holds a pair: remove it",
                    name, line.number);
    if (tab == std::string_view::npos)
      fail<IOError>(kOp, "{}:{}: no tab; expected source<TAB>target; hint: a file of one sentence per line is "
                    "half of an aligned pair (train.<src> + train.<tgt>), not a TSV", name, line.number);
    const auto tabs = std::count(line.text.begin(), line.text.end(), '\t');
    if (tabs > 1)
      fail<IOError>(kOp, "{}:{}: {} tab-separated fields, expected 2 (source<TAB>target); hint: a sentence may not "
                    "contain a tab", name, line.number, tabs + 1);
    const std::string_view source = line.text.substr(0, tab), target = line.text.substr(tab + 1);
    check_sentence(source, name, line.number, "source (before the tab)");
    check_sentence(target, name, line.number, "target (after the tab)");
    out.sources.emplace_back(source);
    out.targets.emplace_back(target);
    out.line_numbers.push_back(line.number);
  }
  return out;
}

ParallelText read_tsv_pairs(const std::string& path, const CorpusLimits& limits, std::vector<std::string>* header) {
  check_limits(limits);
  return parse_tsv_pairs(read_file_bytes(path, limits.max_file_bytes), path, limits, header);
}

ParallelText parse_aligned_texts(std::string_view source_text, std::string_view target_text,
                                 std::string_view source_name, std::string_view target_name,
                                 const CorpusLimits& limits) {
  check_limits(limits);
  ParallelText out;
  out.name = fmt::format("{} + {}", source_name, target_name);
  reserve(out, std::min(line_bound(source_text), line_bound(target_text)));
  LineCursor sources(source_text, source_name, limits, false), targets(target_text, target_name, limits, false);
  Line s, t;
  while (true) {
    const bool has_source = sources.next(s), has_target = targets.next(t);
    if (!has_source && !has_target) break;
    if (has_source != has_target) {
      // Line n + 1 of the longer file is the first without a partner.
      const LineCursor& longer = has_source ? sources : targets;
      const int64_t long_lines = longer.lines_read() + longer.count_rest();
      const int64_t short_lines = longer.lines_read() - 1;
      const std::string_view long_name = has_source ? source_name : target_name;
      const std::string_view short_name = has_source ? target_name : source_name;
      fail<IOError>(kOp, "{} has {}, {} has {}: line {} of {} has no partner in {}; hint: the files must be "
                    "aligned line by line (line i of one translates line i of the other); a missing or split "
                    "line breaks the alignment from there on", long_name, count_lines(long_lines), short_name,
                    count_lines(short_lines), short_lines + 1, long_name, short_name);
    }
    check_sentence(s.text, source_name, s.number, "source");
    check_sentence(t.text, target_name, t.number, "target");
    out.sources.emplace_back(s.text);
    out.targets.emplace_back(t.text);
    out.line_numbers.push_back(s.number);
  }
  return out;
}

ParallelText read_aligned_files(const std::string& source_path, const std::string& target_path,
                                const CorpusLimits& limits) {
  check_limits(limits);
  const std::string source = read_file_bytes(source_path, limits.max_file_bytes);
  const std::string target = read_file_bytes(target_path, limits.max_file_bytes);
  return parse_aligned_texts(source, target, source_path, target_path, limits);
}

CorpusSplits split_corpus(ParallelText all, int64_t valid_size, int64_t test_size, uint64_t seed) {
  const int64_t n = all.size();
  if (all.targets.size() != all.sources.size() || all.line_numbers.size() != all.sources.size())
    fail<ValueError>("split_corpus", "{}: {} sources, {} targets and {} line numbers; expected as many of each",
                     all.name, all.sources.size(), all.targets.size(), all.line_numbers.size());
  if (valid_size < 0 || test_size < 0)
    fail<ValueError>("split_corpus", "sizes must be at least 0, got valid {} and test {}", valid_size, test_size);
  // Each size below n first, so the sum cannot overflow.
  if (valid_size >= n || test_size >= n || valid_size + test_size >= n)
    fail<ValueError>("split_corpus", "{} has {} pairs; valid {} + test {} leave none to train on; hint: ask for "
                     "smaller valid and test parts", all.name, n, valid_size, test_size);

  // Groups of equal sources, numbered in order of first appearance.
  std::vector<int64_t> group(static_cast<size_t>(n));
  std::vector<int64_t> group_size;
  {
    std::unordered_map<std::string_view, int64_t> group_of;
    for (int64_t i = 0; i < n; ++i) {
      const auto [it, fresh] = group_of.try_emplace(all.sources[i], static_cast<int64_t>(group_size.size()));
      if (fresh) group_size.push_back(0);
      group[i] = it->second;
      ++group_size[it->second];
    }
  }
  const size_t groups = group_size.size();
  std::vector<size_t> order(groups);
  for (size_t g = 0; g < groups; ++g) order[g] = g;
  Generator gen(seed);
  for (size_t i = groups; i > 1; --i) std::swap(order[i - 1], order[gen.randint(i)]);

  enum Part : unsigned char { kTrain, kValid, kTest };
  std::vector<Part> part(groups, kTrain);
  int64_t test_left = test_size, valid_left = valid_size;
  for (size_t k = 0; k < groups && (test_left > 0 || valid_left > 0); ++k) {
    const size_t g = order[k];
    if (group_size[g] <= test_left) {
      part[g] = kTest;
      test_left -= group_size[g];
    } else if (group_size[g] <= valid_left) {
      part[g] = kValid;
      valid_left -= group_size[g];
    }
  }

  CorpusSplits out;
  for (ParallelText* p : {&out.train, &out.valid, &out.test}) p->name = all.name;
  reserve(out.valid, static_cast<size_t>(valid_size));
  reserve(out.test, static_cast<size_t>(test_size));
  reserve(out.train, static_cast<size_t>(n - valid_size - test_size));
  for (int64_t i = 0; i < n; ++i) {
    const Part p = part[group[i]];
    ParallelText& dst = p == kTest ? out.test : p == kValid ? out.valid : out.train;
    dst.sources.push_back(std::move(all.sources[i]));
    dst.targets.push_back(std::move(all.targets[i]));
    dst.line_numbers.push_back(all.line_numbers[i]);
  }
  return out;
}

namespace {

// A language code becomes part of a file name, so it may not hold a path.
void check_language(std::string_view lang, std::string_view which) {
  const auto ok = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  };
  if (lang.empty() || !std::all_of(lang.begin(), lang.end(), ok))
    fail<ValueError>("read_corpus_dir", "{} language '{}' must be a code of letters, digits, '-' and '_' (e.g. "
                     "'en'); it names the files train.<lang>", which, lang);
}

bool exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

// One part ("train", "valid", "test") of a corpus directory in either layout.
class CorpusDir {
 public:
  CorpusDir(const std::string& dir, std::string_view src, std::string_view tgt, const CorpusLimits& limits)
      : dir_(dir), src_(src), tgt_(tgt), limits_(limits) {}

  std::string path(std::string_view part, std::string_view ext) const {
    return (std::filesystem::path(dir_) / fmt::format("{}.{}", part, ext)).string();
  }

  // The part's pairs, or nothing when its files are not there.
  std::optional<ParallelText> read(std::string_view part, bool tsv) const {
    ParallelText text;
    if (tsv) {
      const std::string file = path(part, "tsv");
      if (!exists(file)) return std::nullopt;
      std::vector<std::string> header;
      text = read_tsv_pairs(file, limits_, &header);
      check_header(header, file);
    } else {
      const std::string source = path(part, src_), target = path(part, tgt_);
      const bool has_source = exists(source), has_target = exists(target);
      if (!has_source && !has_target) return std::nullopt;
      if (has_source != has_target)
        fail<IOError>("read_corpus_dir", "{} is there but {} is not; hint: an aligned part needs both files",
                      has_source ? source : target, has_source ? target : source);
      text = read_aligned_files(source, target, limits_);
    }
    if (text.size() == 0)
      fail<IOError>("read_corpus_dir", "{} has no sentence pairs; hint: remove an empty valid or test part to "
                    "carve it from train", text.name);
    return text;
  }

 private:
  void check_header(const std::vector<std::string>& header, const std::string& file) const {
    if (header.empty() || (header[0] == src_ && header[1] == tgt_)) return;
    if (header[0] == tgt_ && header[1] == src_)
      fail<IOError>("read_corpus_dir", "{}: header '#{}\\t{}' is the other direction of {} -> {}; hint: swap the "
                    "languages asked for, or the file's columns", file, header[0], header[1], src_, tgt_);
    fail<IOError>("read_corpus_dir", "{}: header '#{}\\t{}' does not match {} -> {}; expected '#{}\\t{}' (or no "
                  "header)", file, header[0], header[1], src_, tgt_, src_, tgt_);
  }

  std::string dir_;
  std::string_view src_, tgt_;
  CorpusLimits limits_;
};

}  // namespace

CorpusSplits read_corpus_dir(const std::string& dir, std::string_view src_lang, std::string_view tgt_lang,
                             int64_t valid_size, int64_t test_size, uint64_t seed, const CorpusLimits& limits) {
  check_language(src_lang, "source");
  check_language(tgt_lang, "target");
  if (src_lang == tgt_lang)
    fail<ValueError>("read_corpus_dir", "source and target language are both '{}'", src_lang);
  if (valid_size < 0 || test_size < 0)
    fail<ValueError>("read_corpus_dir", "sizes must be at least 0, got valid {} and test {}", valid_size, test_size);
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    fail<IOError>("read_corpus_dir", "{} is not a directory; hint: pass the directory holding train.tsv or "
                  "train.{} + train.{}", dir, src_lang, tgt_lang);

  const CorpusDir d(dir, src_lang, tgt_lang, limits);
  const bool tsv = exists(d.path("train", "tsv"));
  const bool aligned = exists(d.path("train", src_lang)) || exists(d.path("train", tgt_lang));
  if (tsv && aligned)
    fail<IOError>("read_corpus_dir", "{} holds both train.tsv and train.{}/train.{}; hint: keep one layout",
                  dir, src_lang, tgt_lang);
  if (!tsv && !aligned)
    fail<IOError>("read_corpus_dir", "no corpus in {}: looked for train.tsv (source<TAB>target rows) and for "
                  "train.{} + train.{} (one sentence per line); hint: valid.* and test.* may sit beside either, "
                  "else they are carved from train", dir, src_lang, tgt_lang);

  std::optional<ParallelText> train = d.read("train", tsv), valid = d.read("valid", tsv), test = d.read("test", tsv);
  CorpusSplits out;
  if (valid && test) {
    out.train = std::move(*train);
  } else {
    CorpusSplits carved = split_corpus(std::move(*train), valid ? 0 : valid_size, test ? 0 : test_size, seed);
    out.train = std::move(carved.train);
    if (!valid) valid = std::move(carved.valid);
    if (!test) test = std::move(carved.test);
  }
  out.valid = std::move(*valid);
  out.test = std::move(*test);
  return out;
}

}  // namespace attograd
