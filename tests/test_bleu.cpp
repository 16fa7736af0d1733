// BLEU, chrF and the 13a tokenizer against values worked out by hand (the arithmetic is in
// the comments) and against the values sacreBLEU documents (each cited where it is used).
#include <gtest/gtest.h>

#include <cmath>

#include <attograd/autograd/error.h>
#include <attograd/data/bleu.h>
#include <attograd/data/tokenizer.h>
#include "test_util.h"

using namespace attograd;
using attograd::testing::error_message;
using attograd::testing::expect_error;

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

// ---- the 13a tokenizer, one rule at a time ---------------------------------------------

TEST(Tokenize13a, SplitsAsciiPunctuationButNotApostropheOrHyphen) {
  EXPECT_EQ(tokenize_13a("(a+b)*c=d? don't well-known"),
            (TokenSeq{"(", "a", "+", "b", ")", "*", "c", "=", "d", "?", "don't", "well-known"}));
  EXPECT_EQ(tokenize_13a("x[y]{z}|~^_`\\@#%$!/:;<>\""),
            (TokenSeq{"x", "[", "y", "]", "{", "z", "}", "|", "~", "^", "_", "`", "\\", "@", "#", "%", "$", "!", "/",
                      ":", ";", "<", ">", "\""}));
}

TEST(Tokenize13a, PeriodAndCommaSplitUnlessBetweenDigits) {
  EXPECT_EQ(tokenize_13a("It costs 3.14, or 1,000 yen."),
            (TokenSeq{"It", "costs", "3.14", ",", "or", "1,000", "yen", "."}));
  EXPECT_EQ(tokenize_13a("end."), (TokenSeq{"end", "."}));
  EXPECT_EQ(tokenize_13a("a.b,c"), (TokenSeq{"a", ".", "b", ",", "c"}));
  // Either side being a non-digit is enough: ".5" is split by the first rule, "5." by the second.
  EXPECT_EQ(tokenize_13a("x.5 5.x .5 5."), (TokenSeq{"x", ".", "5", "5", ".", "x", ".", "5", "5", "."}));
  // Regex passes do not overlap: the "." of "a." is consumed by the first rule's
  // match, so the "," after it is not seen as preceded by a non-digit, and the
  // second rule leaves ",1" alone because a digit follows.
  EXPECT_EQ(tokenize_13a("a.,1"), (TokenSeq{"a", ".", ",1"}));
}

TEST(Tokenize13a, HyphenSplitOnlyAfterADigit) {
  EXPECT_EQ(tokenize_13a("pages 10-20, A-1, x-ray"), (TokenSeq{"pages", "10", "-", "20", ",", "A-1", ",", "x-ray"}));
}

TEST(Tokenize13a, EntitiesSkippedMarkersAndLineBreaks) {
  EXPECT_EQ(tokenize_13a("Tom &amp; Jerry &quot;hi&quot; &lt;b&gt;"),
            (TokenSeq{"Tom", "&", "Jerry", "\"", "hi", "\"", "<", "b", ">"}));
  // Replacements run one after another, so "&amp;lt;" becomes "&lt;" and then "<".
  EXPECT_EQ(tokenize_13a("&amp;lt;"), (TokenSeq{"<"}));
  EXPECT_EQ(tokenize_13a("a <skipped> b"), (TokenSeq{"a", "b"}));
  EXPECT_EQ(tokenize_13a("hyphen-\nated line\nbreak"), (TokenSeq{"hyphenated", "line", "break"}));
}

