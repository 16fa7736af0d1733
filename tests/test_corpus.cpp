#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include <attograd/autograd/error.h>
#include <attograd/data/corpus.h>
#include "test_util.h"

using namespace attograd;
using attograd::testing::error_message;
using attograd::testing::expect_error;
using attograd::testing::TempDir;
using attograd::testing::write_text;

namespace {

// The message of the IOError parse_tsv_pairs throws on text ("" if none).
std::string tsv_error(const std::string& text, const CorpusLimits& limits = {}) {
  return error_message<IOError>([&] { parse_tsv_pairs(text, "x.tsv", limits); });
}

std::string aligned_error(const std::string& source, const std::string& target, const CorpusLimits& limits = {}) {
  return error_message<IOError>([&] { parse_aligned_texts(source, target, "s.en", "t.fr", limits); });
}

// n pairs "s<i>" -> "t<i>" on lines 1..n, all sources different.
ParallelText numbered(int64_t n) {
  ParallelText p;
  p.name = "all.tsv";
  for (int64_t i = 0; i < n; ++i) {
    p.sources.push_back(fmt::format("s{}", i));
    p.targets.push_back(fmt::format("t{}", i));
    p.line_numbers.push_back(i + 1);
  }
  return p;
}

std::vector<int64_t> sorted_lines(std::initializer_list<const ParallelText*> parts) {
  std::vector<int64_t> lines;
  for (const ParallelText* p : parts) lines.insert(lines.end(), p->line_numbers.begin(), p->line_numbers.end());
  std::sort(lines.begin(), lines.end());
  return lines;
}

std::set<std::string> sources_of(const ParallelText& p) { return {p.sources.begin(), p.sources.end()}; }

bool shares_source(const ParallelText& a, const ParallelText& b) {
  const std::set<std::string> sa = sources_of(a);
  return std::any_of(b.sources.begin(), b.sources.end(), [&](const std::string& s) { return sa.count(s) > 0; });
}

// Each pair of a part is still the pair of the line it names (nothing was
// shuffled apart), and the part keeps file order.
void expect_intact(const ParallelText& part, const ParallelText& all) {
  ASSERT_EQ(part.sources.size(), part.targets.size());
  ASSERT_EQ(part.sources.size(), part.line_numbers.size());
  EXPECT_TRUE(std::is_sorted(part.line_numbers.begin(), part.line_numbers.end()));
  for (int64_t i = 0; i < part.size(); ++i) {
    const size_t at = static_cast<size_t>(part.line_numbers[i] - 1);
    EXPECT_EQ(part.sources[i], all.sources[at]);
    EXPECT_EQ(part.targets[i], all.targets[at]);
  }
}

}  // namespace

// ---- TSV ---------------------------------------------------------------------------------

TEST(CorpusTsv, ReadsPairsWithHeaderCrlfAndTrailingBlankLines) {
  std::vector<std::string> header = {"stale"};
  const ParallelText p = parse_tsv_pairs("#en\tfr\r\nthe cat\tle chat\r\n#1 hit\tnuméro un\n\n\r\n", "x.tsv", {}, &header);
  EXPECT_EQ(header, (std::vector<std::string>{"en", "fr"}));
  EXPECT_EQ(p.name, "x.tsv");
  EXPECT_EQ(p.sources, (std::vector<std::string>{"the cat", "#1 hit"}));  // '#' past line 1 is text
  EXPECT_EQ(p.targets, (std::vector<std::string>{"le chat", "numéro un"}));
  EXPECT_EQ(p.line_numbers, (std::vector<int64_t>{2, 3}));
}

