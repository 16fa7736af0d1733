// Multi-head attention, batch-first, with PyTorch's mask semantics and an
// explicit KV cache for incremental decoding.
//
// Shape legend: B batch, T query length, S key/value length, E model width,
// H query heads, D = E / H head width, G key/value heads (G divides H);
// kdim/vdim are the key/value input widths.
//   query [B, T, E], key [B, S, kdim], value [B, S, vdim]  ->  out [B, T, E]
//   q [B, H, T, D], k/v [B, G, S, D] inside (views of the projections)
//
// Grouped-query attention: k_proj and v_proj map to G·D features, not E, and
// each group of H/G query heads shares one K/V head (G = H, the default, is
// multi-head attention; G = 1 is multi-query attention). The KV cache then
// keeps G heads, H/G times less than multi-head attention.
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

struct StepState;
struct StepLayer;
struct RowBlock;
struct PaddingRows;

// What one attention layer keeps between decoding steps.
//  - self-attention: K and V of every token decoded so far, [B, G, t, D] each,
//    grown by one step per call (stored in a buffer with spare capacity so a
//    step copies only the new row, never the whole history);
//  - cross-attention: K and V projected from the encoder memory,
//    [B, G, S, D], computed on the first step and reused unchanged.
struct AttentionCache {
  // The cached keys k, [B, G, capacity, D] storage; rows [0, length) are valid.
  Tensor k, v;           // the cached values, laid out like k
  int64_t length = 0;    // t
  bool cross = false;    // cross-attention: filled once from memory, then reused
  // Empties the cache for a new sequence (drops the buffers).
  void reset() { k = v = Tensor(); length = 0; }
  Tensor keys() const;    // [B, G, t, D] view
  Tensor values() const;  // [B, G, t, D] view
  size_t bytes_used() const;       // 2 · B · G · t · D · sizeof(dtype)
  size_t bytes_allocated() const;  // with spare capacity
  // Room for n more rows of K and V [B, G, ·, D] in dtype: the storage grows
  // (contiguous, capacity doubling, so t steps copy O(t) rows in total) only
  // when full. Keys of another B, G or D are a ShapeError, of another dtype a DTypeError.
  void reserve(int64_t B, int64_t G, int64_t D, int64_t n, DType dtype);
};

// Per-call options of MultiHeadAttention::forward (masks as described above).
struct MHAOptions {
  Tensor attn_mask;  // none (undefined), [T, S] or [B·H, T, S]; bool: true = NOT allowed, float: added to the scores
  Tensor key_padding_mask;  // undefined (none), or [B, S] bool, true at padding keys (never attended to)
  bool is_causal = false;  // query t sees keys s ≤ t only; with a cache, t counts from the cache's start
  bool need_weights = false;  // also return the attention weights in MHAOutput::weights
  bool average_weights = false;  // with need_weights: mean over heads -> [B, T, S]
  AttentionCache* cache = nullptr;  // incremental decoding (see AttentionCache)
};

// What MultiHeadAttention::forward returns.
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

// A MultiHeadAttention's shape and settings.
struct MHAConfig {
  int64_t embed_dim = 0;                    // E
  int64_t num_heads = 1;                    // H, divides E
  std::optional<int64_t> num_kv_heads;      // G, divides H; H when unset (multi-head attention)
  double dropout = 0.0;                     // on the attention weights, in training
  bool bias = true;                         // on all four projections
  // Key input width (key [B, S, kdim]); E when unset. vdim: the same for value.
  std::optional<int64_t> kdim, vdim;        // value input width (value [B, S, vdim]); E when unset
  std::shared_ptr<Generator> dropout_gen;   // draws the dropout masks; needed when dropout > 0
  DType dtype = DType::f32;  // dtype of the four projections' weights and biases
};

