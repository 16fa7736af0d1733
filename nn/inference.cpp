// The lean decoding step (see inference.h for what it keeps and drops).
//
// Shape legend: B rows, E = d_model, F = d_ff, H query heads, G K/V heads,
// D head width, R = H / G, W = E + 2·G·D (packed q | k | v width), t cached
// tokens, S source length, V vocab. Every buffer is row-major [B, ·].
#include <attograd/nn/inference.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include <attograd/autograd/backend/blas.h>
#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/engine.h>
#include <attograd/autograd/kernels/rows.h>
#include <attograd/autograd/ops/elementwise.h>
#include <attograd/autograd/ops/layer_norm.h>
#include <attograd/nn/gpt.h>
#include <attograd/nn/transformer.h>

namespace attograd {

struct LeanState {
  std::optional<int64_t> rows; // B the buffers are sized for (none before the first step)
  DType dtype = DType::f32;    // the weights' dtype
  std::vector<Tensor> qkv_w;   // per layer: the self-attention's q, k, v weights packed, [W, E]
  std::vector<Tensor> qkv_b;   // per layer: their biases packed, [W] (undefined without biases)
  Tensor stream;               // [B, E] the residual stream
  Tensor qkv;                  // [B, W] self-attention q | k | v
  Tensor heads;                // [B, H·D] attention output, heads merged
  Tensor proj;                 // [B, E] a sublayer's output before its residual add (and cross-attention's q)
  Tensor hidden;               // [B, F] feed-forward hidden layer
  Tensor logits;               // [B, V]
  Tensor scores;               // [B, H, ≥ t] attention probabilities, grown with t
};

namespace {

bool no_observer(const MultiHeadAttention& m) { return !m.observer; }

template <class T>
const T* ptr(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }

// out [rows, O] = x [rows, I] · wᵀ + b, as linear() computes it: the bias
// copied into every row first, then one GEMM adds the product (beta = 1).
template <class T>
void linear_rows(T* out, const T* x, int64_t rows, const Tensor& w, const Tensor& b) {
  const int64_t O = w.size(0), I = w.size(1);
  if (const T* pb = ptr<T>(b))
    for (int64_t r = 0; r < rows; ++r) std::copy(pb, pb + O, out + r * O);
  gemm<T>(out, x, w.data<T>(), rows, O, I, false, true, I, I, O, T(1), b.defined() ? T(1) : T(0));
}

// x [n] += y [n], the residual add (add's x + y).
template <class T>
void add_into(T* x, const T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] + y[i];
}

// The graph's W [out, in] weights of q, k, v stacked into one [W, E] (and the biases into [W]).
void pack_qkv(const MultiHeadAttention& m, Tensor& w, Tensor& b) {
  NoGradGuard no_grad;
  const Linear* parts[] = {m.q_proj.get(), m.k_proj.get(), m.v_proj.get()};
  int64_t rows = 0;
  for (const Linear* l : parts) rows += l->out_features;
  w = Tensor::empty({rows, m.embed_dim}, m.q_proj->weight.dtype());
  if (m.q_proj->bias.defined()) b = Tensor::empty({rows}, w.dtype());
  int64_t at = 0;
  for (const Linear* l : parts) {
    w.narrow(0, at, l->out_features).copy_(l->weight);
    if (b.defined()) b.narrow(0, at, l->out_features).copy_(l->bias);
    at += l->out_features;
  }
}

// Buffers for B rows; weights packed on the first call.
template <class Layer>
LeanState& state_for(KVCache& cache, const std::vector<Layer>& layers, int64_t B, int64_t E, int64_t F, int64_t V,
                     DType dtype) {
  if (!cache.lean) cache.lean = std::make_shared<LeanState>();
  LeanState& s = *cache.lean;
  if (s.qkv_w.empty() || s.dtype != dtype) {
    s.qkv_w.assign(layers.size(), Tensor());
    s.qkv_b.assign(layers.size(), Tensor());
    for (size_t i = 0; i < layers.size(); ++i) pack_qkv(*layers[i], s.qkv_w[i], s.qkv_b[i]);
  }
  if (s.rows != B || s.dtype != dtype) {
    const int64_t W = s.qkv_w[0].size(0);
    s.stream = Tensor::empty({B, E}, dtype);
    s.qkv = Tensor::empty({B, W}, dtype);
    s.heads = Tensor::empty({B, E}, dtype);
    s.proj = Tensor::empty({B, E}, dtype);
    s.hidden = Tensor::empty({B, F}, dtype);
    s.logits = Tensor::empty({B, V}, dtype);
    s.scores = Tensor();
  }
  s.rows = B;
  s.dtype = dtype;
  return s;
}

// Where a key padding mask [B, S] (b8, any strides) keeps its entries.
struct PaddingRows {
  const bool* data = nullptr;  // null: no mask
  int64_t sb = 0, ss = 0;
  bool at(int64_t b, int64_t s) const { return data[b * sb + s * ss]; }
};

PaddingRows padding_rows(const Tensor& kpm) {
  if (!kpm.defined()) return {};
  return {kpm.data<bool>(), kpm.strides()[0], kpm.strides()[1]};
}

// heads [B, H·D] = per (b, h): softmax(scale · q_h K_gᵀ, padding -∞) V_g, with
// q [B, ≥ H·D] rows ldq apart and K, V the cache's [B, G, t, D]. The R query
// heads of group g are rows of one [R, D] matrix, so each group takes two GEMMs.
template <class T>
void attend(LeanState& s, const MultiHeadAttention& m, const T* q, int64_t ldq, const AttentionCache& c,
            const PaddingRows& pad, int64_t B) {
  const int64_t H = m.num_heads, G = m.num_kv_heads, D = m.head_dim, R = H / G, t = c.length, E = H * D;
  if (!s.scores.defined() || s.scores.size(1) < H * t) s.scores = Tensor::empty({B, H * std::max<int64_t>(2 * t, 16)}, s.dtype);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(D)));  // the attention op's default
  const T* K = c.k.data<T>();
  const T* V = c.v.data<T>();
  const int64_t sb = c.k.strides()[0], sg = c.k.strides()[1], ld = c.k.strides()[2];
  T* scores = s.scores.data<T>();
  const int64_t lds = s.scores.size(1);
  T* heads = s.heads.data<T>();
  parallel_for(B * G, 1, [&](int64_t first, int64_t last) {
    for (int64_t bg = first; bg < last; ++bg) {
      const int64_t b = bg / G, g = bg % G;
      T* p = scores + b * lds + g * R * t;  // [R, t]
      // P [R, t] = scale · Q Kᵀ, then the padding and the softmax row by row
      gemm<T>(p, q + b * ldq + g * R * D, K + b * sb + g * sg, R, t, D, false, true, D, ld, t, scale, T(0));
      for (int64_t r = 0; r < R; ++r) {
        T* row = p + r * t;
        if (pad.data)
          for (int64_t k = 0; k < t; ++k) if (pad.at(b, k)) row[k] = -INFINITY;
        softmax_row(row, row, t);
      }
      // O [R, D] = P V
      gemm<T>(heads + b * E + g * R * D, p, V + b * sb + g * sg, R, D, t, false, false, t, ld, D, T(1), T(0));
    }
  });
}

