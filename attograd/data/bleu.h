// Corpus BLEU-4 (Papineni et al. 2002) and chrF (Popović 2015) computed as
// sacreBLEU 2.x computes them, on detokenized text (BLEU with sacreBLEU's
// default "13a" tokenization) or on text already split into tokens.
//
// BLEU, from the statistics summed over the corpus:
//
//   correct[n], total[n]   clipped n-gram matches and hypothesis n-grams (n = 1..4);
//                          with several references an n-gram is clipped to its
//                          largest count in any one of them
//   hyp_len, ref_len       tokens; a sentence's reference length is that of the
//                          reference closest in length to the hypothesis (the
//                          shorter on a tie)
//   p[n] = correct[n] / total[n]
//   BP = 1 if hyp_len >= ref_len, else exp(1 - ref_len / hyp_len) (0 for an empty output)
//   BLEU = 100 · BP · exp(Σ_n log p[n] / 4)
//
// Smoothing (sacreBLEU's names; Chen & Cherry 2014):
//   exp  (sacreBLEU's default, mteval-v13a's "method 3"): the k-th order with
//        no match gets p[n] = 1 / (2^k · total[n]) instead of 0;
//   none: a zero p[n] makes BLEU 0.
// As in sacreBLEU, BLEU is 0 when nothing matches at all or when the corpus has
// no n-grams of some order (every output shorter than n tokens).
//
// chrF (character n-grams 1..6, no word n-grams, whitespace removed, sacreBLEU's
// default "effective order" rather than epsilon smoothing):
//
//   for each sentence and order n, with H_n, R_n the hypothesis's and the
//   reference's character n-gram counts and M_n = Σ min(H_n(g), R_n(g)):
//     hyp[n] = |H_n| (but 0 when the reference has no n-gram of order n),
//     ref[n] = |R_n|, match[n] = M_n,
//   summed over the corpus; then over the orders with hyp[n] > 0 and ref[n] > 0
//   (the "effective" orders; none at all gives chrF 0):
//     P = mean of match[n] / hyp[n],   R = mean of match[n] / ref[n]
//     chrF = 100 · (1 + β²) P R / (β² P + R)   (0 when P + R = 0)
//   One F-score of the averaged precision and recall, not an average of
//   per-order F-scores. With several references a sentence contributes the
//   statistics of the reference whose own chrF is highest (the first on a tie).
//
// Inputs follow sacreBLEU: sentences are UTF-8; whitespace means what Python's
// str.split() splits on (ASCII and Unicode spaces, U+00A0 included); an empty
// reference string is skipped, and a sentence left with no reference is a
// ValueError (sacreBLEU refuses it too). Differences: sacreBLEU's warning about
// tokenized input and its lowercasing option are not here.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attograd {

// How an n-gram order with no match counts: none gives BLEU 0; exp (sacreBLEU's
// default) uses 100 / (2^k · total) for the k-th such order.
enum class BleuSmoothing { none, exp };

// corpus_bleu's result with its parts, as sacreBLEU reports them.
struct BleuScore {
  double score = 0;                  // 0..100
  std::array<double, 4> precisions{};  // p[n] in percent, after smoothing
  // correct[n - 1]: clipped n-gram matches, summed over the corpus (n = 1..4).
  std::array<int64_t, 4> correct{}, total{};  // total[n - 1]: hypothesis n-grams, summed over the corpus
  double brevity_penalty = 0;        // BP in [0, 1]: 1 when hyp_len >= ref_len, 0 for an empty output
  // Hypothesis tokens in the corpus.
  int64_t hyp_len = 0, ref_len = 0;  // reference tokens in the corpus
};

// A tokenized sentence.
using TokenSeq = std::vector<std::string>;

// Several references per sentence, laid out as sacreBLEU takes them:
// reference_sets[k][i] is the k-th reference of hypothesis i.
using ReferenceSets = std::vector<std::vector<std::string>>;

// sacreBLEU's default "13a" tokenization (mteval-v13a's): "<skipped>" and
// "-\n" are deleted, "\n" becomes a space, &quot; &amp; &lt; &gt; become
// " & < > (in that order); then, on the text padded with a space each side,
// four passes: the ASCII punctuation { | } ~ [ \ ] ^ _ ` ! " # $ % & ( ) * + : ;
// < = > ? @ / is split off; "." and "," are split off unless between digits
// ("3.14", "1,000" stay whole); "-" after a digit is split off; and the result
// is split at whitespace. Everything outside ASCII passes through untouched.
TokenSeq tokenize_13a(std::string_view sentence);

// BLEU on tokenized text, one reference per sentence (sacreBLEU's tokenize="none"):
// hypotheses[i] is scored against references[i]; ValueError when the counts differ.
BleuScore corpus_bleu(const std::vector<TokenSeq>& hypotheses, const std::vector<TokenSeq>& references,
                      BleuSmoothing smoothing = BleuSmoothing::exp);

// BLEU on detokenized text as sacreBLEU's default reports it (tokenize="13a"):
// each sentence has trailing whitespace stripped, then tokenize_13a. One
// reference per sentence; ValueError when the counts differ or a reference is "".
BleuScore corpus_bleu_13a(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references,
                          BleuSmoothing smoothing = BleuSmoothing::exp);

// corpus_bleu_13a with several references per sentence (empty ones skipped);
// ValueError when a set's length differs from the hypotheses' or there is no set.
BleuScore corpus_bleu_13a_multiref(const std::vector<std::string>& hypotheses, const ReferenceSets& reference_sets,
                                   BleuSmoothing smoothing = BleuSmoothing::exp);

// Corpus chrF as above (beta 2 is sacreBLEU's chrF2), one reference per
// sentence; ValueError for differing counts, an empty reference, invalid UTF-8
// or a negative beta.
double corpus_chrf(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references,
                   int beta = 2);

// corpus_chrf with several references per sentence (empty ones skipped).
double corpus_chrf_multiref(const std::vector<std::string>& hypotheses, const ReferenceSets& reference_sets,
                            int beta = 2);

// sacreBLEU's text line for a BLEU score (without its signature), e.g.
// "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)".
std::string format_bleu(const BleuScore& bleu);

// sacreBLEU's text line for a chrF score, e.g. "chrF2 = 59.73".
std::string format_chrf(double chrf, int beta = 2);

// The score a command-line tool prints for detokenized output against one
// reference per line: format_bleu(corpus_bleu_13a(...)) and
// format_chrf(corpus_chrf(...)) on two lines (no trailing newline).
std::string score_report(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references);

}  // namespace attograd