// PyTorch's nn.MultiheadAttention (batch_first=True): projections q_proj,
// k_proj, v_proj, out_proj around the fused scaled_dot_product_attention.
class MultiHeadAttention : public Module {
 public:
  // MultiHeadAttention({.embed_dim = 64, .num_heads = 4}, gen); gen draws the initial weights.
  MultiHeadAttention(const MHAConfig& config, Generator& gen);
  // query [B, T, E], key [B, S, kdim], value [B, S, vdim] -> out [B, T, E]
  // (and the weights with need_weights). Other ranks or feature sizes are a
  // ShapeError. With opt.cache, query/key/value are the new step(s) only.
  MHAOutput forward(const Tensor& query, const Tensor& key, const Tensor& value, const MHAOptions& opt = {});
  // Projects key [B, S, kdim] and value [B, S, vdim] with k_proj, v_proj and
  // appends them to cache as S rows of [B, G, ·, D] (what forward does with a
  // cache; the lean decode step fills a cross-attention cache with it).
  void append_kv(const Tensor& key, const Tensor& value, AttentionCache& cache);
  // forward's decode step as self-attention (attograd/nn/inference.h), for the rows of
  // `rows`: [q | k | v] = in · Wqkvᵀ + b (in: the block's rows [n, E]), this
  // step's K/V written to the cache at row t − 1, each (row, K/V group)
  // attending over the cache's t rows, then x [n, E] += out_proj(heads). in may
  // be x (in is read before x is written). w: the layer's packed weights.
  template <class T>
  void self_step_rows(StepState& s, const StepLayer& w, const T* in, T* x, AttentionCache& cache, int64_t t,
                      RowBlock rows) const;
  // forward's decode step as cross-attention: q from in, K/V of the memory
  // from the cache (prepare_cross_step), padded keys per pad; x += out_proj(heads).
  template <class T>
  void cross_step_rows(StepState& s, const StepLayer& w, const T* in, T* x, const AttentionCache& cache,
                       const PaddingRows& pad, RowBlock rows) const;
  // Before a step's row blocks: room for the step's K/V row in a
  // self-attention cache and its scores; the step's t (this row included).
  int64_t prepare_self_step(StepState& s, AttentionCache& cache) const;
  // Before a step's row blocks: the memory [B, S, E]'s K/V in a
  // cross-attention cache (first step only), checked against the step's B
  // rows and the padding mask [B, S] b8 (may be undefined).
  void prepare_cross_step(StepState& s, const Tensor& memory, const Tensor& key_padding_mask, AttentionCache& cache);
  int64_t embed_dim;  // E, the query and output width
  int64_t num_heads;  // H query heads
  int64_t head_dim;   // D = E / H
  int64_t kdim;       // key input width (k_proj's in_features); E when unset in MHAConfig
  int64_t vdim;       // value input width (v_proj's in_features); E when unset in MHAConfig
  int64_t num_kv_heads;  // G: k_proj, v_proj give G · head_dim features
  double dropout;  // probability of zeroing an attention weight, in training only
  std::shared_ptr<Linear> q_proj;    // the query projection E -> H·D (= E)
  std::shared_ptr<Linear> k_proj;    // kdim -> G·D
  std::shared_ptr<Linear> v_proj;    // vdim -> G·D
  std::shared_ptr<Linear> out_proj;  // E -> E on the merged heads [B, T, H·D], giving out
  // Unset by default: the forward then keeps no weights and pays nothing for it.
  AttentionObserver observer;

 protected:
  std::string extra_repr() const override;

 private:
  Tensor split_heads(const Tensor& x, int64_t heads) const;  // [B, L, heads·D] -> [B, heads, L, D] (a view)
  // The decode step's attention: heads [rows, H·D] from q (rows ldq apart) and the cache's first t rows.
  template <class T>
  void attend_rows(StepState& s, const T* q, int64_t ldq, const AttentionCache& c, int64_t t, const PaddingRows& pad,
                   RowBlock rows) const;
  std::shared_ptr<Generator> dropout_gen_;
};

// Ainslie et al. 2023's conversion of multi-head K/V projections to grouped
// ones (the start of "uptraining"): a k_proj or v_proj weight [heads·D, in]
// or bias [heads·D] becomes [kv_heads·D, in] / [kv_heads·D], group g's D rows
// being the mean of the D rows of its heads g·R .. g·R + R − 1 (R = heads /
// kv_heads, consecutive heads as MultiHeadAttention groups them). kv_heads =
// heads returns a copy.
Tensor mean_pool_kv_heads(const Tensor& proj, int64_t heads, int64_t kv_heads);

// Every MultiHeadAttention below root, by dotted module name, in registration
// order: {"encoder.layers.0.self_attn", module}, {"decoder.layers.0.self_attn", ...}, ...
std::vector<std::pair<std::string, std::shared_ptr<MultiHeadAttention>>> attention_modules(const Module& root);

// For its lifetime, every attention module below root has make(name) as its
// observer (an empty one removes it); the earlier observers come back after.
class AttentionObserverGuard {
 public:
  // Sets the observers (see above); make is called once per attention module.
  AttentionObserverGuard(const Module& root, const std::function<AttentionObserver(const std::string& name)>& make);
  ~AttentionObserverGuard();
  AttentionObserverGuard(const AttentionObserverGuard&) = delete;
  AttentionObserverGuard& operator=(const AttentionObserverGuard&) = delete;

 private:
  std::vector<std::pair<std::shared_ptr<MultiHeadAttention>, AttentionObserver>> saved_;
};

}  // namespace attograd