// x += SelfAttn(in): the packed projection, the new K/V rows into the cache, attention, out_proj.
template <class T>
void self_attention(LeanState& s, size_t layer, const MultiHeadAttention& m, const T* in, T* x, AttentionCache& c,
                    int64_t B) {
  const int64_t E = m.embed_dim, G = m.num_kv_heads, D = m.head_dim, W = s.qkv_w[layer].size(0);
  T* qkv = s.qkv.data<T>();
  const int64_t ldq = s.qkv.size(1);
  if (ldq != W) fail<ShapeError>("lean decode", "packed q|k|v width {} differs from the buffer's {}", W, ldq);
  linear_rows(qkv, in, B, s.qkv_w[layer], s.qkv_b[layer]);  // [B, W] = q | k | v
  c.reserve(B, G, D, 1, s.dtype);
  T* K = c.k.data<T>();
  T* V = c.v.data<T>();
  const int64_t sb = c.k.strides()[0], sg = c.k.strides()[1], row = c.length * c.k.strides()[2];
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < G; ++g) {
      const T* kn = qkv + b * W + E + g * D;
      std::copy(kn, kn + D, K + b * sb + g * sg + row);
      std::copy(kn + G * D, kn + G * D + D, V + b * sb + g * sg + row);
    }
  c.length += 1;
  attend<T>(s, m, qkv, W, c, {}, B);
  linear_rows(s.proj.data<T>(), s.heads.data<T>(), B, m.out_proj->weight, m.out_proj->bias);
  add_into(x, s.proj.data<T>(), B * E);
}

