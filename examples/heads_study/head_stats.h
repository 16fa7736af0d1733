// What each attention head does, measured: entropy, mean attention distance,
// and the loss a head costs when it is removed (ablation). Part of the heads
// study; works on any Seq2SeqTransformer through attention observers
// (AttentionObserver in attograd/nn/attention.h).
//
// Shape legend: B batch, H heads, T query length, S key length, V target vocab.
//   weights [B, H, T, S]: one softmax row per query (a fully masked row is all 0)
//   query_padding [B, T] b8, key_padding [B, S] b8: true at padding (may be undefined)
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <attograd/nn/transformer.h>

namespace attograd::app::heads {

struct HeadStat {
  std::string module;  // "decoder.layers.0.cross_attn"
  int64_t head = 0;
  double entropy = 0;        // mean over query rows of -Σ_s p log p (nats); 0 = one key, log S = uniform
  double uniform_entropy = 0;  // mean over the same rows of log(number of visible keys): the ceiling
  double mean_distance = 0;  // mean over rows of Σ_s p·|t - s| (positions); 0 = attends to its own position
  double max_weight = 0;     // mean over rows of max_s p: how peaked the head is
  int64_t rows = 0;          // query rows counted (padding queries and fully masked rows are skipped)
};

// Accumulates statistics over batches, per (module, head).
class HeadStatistics {
 public:
  // weights [B, H, T, S] (any float dtype); the paddings mark rows and keys
  // that are not counted; `causal` says query t sees only keys s <= t (for
  // the uniform-entropy ceiling).
  void add(const std::string& module, const Tensor& weights, const Tensor& query_padding = Tensor(),
           const Tensor& key_padding = Tensor(), bool causal = false);
  // Runs model.forward on one batch (in eval mode, without gradients) with an
  // observer on every attention module that adds its weights (encoder self,
  // decoder self, decoder cross).
  void add_batch(Seq2SeqTransformer& model, const Tensor& src, const Tensor& tgt_in, const Tensor& src_key_padding_mask,
                 const Tensor& tgt_key_padding_mask);
  // One entry per (module, head), modules in the order they were first added.
  std::vector<HeadStat> results() const;

 private:
  struct Sums {
    double entropy = 0, uniform = 0, distance = 0, max_weight = 0;
    int64_t rows = 0;
  };
  std::vector<std::string> order_;
  std::map<std::string, std::vector<Sums>> sums_;
};

struct HeadAblation {
  std::string module;
  int64_t head = 0;
  double loss = 0;   // mean cross-entropy per target token with this head removed
  double delta = 0;  // loss - baseline loss
};

struct AblationBatch {
  Tensor src, tgt_in, tgt_out, src_key_padding_mask;  // as attograd/data/loader.h's Batch
};

// The teacher-forced loss with every head kept (the baseline) ...
double masked_heads_loss(Seq2SeqTransformer& model, const std::vector<AblationBatch>& batches, int64_t pad_id);
// ... and with each head removed in turn (an observer scales its output by 0
// before out_proj), one entry per head of every attention module. The
// modules' observers are left as they were.
std::vector<HeadAblation> ablate_heads(Seq2SeqTransformer& model, const std::vector<AblationBatch>& batches,
                                       int64_t pad_id, double* baseline = nullptr);

// Which heads are kept, per attention module (names as attention_modules
// gives them): one factor per head, 1 kept, 0 removed.
using HeadMask = std::map<std::string, std::vector<double>>;

// Every head of every attention module kept.
HeadMask full_head_mask(const Seq2SeqTransformer& model);
// The heads the mask removes, over all modules.
int64_t removed_heads(const HeadMask& mask);

// For its lifetime, each attention module of the mask multiplies head h's
// output by mask[module][h] before out_proj (AttentionCall::head_scale), in
// every forward, incremental decoding included. Earlier observers come back after.
class HeadMaskGuard {
 public:
  HeadMaskGuard(Seq2SeqTransformer& model, const HeadMask& mask);

 private:
  std::map<std::string, Tensor> scales_;  // [H] per module, in the model's dtype
  AttentionObserverGuard guard_;
};

struct HeadImportance {
  std::string module;
  int64_t head = 0;
  double importance = 0;  // mean over batches of |∂L/∂ξ_h| (ξ_h: the head's gate, at its mask value)
  double normalized = 0;  // importance / the L2 norm of its module's importances (Michel et al. 2019, §4.1)
};

// Head importance as Michel, Levy & Neubig (2019) define it: the teacher-forced
// loss L (mean cross-entropy per target token, eval mode) is differentiated
// with respect to a gate ξ_h on every head's output, one backward per batch.
// Heads the mask removed sit at ξ_h = 0 and are scored there. Parameters' .grad
// are not touched. One entry per (module, head), in attention_modules order.
std::vector<HeadImportance> head_importance(Seq2SeqTransformer& model, const std::vector<AblationBatch>& batches,
                                            int64_t pad_id, const HeadMask& mask);

}  // namespace attograd::app::heads
