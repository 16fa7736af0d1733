// Scaled dot-product attention, fused (one graph node, hand-written backward)
// and composite (the same math from primitives; the tests hold them equal).
//
// Shape legend: B batch, H query heads, G key/value heads (G divides H),
// T query length, S key/value length, D query/key head width, Dv value head width.
//   q [B, H, T, D], k [B, G, S, D], v [B, G, S, Dv]  ->  out [B, H, T, Dv]
//
// Grouped-query attention (Ainslie et al. 2023): query head h reads K/V head
// g = h / (H/G), so each group of H/G consecutive query heads shares one K/V
// head. G = H is multi-head attention, G = 1 multi-query attention (Shazeer
// 2019). The fused op addresses the shared head in place (no repeated K/V);
// the gradient of a K/V head is the sum over the query heads of its group.
//
//   scores  = scale · q kᵀ + masks          [B, H, T, S]   (scale defaults to 1/√D)
//   weights = dropout(softmax(scores))      [B, H, T, S]   (softmax over S)
//   out     = weights v                     [B, H, T, Dv]  (the fused op's out is a view of a
//                                           contiguous [B, T, H, Dv] buffer: merging heads is free)
//
// Masks follow PyTorch's polarity and all enter the scores before the softmax:
//   attn_mask [T, S] or [B·H, T, S]: bool (b8), true where attention is NOT
//       allowed (the score becomes -∞); or float (q's dtype), added to the
//       scores (-∞ entries mask, finite ones bias; a float mask that requires
//       grad gets one, so a learned additive bias trains).
//   key_padding_mask [B, S]: bool, true at padding keys (score -∞).
//   is_causal: query t sees keys s ≤ t (top-left aligned: torch.tril(ones(T, S))).
// A query row whose keys are all masked has no softmax; its weights and output
// are 0 and it passes no gradient (never NaN). PyTorch gives NaN there.
#pragma once
#include <optional>

#include <attograd/autograd/generator.h>
#include <attograd/autograd/tensor.h>

namespace attograd {

// Masks, dropout and scale of scaled_dot_product_attention (see above).
struct AttentionOptions {
  Tensor attn_mask;         // optional: b8 or q's dtype, [T, S] or [B·H, T, S]
  Tensor key_padding_mask;  // optional: b8 [B, S], true at padding keys
  bool is_causal = false;  // mask keys after the query: query t sees keys s ≤ t (top-left aligned)
  double dropout_p = 0.0;   // on the weights, kept ones scaled by 1/(1−p); needs `generator` when > 0
  Generator* generator = nullptr;  // not owned; draws the dropout mask (advances its state); required when dropout_p > 0
  std::optional<double> scale;  // default 1/√D
  bool need_weights = false;    // also return the weights [B, H, T, S]
};

// scaled_dot_product_attention's output, and its weights when asked for.
struct AttentionResult {
  Tensor out;      // [B, H, T, Dv]
  // [B, H, T, S], only with need_weights: the weights that multiplied v (after
  // dropout, as PyTorch's MultiheadAttention returns them), detached — for
  // inspection and head analysis, not for gradients. Without dropout each row
  // is a softmax over the keys (or all zeros for a fully masked row).
  Tensor weights;
};

// The fused op: per (b, h) two GEMMs and a row softmax, one graph node.
AttentionResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const AttentionOptions& o = {});

// The composite twin from primitives (matmul, transpose, masked_fill, add,
// mul, softmax, dropout; expand + reshape repeat the K/V heads when G < H). Same values and gradients as the fused op; with
// dropout and the same generator state it draws the same mask.
AttentionResult scaled_dot_product_attention_composite(const Tensor& q, const Tensor& k, const Tensor& v,
                                                       const AttentionOptions& o = {});

}  // namespace attograd