TEST(CorpusTsv, HeaderIsOptionalAndAByteOrderMarkIsSkipped) {
  std::vector<std::string> header = {"stale"};
  const ParallelText p = parse_tsv_pairs("\xEF\xBB\xBF" "a b\tc d\ne\tf", "x.tsv", {}, &header);
  EXPECT_TRUE(header.empty());
  EXPECT_EQ(p.sources, (std::vector<std::string>{"a b", "e"}));
  EXPECT_EQ(p.targets, (std::vector<std::string>{"c d", "f"}));
  EXPECT_EQ(p.line_numbers, (std::vector<int64_t>{1, 2}));
  // A byte order mark does not hide a header.
  parse_tsv_pairs("\xEF\xBB\xBF#de\ten\nx\ty\n", "x.tsv", {}, &header);
  EXPECT_EQ(header, (std::vector<std::string>{"de", "en"}));
}

TEST(CorpusTsv, EmptyTextOrHeaderOnlyHasNoPairs) {
  EXPECT_EQ(parse_tsv_pairs("", "x.tsv").size(), 0);
  EXPECT_EQ(parse_tsv_pairs("\n\n", "x.tsv").size(), 0);
  std::vector<std::string> header;
  EXPECT_EQ(parse_tsv_pairs("#en\tfr\n", "x.tsv", {}, &header).size(), 0);
  EXPECT_EQ(header.size(), 2u);
}

TEST(CorpusTsv, BadRowsNameTheLine) {
  struct Case { std::string text, expect; };
  const std::vector<Case> cases = {
      {"a\tb\nc d\n", "x.tsv:2: no tab; expected source<TAB>target"},
      {"a\tb\nc\td\te\n", "x.tsv:2: 3 tab-separated fields, expected 2"},
      {"a\tb\tc\td\n", "x.tsv:1: 4 tab-separated fields"},
      {"\tb\n", "x.tsv:1: the source (before the tab) sentence is empty"},
      {"a\tb\nc\t\n", "x.tsv:2: the target (after the tab) sentence is empty"},
      {"a\tb\n  \td\n", "x.tsv:2: the source (before the tab) sentence is only spaces"},
      {"a\t \n", "x.tsv:1: the target (after the tab) sentence is only spaces"},
      {"a\tb\n\nc\td\n", "x.tsv:2: blank line"},
      {"a\tb\n   \nc\td\n", "x.tsv:2: blank line"},
      {std::string("a\tb\0c\n", 6), "x.tsv:1: control character 0x00 at column 4"},
      {"a\rb\tc\n", "x.tsv:1: control character 0x0D at column 2"},
      {"a\tb\x7F\n", "x.tsv:1: control character 0x7F at column 4"},
      {"a\tb\nc\fd\te\n", "x.tsv:2: control character 0x0C"},
      {"# notes\na\tb\n", "x.tsv:1: header '# notes' does not name two columns"},
      {"#en\tfr\tde\na\tb\n", "does not name two columns"},
      {"#en\t\na\tb\n", "does not name two columns"},
  };
  for (const auto& c : cases) {
    const std::string msg = tsv_error(c.text);
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "input " << ::testing::PrintToString(c.text) << " gave: " << msg;
  }
}

TEST(CorpusTsv, InvalidUtf8NamesTheByteOffsetInTheFile) {
  // "a\tb\n" is bytes 0-3, "c\td" bytes 4-6: the stray 0xFF is byte 7.
  EXPECT_NE(tsv_error("a\tb\nc\td\xFF\n").find("x.tsv:2: invalid UTF-8 at byte offset 7 of the file (column 4, byte 0xFF)"),
            std::string::npos) << tsv_error("a\tb\nc\td\xFF\n");
  // The offset counts a byte order mark and "\r\n" line ends: 3 + 5 + 2 = 10;
  // 0xC3 followed by '(' is a broken two-byte sequence starting at 10.
  const std::string msg = tsv_error("\xEF\xBB\xBF" "a\tb\r\nc\t\xC3(\n");
  EXPECT_NE(msg.find("x.tsv:2: invalid UTF-8 at byte offset 10 of the file"), std::string::npos) << msg;
  // A sequence cut short by the line end; an overlong encoding of '/'; a surrogate.
  EXPECT_NE(tsv_error("ab\tc\xE2\x82\n").find("byte offset 4 of"), std::string::npos);
  EXPECT_NE(tsv_error("ab\tc\xC0\xAF\n").find("byte offset 4 of"), std::string::npos);
  EXPECT_NE(tsv_error("a\t\xED\xA0\x80\n").find("byte offset 2 of"), std::string::npos);
  // Valid multi-byte text passes.
  EXPECT_EQ(parse_tsv_pairs("süß\t日本語 🙂\n", "x.tsv").targets.at(0), "日本語 🙂");
}

