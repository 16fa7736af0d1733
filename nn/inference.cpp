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

// A linear layer as the lean step multiplies by it: W [O, I] (several layers'
// W [O_i, I] stacked along O for the packed q | k | v), also transposed, and b [O].
struct LeanLinear {
  Tensor w;   // [O, I], the graph's operand
  Tensor wt;  // [I, O] = Wᵀ
  Tensor b;   // [O], undefined without biases
};

// One layer's weights (cross_* undefined for a GPT block).
struct LeanLayer {
  LeanLinear qkv, out, cross_q, cross_out, ff1, ff2;
};

struct LeanState {
  std::optional<int64_t> rows; // B the buffers are sized for (none before the first step)
  DType dtype = DType::f32;    // the weights' dtype
  std::vector<LeanLayer> layers;
  LeanLinear head;             // the generator / lm_head [E, V]
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

// Whether gemm<T> runs this product on libxsmm, whose kernels read a
// transposed b only through a copy made on every call (small_gemm.h).
template <class T>
bool on_xsmm(int64_t M, int64_t N, int64_t K, bool trans_b, T alpha, T beta) {
  if constexpr (!std::is_same_v<T, float>) {
    return false;
  } else {
    const GemmBackend lib = gemm_backend();
    return lib == GemmBackend::xsmm ||
           (lib == GemmBackend::blas && routed_gemm_backend(M, N, K, trans_b, alpha, beta) == GemmBackend::xsmm);
  }
}

// out [rows, O] = x [rows, I] · Wᵀ + b, as linear() computes it: the bias
// copied into every row first, then one GEMM adds the product (beta = 1).
// Where libxsmm runs it, the GEMM reads Wᵀ untransposed (wt); elsewhere it
// takes the graph's operand W, which OpenBLAS packs either way, so there the
// bits stay the graph's.
template <class T>
void linear_rows(T* out, const T* x, int64_t rows, const LeanLinear& l) {
  const int64_t O = l.w.size(0), I = l.w.size(1);
  const T beta = l.b.defined() ? T(1) : T(0);
  if (const T* pb = ptr<T>(l.b))
    for (int64_t r = 0; r < rows; ++r) std::copy(pb, pb + O, out + r * O);
  if (on_xsmm<T>(rows, O, I, false, T(1), beta))
    gemm<T>(out, x, l.wt.data<T>(), rows, O, I, false, false, I, O, O, T(1), beta);
  else
    gemm<T>(out, x, l.w.data<T>(), rows, O, I, false, true, I, I, O, T(1), beta);
}

// x [n] += y [n], the residual add (add's x + y).
template <class T>
void add_into(T* x, const T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] + y[i];
}

// The items [first, first + n) one pool task takes: batch rows through a
// whole step, or a pack's weights.
struct Rows {
  int64_t first = 0, n = 0;
};

// A step's rows never meet (each row attends to its own cache rows only), so
// the step is cut into blocks of at most this many rows, as even as the cut
// allows, and each block runs every layer for its rows as one task on the
// pool: the pool joins once per step instead of once per product. Inside a
// task the products, heads and layer-norm rows run inline (nested loops do).
// The cut depends on B only, never on the thread count, so the products'
// shapes, and with them the numbers, are the same on any number of threads.
constexpr int64_t kRowsPerTask = 32;

// f(block) for every block of [0, n) (blocks of at most per_task items, as
// even as the cut allows), grad mode off in every task (it is per thread).
// The pool's threads claim the blocks one at a time (threads.h), so a thread
// that is descheduled holds up one block, not a fixed share. A single block
// runs inline, its loops on the pool as usual.
template <class F>
void for_blocks(int64_t n, int64_t per_task, const F& f) {
  const int64_t blocks = block_count(n, per_task);
  parallel_for(blocks, 1, [&](int64_t first, int64_t last) {
    NoGradGuard no_grad;
    for (int64_t i = first; i < last; ++i) f(Rows{i * n / blocks, (i + 1) * n / blocks - i * n / blocks});
  });
}

