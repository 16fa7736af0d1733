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
#pragma once
#include <memory>
#include <optional>

#include "nn/linear.h"
#include "nn/module.h"

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
  // Optional per-head multiplier [H] on each head's output (1 keeps, 0 removes):
  // head ablation for the heads study.
  Tensor head_mask;
};

struct MHAOutput {
  Tensor out;      // [B, T, E]
  Tensor weights;  // [B, H, T, S] (or [B, T, S] averaged); only with need_weights
};

class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(int64_t embed_dim, int64_t num_heads, Generator& gen, double dropout = 0.0,
                     bool bias = true, std::optional<int64_t> kdim = std::nullopt,
                     std::optional<int64_t> vdim = std::nullopt,
                     std::shared_ptr<Generator> dropout_gen = nullptr, DType dtype = DType::f32);
  MHAOutput forward(const Tensor& query, const Tensor& key, const Tensor& value, const MHAOptions& opt = {});
  int64_t embed_dim, num_heads, head_dim, kdim, vdim;
  double dropout;
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, out_proj;
  // When true, every forward keeps its per-head weights [B, H, T, S] in
  // last_weights (detached), for attention pictures and head statistics.
  bool keep_weights = false;
  Tensor last_weights;

 protected:
  std::string extra_repr() const override;

 private:
  Tensor split_heads(const Tensor& x) const;  // [B, L, E] -> [B, H, L, D] (a view)
  std::shared_ptr<Generator> dropout_gen_;
};

}  // namespace attograd