TEST(CorpusTsv, LineLengthIsBounded) {
  CorpusLimits limits;
  limits.max_line_bytes = 10;
  EXPECT_EQ(parse_tsv_pairs("abcd\tefgh\r\n", "x.tsv", limits).size(), 1);  // 9 bytes; "\r\n" not counted
  EXPECT_EQ(parse_tsv_pairs("abcde\tfghi\n", "x.tsv", limits).size(), 1);   // exactly 10
  EXPECT_NE(tsv_error("a\tb\nabcde\tfghij\n", limits).find("x.tsv:2: line of 11 bytes, longer than the limit of 10"),
            std::string::npos);
  // The default bound, 4096 bytes.
  const std::string ok = std::string(2000, 'a') + "\t" + std::string(2095, 'b');
  EXPECT_EQ(ok.size(), 4096u);
  EXPECT_EQ(parse_tsv_pairs(ok, "x.tsv").size(), 1);
  EXPECT_NE(tsv_error(ok + "b").find("x.tsv:1: line of 4097 bytes, longer than the limit of 4096"), std::string::npos);
  // A file with no line break at all is one line, refused without being split into pairs.
  EXPECT_NE(tsv_error(std::string(1 << 20, 'z')).find("line of 1048576 bytes"), std::string::npos);
  limits.max_line_bytes = 0;
  EXPECT_NE(error_message<ValueError>([&] { parse_tsv_pairs("a\tb", "x.tsv", limits); }), "");
}

TEST(CorpusTsv, ReadsFilesWithinTheirBound) {
  TempDir dir("corpus");
  write_text(dir / "p.tsv", "#en\tfr\none\tun\ntwo\tdeux\n");
  std::vector<std::string> header;
  const ParallelText p = read_tsv_pairs(dir / "p.tsv", {}, &header);
  EXPECT_EQ(p.name, dir / "p.tsv");
  EXPECT_EQ(p.targets, (std::vector<std::string>{"un", "deux"}));
  EXPECT_EQ(header, (std::vector<std::string>{"en", "fr"}));
  CorpusLimits small;
  small.max_file_bytes = 10;
  expect_error<IOError>([&] { read_tsv_pairs(dir / "p.tsv", small); }, {dir / "p.tsv"});
  expect_error<IOError>([&] { read_tsv_pairs(dir / "missing.tsv"); }, {"missing.tsv"});
  write_text(dir / "bad.tsv", "one\tun\ntwo deux\n");
  expect_error<IOError>([&] { read_tsv_pairs(dir / "bad.tsv"); }, {dir / "bad.tsv:2: no tab"});
}

// ---- aligned files -----------------------------------------------------------------------

