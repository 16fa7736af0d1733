// Multi-head attention, batch-first, with PyTorch's mask semantics and an
// explicit KV cache for incremental decoding.
//
// Shape legend: B batch, T query length, S key/value length, E model width,
// H heads, D = E / H head width; kdim/vdim are the key/value input widths.
//   query [B, T, E], key [B, S, kdim], value [B, S, vdim]  ->  out [B, T, E]
//   q [B, H, T, D], k/v [B, H, S, D] inside (views of the projections)
//
// Masks (PyTorch's polarity):
//   attn_mask [T, S] or [B·H, T, S]: bool, true where attention is NOT allowed;
//                                    or float, added to the scores.
//   key_padding_mask [B, S]: bool, true at padding keys.
//   is_causal: query t sees keys s ≤ t.
// A query row with every key masked gives zeros, not NaN.
//
// An observer (AttentionObserver) set on a module sees each forward's weights
// [B, H, T, S] and per-head outputs [B, H, T, D], and may scale heads: the one
// hook for head statistics, attention pictures, ablation and pruning.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <attograd/nn/linear.h>
#include <attograd/nn/module.h>

namespace attograd {

// What one attention layer keeps between decoding steps.
//  - self-attention: K and V of every token decoded so far, [B, H, t, D] each,
//    grown by one step per call (stored in a buffer with spare capacity so a
//    step copies only the new row, never the whole history);
//  - cross-attention: K and V projected from the encoder memory, [B, H, S, D],
//    computed on the first step and reused unchanged.
struct AttentionCache {
  Tensor k, v;           // [B, H, capacity, D] storage; rows [0, length) are valid
  int64_t length = 0;    // t
  bool cross = false;    // cross-attention: filled once from memory, then reused
  void reset() { k = v = Tensor(); length = 0; }
  Tensor keys() const;    // [B, H, t, D] view
  Tensor values() const;  // [B, H, t, D] view
  size_t bytes_used() const;       // 2 · B · H · t · D · sizeof(dtype)
  size_t bytes_allocated() const;  // with spare capacity
};

struct MHAOptions {
  Tensor attn_mask;
  Tensor key_padding_mask;
  bool is_causal = false;
  bool need_weights = false;
  bool average_weights = false;  // with need_weights: mean over heads -> [B, T, S]
  AttentionCache* cache = nullptr;  // incremental decoding (see AttentionCache)
};

struct MHAOutput {
  Tensor out;      // [B, T, E]
  Tensor weights;  // [B, H, T, S] (or [B, T, S] averaged); only with need_weights
};

// One forward as an observer sees it, and what it may change.
struct AttentionCall {
  // [B, H, T, S], detached: the weights that multiplied v (after dropout in
  // training, as MHAOptions::need_weights returns them).
  Tensor weights;
  // [B, H, T, D]: each head's output weights · v, before the heads are merged
  // and out_proj applied; part of the graph (read it, do not write into it).
  Tensor heads;
  // Undefined unless the observer sets it: [H] in heads' dtype, head h's output
  // is multiplied by head_scale[h] before out_proj. Differentiable: 0 removes a
  // head (ablation, pruning), and a scale that requires grad learns.
  Tensor head_scale;
};

// Called once per forward, during the forward. Only a module with an observer
// hands out its weights (a copy of them when autograd records the forward).
using AttentionObserver = std::function<void(AttentionCall&)>;

struct MHAConfig {
  int64_t embed_dim = 0;                    // E
  int64_t num_heads = 1;                    // H, divides E
  double dropout = 0.0;                     // on the attention weights, in training
  bool bias = true;                         // on all four projections
  std::optional<int64_t> kdim, vdim;        // key / value input widths; E when unset
  std::shared_ptr<Generator> dropout_gen;   // draws the dropout masks; needed when dropout > 0
  DType dtype = DType::f32;
};

class MultiHeadAttention : public Module {
 public:
  // MultiHeadAttention({.embed_dim = 64, .num_heads = 4}, gen); gen draws the initial weights.
  MultiHeadAttention(const MHAConfig& config, Generator& gen);
  MHAOutput forward(const Tensor& query, const Tensor& key, const Tensor& value, const MHAOptions& opt = {});
  int64_t embed_dim, num_heads, head_dim, kdim, vdim;
  double dropout;
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, out_proj;
  // Unset by default: the forward then keeps no weights and pays nothing for it.
  AttentionObserver observer;

 protected:
  std::string extra_repr() const override;

 private:
  Tensor split_heads(const Tensor& x) const;  // [B, L, E] -> [B, H, L, D] (a view)
  std::shared_ptr<Generator> dropout_gen_;
};

// Every MultiHeadAttention below root, by dotted module name, in registration
// order: {"encoder.layers.0.self_attn", module}, {"decoder.layers.0.self_attn", ...}, ...
std::vector<std::pair<std::string, std::shared_ptr<MultiHeadAttention>>> attention_modules(const Module& root);

// For its lifetime, every attention module below root has make(name) as its
// observer (an empty one removes it); the earlier observers come back after.
class AttentionObserverGuard {
 public:
  AttentionObserverGuard(const Module& root, const std::function<AttentionObserver(const std::string& name)>& make);
  ~AttentionObserverGuard();
  AttentionObserverGuard(const AttentionObserverGuard&) = delete;
  AttentionObserverGuard& operator=(const AttentionObserverGuard&) = delete;

 private:
  std::vector<std::pair<std::shared_ptr<MultiHeadAttention>, AttentionObserver>> saved_;
};

}  // namespace attograd
