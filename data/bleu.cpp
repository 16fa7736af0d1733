#include <attograd/data/bleu.h>

#include <cmath>
#include <map>

#include <attograd/autograd/error.h>
#include <attograd/data/tokenizer.h>

namespace attograd {
namespace {

constexpr int kOrder = 4;

// Counts of the n-grams of `tokens` (order n exactly).
template <class T>
std::map<std::vector<T>, int64_t> ngram_counts(const std::vector<T>& tokens, size_t n) {
  std::map<std::vector<T>, int64_t> counts;
  for (size_t i = 0; i + n <= tokens.size(); ++i) ++counts[std::vector<T>(tokens.begin() + i, tokens.begin() + i + n)];
  return counts;
}

// Σ over the hypothesis's n-grams of min(count in hyp, count in ref): the clipped matches.
template <class T>
int64_t clipped_matches(const std::map<std::vector<T>, int64_t>& hyp, const std::map<std::vector<T>, int64_t>& ref) {
  int64_t m = 0;
  for (const auto& [gram, count] : hyp)
    if (auto it = ref.find(gram); it != ref.end()) m += std::min(count, it->second);
  return m;
}

}  // namespace

BleuScore corpus_bleu(const std::vector<TokenSeq>& hypotheses, const std::vector<TokenSeq>& references,
                      BleuSmoothing smoothing) {
  if (hypotheses.size() != references.size())
    fail<ValueError>("corpus_bleu", "expected one reference per hypothesis, got {} hypotheses and {} references",
                     hypotheses.size(), references.size());
  BleuScore s;
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    s.hyp_len += static_cast<int64_t>(hypotheses[i].size());
    s.ref_len += static_cast<int64_t>(references[i].size());
    for (int n = 1; n <= kOrder; ++n) {
      const auto h = ngram_counts(hypotheses[i], n);
      for (const auto& [gram, count] : h) s.total[n - 1] += count;
      s.correct[n - 1] += clipped_matches(h, ngram_counts(references[i], n));
    }
  }
  s.brevity_penalty = s.hyp_len >= s.ref_len ? 1.0
                      : s.hyp_len > 0        ? std::exp(1.0 - static_cast<double>(s.ref_len) / static_cast<double>(s.hyp_len))
                                             : 0.0;
  if (s.correct[0] == 0) return s;  // nothing matches (no higher-order match either)
  double log_sum = 0, unmatched = 1;
  for (int n = 0; n < kOrder; ++n) {
    if (s.total[n] == 0) return s;  // no n-grams of this order anywhere: BLEU-4 is 0
    if (s.correct[n] > 0) {
      s.precisions[n] = 100.0 * static_cast<double>(s.correct[n]) / static_cast<double>(s.total[n]);
    } else if (smoothing == BleuSmoothing::exp) {
      unmatched *= 2;
      s.precisions[n] = 100.0 / (unmatched * static_cast<double>(s.total[n]));
    } else {
      return s;
    }
    log_sum += std::log(s.precisions[n] / 100.0);
  }
  s.score = 100.0 * s.brevity_penalty * std::exp(log_sum / kOrder);
  return s;
}

double corpus_chrf(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references) {
  constexpr int kCharOrder = 6;
  constexpr double kBeta2 = 4.0;  // β = 2
  if (hypotheses.size() != references.size())
    fail<ValueError>("corpus_chrf", "expected one reference per hypothesis, got {} hypotheses and {} references",
                     hypotheses.size(), references.size());
  std::array<int64_t, kCharOrder> n_hyp{}, n_ref{}, n_match{};
  CharTokenizer chars;
  auto no_space = [&](const std::string& s) {
    std::vector<std::string> out;
    for (auto& c : chars.split(s))
      if (c != " " && c != "\t") out.push_back(std::move(c));
    return out;
  };
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    const auto h = no_space(hypotheses[i]), r = no_space(references[i]);
    for (int n = 1; n <= kCharOrder; ++n) {
      const auto hc = ngram_counts(h, n), rc = ngram_counts(r, n);
      for (const auto& [g, c] : hc) n_hyp[n - 1] += c;
      for (const auto& [g, c] : rc) n_ref[n - 1] += c;
      n_match[n - 1] += clipped_matches(hc, rc);
    }
  }
  double precision = 0, recall = 0;
  int effective = 0;
  for (int n = 0; n < kCharOrder; ++n) {
    if (n_hyp[n] == 0 || n_ref[n] == 0) continue;
    precision += static_cast<double>(n_match[n]) / static_cast<double>(n_hyp[n]);
    recall += static_cast<double>(n_match[n]) / static_cast<double>(n_ref[n]);
    ++effective;
  }
  if (effective == 0) return 0.0;
  precision /= effective;
  recall /= effective;
  const double denom = kBeta2 * precision + recall;
  return denom > 0 ? 100.0 * (1 + kBeta2) * precision * recall / denom : 0.0;
}

}  // namespace attograd