TEST(CorpusAligned, PairsLineIWithLineI) {
  const ParallelText p = parse_aligned_texts("\xEF\xBB\xBFthe cat\r\nthe dog\r\n\r\n", "le chat\nle chien", "s.en", "t.fr");
  EXPECT_EQ(p.name, "s.en + t.fr");
  EXPECT_EQ(p.sources, (std::vector<std::string>{"the cat", "the dog"}));
  EXPECT_EQ(p.targets, (std::vector<std::string>{"le chat", "le chien"}));
  EXPECT_EQ(p.line_numbers, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(parse_aligned_texts("", "\n", "s.en", "t.fr").size(), 0);
  // '#' has no meaning here: a first line starting with it is a sentence.
  EXPECT_EQ(parse_aligned_texts("#1\n", "n°1\n", "s.en", "t.fr").sources.at(0), "#1");
}

TEST(CorpusAligned, DifferentLineCountsNameTheFirstLineWithoutAPartner) {
  EXPECT_NE(aligned_error("a\nb\nc\n", "x\ny\n").find("s.en has 3 lines, t.fr has 2 lines: line 3 of s.en has no partner in t.fr"),
            std::string::npos) << aligned_error("a\nb\nc\n", "x\ny\n");
  EXPECT_NE(aligned_error("a\n", "x\ny\nz\n\n").find("t.fr has 3 lines, s.en has 1 line: line 2 of t.fr has no partner in s.en"),
            std::string::npos) << aligned_error("a\n", "x\ny\nz\n\n");
  EXPECT_NE(aligned_error("", "x\n").find("t.fr has 1 line, s.en has 0 lines: line 1 of t.fr"), std::string::npos);
  // The longer file is counted to its end even past a line that would fail its checks.
  EXPECT_NE(aligned_error("a\nb\nc\xFF\nd\n", "x\n").find("s.en has 4 lines, t.fr has 1 line: line 2 of s.en"),
            std::string::npos) << aligned_error("a\nb\nc\xFF\nd\n", "x\n");
}

TEST(CorpusAligned, BadLinesNameFileLineAndSide) {
  struct Case { std::string source, target, expect; };
  const std::vector<Case> cases = {
      {"a\nb\n", "x\n\n\ny\n", "t.fr:2: the target sentence is empty"},
      {"a\n  \n", "x\ny\n", "s.en:2: the source sentence is only spaces"},
      {"a\tb\n", "x\n", "s.en:1: tab at column 2"},
      {"a\n", "x\ry\n", "t.fr:1: control character 0x0D"},
      {"a\nb\n", "x\nyz\xC3\n", "t.fr:2: invalid UTF-8 at byte offset 4 of the file (column 3, byte 0xC3)"},
      {"a\nb\xFF\n", "x\n\xFF\n", "s.en:2: invalid UTF-8 at byte offset 3"},  // earlier line first, then source
  };
  for (const auto& c : cases) {
    const std::string msg = aligned_error(c.source, c.target);
    EXPECT_NE(msg.find(c.expect), std::string::npos) << ::testing::PrintToString(c.source) << " / "
                                                     << ::testing::PrintToString(c.target) << " gave: " << msg;
  }
  CorpusLimits limits;
  limits.max_line_bytes = 3;
  EXPECT_NE(aligned_error("abc\nd\n", "x\nwxyz\n", limits).find("t.fr:2: line of 4 bytes, longer than the limit of 3"),
            std::string::npos);
}

TEST(CorpusAligned, ReadsTwoFiles) {
  TempDir dir("corpus");
  write_text(dir / "a.en", "one\ntwo\n");
  write_text(dir / "a.fr", "un\ndeux\n");
  write_text(dir / "b.fr", "un\n");
  const ParallelText p = read_aligned_files(dir / "a.en", dir / "a.fr");
  EXPECT_EQ(p.name, dir / "a.en" + " + " + dir / "a.fr");
  EXPECT_EQ(p.sources, (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(p.targets, (std::vector<std::string>{"un", "deux"}));
  expect_error<IOError>([&] { read_aligned_files(dir / "a.en", dir / "b.fr"); },
                        {dir / "a.en has 2 lines", dir / "b.fr has 1 line", "line 2 of " + dir / "a.en"});
  expect_error<IOError>([&] { read_aligned_files(dir / "a.en", dir / "none.fr"); }, {"none.fr"});
}

// ---- split_corpus ------------------------------------------------------------------------

TEST(SplitCorpus, DeterministicSizedDisjointAndComplete) {
  const ParallelText all = numbered(100);
  const CorpusSplits a = split_corpus(all, 10, 20, 7), b = split_corpus(all, 10, 20, 7), c = split_corpus(all, 10, 20, 8);
  EXPECT_EQ(a.train.size(), 70);
  EXPECT_EQ(a.valid.size(), 10);
  EXPECT_EQ(a.test.size(), 20);
  EXPECT_EQ(a.valid.line_numbers, b.valid.line_numbers);
  EXPECT_EQ(a.test.line_numbers, b.test.line_numbers);
  EXPECT_EQ(a.train.sources, b.train.sources);
  EXPECT_NE(a.test.line_numbers, c.test.line_numbers);
  EXPECT_NE(a.valid.line_numbers, c.valid.line_numbers);
  // Disjoint and together the whole input, each pair intact and named by its line.
  std::vector<int64_t> every(100);
  for (int64_t i = 0; i < 100; ++i) every[i] = i + 1;
  EXPECT_EQ(sorted_lines({&a.train, &a.valid, &a.test}), every);
  for (const ParallelText* p : {&a.train, &a.valid, &a.test}) {
    expect_intact(*p, all);
    EXPECT_EQ(p->name, "all.tsv");
  }
  // Not simply the last lines: the carve is shuffled.
  std::vector<int64_t> last(20);
  for (int64_t i = 0; i < 20; ++i) last[i] = 81 + i;
  EXPECT_NE(a.test.line_numbers, last);
  // Sizes of zero leave everything to train.
  const CorpusSplits none = split_corpus(all, 0, 0, 7);
  EXPECT_EQ(none.train.sources, all.sources);
  EXPECT_EQ(none.valid.size() + none.test.size(), 0);
}

// Generator's sequence is fixed on every machine, so a seed's carve is too.
TEST(SplitCorpus, SeedFixesTheCarve) {
  const CorpusSplits s = split_corpus(numbered(8), 2, 2, 1);
  const CorpusSplits again = split_corpus(numbered(8), 2, 2, 1);
  EXPECT_EQ(s.test.line_numbers, again.test.line_numbers);
  std::set<std::vector<int64_t>> seen;
  for (uint64_t seed = 0; seed < 20; ++seed) seen.insert(split_corpus(numbered(8), 2, 2, seed).test.line_numbers);
  EXPECT_GT(seen.size(), 5u);  // seeds really choose among the 28 possible test parts
}

TEST(SplitCorpus, RepeatedSourcesNeverLeakIntoValidOrTest) {
  ParallelText all = numbered(60);
  for (int64_t i = 0; i < 60; i += 3) all.sources[i] = fmt::format("dup{}", i % 4);  // 4 sources, 5 pairs each
  for (uint64_t seed = 0; seed < 30; ++seed) {
    const CorpusSplits s = split_corpus(all, 8, 8, seed);
    EXPECT_FALSE(shares_source(s.train, s.valid)) << "seed " << seed;
    EXPECT_FALSE(shares_source(s.train, s.test)) << "seed " << seed;
    EXPECT_FALSE(shares_source(s.valid, s.test)) << "seed " << seed;
    EXPECT_EQ(s.valid.size(), 8);  // 40 single sources are enough to fill both exactly
    EXPECT_EQ(s.test.size(), 8);
    EXPECT_EQ(sorted_lines({&s.train, &s.valid, &s.test}).size(), 60u);
    for (const ParallelText* p : {&s.train, &s.valid, &s.test}) expect_intact(*p, all);
  }
}

TEST(SplitCorpus, FewerThanAskedWhenOnlyLargeGroupsRemain) {
  ParallelText all = numbered(10);
  for (int64_t i = 0; i < 8; ++i) all.sources[i] = "same";  // one group of 8, two single sources
  for (uint64_t seed = 0; seed < 10; ++seed) {
    const CorpusSplits s = split_corpus(all, 0, 3, seed);
    EXPECT_EQ(s.test.line_numbers, (std::vector<int64_t>{9, 10})) << "seed " << seed;
    EXPECT_EQ(s.train.size(), 8);
  }
}

TEST(SplitCorpus, RefusesSizesThatLeaveNoTraining) {
  const ParallelText all = numbered(10);
  expect_error<ValueError>([&] { split_corpus(all, -1, 2, 0); }, {"at least 0", "valid -1"});
  expect_error<ValueError>([&] { split_corpus(all, 2, -3, 0); }, {"test -3"});
  expect_error<ValueError>([&] { split_corpus(all, 5, 5, 0); }, {"all.tsv has 10 pairs", "leave none"});
  expect_error<ValueError>([&] { split_corpus(all, INT64_MAX, INT64_MAX, 0); }, {"leave none"});
  expect_error<ValueError>([&] { split_corpus(numbered(0), 0, 0, 0); }, {"has 0 pairs"});
  EXPECT_EQ(split_corpus(all, 5, 4, 0).train.size(), 1);
  ParallelText ragged = numbered(3);
  ragged.targets.pop_back();
  expect_error<ValueError>([&] { split_corpus(ragged, 0, 0, 0); }, {"3 sources, 2 targets"});
}

// ---- read_corpus_dir ---------------------------------------------------------------------

namespace {

// Rows "w<i> en"<TAB>"w<i> fr" for i in [from, to), as TSV or as two aligned texts.
std::string tsv_rows(int from, int to, const std::string& header = "") {
  std::string s = header;
  for (int i = from; i < to; ++i) s += fmt::format("w{} en\tw{} fr\n", i, i);
  return s;
}
std::string side_rows(int from, int to, const std::string& lang) {
  std::string s;
  for (int i = from; i < to; ++i) s += fmt::format("w{} {}\n", i, lang);
  return s;
}

}  // namespace

TEST(CorpusDir, TsvLayoutCarvesMissingParts) {
  TempDir dir("corpus");
  write_text(dir / "train.tsv", tsv_rows(0, 50, "#en\tfr\n"));
  const CorpusSplits s = read_corpus_dir(dir.path, "en", "fr", 5, 4, 3);
  EXPECT_EQ(s.train.size(), 41);
  EXPECT_EQ(s.valid.size(), 5);
  EXPECT_EQ(s.test.size(), 4);
  EXPECT_EQ(s.valid.name, dir / "train.tsv");
  EXPECT_EQ(sorted_lines({&s.train, &s.valid, &s.test}).front(), 2);  // line 1 is the header
  EXPECT_EQ(s.test.line_numbers, read_corpus_dir(dir.path, "en", "fr", 5, 4, 3).test.line_numbers);
  for (int64_t i = 0; i < s.test.size(); ++i)  // pairs stay pairs: "wK en" with "wK fr"
    EXPECT_EQ(s.test.sources[i].substr(0, s.test.sources[i].size() - 2),
              s.test.targets[i].substr(0, s.test.targets[i].size() - 2));

  // A valid.tsv beside it is used as it is; only test is carved.
  write_text(dir / "valid.tsv", tsv_rows(100, 103));
  const CorpusSplits v = read_corpus_dir(dir.path, "en", "fr", 5, 4, 3);
  EXPECT_EQ(v.valid.name, dir / "valid.tsv");
  EXPECT_EQ(v.valid.sources, (std::vector<std::string>{"w100 en", "w101 en", "w102 en"}));
  EXPECT_EQ(v.test.size(), 4);
  EXPECT_EQ(v.train.size(), 46);

  // With all three files the sizes are not used.
  write_text(dir / "test.tsv", tsv_rows(200, 202));
  const CorpusSplits all = read_corpus_dir(dir.path, "en", "fr", 5, 4, 3);
  EXPECT_EQ(all.train.size(), 50);
  EXPECT_EQ(all.test.size(), 2);
}

TEST(CorpusDir, AlignedLayoutInEitherDirection) {
  TempDir dir("corpus");
  write_text(dir / "train.en", side_rows(0, 20, "en"));
  write_text(dir / "train.fr", side_rows(0, 20, "fr"));
  write_text(dir / "test.en", side_rows(50, 53, "en"));
  write_text(dir / "test.fr", side_rows(50, 53, "fr"));
  const CorpusSplits s = read_corpus_dir(dir.path, "en", "fr", 2, 99, 0);
  EXPECT_EQ(s.train.size(), 18);
  EXPECT_EQ(s.valid.size(), 2);
  EXPECT_EQ(s.test.targets, (std::vector<std::string>{"w50 fr", "w51 fr", "w52 fr"}));
  EXPECT_EQ(s.train.name, dir / "train.en" + " + " + dir / "train.fr");
  const CorpusSplits back = read_corpus_dir(dir.path, "fr", "en", 2, 0, 0);
  EXPECT_EQ(back.test.sources, (std::vector<std::string>{"w50 fr", "w51 fr", "w52 fr"}));
  // Half of an aligned part.
  write_text(dir / "valid.en", side_rows(0, 2, "en"));
  expect_error<IOError>([&] { read_corpus_dir(dir.path, "en", "fr", 2, 0, 0); },
                        {dir / "valid.en is there but " + dir / "valid.fr is not"});
}

TEST(CorpusDir, RefusesMissingAmbiguousOrMismatchedCorpora) {
  TempDir dir("corpus");
  expect_error<IOError>([&] { read_corpus_dir(dir.path, "en", "fr", 1, 1, 0); },
                        {"no corpus in " + dir.path, "looked for train.tsv", "train.en + train.fr"});
  expect_error<IOError>([&] { read_corpus_dir(dir / "nope", "en", "fr", 1, 1, 0); }, {"is not a directory"});
  write_text(dir / "train.fr", side_rows(0, 3, "fr"));
  expect_error<IOError>([&] { read_corpus_dir(dir.path, "en", "fr", 1, 1, 0); },
                        {dir / "train.fr is there but " + dir / "train.en is not"});
  write_text(dir / "train.tsv", tsv_rows(0, 10, "#fr\ten\n"));
  expect_error<IOError>([&] { read_corpus_dir(dir.path, "en", "fr", 1, 1, 0); }, {"both train.tsv and train.en"});
  std::filesystem::remove(dir / "train.fr");
  expect_error<IOError>([&] { read_corpus_dir(dir.path, "en", "fr", 1, 1, 0); },
                        {"header '#fr\\ten' is the other direction of en -> fr"});
  expect_error<IOError>([&] { read_corpus_dir(dir.path, "en", "de", 1, 1, 0); }, {"does not match en -> de"});
  EXPECT_EQ(read_corpus_dir(dir.path, "fr", "en", 1, 1, 0).train.size(), 8);
  write_text(dir / "valid.tsv", "#fr\ten\n");
  expect_error<IOError>([&] { read_corpus_dir(dir.path, "fr", "en", 1, 1, 0); },
                        {dir / "valid.tsv has no sentence pairs"});
  std::filesystem::remove(dir / "valid.tsv");
  expect_error<ValueError>([&] { read_corpus_dir(dir.path, "fr", "en", 5, 5, 0); }, {"leave none"});
  expect_error<ValueError>([&] { read_corpus_dir(dir.path, "fr", "en", -1, 1, 0); }, {"at least 0"});
  for (const char* lang : {"", "../x", "e n", "en/"})
    expect_error<ValueError>([&] { read_corpus_dir(dir.path, lang, "en", 1, 1, 0); }, {"letters, digits"});
  expect_error<ValueError>([&] { read_corpus_dir(dir.path, "fr", "fr", 1, 1, 0); }, {"both 'fr'"});
}