TEST(Tokenize13a, NonAsciiPassesThroughAndUnicodeSpacesSplit) {
  EXPECT_EQ(tokenize_13a("Grüße, «Straße»."), (TokenSeq{"Grüße", ",", "«Straße»", "."}));
  EXPECT_EQ(tokenize_13a("日本語。テスト"), (TokenSeq{"日本語。テスト"}));
  // Python's str.split() breaks at U+00A0 and U+3000 too, so sacreBLEU does.
  EXPECT_EQ(tokenize_13a("a\u00A0b\u3000c\td"), (TokenSeq{"a", "b", "c", "d"}));
  EXPECT_EQ(tokenize_13a("  \n "), TokenSeq{});
  // An overlong encoding of a space (not UTF-8, Python would refuse it) is not whitespace.
  EXPECT_EQ(tokenize_13a("a\xC0\xA0" "z"), (TokenSeq{"a\xC0\xA0" "z"}));
}

// ---- BLEU on detokenized text ------------------------------------------------------------

// Sentence 1: "The cat sat on the mat." / "The cat is on the mat." → 7 tokens each
// (case kept: "The" ≠ "the"; "." is a token). 1-grams 6/7 (all but "sat"),
// 2-grams 4/6 (The cat, on the, the mat, mat .), 3-grams 2/5 (on the mat, the mat .),
// 4-grams 1/4 (on the mat .).
// Sentence 2: "It costs 3.50 euros." / "It costs 3.50 dollars today." → 5 and 6
// tokens, "3.50" one token. 1-grams 4/5, 2-grams 2/4 (It costs, costs 3.50),
// 3-grams 1/3 (It costs 3.50), 4-grams 0/2.
// Corpus: 10/12, 6/10, 3/8, 1/6; hyp_len 12, ref_len 13, BP = exp(1 - 13/12);
// BLEU = 100 · BP · (10/12 · 6/10 · 3/8 · 1/6)^(1/4) = 38.6831.
TEST(Bleu13a, HandComputedCorpus) {
  const BleuScore s = corpus_bleu_13a({"The cat sat on the mat.", "It costs 3.50 euros."},
                                      {"The cat is on the mat.", "It costs 3.50 dollars today."});
  EXPECT_EQ(s.correct, (std::array<int64_t, 4>{10, 6, 3, 1}));
  EXPECT_EQ(s.total, (std::array<int64_t, 4>{12, 10, 8, 6}));
  EXPECT_EQ(s.hyp_len, 12);
  EXPECT_EQ(s.ref_len, 13);
  EXPECT_NEAR(s.brevity_penalty, std::exp(1.0 - 13.0 / 12.0), 1e-15);
  EXPECT_NEAR(s.score, 38.68310250680001, 1e-9);
  // The first sentence alone: BLEU = 100 · (6/7 · 4/6 · 2/5 · 1/4)^(1/4).
  EXPECT_NEAR(corpus_bleu_13a({"The cat sat on the mat."}, {"The cat is on the mat."}).score, 48.89230224349011, 1e-9);
}

// sacreBLEU's README ("Using SacreBLEU from Python", github.com/mjpost/sacrebleu
// README.md) and its test/test_bleu.py (test_corpus_bleu_cases): two reference
// sets, default settings (signature nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp|version:2.0.0)
// give "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)",
// 48.530827 in the test; chrF2 = 59.73. Empty hypotheses score 0.
namespace {
const std::vector<std::string> kReadmeHyps = {"The dog bit the man.", "It wasn't surprising.",
                                              "The man had just bitten him."};
const ReferenceSets kReadmeRefs = {
    {"The dog bit the man.", "It was not unexpected.", "The man bit him first."},
    {"The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."}};
}  // namespace

TEST(SacreBleuReadme, MultiReferenceBleuAndChrf) {
  const BleuScore s = corpus_bleu_13a_multiref(kReadmeHyps, kReadmeRefs);
  EXPECT_NEAR(s.score, 48.530827, 1e-6);
  EXPECT_EQ(format_bleu(s), "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)");
  EXPECT_NEAR(corpus_chrf_multiref(kReadmeHyps, kReadmeRefs), 59.73, 0.005);
  EXPECT_EQ(format_chrf(corpus_chrf_multiref(kReadmeHyps, kReadmeRefs)), "chrF2 = 59.73");
  EXPECT_EQ(corpus_bleu_13a_multiref({"", "", ""}, kReadmeRefs).score, 0.0);
}

