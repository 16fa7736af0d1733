// head_probe lm: what every head of a trained GPT (examples/lm) does and
// costs, on the held-out windows `lm eval` and the trainer's evaluation read.
// Built on the heads study's tools (examples/heads_study/head_stats.h), with
// the next-token loss as their LossBatches.
//
// Shape legend: B windows per batch, T context, V vocab, H heads, N = layers·H.
//   LMBatch input, target [B, T] i64 (attograd/data/token_windows.h)
#pragma once
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include <attograd/data/token_windows.h>
#include <attograd/nn/gpt.h>
#include "examples/heads_study/head_stats.h"

namespace attograd::app::probe {

// The held-out windows [0, windows) (all when windows is 0 or more than there
// are) in batches of `batch`, as evaluate_lm (examples/lm/lm_task.h) reads them.
std::vector<LMBatch> heldout_batches(const TokenWindows& data, int64_t windows, int64_t batch);

// The next-token cross-entropy of each batch, summed over its B·T targets, as
// the head tools take it (heads_loss of it is evaluate_lm's loss on the same
// windows). model and batches must outlive it.
heads::LossBatches lm_loss(GPT& model, const std::vector<LMBatch>& batches);

// Attention statistics of every block's heads over the batches: causal as the
// model is, the induction score from the input tokens.
std::vector<heads::HeadStat> lm_attention_stats(GPT& model, const std::vector<LMBatch>& batches);

// k = round(f·n), half away from zero, for f = 0, 0.1, ..., 1: the pruning
// curves' numbers of removed heads.
std::vector<int64_t> pruning_counts(int64_t n);

struct ProbeOptions {
  int64_t random_orders = 5;  // seeded random removal orders beside the three ranked ones
  uint64_t seed = 1;          // random order r draws from Generator(mix_seed(seed, r))
};

// The analyses of head_probe lm on the model and batches, as JSON:
//   baseline_loss, tokens, importance ("once, full model");
//   heads: one object per (layer, head), layers in block order: layer, head,
//     module, kv_head, importance, importance_normalized, ablation_loss,
//     ablation_delta, and the attention statistics (HeadStat's fields);
//   pruning: {fractions, removed (k per fraction), heads (N), orders: [{name,
//     heads: [[layer, head]...] in removal order, loss: [per k]}]} with orders
//     importance, importance_normalized, ablation, random-1..K (least important first);
//   seconds: the time of each part.
nlohmann::json probe_lm(GPT& model, const std::vector<LMBatch>& batches, const ProbeOptions& o);

// The subcommand: flags, checkpoint and text, probe_lm, the JSON file.
int lm_main(int argc, char** argv);

}  // namespace attograd::app::probe
