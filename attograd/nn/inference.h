// What every layer's decode step shares: the buffers and weights one cached
// decoding step keeps between steps (StepState, in KVCache::step) and the loop
// that cuts a step's rows into blocks. Decoding is an explicit call,
// Seq2SeqTransformer::decode_step / GPT::decode_step (used by greedy_decode,
// beam_search and the LM's sampling); forward() and decode() are always the
// graph, the reference the tests hold the steps to. Each layer's step sits
// beside its forward, so a change to a block is made twice within a few lines:
//   Linear::forward_rows                 attograd/nn/linear.cpp
//   MultiHeadAttention::self_step_rows,
//     cross_step_rows                    attograd/nn/attention.cpp
//   FeedForward::step_rows,
//   TransformerDecoderLayer::step_rows   attograd/nn/transformer.cpp
//   GPTBlock::step_rows                  attograd/nn/gpt.cpp
//
// Shape legend: B rows (batch, or live beams), E = d_model, F = d_ff, H query
// heads, G K/V heads, D = E / H head width, R = H / G, W = E + 2·G·D (the
// packed q | k | v width), t tokens cached (this step's included), V vocab.
//   ids [B] (each row's new token) -> logits [B, V]
//
// A step keeps the graph's GEMM operands and bias-then-accumulate order, the
// attention op's scale and row kernel, the layer_norm, relu and gelu ops and
// the cache's layout; it drops graph nodes, per-head views and per-call
// buffers (it writes into StepState's, reused while B stays the same), so a
// step takes no new memory from the system after the first. Rows never meet
// inside a step, so it is cut into blocks of at most kRowsPerTask rows (by B
// alone, never by the thread count, so the numbers are the same on any
// number of threads), each block one pool task running every layer: the pool
// joins once per step, not once per product.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <vector>

#include <attograd/autograd/tensor.h>

namespace attograd {

class Linear;
class Module;
struct KVCache;

// Throws, naming op and the failed condition, unless a decode step may run on
// model with cache: grad mode off (the step records no graph), eval mode
// (it applies no dropout), a cache of `layers` layers, a position left below
// `positions`, and (checked on the cache's first step) float contiguous weights.
void check_decode_step(const Module& model, const char* op, const KVCache& cache, size_t layers, int64_t positions);

// A linear layer as a decode step multiplies by it: w [O, I] (several layers'
// weights stacked along O for the packed q | k | v), b [O]. A stacked copy is
// remade by refresh_step_weights when a part's version() changes, and the
// GEMM layer keeps and refreshes wᵀ where its library wants it (gemm_weight),
// so a step always reads the weights as they are now (the keys and values
// already cached stay those of the weights at their own step).
struct StepLinear {
  // [O, I], the graph's operand (the layer's own weight when not stacked).
  Tensor w;
  Tensor b;  // [O], undefined without biases
  // Stacked only: the parts' weights and biases w and b were copied from.
  std::vector<Tensor> parts;
  // Stacked only: each part's version() at that copy (a change restacks).
  std::vector<int64_t> versions;
};

// The weights of parts stacked along O (one part: its own weight and bias,
// shared).
StepLinear pack_linears(std::initializer_list<const Linear*> parts);

// One decoder layer's or GPT block's weights for a step (cross_* undefined in a GPT block).
struct StepLayer {
  // Self-attention: q | k | v stacked.
  StepLinear qkv;
  // Self-attention's out_proj.
  StepLinear out;
  // Cross-attention's q_proj.
  StepLinear cross_q;
  // Cross-attention's out_proj.
  StepLinear cross_out;
  // The feed-forward block's linear1.
  StepLinear ff1;
  // The feed-forward block's linear2.
  StepLinear ff2;
};

// A step's buffers and weights, kept in KVCache::step between steps (dropped
// by KVCache::reset()).
struct StepState {
  // B the buffers are sized for (none before the first step).
  std::optional<int64_t> rows;
  DType dtype = DType::f32;      // the weights' dtype
  std::vector<StepLayer> layers;  // per decoder layer / block
  StepLinear head;                // the generator / lm_head [E, V]
  Tensor stream;                  // [B, E] the residual stream
  Tensor qkv;                     // [B, W] self-attention q | k | v
  Tensor heads;                   // [B, H·D] attention output, heads merged
  Tensor proj;                    // [B, E] a sublayer's output before its residual add (and cross-attention's q)
  Tensor hidden;                  // [B, F] feed-forward hidden layer
  Tensor logits;                  // [B, V]
  Tensor scores;                  // [B, H, ≥ t] attention probabilities, grown with t
};

// Restacks every stacked weight of s a part of which was written since it
// was stacked (a changed version(), dtype included): called by every step.
void refresh_step_weights(StepState& s);

// Sizes s's buffers for B rows (kept while B and dtype stay the same).
void size_step_buffers(StepState& s, int64_t B, int64_t E, int64_t F, int64_t V, DType dtype);

// Room for t columns per head of the scores (the buffer only grows).
void reserve_step_scores(StepState& s, int64_t H, int64_t t);

// The rows [first, first + n) one pool task runs through every layer.
struct RowBlock {
  // The block's first row.
  int64_t first = 0;
  int64_t n = 0;  // its row count
};

// A step's rows per pool task, at most.
constexpr int64_t kRowsPerTask = 32;

// f(block) for every block of [0, n), blocks of at most per_task items as even
// as the cut allows, one pool task each, grad mode off in every task. A single
// block runs inline, its loops on the pool as usual.
void for_row_blocks(int64_t n, int64_t per_task, const std::function<void(RowBlock)>& f);

// Where a key padding mask [B, S] (b8, any strides) keeps its entries; data null: no mask.
struct PaddingRows {
  // The mask's first element, or null without a mask.
  const bool* data = nullptr;
  // Its stride along B.
  int64_t sb = 0;
  // Its stride along S.
  int64_t ss = 0;
  // True where key s of row b is padding.
  bool at(int64_t b, int64_t s) const { return data[b * sb + s * ss]; }
};

// The rows of a mask [B, S] b8 (undefined: none).
PaddingRows padding_rows(const Tensor& key_padding_mask);

// Fills x [B, E] = table[ids] · scale + pos[start] (scale 1 skips the
// scaling); an id out of range is an IndexError naming op.
void embed_step(const Tensor& x, std::span<const int64_t> ids, const Tensor& table, double scale, const Tensor& pos,
                int64_t start, const char* op);

}  // namespace attograd