// The README's "Variable Number of References": the first sentence's first
// reference is "", so only "The dog had bit the man." counts for it:
// "BLEU = 29.44 82.4/42.9/27.3/12.5 (BP = 0.889 ratio = 0.895 hyp_len = 17 ref_len = 19)".
TEST(SacreBleuReadme, EmptyReferencesAreSkipped) {
  ReferenceSets refs = kReadmeRefs;
  refs[0][0] = "";
  EXPECT_EQ(format_bleu(corpus_bleu_13a_multiref(kReadmeHyps, refs)),
            "BLEU = 29.44 82.4/42.9/27.3/12.5 (BP = 0.889 ratio = 0.895 hyp_len = 17 ref_len = 19)");
}

// sacreBLEU test/test_bleu.py, test_case_statistics: counts [4, 2, 1, 0], totals [6, 5, 4, 3].
TEST(SacreBleuTests, Statistics) {
  const BleuScore s = corpus_bleu_13a({"am I am a character sequence"}, {"I am a symbol string sequence a a"});
  EXPECT_EQ(s.correct, (std::array<int64_t, 4>{4, 2, 1, 0}));
  EXPECT_EQ(s.total, (std::array<int64_t, 4>{6, 5, 4, 3}));
}

// sacreBLEU strips trailing whitespace before tokenizing, so a final "-\n" is a
// hyphen followed by the line's end, not a hyphenated line break to join.
TEST(Bleu13a, TrailingWhitespaceStrippedBeforeTokenizing) {
  EXPECT_EQ(tokenize_13a("a b c well-\n"), (TokenSeq{"a", "b", "c", "well"}));
  EXPECT_EQ(corpus_bleu_13a({"a b c well-\n"}, {"a b c well-"}).correct[0], 4);
}

TEST(Bleu13a, MultiReferenceClipsToTheLargestCountInOneReference) {
  // "the" ×3 against "the cat" and "the the dog": clipped to 2 (not 1 + 2).
  const ReferenceSets refs = {{"the cat"}, {"the the dog"}};
  EXPECT_EQ(corpus_bleu_13a_multiref({"the the the"}, refs).correct[0], 2);
  // Reference length: the closest to the hypothesis's 3 tokens is 3 ("the the dog"); a tie picks the shorter.
  EXPECT_EQ(corpus_bleu_13a_multiref({"the the the"}, refs).ref_len, 3);
  EXPECT_EQ(corpus_bleu_13a_multiref({"a b c"}, ReferenceSets{{"a b"}, {"a b c d"}}).ref_len, 2);
}

TEST(Bleu13a, Errors) {
  expect_error<ValueError>([] { corpus_bleu_13a({"a"}, {""}); }, {"corpus_bleu_13a", "sentence 0 has no reference"});
  expect_error<ValueError>([] { corpus_bleu_13a({"a", "b"}, {"a"}); },
                           {"corpus_bleu_13a", "2 hypotheses and 1 references"});
  expect_error<ValueError>([] { corpus_bleu_13a_multiref({"a"}, ReferenceSets{}); }, {"at least one reference set"});
  expect_error<ValueError>([] { corpus_bleu_13a_multiref({"a"}, ReferenceSets{{"a"}, {}}); },
                           {"1 hypotheses and 0 references in reference set 1"});
}

// ---- chrF as sacreBLEU 2.x ---------------------------------------------------------------

