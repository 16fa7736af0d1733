// The models examples/bench trains, each with its fixed batches.
//
// Shape legend: B batch, L sequence length (S = T = L), E d_model, F d_ff,
// V vocab, H heads, N layers (per stack).
//   seq2seq (tiny, base): Seq2SeqTransformer on copy-task batches: src [B, L]
//     random symbols, tgt_in = [BOS, src[:-1]], tgt_out = src, no padding.
//   gpt (lm): GPT (attograd/nn/gpt.h, GPT-2 init) on windows w [B, L + 1] of random
//     token ids in [1, V): inputs w[:, :-1], targets w[:, 1:].
// The loss is the mean cross-entropy over the batch rows [first, last) this
// process trains on (all rows in one process; an equal share per rank in a
// data-parallel run).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <attograd/autograd/tensor.h>
#include <attograd/nn/module.h>
#include <attograd/nn/transformer.h>

namespace attograd::bench {

enum class Arch { seq2seq, gpt };

inline constexpr int64_t kBos = 1;  // the copy task's first decoder input

struct BenchConfig {
  std::string name;
  Arch arch;
  int64_t vocab, len, batch, d_model, heads, d_ff, layers;
};

// The Seq2SeqTransformer configurations, and the lm program's default GPT
// (docs/lm.md: 4 layers, d_model 128, 4 heads, MLP 512, context 128, the 114
// characters of the fortunes) at its default batch of 32 windows.
inline const BenchConfig kTiny{"tiny", Arch::seq2seq, 16, 16, 64, 64, 4, 256, 2};
inline const BenchConfig kBase{"base", Arch::seq2seq, 64, 32, 32, 256, 8, 1024, 2};
inline const BenchConfig kLm{"lm", Arch::gpt, 114, 128, 32, 128, 4, 512, 4};

// Forward matmul FLOPs of one batch (see examples/bench/main.cpp's header).
double forward_flops(const BenchConfig& c);

// One GEMM shape of a training step as the model issues it to gemm<float>
// (attograd/autograd/backend/gemm.h's arguments, operands contiguous): `calls` times
// per step, each call `heads` independent products side by side on the pool
// (B·H for the fused attention's per-head products, 1 for a linear layer).
struct StepGemm {
  int64_t calls, heads, M, N, K;
  bool trans_a, trans_b;
  float alpha, beta;
};

// Every matmul of a training step, forward and backward, by shape: each
// linear layer x [R, I] -> [R, O] (R = B·L) gives x Wᵀ (NT, beta 1 with a
// bias), dx = grad W (NN) and dW = gradᵀ x (TN); each attention gives per
// head S = scale·Q Kᵀ, O = P V, dV = Pᵀ dO, dP = dO Vᵀ, dQ = scale·dS K and
// dK = scale·dSᵀ Q ([L, L] by D). Their FLOPs are 3 × forward_flops(c).
std::vector<StepGemm> step_gemms(const BenchConfig& c);
double gemm_flops(const std::vector<StepGemm>& gemms);

// The Seq2SeqTransformer of a seq2seq config (dropout 0).
TransformerConfig seq2seq_config(const BenchConfig& c);

struct CopyBatch {
  Tensor src, tgt_in, tgt_out;  // i64 [B, L]
};

// A copy-task batch of c.batch rows.
CopyBatch make_copy_batch(const BenchConfig& c, std::mt19937_64& rng);

struct RowRange {
  int64_t first = 0, last = 0;  // batch rows [first, last)
};

struct Workload {
  std::shared_ptr<Module> model;
  // The mean cross-entropy of fixed batch i % 8, on this process's rows.
  std::function<Tensor(int64_t i)> loss;
};

// The model of c (weights from seed) in training mode, with 8 fixed batches
// drawn from seed; every rank draws the same batches and keeps its rows.
Workload make_workload(const BenchConfig& c, uint64_t seed, RowRange rows);

}  // namespace attograd::bench
