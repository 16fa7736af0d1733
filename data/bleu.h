// Corpus BLEU-4 (Papineni et al. 2002) on already-tokenized text, computed as
// sacreBLEU computes it with tokenize="none" and one reference per sentence:
//
//   correct[n], total[n]   clipped n-gram matches and hypothesis n-grams,
//                          summed over the corpus (n = 1..4)
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
#pragma once
#include <array>
#include <cstdint>
#include <string>
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

// hypotheses[i] is scored against references[i]; ValueError when the counts differ.
BleuScore corpus_bleu(const std::vector<TokenSeq>& hypotheses, const std::vector<TokenSeq>& references,
                      BleuSmoothing smoothing = BleuSmoothing::exp);

// Corpus chrF (Popović 2015) as sacreBLEU computes it with its defaults
// (character n-grams 1..6, no word n-grams, beta 2, whitespace removed): for
// each order n the n-gram matches, hypothesis and reference counts are summed
// over the corpus; P_n and R_n are averaged over the orders that have n-grams
// on both sides, and chrF = 100 · (1 + β²) P R / (β² P + R). Sentences are
// strings (UTF-8; characters are code points).
double corpus_chrf(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references);

}  // namespace attograd
