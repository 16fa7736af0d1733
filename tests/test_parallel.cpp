// Parallel corpora: the hyphen tokenizer, TSV columns by name, and the
// committed number-words corpus (data/numbers) tokenized per language.
#include <gtest/gtest.h>

#include <set>

#include <attograd/autograd/error.h>
#include <attograd/data/parallel.h>
#include <attograd/data/tsv.h>
#include "test_util.h"

using namespace attograd;
using attograd::testing::error_message;

namespace {
const std::string kNumbers = std::string(ATTOGRAD_SOURCE_DIR) + "/data/numbers/";
using Tokens = std::vector<std::string>;
}  // namespace

TEST(HyphenTokenizer, SplitsHyphensIntoTokensAndJoinsBack) {
  HyphenWordTokenizer t;
  EXPECT_EQ(t.split("quatre-vingt-onze  mille"), (Tokens{"quatre", "-", "vingt", "-", "onze", "mille"}));
  EXPECT_EQ(t.join(t.split("quatre-vingt-onze mille")), "quatre-vingt-onze mille");
  EXPECT_EQ(t.split("-a- b"), (Tokens{"-", "a", "-", "b"}));
  EXPECT_EQ(t.split("a--b"), (Tokens{"a", "-", "-", "b"}));
  EXPECT_EQ(t.join({"a", "-", "-", "b", "c"}), "a--b c");
  EXPECT_TRUE(t.split("  ").empty());
  EXPECT_EQ(make_tokenizer("hyphen")->name(), "hyphen");
}

TEST(ParallelTsv, PicksColumnsByName) {
  const ParallelText p = parse_parallel_tsv("#number\ten\tfr\n71\tseventy-one\tsoixante et onze\n3\tthree\ttrois\n", "en", "fr");
  EXPECT_EQ(p.sources, (Tokens{"seventy-one", "three"}));
  EXPECT_EQ(p.targets, (Tokens{"soixante et onze", "trois"}));
  EXPECT_EQ(p.line_numbers, (std::vector<int64_t>{2, 3}));
}

TEST(ParallelTsv, BadInputsAreIOErrorsNamingTheProblem) {
  struct Case { std::string text, expect; };
  const std::vector<Case> cases = {
      {"71\tseventy-one\tsoixante et onze\n", "x:1: expected a '#' header"},
      {"", "x:1: expected a '#' header"},
      {"#number\ten\tde\n1\tone\teins\n", "x: no column 'fr'; the header has number, en, de"},
      {"#number\ten\tfr\n1\tone\n", "x:2: expected 3 tab-separated fields, found 2"},
  };
  for (const auto& c : cases) {
    const std::string msg = error_message<IOError>([&] { parse_parallel_tsv(c.text, "en", "fr", "x"); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << ::testing::PrintToString(c.text) << " gave: " << msg;
  }
  EXPECT_NE(error_message<IOError>([] { read_parallel_tsv("/nonexistent/numbers.tsv", "en", "fr"); }).find("/nonexistent"),
            std::string::npos);
}

TEST(NumberCorpus, TargetTokenizerPerLanguage) {
  EXPECT_EQ(number_target_tokenizer("fr"), "hyphen");
  EXPECT_EQ(number_target_tokenizer("es"), "hyphen");
  EXPECT_EQ(number_target_tokenizer("de"), "char");
  EXPECT_NE(error_message<ValueError>([] { number_target_tokenizer("it"); }).find("'it'; expected fr, de or es"),
            std::string::npos);
}

// Every split of every language: the tokenizers give the text back, the
// splits have their documented sizes and are disjoint by number.
TEST(NumberCorpus, SplitsRoundTripAndAreDisjoint) {
  const std::vector<std::pair<std::string, int64_t>> splits = {{"train", 50000}, {"valid", 2000}, {"test", 2000}, {"gen", 2000}};
  const auto hyphen = make_tokenizer("hyphen");
  const auto chars = make_tokenizer("char");
  std::set<std::string> numbers;
  for (const auto& [split, size] : splits) {
    const TsvTable t = read_tsv(kNumbers + split + ".tsv", 5);
    ASSERT_EQ(t.header, (Tokens{"number", "en", "fr", "de", "es"}));
    ASSERT_EQ(static_cast<int64_t>(t.rows.size()), size) << split;
    for (const auto& row : t.rows) {
      numbers.insert(row[0]);
      for (size_t c : {1, 2, 4}) ASSERT_EQ(hyphen->join(hyphen->split(row[c])), row[c]);
      ASSERT_EQ(chars->join(chars->split(row[3])), row[3]);
    }
  }
  EXPECT_EQ(numbers.size(), 56000u);
}

TEST(NumberCorpus, FrenchAndSpanishAreWordsGermanIsCharacters) {
  const auto hyphen = make_tokenizer("hyphen");
  const auto chars = make_tokenizer("char");
  EXPECT_EQ(hyphen->split("nine hundred and ninety-nine"), (Tokens{"nine", "hundred", "and", "ninety", "-", "nine"}));
  EXPECT_EQ(hyphen->split("quatre-vingt-dix-neuf mille"), (Tokens{"quatre", "-", "vingt", "-", "dix", "-", "neuf", "mille"}));
  EXPECT_EQ(chars->split("dreißig"), (Tokens{"d", "r", "e", "i", "ß", "i", "g"}));

  const TsvTable t = read_tsv(kNumbers + "train.tsv", 5);
  std::vector<std::string> en, fr, de, es;
  for (const auto& row : t.rows) {
    en.push_back(row[1]);
    fr.push_back(row[2]);
    de.push_back(row[3]);
    es.push_back(row[4]);
  }
  const Vocab src = Vocab::build(en, *hyphen);
  const Vocab vfr = Vocab::build(fr, *hyphen);
  const Vocab vde = Vocab::build(de, *chars);
  const Vocab ves = Vocab::build(es, *hyphen);
  // Closed-class vocabularies: a few dozen words; German is an alphabet.
  EXPECT_EQ(src.size(), kNumSpecials + 32);  // zero..nineteen, twenty..ninety, hundred, thousand, and, "-"
  for (const char* w : {"quatre", "vingts", "mille", "-", "et", "cent", "cents"}) EXPECT_TRUE(vfr.contains(w)) << w;
  for (const char* w : {"mil", "y", "veintiuno", "quinientos", "cien", "ciento"}) EXPECT_TRUE(ves.contains(w)) << w;
  for (const char* c : {"ß", "z", "t"}) EXPECT_TRUE(vde.contains(c)) << c;
  EXPECT_FALSE(vde.contains(" "));  // German number words below a million have no spaces
  EXPECT_LT(vde.size(), 40);
  EXPECT_FALSE(ves.contains("-"));  // Spanish writes its numbers without hyphens

  ParallelText p;
  p.sources = {en.begin(), en.begin() + 100};
  p.targets = {de.begin(), de.begin() + 100};
  const VectorDataset d = encode_parallel(p, *hyphen, src, *chars, vde);
  ASSERT_EQ(d.size(), 100);
  EXPECT_EQ(vde.decode(d.get(7).tgt), chars->split(de[7]));
  EXPECT_EQ(src.decode(d.get(7).src), hyphen->split(en[7]));
  // Unseen tokens map to <unk>.
  const VectorDataset u = encode_parallel(parse_parallel_tsv("#en\tfr\nseventy-one zillion\tsoixante et onze zillions\n",
                                                             "en", "fr"), *hyphen, src, *hyphen, vfr);
  EXPECT_EQ(u.get(0).src.back(), kUnkId);
  EXPECT_EQ(u.get(0).tgt.back(), kUnkId);
}
