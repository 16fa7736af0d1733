#include "examples/lm/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <attograd/autograd/engine.h>

namespace attograd::app {

int32_t sample_token(std::span<const float> logits, const SampleOptions& opt, Generator& gen) {
  const char* op = "sample";
  if (logits.empty()) fail<ValueError>(op, "no logits");
  if (!(opt.temperature >= 0)) fail<ValueError>(op, "--temperature must be >= 0, got {}", opt.temperature);
  if (opt.top_k < 0) fail<ValueError>(op, "--top-k must be >= 0, got {}", opt.top_k);
  if (!(opt.top_p > 0 && opt.top_p <= 1)) fail<ValueError>(op, "--top-p must be in (0, 1], got {}", opt.top_p);
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  // Most likely first; equal logits by id, so a seed gives the same text everywhere.
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (opt.temperature == 0) return order[0];
  size_t keep = opt.top_k > 0 ? std::min(order.size(), static_cast<size_t>(opt.top_k)) : order.size();
  // p_i = exp((l_i − l_max) / temperature) / Σ
  std::vector<double> p(keep);
  const double top = logits[order[0]];
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[i] = std::exp((logits[order[i]] - top) / opt.temperature);
  if (opt.top_p < 1) {
    double mass = 0;
    size_t n = 0;
    while (n < keep && mass < opt.top_p * total) mass += p[n++];
    keep = std::max<size_t>(n, 1);
    total = std::accumulate(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
  }
  double u = gen.uniform() * total;
  for (size_t i = 0; i < keep; ++i) {
    u -= p[i];
    if (u < 0) return order[i];
  }
  return order[keep - 1];
}

namespace {

// Logits [V] of the last position after feeding ids into the cache: a
// prompt through the graph, one token through the decode step.
std::vector<float> feed(GPT& model, KVCache& cache, std::span<const int32_t> ids) {
  const std::vector<int64_t> v(ids.begin(), ids.end());
  if (v.size() == 1) return model.decode_step(v, cache).reshape({-1}).to_vector<float>();  // [1, V]
  const Tensor logits = model.forward(Tensor::from_vector(v, {1, static_cast<int64_t>(v.size())}), &cache);  // [1, n, V]
  return logits.narrow(1, logits.size(1) - 1, 1).reshape({-1}).to_vector<float>();
}

// Logits [V] of the last of ids (at most the context) through the graph
// without a cache: the only way to run a model without the causal mask, each
// token's keys and values depending on every later token.
std::vector<float> last_logits(GPT& model, std::span<const int32_t> ids) {
  const std::vector<int64_t> v(ids.begin(), ids.end());
  const Tensor logits = model.forward(Tensor::from_vector(v, {1, static_cast<int64_t>(v.size())}));  // [1, n, V]
  return logits.narrow(1, logits.size(1) - 1, 1).reshape({-1}).to_vector<float>();
}

}  // namespace

std::vector<int32_t> generate(GPT& model, const std::vector<int32_t>& prompt, const SampleOptions& opt, Generator& gen,
                              const std::function<void(int32_t)>& on_token) {
  const int64_t context = model.config.context;
  if (prompt.empty()) fail<ValueError>("generate", "the prompt is empty; hint: give at least one character");
  if (static_cast<int64_t>(prompt.size()) >= context)
    fail<ValueError>("generate", "the prompt has {} tokens, but the model's context is {} tokens (the prompt may use "
                     "at most {}); hint: a shorter --prompt", prompt.size(), context, context - 1);
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  KVCache cache = model.make_cache();
  std::vector<int32_t> all = prompt;
  const bool cached = model.config.causal;
  std::vector<float> logits = cached ? feed(model, cache, all) : last_logits(model, all);
  for (int64_t i = 0; i < opt.max_new; ++i) {
    const int32_t next = sample_token(logits, opt, gen);
    all.push_back(next);
    if (on_token) on_token(next);
    if (!cached) {  // the last context tokens, whole
      const auto window = std::min(static_cast<size_t>(context), all.size());
      logits = last_logits(model, std::span<const int32_t>(all).last(window));
    } else if (cache.length() + 1 > context) {  // full: start again from the last half context
      cache = model.make_cache();
      const auto keep = static_cast<size_t>(std::max<int64_t>(context / 2, 1));
      logits = feed(model, cache, std::span<const int32_t>(all).last(std::min(keep, all.size())));
    } else {
      logits = feed(model, cache, std::span<const int32_t>(&all.back(), 1));
    }
  }
  model.train(was_training);
  return std::vector<int32_t>(all.begin() + static_cast<std::ptrdiff_t>(prompt.size()), all.end());
}

}  // namespace attograd::app