// x += CrossAttn(in): q from in; K, V of the memory computed on the first step, then read from the cache.
template <class T>
void cross_attention(LeanState& s, MultiHeadAttention& m, const T* in, T* x, const Tensor& memory,
                     const Tensor& kpm, AttentionCache& c, int64_t B) {
  const int64_t E = m.embed_dim;
  if (c.length == 0) m.append_kv(memory, memory, c);
  if (c.k.size(0) != B)
    fail<ShapeError>("lean decode", "the cross-attention cache holds {} rows, the step {}; hint: reset() the cache "
                     "for a new batch", c.k.size(0), B);
  if (kpm.defined() && (kpm.dim() != 2 || kpm.size(0) != B || kpm.size(1) != c.length || kpm.dtype() != DType::b8))
    fail<ShapeError>("lean decode", "memory_key_padding_mask must be b8 [{}, {}], got {} {}", B, c.length,
                     dtype_name(kpm.dtype()), shape_str(kpm.shape()));
  linear_rows(s.proj.data<T>(), in, B, m.q_proj->weight, m.q_proj->bias);  // q [B, E], read by attend only
  attend<T>(s, m, s.proj.data<T>(), E, c, padding_rows(kpm), B);
  linear_rows(s.proj.data<T>(), s.heads.data<T>(), B, m.out_proj->weight, m.out_proj->bias);
  add_into(x, s.proj.data<T>(), B * E);
}

// x += FFN(in) = Linear2(act(Linear1(in))).
template <class T>
void feed_forward(LeanState& s, const FeedForward& ff, const T* in, T* x, int64_t B) {
  const int64_t E = ff.linear2->out_features;
  linear_rows(s.hidden.data<T>(), in, B, ff.linear1->weight, ff.linear1->bias);
  const Tensor a = ff.activation == Activation::gelu ? gelu(s.hidden) : relu(s.hidden);  // [B, F] contiguous
  linear_rows(s.proj.data<T>(), a.data<T>(), B, ff.linear2->weight, ff.linear2->bias);
  add_into(x, s.proj.data<T>(), B * E);
}

Tensor norm(const LayerNorm& ln, const Tensor& x) { return layer_norm(x, ln.normalized_shape, ln.weight, ln.bias, ln.eps); }

// One decoder layer on the residual stream x [B, E] (pre-LN or post-LN, as TransformerDecoderLayer::forward).
template <class T>
Tensor decoder_layer(LeanState& s, size_t i, TransformerDecoderLayer& l, Tensor x, const Tensor& memory,
                     const Tensor& kpm, KVCache& cache, int64_t B) {
  AttentionCache& sc = cache.self_attn[i];
  AttentionCache& cc = cache.cross_attn[i];
  if (l.pre_ln) {
    // h = x + SA(LN1(x));  h = h + CA(LN2(h));  h + FF(LN3(h))
    self_attention<T>(s, i, *l.self_attn, norm(*l.norm1, x).data<T>(), x.data<T>(), sc, B);
    cross_attention<T>(s, *l.cross_attn, norm(*l.norm2, x).data<T>(), x.data<T>(), memory, kpm, cc, B);
    feed_forward<T>(s, *l.ff, norm(*l.norm3, x).data<T>(), x.data<T>(), B);
    return x;
  }
  // h = LN1(x + SA(x));  h = LN2(h + CA(h));  LN3(h + FF(h)). Each sublayer reads its input in
  // its first GEMM and adds into x only at its end, so input and stream may be one buffer.
  self_attention<T>(s, i, *l.self_attn, x.data<T>(), x.data<T>(), sc, B);
  x = norm(*l.norm1, x);
  cross_attention<T>(s, *l.cross_attn, x.data<T>(), x.data<T>(), memory, kpm, cc, B);
  x = norm(*l.norm2, x);
  feed_forward<T>(s, *l.ff, x.data<T>(), x.data<T>(), B);
  return norm(*l.norm3, x);
}

// x [B, E] = table[ids] · scale + pos[start]: the embedding, its scaling (skipped for scale 1) and the position row.
template <class T>
void embed(T* x, std::span<const int64_t> ids, const Tensor& table, double scale, const Tensor& pos, int64_t start) {
  const int64_t V = table.size(0), E = table.size(1);
  const T* w = table.data<T>();
  const T* p = pos.data<T>() + start * E;
  for (size_t b = 0; b < ids.size(); ++b) {
    if (ids[b] < 0 || ids[b] >= V)
      fail<IndexError>("lean decode", "id {} (row {}) is out of range for the embedding [{}, {}]; hint: is the "
                       "vocabulary size right?", ids[b], b, V, E);
    std::copy(w + ids[b] * E, w + ids[b] * E + E, x + b * E);
  }
  const int64_t n = static_cast<int64_t>(ids.size()) * E;
  if (scale != 1.0)
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] * static_cast<T>(scale);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] + p[i % E];
}