// dst [cols, rows] (rows ldd apart) = src [rows, cols]ᵀ, in tiles that stay in cache.
template <class T>
void transpose_into(T* dst, int64_t ldd, const T* src, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c)
        for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r) dst[c * ldd + r] = src[r * cols + c];
}

// The weights W [O_i, I] of `parts` stacked along O into w [ΣO_i, I] (one
// part: its own weight, shared), room for Wᵀ in wt (filled by
// transpose_weights); their biases into b.
LeanLinear transposed(std::initializer_list<const Linear*> parts) {
  NoGradGuard no_grad;
  const Linear& first = **parts.begin();
  int64_t O = 0;
  for (const Linear* l : parts) O += l->out_features;
  const DType dt = first.weight.dtype();
  LeanLinear t{parts.size() == 1 ? first.weight : Tensor::empty({O, first.in_features}, dt),
               Tensor::empty({first.in_features, O}, dt), parts.size() == 1 ? first.bias : Tensor()};
  if (parts.size() > 1 && first.bias.defined()) t.b = Tensor::empty({O}, dt);
  int64_t at = 0;
  for (const Linear* l : parts) {
    if (parts.size() > 1) {
      t.w.narrow(0, at, l->out_features).copy_(l->weight);
      if (t.b.defined()) t.b.narrow(0, at, l->out_features).copy_(l->bias);
    }
    at += l->out_features;
  }
  return t;
}

LeanLayer self_attention_weights(const MultiHeadAttention& m) {
  return {.qkv = transposed({m.q_proj.get(), m.k_proj.get(), m.v_proj.get()}), .out = transposed({m.out_proj.get()})};
}

void feed_forward_weights(LeanLayer& l, const FeedForward& ff) {
  l.ff1 = transposed({ff.linear1.get()});
  l.ff2 = transposed({ff.linear2.get()});
}

// wt = wᵀ for every weight of s, one weight per pool task (a 64×32 decode of
// the base model transposes 1.8 M floats on its first step).
void transpose_weights(LeanState& s) {
  std::vector<const LeanLinear*> all{&s.head};
  for (const LeanLayer& l : s.layers)
    for (const LeanLinear* x : {&l.qkv, &l.out, &l.cross_q, &l.cross_out, &l.ff1, &l.ff2})
      if (x->w.defined()) all.push_back(x);
  for_blocks(static_cast<int64_t>(all.size()), 1, [&](Rows r) {
    const LeanLinear& x = *all[r.first];
    dispatch_float(x.w.dtype(), "lean decode", [&]<class T>() {
      transpose_into(x.wt.data<T>(), x.w.size(0), x.w.data<T>(), x.w.size(0), x.w.size(1));
    });
  });
}

// The seq2seq decoder's weights, transposed.
void pack_weights(LeanState& s, const Seq2SeqTransformer& model) {
  s.layers.clear();
  for (const auto& dl : *model.decoder->layers) {
    LeanLayer l = self_attention_weights(*dl->self_attn);
    l.cross_q = transposed({dl->cross_attn->q_proj.get()});
    l.cross_out = transposed({dl->cross_attn->out_proj.get()});
    feed_forward_weights(l, *dl->ff);
    s.layers.push_back(std::move(l));
  }
  s.head = transposed({model.generator.get()});
  transpose_weights(s);
}

// The GPT's weights, transposed.
void pack_weights(LeanState& s, const GPT& model) {
  s.layers.clear();
  for (const auto& blk : *model.blocks) {
    LeanLayer l = self_attention_weights(*blk->attn);
    feed_forward_weights(l, *blk->mlp);
    s.layers.push_back(std::move(l));
  }
  s.head = transposed({model.lm_head.get()});
  transpose_weights(s);
}

