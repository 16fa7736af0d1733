// examples/common/number_words.h: the corpus spelling of every number in data/numbers,
// and the input normaliser that training, eval and translate share.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <attograd/autograd/error.h>
#include "examples/common/number_words.h"
#include <attograd/data/tsv.h>
#include "test_util.h"

namespace attograd::app {
namespace {

const std::string kCorpus = std::string(ATTOGRAD_SOURCE_DIR) + "/data/numbers/";

TEST(NumberWords, SpellsEveryNumberOfTheCorpusAsTheCorpusDoes) {
  int64_t checked = 0;
  for (const std::string split : {"train", "valid", "test", "gen"}) {
    const TsvTable t = read_tsv(kCorpus + split + ".tsv", 5);
    ASSERT_EQ(t.header[0], "number");
    ASSERT_EQ(t.header[1], "en");
    for (const auto& row : t.rows) {
      ASSERT_EQ(english_number_words(std::stoll(row[0])), row[1]) << split << ": " << row[0];
      ++checked;
    }
  }
  EXPECT_EQ(checked, 56'000);
}

TEST(NumberWords, EdgesOfTheRange) {
  EXPECT_EQ(english_number_words(0), "zero");
  EXPECT_EQ(english_number_words(1000), "one thousand");
  EXPECT_EQ(english_number_words(100'000), "one hundred thousand");
  EXPECT_EQ(english_number_words(kMaxNumberWords),
            "nine hundred and ninety-nine thousand nine hundred and ninety-nine");
  testing::expect_error<ValueError>([] { english_number_words(-1); }, {"-1", "[0, 999999]"});
  testing::expect_error<ValueError>([] { english_number_words(kMaxNumberWords + 1); }, {"1000000"});
}

TEST(NumberWords, EverySpellingOfANumberNormalisesToTheCorpusForm) {
  const std::string canonical = "three thousand four hundred and eighty-five";
  const std::vector<std::string> spellings = {
      canonical,
      "Three thousand, four hundred and eighty-five",      // how num2words prints it
      "three  thousand four hundred and eighty-five ",
      "THREE THOUSAND, FOUR HUNDRED AND EIGHTY-FIVE",
      "  three thousand,four hundred and eighty-five.",
      "three thousand four hundred and eighty - five",
      "\tthree thousand\tfour hundred and eighty-five\r",
      "three thousand; four hundred and eighty-five!",
      "\"three thousand four hundred and eighty-five\"",
      "three thousand four hundred and eighty\u2011five",    // non-breaking hyphen
      "three\u00a0thousand four hundred and eighty\u2013five",  // no-break space, en dash
      "three thousand four hundred and eighty--five",
      "3485",
      "3,485",
      " 3485. ",
  };
  for (const std::string& s : spellings) EXPECT_EQ(normalize_number_words(s), canonical) << "'" << s << "'";
}

TEST(NumberWords, CorpusTextComesBackUnchanged) {
  for (const std::string split : {"train", "gen"}) {
    const TsvTable t = read_tsv(kCorpus + split + ".tsv", 5);
    for (const auto& row : t.rows) ASSERT_EQ(normalize_number_words(row[1]), row[1]);
  }
}

TEST(NumberWords, DigitsBecomeWordsOnlyWhenTheyAreAWholeNumberInRange) {
  EXPECT_EQ(normalize_number_words("0"), "zero");
  EXPECT_EQ(normalize_number_words("999,999"), "nine hundred and ninety-nine thousand nine hundred and ninety-nine");
  EXPECT_EQ(normalize_number_words("71 thousand"), "seventy-one thousand");
  EXPECT_EQ(normalize_number_words("007"), "seven");
  EXPECT_EQ(normalize_number_words("1000000"), "1000000");   // beyond the corpus: stays, and is unknown
  EXPECT_EQ(normalize_number_words("1,000,000"), "1000000");
  EXPECT_EQ(normalize_number_words("3.5"), "3 5");           // a decimal is not read as numbers
  EXPECT_EQ(normalize_number_words("x3485"), "x3485");
  EXPECT_EQ(normalize_number_words("3485th"), "3485th");
  EXPECT_EQ(normalize_number_words("3,48"), "3 48");         // not a thousands group
  EXPECT_EQ(normalize_number_words("zillion"), "zillion");
  EXPECT_EQ(normalize_number_words(" ,.; "), "");
}

}  // namespace
}  // namespace attograd::app
