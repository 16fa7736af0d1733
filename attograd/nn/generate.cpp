#include <attograd/nn/generate.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <attograd/autograd/engine.h>
#include <attograd/autograd/kernels/rows.h>
#include <attograd/autograd/ops/indexing.h>
#include <attograd/autograd/ops/shape.h>

namespace attograd {

namespace {

// Puts the model in eval mode for the scope, restoring its mode after.
struct EvalScope {
  explicit EvalScope(Module& m) : m_(m), was_training_(m.is_training()) { m_.eval(); }
  ~EvalScope() { m_.train(was_training_); }
  Module& m_;
  bool was_training_;
};

// log-softmax of one row of V logits, in double: x − logsumexp(x).
std::vector<double> log_probs(const Tensor& logits_row) {
  std::vector<double> v = logits_row.to_vector<double>();
  const double lse = logsumexp_row(v.data(), static_cast<int64_t>(v.size()));
  for (double& x : v) x -= lse;
  return v;
}

Tensor ids_tensor(const std::vector<int64_t>& ids, int64_t rows) {
  return Tensor::from_vector(ids, {rows, static_cast<int64_t>(ids.size()) / rows});
}

// Next-token log-probs [rows][V] for the current prefixes. With a cache only
// the last token is fed (through decode_step, or the graph when `graph`);
// without one, the whole prefix.
std::vector<std::vector<double>> step_log_probs(Seq2SeqTransformer& model, const std::vector<std::vector<int64_t>>& prefixes,
                                                const Tensor& memory, const Tensor& kpm, KVCache* cache, bool graph) {
  const int64_t rows = static_cast<int64_t>(prefixes.size());
  std::vector<int64_t> ids;
  for (auto& p : prefixes) {
    if (cache) ids.push_back(p.back());
    else ids.insert(ids.end(), p.begin(), p.end());
  }
  // The decode step gives [rows, V]; the graph [rows, L, V], of which the last position.
  Tensor logits;
  if (cache && !graph) {
    logits = model.decode_step(ids, *cache, memory, kpm);
  } else {
    const Tensor all = model.decode(ids_tensor(ids, rows), memory, kpm, Tensor(), cache);
    logits = all.narrow(1, all.size(1) - 1, 1).reshape({rows, all.size(2)});
  }
  std::vector<std::vector<double>> out;
  for (int64_t r = 0; r < rows; ++r) out.push_back(log_probs(logits.narrow(0, r, 1)));
  return out;
}

void check_inputs(const Seq2SeqTransformer& model, const Tensor& src, const DecodeOptions& opt) {
  if (src.dim() != 2 || src.dtype() != DType::i64)
    fail<ShapeError>("decode", "src must be i64 [B, S], got {} {}", dtype_name(src.dtype()), shape_str(src.shape()));
  if (src.size(1) > model.config.max_len)
    fail<ShapeError>("decode", "source length {} exceeds the model's max_len {}", src.size(1), model.config.max_len);
  if (opt.max_len <= 0 || opt.max_len >= model.config.max_len)
    fail<ValueError>("decode", "max_len must be in [1, {}), got {}", model.config.max_len, opt.max_len);
}

double length_penalty(size_t len, double alpha) { return std::pow((5.0 + static_cast<double>(len)) / 6.0, alpha); }

}  // namespace

std::vector<Hypothesis> greedy_decode(Seq2SeqTransformer& model, const Tensor& src, const Tensor& kpm,
                                      const DecodeOptions& opt) {
  check_inputs(model, src, opt);
  EvalScope eval(model);
  NoGradGuard no_grad;
  const int64_t B = src.size(0);
  Tensor memory = model.encode(src, kpm);  // [B, S, E]
  KVCache cache = model.make_cache();
  std::vector<std::vector<int64_t>> prefixes(B, std::vector<int64_t>{opt.bos_id});
  std::vector<Hypothesis> hyps(B);
  std::vector<bool> done(B, false);
  for (int64_t step = 0; step < opt.max_len; ++step) {
    auto logp = step_log_probs(model, prefixes, memory, kpm, opt.use_cache ? &cache : nullptr,
                               !opt.use_decode_step);
    bool all_done = true;
    for (int64_t b = 0; b < B; ++b) {
      const auto best = std::max_element(logp[b].begin(), logp[b].end());
      const int64_t tok = best - logp[b].begin();
      prefixes[b].push_back(tok);
      if (done[b]) continue;
      hyps[b].log_prob += *best;
      if (tok == opt.eos_id) done[b] = true;
      else hyps[b].tokens.push_back(tok);
      all_done = all_done && done[b];
    }
    if (all_done) break;
  }
  for (auto& h : hyps) h.score = h.log_prob;
  return hyps;
}

std::vector<Hypothesis> beam_search(Seq2SeqTransformer& model, const Tensor& src, const Tensor& kpm,
                                    const DecodeOptions& opt, const BeamOptions& bo) {
  check_inputs(model, src, opt);
  if (bo.beam < 1) fail<ValueError>("beam_search", "beam must be >= 1, got {}", bo.beam);
  if (bo.length_penalty < 0) fail<ValueError>("beam_search", "length_penalty must be >= 0, got {}", bo.length_penalty);
  EvalScope eval(model);
  NoGradGuard no_grad;
  // Greedy seeds the finished set, so beam search never returns a hypothesis
  // that greedy beats on score (pruning alone cannot promise that).
  std::vector<Hypothesis> greedy = greedy_decode(model, src, kpm, opt);
  std::vector<Hypothesis> result;
  const int64_t B = src.size(0), K = bo.beam;
  for (int64_t b = 0; b < B; ++b) {
    const Tensor src_b = src.narrow(0, b, 1);
    const Tensor kpm_b = kpm.defined() ? kpm.narrow(0, b, 1) : Tensor();
    const Tensor memory1 = model.encode(src_b, kpm_b);  // [1, S, E]
    struct Beam { std::vector<int64_t> prefix; double log_prob; };
    std::vector<Beam> live{{{opt.bos_id}, 0.0}};
    std::vector<Hypothesis> finished;
    Hypothesis g = greedy[b];
    g.score = g.log_prob / length_penalty(g.tokens.size() + 1, bo.length_penalty);
    finished.push_back(g);
    KVCache cache = model.make_cache();
    for (int64_t step = 0; step < opt.max_len && !live.empty(); ++step) {
      const int64_t n = static_cast<int64_t>(live.size());
      const Tensor memory = memory1.expand({n, memory1.size(1), memory1.size(2)});
      const Tensor kpm_n = kpm_b.defined() ? kpm_b.expand({n, kpm_b.size(1)}) : Tensor();
      std::vector<std::vector<int64_t>> prefixes;
      for (auto& l : live) prefixes.push_back(l.prefix);
      auto logp = step_log_probs(model, prefixes, memory, kpm_n, opt.use_cache ? &cache : nullptr,
                                 !opt.use_decode_step);
      struct Cand { int64_t beam, tok; double log_prob; };
      std::vector<Cand> cands;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t v = 0; v < static_cast<int64_t>(logp[i].size()); ++v)
          cands.push_back({i, v, live[i].log_prob + logp[i][v]});
      const size_t keep = std::min<size_t>(cands.size(), static_cast<size_t>(2 * K));
      std::partial_sort(cands.begin(), cands.begin() + static_cast<long>(keep), cands.end(),
                        [](const Cand& a, const Cand& c) { return a.log_prob > c.log_prob; });
      std::vector<Beam> next;
      std::vector<int64_t> origin;
      for (size_t c = 0; c < keep && static_cast<int64_t>(next.size()) < K; ++c) {
        const Cand& cd = cands[c];
        std::vector<int64_t> p = live[cd.beam].prefix;
        if (cd.tok == opt.eos_id) {
          Hypothesis h{std::vector<int64_t>(p.begin() + 1, p.end()), cd.log_prob, 0};
          h.score = h.log_prob / length_penalty(h.tokens.size() + 1, bo.length_penalty);
          finished.push_back(h);
          continue;
        }
        p.push_back(cd.tok);
        next.push_back({p, cd.log_prob});
        origin.push_back(cd.beam);
      }
      // Every extension only lowers log_prob: with no length penalty, a live
      // beam already below the best finished hypothesis can never win.
      if (bo.length_penalty == 0) {
        double best = -std::numeric_limits<double>::infinity();
        for (auto& h : finished) best = std::max(best, h.score);
        std::vector<Beam> kept;
        std::vector<int64_t> kept_origin;
        for (size_t i = 0; i < next.size(); ++i)
          if (next[i].log_prob > best) { kept.push_back(next[i]); kept_origin.push_back(origin[i]); }
        next.swap(kept);
        origin.swap(kept_origin);
      }
      if (opt.use_cache && !next.empty()) cache.reorder(origin);
      live.swap(next);
    }
    for (auto& l : live) {  // reached max_len without EOS
      Hypothesis h{std::vector<int64_t>(l.prefix.begin() + 1, l.prefix.end()), l.log_prob, 0};
      h.score = h.log_prob / length_penalty(h.tokens.size(), bo.length_penalty);
      finished.push_back(h);
    }
    result.push_back(*std::max_element(finished.begin(), finished.end(),
                                       [](const Hypothesis& a, const Hypothesis& c) { return a.score < c.score; }));
  }
  return result;
}

std::vector<double> sequence_log_prob(Seq2SeqTransformer& model, const Tensor& src, const Tensor& kpm,
                                      const std::vector<std::vector<int64_t>>& outputs, const DecodeOptions& opt) {
  EvalScope eval(model);
  NoGradGuard no_grad;
  std::vector<double> res;
  for (int64_t b = 0; b < src.size(0); ++b) {
    std::vector<int64_t> in{opt.bos_id};
    in.insert(in.end(), outputs[b].begin(), outputs[b].end());
    std::vector<int64_t> target(outputs[b].begin(), outputs[b].end());
    target.push_back(opt.eos_id);
    const Tensor kpm_b = kpm.defined() ? kpm.narrow(0, b, 1) : Tensor();
    Tensor logits = model.forward(src.narrow(0, b, 1), ids_tensor(in, 1), kpm_b);  // [1, L, V]
    double lp = 0;
    for (size_t t = 0; t < target.size(); ++t)
      lp += log_probs(logits.narrow(1, static_cast<int64_t>(t), 1))[target[t]];
    res.push_back(lp);
  }
  return res;
}

}  // namespace attograd