bool weights_are_float(const Module& m) {
  for (const Tensor& p : m.parameters())
    if (!is_floating(p.dtype()) || !p.is_contiguous()) return false;
  return true;
}

}  // namespace

bool lean_decode_applies(const Seq2SeqTransformer& model, const KVCache* cache, int64_t new_tokens,
                         const Tensor& tgt_kpm) {
  if (!cache || new_tokens != 1 || tgt_kpm.defined() || GradMode::enabled() || model.is_training()) return false;
  if (cache->length() + 1 > model.pos->max_len || cache->self_attn.size() != model.decoder->layers->size()) return false;
  for (const auto& l : *model.decoder->layers)
    if (!no_observer(*l->self_attn) || !no_observer(*l->cross_attn)) return false;
  return cache->lean || weights_are_float(model);  // checked once per cache
}

bool lean_gpt_applies(const GPT& model, const KVCache* cache, int64_t new_tokens) {
  if (!cache || new_tokens != 1 || GradMode::enabled() || model.is_training()) return false;
  if (cache->length() + 1 > model.config.context || cache->self_attn.size() != model.blocks->size()) return false;
  for (const auto& b : *model.blocks)
    if (!no_observer(*b->attn)) return false;
  return cache->lean || weights_are_float(model);  // checked once per cache
}

Tensor lean_decode_step(Seq2SeqTransformer& model, std::span<const int64_t> ids, const Tensor& memory,
                        const Tensor& kpm, KVCache& cache) {
  const TransformerConfig& c = model.config;
  const int64_t B = static_cast<int64_t>(ids.size());
  std::vector<MultiHeadAttention*> self_attn;
  for (const auto& l : *model.decoder->layers) self_attn.push_back(l->self_attn.get());
  const DType dt = model.generator->weight.dtype();
  LeanState& s = state_for(cache, self_attn, B, c.d_model, c.d_ff, c.tgt_vocab, dt);
  NoGradGuard no_grad;
  return dispatch_float(dt, "lean decode", [&]<class T>() {
    const int64_t start = cache.length();
    Tensor x = s.stream;
    embed<T>(x.data<T>(), ids, model.tgt_embed->weight, std::sqrt(static_cast<double>(c.d_model)), model.pos->table,
             start);
    for (size_t i = 0; i < model.decoder->layers->size(); ++i)
      x = decoder_layer<T>(s, i, (*model.decoder->layers)[i], x, memory, kpm, cache, B);
    if (model.decoder->norm) x = norm(*model.decoder->norm, x);
    linear_rows(s.logits.data<T>(), x.data<T>(), B, model.generator->weight, model.generator->bias);
    return s.logits;
  });
}

Tensor lean_gpt_step(GPT& model, std::span<const int64_t> ids, KVCache& cache) {
  const GPTConfig& c = model.config;
  const int64_t B = static_cast<int64_t>(ids.size());
  std::vector<MultiHeadAttention*> attn;
  for (const auto& b : *model.blocks) attn.push_back(b->attn.get());
  const DType dt = model.lm_head->weight.dtype();
  LeanState& s = state_for(cache, attn, B, c.d_model, c.d_ff, c.vocab, dt);
  NoGradGuard no_grad;
  return dispatch_float(dt, "lean decode", [&]<class T>() {
    Tensor x = s.stream;
    embed<T>(x.data<T>(), ids, model.tok_embed->weight, 1.0, model.pos->table, cache.length());
    for (size_t i = 0; i < model.blocks->size(); ++i) {
      // x = x + SA(LN1(x));  x = x + MLP(LN2(x))
      GPTBlock& blk = (*model.blocks)[i];
      self_attention<T>(s, i, *blk.attn, norm(*blk.ln1, x).data<T>(), x.data<T>(), cache.self_attn[i], B);
      feed_forward<T>(s, *blk.mlp, norm(*blk.ln2, x).data<T>(), x.data<T>(), B);
    }
    x = norm(*model.ln_f, x);
    linear_rows(s.logits.data<T>(), x.data<T>(), B, model.lm_head->weight, model.lm_head->bias);
    return s.logits;
  });
}

}  // namespace attograd
