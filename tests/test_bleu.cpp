// BLEU and chrF against values worked out by hand (the arithmetic is in the comments).
#include <gtest/gtest.h>

#include <cmath>

#include <attograd/autograd/error.h>
#include <attograd/data/bleu.h>
#include <attograd/data/tokenizer.h>
#include "test_util.h"

using namespace attograd;
using attograd::testing::error_message;

namespace {
std::vector<TokenSeq> words(const std::vector<std::string>& lines) {
  std::vector<TokenSeq> out;
  for (const auto& l : lines) out.push_back(WhitespaceTokenizer().split(l));
  return out;
}
}  // namespace

TEST(Bleu, IdenticalCorpusIs100) {
  const auto c = words({"a b c d e", "vingt et un mille"});
  const BleuScore s = corpus_bleu(c, c);
  EXPECT_DOUBLE_EQ(s.score, 100.0);
  EXPECT_EQ(s.total, (std::array<int64_t, 4>{9, 7, 5, 3}));
  EXPECT_EQ(s.correct, s.total);
}

// hyp "the cat sat on the mat" / ref "the cat is on the mat":
// 1-grams 5/6 (the×2 cat on mat), 2-grams 3/5 (the cat, on the, the mat),
// 3-grams 1/4 (on the mat), 4-grams 0/3. With exp smoothing the first order
// without a match gets 1/(2·3), so BLEU = 100·(5/6 · 3/5 · 1/4 · 1/6)^(1/4) = 37.9918.
TEST(Bleu, PartialMatchWithExpSmoothing) {
  const BleuScore s = corpus_bleu(words({"the cat sat on the mat"}), words({"the cat is on the mat"}));
  EXPECT_EQ(s.correct, (std::array<int64_t, 4>{5, 3, 1, 0}));
  EXPECT_EQ(s.total, (std::array<int64_t, 4>{6, 5, 4, 3}));
  EXPECT_DOUBLE_EQ(s.brevity_penalty, 1.0);
  EXPECT_NEAR(s.precisions[3], 100.0 / 6, 1e-12);
  EXPECT_NEAR(s.score, 37.99178428257963, 1e-9);
  EXPECT_EQ(corpus_bleu(words({"the cat sat on the mat"}), words({"the cat is on the mat"}), BleuSmoothing::none).score, 0.0);
}

// Clipping (Papineni's example): "the" ×7 against a reference with two "the":
// 1-grams 2/7; no 2-, 3-, 4-gram matches, smoothed 1/(2·6), 1/(4·5), 1/(8·4).
// BLEU = 100·(2/7 · 1/12 · 1/20 · 1/32)^(1/4) = 7.80985.
TEST(Bleu, ClipsRepeatedWordsAndSmoothsEachMissingOrderTwiceAsHard) {
  const BleuScore s = corpus_bleu(words({"the the the the the the the"}), words({"the cat is on the mat"}));
  EXPECT_EQ(s.correct[0], 2);
  EXPECT_NEAR(s.precisions[1], 100.0 / 12, 1e-12);
  EXPECT_NEAR(s.precisions[2], 100.0 / 20, 1e-12);
  EXPECT_NEAR(s.precisions[3], 100.0 / 32, 1e-12);
  EXPECT_NEAR(s.score, 7.80984984230064, 1e-9);
}

// Statistics are summed over the corpus before the precisions: "a b c d" is
// exact; "x y" against "x y z w" adds matching 1- and 2-grams only. All
// precisions are 1, hyp_len 6 < ref_len 8, BP = exp(1 - 8/6), BLEU = 71.6531.
TEST(Bleu, BrevityPenaltyOnCorpusLengths) {
  const BleuScore s = corpus_bleu(words({"a b c d", "x y"}), words({"a b c d", "x y z w"}));
  EXPECT_EQ(s.hyp_len, 6);
  EXPECT_EQ(s.ref_len, 8);
  EXPECT_EQ(s.correct, s.total);
  EXPECT_NEAR(s.brevity_penalty, std::exp(1.0 - 8.0 / 6.0), 1e-15);
  EXPECT_NEAR(s.score, 71.65313105737893, 1e-9);
}

TEST(Bleu, ZeroCases) {
  EXPECT_EQ(corpus_bleu(words({"a b c d"}), words({"e f g h"})).score, 0.0);       // nothing matches
  EXPECT_EQ(corpus_bleu(words({"a b c"}), words({"a b c"})).score, 0.0);           // no 4-grams at all
  EXPECT_EQ(corpus_bleu({TokenSeq{}}, words({"a b c d"})).score, 0.0);            // empty output
  EXPECT_EQ(corpus_bleu({}, {}).score, 0.0);
  EXPECT_NE(error_message<ValueError>([] { corpus_bleu(words({"a"}), {}); }).find("1 hypotheses and 0 references"),
            std::string::npos);
}

// hyp "ab" / ref "a b c" (spaces removed: "abc"): 1-grams 2 of 2 hyp, 3 ref;
// 2-grams "ab" 1 of 1, 2 ref; no 3-grams in the hypothesis. P = 1, R = (2/3 + 1/2)/2
// = 7/12, chrF = 100 · 5 · P · R / (4P + R) = 100 · 35/55 = 63.636.
TEST(Chrf, HandComputed) {
  EXPECT_NEAR(corpus_chrf({"ab"}, {"a b c"}), 100.0 * 35.0 / 55.0, 1e-9);
  EXPECT_DOUBLE_EQ(corpus_chrf({"einundzwanzig", "drei"}, {"einundzwanzig", "drei"}), 100.0);
  EXPECT_EQ(corpus_chrf({"xyz"}, {"abc"}), 0.0);
  // Characters are code points: "ß" is one 1-gram, not two bytes.
  EXPECT_NEAR(corpus_chrf({"ß"}, {"ßa"}), 100.0 * 5 * 0.5 / (4 + 0.5), 1e-9);
}