// Buffers for B rows; weights packed on the first call.
template <class Model>
LeanState& state_for(KVCache& cache, const Model& model, int64_t B, int64_t E, int64_t F, int64_t V, DType dtype) {
  if (!cache.lean) cache.lean = std::make_shared<LeanState>();
  LeanState& s = *cache.lean;
  if (s.layers.empty() || s.dtype != dtype) pack_weights(s, model);
  if (s.rows != B || s.dtype != dtype) {
    const int64_t W = s.layers[0].qkv.wt.size(1);
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

// Room for t more columns of every head's scores (the buffer only grows).
void reserve_scores(LeanState& s, int64_t H, int64_t t) {
  if (!s.scores.defined() || s.scores.size(1) < H * t)
    s.scores = Tensor::empty({*s.rows, H * std::max<int64_t>(2 * t, 16)}, s.dtype);
}

// Room for this step's K/V row in a self-attention cache; the step's t (this row included).
int64_t reserve_step_row(LeanState& s, const MultiHeadAttention& m, AttentionCache& c) {
  c.reserve(*s.rows, m.num_kv_heads, m.head_dim, 1, s.dtype);
  reserve_scores(s, m.num_heads, c.length + 1);
  return c.length + 1;
}

// heads [B, H·D] = per (b, h): softmax(scale · q_h K_gᵀ, padding -∞) V_g for
// the rows b of `rows`, with q [B, ≥ H·D] rows ldq apart and K, V the cache's
// [B, G, ≥ t, D] (its first t rows). The R query heads of group g are rows of
// one [R, D] matrix, so each group takes two GEMMs. With one query head per
// group (R = 1) the scores are taken as the column K_g q_hᵀ [t, 1], the same
// t dot products, where libxsmm runs the products: it would copy K_g
// transposed on every call.
template <class T>
void attend(LeanState& s, const MultiHeadAttention& m, const T* q, int64_t ldq, const AttentionCache& c, int64_t t,
            const PaddingRows& pad, Rows rows) {
  const int64_t H = m.num_heads, G = m.num_kv_heads, D = m.head_dim, R = H / G, E = H * D;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(D)));  // the attention op's default
  const T* K = c.k.data<T>();
  const T* V = c.v.data<T>();
  const int64_t sb = c.k.strides()[0], sg = c.k.strides()[1], ld = c.k.strides()[2];
  T* scores = s.scores.data<T>();
  const int64_t lds = s.scores.size(1);
  T* heads = s.heads.data<T>();
  const bool keys_first = R == 1 && on_xsmm<T>(R, t, D, true, scale, T(0));
  parallel_for(rows.n * G, 1, [&](int64_t first, int64_t last) {
    for (int64_t bg = first; bg < last; ++bg) {
      const int64_t b = rows.first + bg / G, g = bg % G;
      T* p = scores + b * lds + g * R * t;  // [R, t]
      // P [R, t] = scale · Q Kᵀ, then the padding and the softmax row by row
      const T* qg = q + b * ldq + g * R * D;
      const T* Kg = K + b * sb + g * sg;
      if (keys_first)
        gemm<T>(p, Kg, qg, t, 1, D, false, true, ld, D, 1, scale, T(0));
      else
        gemm<T>(p, qg, Kg, R, t, D, false, true, D, ld, t, scale, T(0));
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

// x += SelfAttn(in) for the rows of `rows` (in, x: their [n, E]): the packed
// projection, the new K/V rows into the cache at row t − 1, attention over t
// rows, out_proj.
template <class T>
void self_attention(LeanState& s, const LeanLayer& w, const MultiHeadAttention& m, const T* in, T* x,
                    AttentionCache& c, int64_t t, Rows rows) {
  const int64_t E = m.embed_dim, G = m.num_kv_heads, D = m.head_dim, W = w.qkv.wt.size(1);
  if (s.qkv.size(1) != W) fail<ShapeError>("lean decode", "packed q|k|v width {} differs from the buffer's {}", W, s.qkv.size(1));
  T* qkv = s.qkv.data<T>();
  linear_rows(qkv + rows.first * W, in, rows.n, w.qkv);  // [n, W] = q | k | v
  T* K = c.k.data<T>();
  T* V = c.v.data<T>();
  const int64_t sb = c.k.strides()[0], sg = c.k.strides()[1], row = (t - 1) * c.k.strides()[2];
  for (int64_t b = rows.first; b < rows.first + rows.n; ++b)
    for (int64_t g = 0; g < G; ++g) {
      const T* kn = qkv + b * W + E + g * D;
      std::copy(kn, kn + D, K + b * sb + g * sg + row);
      std::copy(kn + G * D, kn + G * D + D, V + b * sb + g * sg + row);
    }
  attend<T>(s, m, qkv, W, c, t, {}, rows);
  T* proj = s.proj.data<T>() + rows.first * E;
  linear_rows(proj, s.heads.data<T>() + rows.first * E, rows.n, w.out);
  add_into(x, proj, rows.n * E);
}

// Before a step's tasks: the memory's K, V in a cross-attention cache (first
// step only), checked against the step's B rows and the padding mask.
void fill_cross_cache(LeanState& s, MultiHeadAttention& m, const Tensor& memory, const Tensor& kpm,
                      AttentionCache& c) {
  const int64_t B = *s.rows;
  if (c.length == 0) m.append_kv(memory, memory, c);
  if (c.k.size(0) != B)
    fail<ShapeError>("lean decode", "the cross-attention cache holds {} rows, the step {}; hint: reset() the cache "
                     "for a new batch", c.k.size(0), B);
  if (kpm.defined() && (kpm.dim() != 2 || kpm.size(0) != B || kpm.size(1) != c.length || kpm.dtype() != DType::b8))
    fail<ShapeError>("lean decode", "memory_key_padding_mask must be b8 [{}, {}], got {} {}", B, c.length,
                     dtype_name(kpm.dtype()), shape_str(kpm.shape()));
  reserve_scores(s, m.num_heads, c.length);
}

// x += CrossAttn(in) for the rows of `rows`: q from in; K, V of the memory from the cache.
template <class T>
void cross_attention(LeanState& s, const LeanLayer& w, const MultiHeadAttention& m, const T* in, T* x,
                     const AttentionCache& c, const PaddingRows& pad, Rows rows) {
  const int64_t E = m.embed_dim;
  T* proj = s.proj.data<T>() + rows.first * E;
  linear_rows(proj, in, rows.n, w.cross_q);  // q [n, E], read by attend only
  attend<T>(s, m, s.proj.data<T>(), E, c, c.length, pad, rows);
  linear_rows(proj, s.heads.data<T>() + rows.first * E, rows.n, w.cross_out);
  add_into(x, proj, rows.n * E);
}

// x += FFN(in) = Linear2(act(Linear1(in))) for the rows of `rows`.
template <class T>
void feed_forward(LeanState& s, const LeanLayer& w, const FeedForward& ff, const T* in, T* x, Rows rows) {
  const int64_t E = ff.linear2->out_features;
  const Tensor hidden = s.hidden.narrow(0, rows.first, rows.n);  // [n, F] contiguous
  linear_rows(hidden.data<T>(), in, rows.n, w.ff1);
  const Tensor a = ff.activation == Activation::gelu ? gelu(hidden) : relu(hidden);
  T* proj = s.proj.data<T>() + rows.first * E;
  linear_rows(proj, a.data<T>(), rows.n, w.ff2);
  add_into(x, proj, rows.n * E);
}

Tensor norm(const LayerNorm& ln, const Tensor& x) { return layer_norm(x, ln.normalized_shape, ln.weight, ln.bias, ln.eps); }

// One decoder layer on the stream x [n, E] of the rows of `rows` (pre-LN or
// post-LN, as TransformerDecoderLayer::forward); t: the self-attention's.
template <class T>
Tensor decoder_layer(LeanState& s, size_t i, const TransformerDecoderLayer& l, Tensor x, int64_t t,
                     const PaddingRows& pad, KVCache& cache, Rows rows) {
  AttentionCache& sc = cache.self_attn[i];
  const AttentionCache& cc = cache.cross_attn[i];
  const LeanLayer& w = s.layers[i];
  if (l.pre_ln) {
    // h = x + SA(LN1(x));  h = h + CA(LN2(h));  h + FF(LN3(h))
    self_attention<T>(s, w, *l.self_attn, norm(*l.norm1, x).data<T>(), x.data<T>(), sc, t, rows);
    cross_attention<T>(s, w, *l.cross_attn, norm(*l.norm2, x).data<T>(), x.data<T>(), cc, pad, rows);
    feed_forward<T>(s, w, *l.ff, norm(*l.norm3, x).data<T>(), x.data<T>(), rows);
    return x;
  }
  // h = LN1(x + SA(x));  h = LN2(h + CA(h));  LN3(h + FF(h)). Each sublayer reads its input in
  // its first GEMM and adds into x only at its end, so input and stream may be one buffer.
  self_attention<T>(s, w, *l.self_attn, x.data<T>(), x.data<T>(), sc, t, rows);
  x = norm(*l.norm1, x);
  cross_attention<T>(s, w, *l.cross_attn, x.data<T>(), x.data<T>(), cc, pad, rows);
  x = norm(*l.norm2, x);
  feed_forward<T>(s, w, *l.ff, x.data<T>(), x.data<T>(), rows);
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
  const DType dt = model.generator->weight.dtype();
  LeanState& s = state_for(cache, model, B, c.d_model, c.d_ff, c.tgt_vocab, dt);
  NoGradGuard no_grad;
  const auto& layers = *model.decoder->layers;
  return dispatch_float(dt, "lean decode", [&]<class T>() {
    embed<T>(s.stream.data<T>(), ids, model.tgt_embed->weight, std::sqrt(static_cast<double>(c.d_model)),
             model.pos->table, cache.length());
    int64_t t = 0;
    for (size_t i = 0; i < layers.size(); ++i) {
      t = reserve_step_row(s, *layers[i].self_attn, cache.self_attn[i]);
      fill_cross_cache(s, *layers[i].cross_attn, memory, kpm, cache.cross_attn[i]);
    }
    const PaddingRows pad = padding_rows(kpm);
    for_blocks(B, kRowsPerTask, [&](Rows rows) {
      Tensor x = s.stream.narrow(0, rows.first, rows.n);
      for (size_t i = 0; i < layers.size(); ++i) x = decoder_layer<T>(s, i, layers[i], x, t, pad, cache, rows);
      if (model.decoder->norm) x = norm(*model.decoder->norm, x);
      linear_rows(s.logits.data<T>() + rows.first * c.tgt_vocab, x.data<T>(), rows.n, s.head);
    });
    for (auto& sc : cache.self_attn) sc.length += 1;
    return s.logits;
  });
}

Tensor lean_gpt_step(GPT& model, std::span<const int64_t> ids, KVCache& cache) {
  const GPTConfig& c = model.config;
  const int64_t B = static_cast<int64_t>(ids.size());
  const DType dt = model.lm_head->weight.dtype();
  LeanState& s = state_for(cache, model, B, c.d_model, c.d_ff, c.vocab, dt);
  NoGradGuard no_grad;
  const auto& blocks = *model.blocks;
  return dispatch_float(dt, "lean decode", [&]<class T>() {
    embed<T>(s.stream.data<T>(), ids, model.tok_embed->weight, 1.0, model.pos->table, cache.length());
    int64_t t = 0;
    for (size_t i = 0; i < blocks.size(); ++i) t = reserve_step_row(s, *blocks[i].attn, cache.self_attn[i]);
    for_blocks(B, kRowsPerTask, [&](Rows rows) {
      Tensor x = s.stream.narrow(0, rows.first, rows.n);
      for (size_t i = 0; i < blocks.size(); ++i) {
        // x = x + SA(LN1(x));  x = x + MLP(LN2(x))
        const GPTBlock& blk = blocks[i];
        const LeanLayer& w = s.layers[i];
        self_attention<T>(s, w, *blk.attn, norm(*blk.ln1, x).data<T>(), x.data<T>(), cache.self_attn[i], t, rows);
        feed_forward<T>(s, w, *blk.mlp, norm(*blk.ln2, x).data<T>(), x.data<T>(), rows);
      }
      x = norm(*model.ln_f, x);
      linear_rows(s.logits.data<T>() + rows.first * c.vocab, x.data<T>(), rows.n, s.head);
    });
    for (auto& sc : cache.self_attn) sc.length += 1;
    return s.logits;
  });
}

}  // namespace attograd