// Sentence 2's reference "x" has no 2-grams, so (as in sacreBLEU) the
// hypothesis's 2-gram "xy" is not counted either. Orders: 1: hyp 3+2, ref 3+1,
// match 3+1; 2: 2/2/2; 3: 1/1/1; 4..6 have no n-grams. P = (4/5 + 1 + 1)/3 = 14/15,
// R = 1, chrF = 100 · 5 · P / (4P + 1) = 100 · 70/71 = 98.5915. (Counting "xy"
// would give P = (4/5 + 2/3 + 1)/3 and 96.55.)
TEST(Chrf, ShortReferenceOrdersCountNoHypothesisNgrams) {
  EXPECT_NEAR(corpus_chrf({"abc", "xy"}, {"abc", "x"}), 100.0 * 70.0 / 71.0, 1e-9);
}

TEST(Chrf, WhitespaceAsPythonSplitSeesIt) {
  EXPECT_DOUBLE_EQ(corpus_chrf({"a\u00A0b\tc\n"}, {"a b c"}), 100.0);
  EXPECT_DOUBLE_EQ(corpus_chrf({"a\u3000bc"}, {"abc"}), 100.0);
}

// huggingface/datasets metrics/chrf/README.md (its chrF is sacreBLEU's CHRF with
// the defaults): one pair 61.576379378113785, and a two-sentence corpus 84.64214891738334.
TEST(Chrf, DocumentedValues) {
  EXPECT_NEAR(corpus_chrf({"The relationship between Obama and Netanyahu is not exactly friendly."},
                          {"The ties between Obama and Netanyahu are not particularly friendly."}),
              61.576379378113785, 1e-9);
  EXPECT_NEAR(corpus_chrf({"The relationship between cats and dogs is not exactly friendly.",
                           "a good bookshop is just a genteel black hole that knows how to read."},
                          {"The relationship between dogs and cats is not exactly friendly.",
                           "A good bookshop is just a genteel Black Hole that knows how to read."}),
              84.64214891738334, 1e-9);
}

// sacreBLEU test/test_chrf.py, test_cases_effective_order (beta = 3, eps_smoothing False).
TEST(Chrf, SacreBleuEffectiveOrderCases) {
  EXPECT_NEAR(corpus_chrf({"a"}, {"a"}, 3), 100.0, 1e-4);
  EXPECT_NEAR(corpus_chrf({""}, {"reference"}, 3), 0.0, 1e-4);
  EXPECT_NEAR(corpus_chrf({"a b c"}, {"a b c"}, 3), 100.0, 1e-4);
  EXPECT_NEAR(corpus_chrf({"a b c"}, {"abc"}, 3), 100.0, 1e-4);
  EXPECT_NEAR(corpus_chrf({""}, {"c"}, 3), 0.0, 1e-4);
  EXPECT_NEAR(corpus_chrf({"a", "b"}, {"a", "c"}, 3), 50.0, 1e-4);
  EXPECT_NEAR(corpus_chrf({"aa"}, {"ab"}, 3), 25.0, 1e-4);
}

TEST(Chrf, MultiReferenceTakesTheBestReferencePerSentence) {
  EXPECT_DOUBLE_EQ(corpus_chrf_multiref({"abc"}, ReferenceSets{{"xyz"}, {"abc"}}), 100.0);
  EXPECT_DOUBLE_EQ(corpus_chrf_multiref({"abc"}, ReferenceSets{{""}, {"abc"}}), 100.0);
}

TEST(Chrf, Errors) {
  expect_error<ValueError>([] { corpus_chrf({"a"}, {""}); }, {"corpus_chrf", "sentence 0 has no reference"});
  expect_error<ValueError>([] { corpus_chrf({"a"}, {"\xff"}); }, {"invalid UTF-8"});
  expect_error<ValueError>([] { corpus_chrf({"a"}, {"a"}, -1); }, {"beta"});
}

TEST(ScoreReport, BothMetricLines) {
  EXPECT_EQ(score_report({"The cat sat on the mat."}, {"The cat sat on the mat."}),
            "BLEU = 100.00 100.0/100.0/100.0/100.0 (BP = 1.000 ratio = 1.000 hyp_len = 7 ref_len = 7)\nchrF2 = 100.00");
}
