// The lean inference path: one decoding step (one new token per row) of a
// Seq2SeqTransformer's decoder or of a GPT, with the KV cache and without
// the autograd graph. Seq2SeqTransformer::decode and GPT::forward take it by
// themselves when it applies (grad mode off, eval mode, one new token per row,
// a cache, no attention observer); greedy_decode, beam_search and the LM's
// sampling therefore use it. The graph forward stays the reference: the tests
// hold the lean step's logits and decoded tokens to it.
//
// Shape legend: B rows (batch, or live beams), E = d_model, F = d_ff, H query
// heads, G K/V heads, D = E / H head width, R = H / G, t tokens cached so far
// (this step's included), S source length, V vocab.
//   ids [B] (each row's new token) -> logits [B, V]
//
// Per decoder layer and step:
//   self-attention:  [q | k | v] = h Wqkvᵀ + bqkv   one GEMM [B, E] x [E, E + 2·G·D] (the three
//                                                   projections' weights stacked and transposed
//                                                   once per cache)
//                    k, v rows appended to the cache [B, G, t, D] in place
//                    per (b, g): P [R, t] = softmax(scale · Q Kᵀ), O [R, D] = P V   (the R query
//                    heads of a group in one GEMM each; for R = 1, where libxsmm
//                    runs the product, the scores as K qᵀ [t, 1])
//   cross-attention: q = h Wqᵀ + bq; K, V of the memory projected on the first step only
//   feed-forward, out projections, residual adds into one [B, E] stream.
// Every weight is also kept transposed, Wᵀ [in, out], from the cache's first
// step on: where the GEMM layer runs a product on libxsmm, whose kernels read
// a transposed operand only through a per-call copy, the step multiplies by
// Wᵀ untransposed; where it runs OpenBLAS (which packs either form) it takes
// the graph's W, so there the bits stay the graph's. Rows never meet inside a
// step, so the step is cut into blocks of at most 32 rows (by B alone, not by
// the thread count), each block one task on the pool running every layer:
// the pool joins once per step, not once per product.
// What it keeps from the graph forward: the GEMM layer (gemm<T>) with the
// operands and the bias-then-accumulate order of linear(), the attention op's
// scale and row kernel (softmax_row, masks as -∞ before it), the layer_norm,
// relu and gelu ops, the cache's layout. What it drops: graph nodes, per-head
// views, per-call buffers: the step writes into buffers kept in the cache
// (KVCache::lean) and reused while B stays the same. The ops it calls
// (layer_norm, relu / gelu) still return fresh tensors, served from the
// caching allocator's free lists, so a step takes no new memory from the
// system after the first (tested with the allocator's byte counts).
#pragma once
#include <cstdint>
#include <span>

#include <attograd/autograd/tensor.h>

namespace attograd {

class GPT;
class Seq2SeqTransformer;
struct KVCache;

// The lean step's buffers and transposed weights, kept in KVCache::lean
// between steps (dropped by KVCache::reset()). The weights are copied on the
// cache's first lean step: a cache outlives no weight update.
struct LeanState;

// True when Seq2SeqTransformer::decode may take the lean step: a cache, grad
// mode off, eval mode, new_tokens == 1, no target padding mask, no attention
// observer, float weights, and a position left in the positional table.
bool lean_decode_applies(const Seq2SeqTransformer& model, const KVCache* cache, int64_t new_tokens,
                         const Tensor& tgt_key_padding_mask);
// The same for GPT::forward.
bool lean_gpt_applies(const GPT& model, const KVCache* cache, int64_t new_tokens);

// One cached step of Seq2SeqTransformer::decode: ids [B] -> logits [B, V],
// the step's buffer (valid until the cache's next step; clone() it to keep
// it). memory [B, S, E] is read on the first step only (the cross-attention
// K/V); memory_key_padding_mask [B, S] b8 (true at padding) may be undefined.
Tensor lean_decode_step(Seq2SeqTransformer& model, std::span<const int64_t> ids, const Tensor& memory,
                        const Tensor& memory_key_padding_mask, KVCache& cache);

// One cached step of GPT::forward: ids [B] -> logits [B, V] (valid as above).
Tensor lean_gpt_step(GPT& model, std::span<const int64_t> ids, KVCache& cache);

}  // namespace attograd
