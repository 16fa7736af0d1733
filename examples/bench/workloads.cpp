#include "examples/bench/workloads.h"

#include <cmath>
#include <vector>

#include <attograd/autograd/ops/loss.h>
#include <attograd/autograd/ops/shape.h>
#include <attograd/data/vocab.h>
#include <attograd/nn/gpt.h>

namespace attograd::bench {

namespace {

constexpr int64_t kFirstSymbol = 3;  // ids 0..2 are PAD, BOS, EOS
constexpr int kBatches = 8;

Tensor rows_of(const Tensor& t, RowRange rows) { return t.narrow(0, rows.first, rows.last - rows.first).contiguous(); }

Workload seq2seq_workload(const BenchConfig& c, uint64_t seed, RowRange rows) {
  Generator gen(seed);
  auto model = std::make_shared<Seq2SeqTransformer>(seq2seq_config(c), gen, nullptr);
  std::mt19937_64 rng(seed);
  std::vector<CopyBatch> batches;
  for (int i = 0; i < kBatches; ++i) {
    const CopyBatch b = make_copy_batch(c, rng);
    batches.push_back({rows_of(b.src, rows), rows_of(b.tgt_in, rows), rows_of(b.tgt_out, rows)});
  }
  CrossEntropyOptions ce;
  ce.ignore_index = kPadId;
  auto loss = [model, batches = std::move(batches), ce, V = c.vocab](int64_t i) {
    const CopyBatch& b = batches[i % kBatches];
    Tensor logits = model->forward(b.src, b.tgt_in);  // [B, L, V]
    return cross_entropy(logits.reshape({-1, V}), b.tgt_out.reshape({-1}), ce);
  };
  return {model, loss};
}

Workload gpt_workload(const BenchConfig& c, uint64_t seed, RowRange rows) {
  GPTConfig g;
  g.vocab = c.vocab;
  g.context = c.len;
  g.d_model = c.d_model;
  g.heads = c.heads;
  g.d_ff = c.d_ff;
  g.layers = c.layers;
  g.init = GPTInit::gpt2;
  Generator gen(seed);
  auto model = std::make_shared<GPT>(g, gen);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> id(1, c.vocab - 1);
  std::vector<std::pair<Tensor, Tensor>> batches;  // inputs, targets: [B, L]
  for (int i = 0; i < kBatches; ++i) {
    std::vector<int64_t> w(c.batch * (c.len + 1));
    for (int64_t& x : w) x = id(rng);
    const Tensor window = rows_of(Tensor::from_vector(w, {c.batch, c.len + 1}), rows);
    batches.emplace_back(window.narrow(1, 0, c.len).contiguous(), window.narrow(1, 1, c.len).contiguous());
  }
  auto loss = [model, batches = std::move(batches), V = c.vocab](int64_t i) {
    const auto& [inputs, targets] = batches[i % kBatches];
    Tensor logits = model->forward(inputs);  // [B, L, V]
    return cross_entropy(logits.reshape({-1, V}), targets.reshape({-1}));
  };
  return {model, loss};
}

}  // namespace

double forward_flops(const BenchConfig& c) {
  const double B = c.batch, L = c.len, E = c.d_model, F = c.d_ff, V = c.vocab, n = c.layers;
  const double self_layer = 8 * B * L * E * E + 4 * B * L * L * E + 4 * B * L * E * F;
  const double head = 2 * B * L * E * V;
  if (c.arch == Arch::gpt) return n * self_layer + head;
  const double cross = 8 * B * L * E * E + 4 * B * L * L * E;
  return n * self_layer + n * (self_layer + cross) + head;
}

std::vector<StepGemm> step_gemms(const BenchConfig& c) {
  const int64_t R = c.batch * c.len, L = c.len, E = c.d_model, F = c.d_ff, D = c.d_model / c.heads;
  const bool gpt = c.arch == Arch::gpt;
  // Linear layers I -> O, `n` of them per step; the GPT's lm_head has no bias.
  std::vector<StepGemm> out;
  auto linear = [&](int64_t n, int64_t I, int64_t O, bool bias) {
    out.push_back({n, 1, R, O, I, false, true, 1.f, bias ? 1.f : 0.f});  // out = x Wᵀ (+ bias rows)
    out.push_back({n, 1, R, I, O, false, false, 1.f, 0.f});              // dx = grad W
    out.push_back({n, 1, O, I, R, true, false, 1.f, 0.f});               // dW = gradᵀ x
  };
  const int64_t attentions = gpt ? c.layers : 3 * c.layers;  // encoder self; decoder self and cross
  linear(4 * attentions, E, E, true);                         // q, k, v, out projections
  linear(gpt ? c.layers : 2 * c.layers, E, F, true);          // FFN
  linear(gpt ? c.layers : 2 * c.layers, F, E, true);
  linear(1, E, c.vocab, !gpt);                                // generator / lm_head
  const int64_t heads = c.batch * c.heads;
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  for (const StepGemm& g : std::vector<StepGemm>{
           {attentions, heads, L, L, D, false, true, scale, 0.f},  // S = scale · Q Kᵀ
           {attentions, heads, L, D, L, false, false, 1.f, 0.f},   // O = P V
           {attentions, heads, L, D, L, true, false, 1.f, 0.f},    // dV = Pᵀ dO
           {attentions, heads, L, L, D, false, true, 1.f, 0.f},    // dP = dO Vᵀ
           {attentions, heads, L, D, L, false, false, scale, 0.f}, // dQ = scale · dS K
           {attentions, heads, L, D, L, true, false, scale, 0.f},  // dK = scale · dSᵀ Q
       })
    out.push_back(g);
  return out;
}

double gemm_flops(const std::vector<StepGemm>& gemms) {
  double flops = 0;
  for (const StepGemm& g : gemms)
    flops += 2.0 * static_cast<double>(g.calls * g.heads) * static_cast<double>(g.M * g.N * g.K);
  return flops;
}

TransformerConfig seq2seq_config(const BenchConfig& b) {
  TransformerConfig c;
  c.src_vocab = c.tgt_vocab = b.vocab;
  c.d_model = b.d_model;
  c.heads = b.heads;
  c.d_ff = b.d_ff;
  c.enc_layers = c.dec_layers = b.layers;
  c.dropout = 0.0;
  c.max_len = 256;
  return c;
}

CopyBatch make_copy_batch(const BenchConfig& c, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> sym(kFirstSymbol, c.vocab - 1);
  std::vector<int64_t> src(c.batch * c.len), tgt_in(src.size());
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t t = 0; t < c.len; ++t) {
      src[b * c.len + t] = sym(rng);
      tgt_in[b * c.len + t] = t == 0 ? kBos : src[b * c.len + t - 1];
    }
  const Shape s{c.batch, c.len};
  return {Tensor::from_vector(src, s), Tensor::from_vector(tgt_in, s), Tensor::from_vector(src, s)};
}

Workload make_workload(const BenchConfig& c, uint64_t seed, RowRange rows) {
  Workload w = c.arch == Arch::gpt ? gpt_workload(c, seed, rows) : seq2seq_workload(c, seed, rows);
  w.model->train();
  return w;
}

}  // namespace attograd::bench
