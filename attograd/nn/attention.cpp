#include <attograd/nn/attention.h>

#include <algorithm>
#include <cmath>

#include <attograd/autograd/backend/blas.h>
#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/engine.h>
#include <attograd/autograd/kernels/rows.h>
#include <attograd/autograd/ops/attention.h>
#include <attograd/autograd/ops/elementwise.h>
#include <attograd/autograd/ops/reduction.h>
#include <attograd/autograd/ops/shape.h>
#include <attograd/nn/inference.h>
#include <attograd/nn/init.h>

namespace attograd {

// ---- KV cache -------------------------------------------------------------------

Tensor AttentionCache::keys() const { return k.narrow(2, 0, length); }
Tensor AttentionCache::values() const { return v.narrow(2, 0, length); }
size_t AttentionCache::bytes_used() const {
  if (!k.defined()) return 0;
  return 2 * static_cast<size_t>(k.size(0) * k.size(1) * length * k.size(3)) * dtype_size(k.dtype());
}
size_t AttentionCache::bytes_allocated() const {
  return k.defined() ? 2 * static_cast<size_t>(k.numel()) * dtype_size(k.dtype()) : 0;
}

void AttentionCache::reserve(int64_t B, int64_t G, int64_t D, int64_t n, DType dtype) {
  if (k.defined() && (k.size(0) != B || k.size(1) != G || k.size(3) != D))
    fail<ShapeError>("AttentionCache", "new keys [{}, {}, {}, {}] do not match the cache {}; hint: reset() the cache "
                     "for a new batch", B, G, n, D, shape_str(k.shape()));
  if (k.defined() && k.dtype() != dtype)
    fail<DTypeError>("AttentionCache", "new keys are {}, the cache {}; hint: reset() the cache after changing the "
                     "model's dtype", dtype_name(dtype), dtype_name(k.dtype()));
  const int64_t cap = k.defined() ? k.size(2) : 0;
  if (length + n <= cap && k.is_contiguous() && v.is_contiguous()) return;
  NoGradGuard no_grad;
  const int64_t new_cap = length + n <= cap ? cap : std::max<int64_t>({16, 2 * cap, length + n});
  Tensor k2 = Tensor::empty({B, G, new_cap, D}, dtype), v2 = Tensor::empty({B, G, new_cap, D}, dtype);
  if (length > 0) {
    k2.narrow(2, 0, length).copy_(keys());
    v2.narrow(2, 0, length).copy_(values());
  }
  k = k2;
  v = v2;
}

namespace {

// Append new rows kn/vn [B, G, n, D] to the cache.
void cache_append(AttentionCache& c, const Tensor& kn, const Tensor& vn) {
  NoGradGuard no_grad;
  const int64_t n = kn.size(2);
  c.reserve(kn.size(0), kn.size(1), kn.size(3), n, kn.dtype());
  c.k.narrow(2, c.length, n).copy_(kn);
  c.v.narrow(2, c.length, n).copy_(vn);
  c.length += n;
}

}  // namespace

// ---- MultiHeadAttention ---------------------------------------------------------------

MultiHeadAttention::MultiHeadAttention(const MHAConfig& c, Generator& gen)
    : Module("MultiHeadAttention"), embed_dim(c.embed_dim), num_heads(c.num_heads),
      head_dim(c.num_heads > 0 ? c.embed_dim / c.num_heads : 0), kdim(c.kdim.value_or(c.embed_dim)),
      vdim(c.vdim.value_or(c.embed_dim)), num_kv_heads(c.num_kv_heads.value_or(c.num_heads)), dropout(c.dropout),
      dropout_gen_(c.dropout_gen) {
  const int64_t e = embed_dim;
  if (e <= 0 || num_heads <= 0 || e % num_heads != 0)
    fail<ValueError>("MultiHeadAttention", "embed_dim {} must be positive and divisible by num_heads {}", e, num_heads);
  if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0)
    fail<ValueError>("MultiHeadAttention", "num_kv_heads {} must be positive and divide num_heads {}; hint: {} is "
                     "multi-head, 1 multi-query attention", num_kv_heads, num_heads, num_heads);
  const int64_t kv = num_kv_heads * head_dim;  // G · D
  if (!(dropout >= 0 && dropout < 1)) fail<ValueError>("MultiHeadAttention", "dropout must be in [0, 1), got {}", dropout);
  if (dropout > 0 && !dropout_gen_) fail<ValueError>("MultiHeadAttention", "dropout {} needs a Generator", dropout);
  q_proj = register_module("q_proj", std::make_shared<Linear>(e, e, gen, c.bias, c.dtype));
  k_proj = register_module("k_proj", std::make_shared<Linear>(kdim, kv, gen, c.bias, c.dtype));
  v_proj = register_module("v_proj", std::make_shared<Linear>(vdim, kv, gen, c.bias, c.dtype));
  out_proj = register_module("out_proj", std::make_shared<Linear>(e, e, gen, c.bias, c.dtype));
  // PyTorch's init: xavier-uniform projections (when kdim == vdim == E, PyTorch
  // packs q/k/v into one [3E, E] matrix, so the bound uses fan_out = 3E; with
  // G < H the packed matrix is [E + 2·G·D, E]), zero biases; out_proj keeps
  // Linear's weight init with a zero bias.
  const bool packed = kdim == e && vdim == e;
  for (auto* lin : {q_proj.get(), k_proj.get(), v_proj.get()}) {
    if (packed) {
      const double b = std::sqrt(6.0 / static_cast<double>(e + e + 2 * kv));
      init::uniform_(lin->weight, -b, b, gen);
    } else {
      init::xavier_uniform_(lin->weight, gen);
    }
    if (c.bias) init::zeros_(lin->bias);
  }
  if (c.bias) init::zeros_(out_proj->bias);
}

Tensor MultiHeadAttention::split_heads(const Tensor& x, int64_t heads) const {
  // [B, L, heads·D] -> [B, L, heads, D] -> [B, heads, L, D]: a strided view, no copy.
  return x.reshape({x.size(0), x.size(1), heads, head_dim}).transpose(1, 2);
}

MHAOutput MultiHeadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                      const MHAOptions& opt) {
  if (query.dim() != 3 || key.dim() != 3 || value.dim() != 3)
    fail<ShapeError>("MultiHeadAttention", "expected batch-first query [B, T, E], key [B, S, kdim], value [B, S, vdim], "
                     "got {}, {}, {}", shape_str(query.shape()), shape_str(key.shape()), shape_str(value.shape()));
  if (query.size(2) != embed_dim || key.size(2) != kdim || value.size(2) != vdim)
    fail<ShapeError>("MultiHeadAttention", "feature sizes {}, {}, {} do not match embed_dim {}, kdim {}, vdim {}",
                     query.size(2), key.size(2), value.size(2), embed_dim, kdim, vdim);
  const int64_t B = query.size(0), T = query.size(1);

  Tensor q = split_heads(q_proj->forward(query), num_heads);  // [B, H, T, D]
  Tensor k, v;                                                // [B, G, S, D]
  AttentionCache* cache = opt.cache;
  Tensor attn_mask = opt.attn_mask;
  bool is_causal = opt.is_causal;
  if (cache && cache->cross && cache->length > 0) {
    k = cache->keys();  // cross-attention: memory projected on the first step
    v = cache->values();
  } else {
    if (cache) {
      const int64_t t0 = cache->length;
      append_kv(key, value, *cache);
      k = cache->keys();
      v = cache->values();
      // The new queries sit at positions t0..t0+T-1; causal means "keys up to
      // my own position", which spans the whole cache for a single step.
      if (is_causal && T > 1) {
        std::vector<bool> m(static_cast<size_t>(T * cache->length));
        for (int64_t i = 0; i < T; ++i)
          for (int64_t s = 0; s < cache->length; ++s) m[i * cache->length + s] = s > t0 + i;
        attn_mask = Tensor::from_vector(m, {T, cache->length});
      }
      is_causal = false;
    } else {
      k = split_heads(k_proj->forward(key), num_kv_heads);
      v = split_heads(v_proj->forward(value), num_kv_heads);
    }
  }

  AttentionOptions ao;
  ao.attn_mask = attn_mask;
  ao.key_padding_mask = opt.key_padding_mask;
  ao.is_causal = is_causal;
  ao.dropout_p = is_training() ? dropout : 0.0;
  ao.generator = dropout_gen_.get();
  ao.need_weights = opt.need_weights || observer;
  AttentionResult r = scaled_dot_product_attention(q, k, v, ao);  // out [B, H, T, D]

  Tensor heads = r.out;
  if (observer) {
    AttentionCall call{r.weights, r.out, Tensor()};
    observer(call);
    const Tensor& scale = call.head_scale;
    if (scale.defined()) {
      if (scale.shape() != Shape{num_heads})
        fail<ShapeError>("MultiHeadAttention", "an observer's head_scale must be [{}] (one per head), got {}",
                         num_heads, shape_str(scale.shape()));
      if (scale.dtype() != heads.dtype())
        fail<DTypeError>("MultiHeadAttention", "an observer's head_scale must be {} like the heads, got {}",
                         dtype_name(heads.dtype()), dtype_name(scale.dtype()));
      heads = heads * scale.reshape({1, num_heads, 1, 1});
    }
  }
  // [B, H, T, D] -> [B, T, H, D] -> [B, T, E]
  Tensor merged = heads.transpose(1, 2).reshape({B, T, embed_dim});
  MHAOutput res{out_proj->forward(merged), Tensor()};
  if (opt.need_weights) res.weights = opt.average_weights ? mean(r.weights, {1}) : r.weights;
  return res;
}

void MultiHeadAttention::append_kv(const Tensor& key, const Tensor& value, AttentionCache& cache) {
  cache_append(cache, split_heads(k_proj->forward(key), num_kv_heads), split_heads(v_proj->forward(value), num_kv_heads));
}

// ---- MultiHeadAttention's decode step (forward's, without the graph) -------------------

// heads [B, H·D] = per (b, h): softmax(scale · q_h K_gᵀ, padding -∞) V_g for
// the rows b of `rows`. The R query heads of group g are rows of one [R, D]
// matrix, so each group takes two GEMMs.
template <class T>
void MultiHeadAttention::attend_rows(StepState& s, const T* q, int64_t ldq, const AttentionCache& c, int64_t t,
                                     const PaddingRows& pad, RowBlock rows) const {
  const int64_t H = num_heads, G = num_kv_heads, D = head_dim, R = H / G, E = H * D;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(D)));  // the attention op's default
  const T* K = c.k.data<T>();
  const T* V = c.v.data<T>();
  const int64_t sb = c.k.strides()[0], sg = c.k.strides()[1], ld = c.k.strides()[2];
  T* scores = s.scores.data<T>();
  const int64_t lds = s.scores.size(1);
  T* heads = s.heads.data<T>();
  parallel_for(rows.n * G, 1, [&](int64_t first, int64_t last) {
    for (int64_t bg = first; bg < last; ++bg) {
      const int64_t b = rows.first + bg / G, g = bg % G;
      T* p = scores + b * lds + g * R * t;  // P [R, t] = scale · Q Kᵀ, then the padding and the softmax row by row
      const T* qg = q + b * ldq + g * R * D;
      const T* Kg = K + b * sb + g * sg;
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

int64_t MultiHeadAttention::prepare_self_step(StepState& s, AttentionCache& c) const {
  c.reserve(*s.rows, num_kv_heads, head_dim, 1, s.dtype);
  reserve_step_scores(s, num_heads, c.length + 1);
  return c.length + 1;
}

template <class T>
void MultiHeadAttention::self_step_rows(StepState& s, const StepLayer& w, const T* in, T* x, AttentionCache& c,
                                        int64_t t, RowBlock rows) const {
  const int64_t E = embed_dim, G = num_kv_heads, D = head_dim, W = w.qkv.w.size(0);
  T* qkv = s.qkv.data<T>();
  Linear::forward_rows(qkv + rows.first * W, in, rows.n, w.qkv);  // [n, W] = q | k | v
  T* K = c.k.data<T>();
  T* V = c.v.data<T>();
  const int64_t sb = c.k.strides()[0], sg = c.k.strides()[1], row = (t - 1) * c.k.strides()[2];
  for (int64_t b = rows.first; b < rows.first + rows.n; ++b)
    for (int64_t g = 0; g < G; ++g) {
      const T* kn = qkv + b * W + E + g * D;
      std::copy(kn, kn + D, K + b * sb + g * sg + row);
      std::copy(kn + G * D, kn + G * D + D, V + b * sb + g * sg + row);
    }
  attend_rows<T>(s, qkv, W, c, t, PaddingRows{}, rows);
  T* proj = s.proj.data<T>() + rows.first * E;
  Linear::forward_rows(proj, s.heads.data<T>() + rows.first * E, rows.n, w.out);
  for (int64_t i = 0; i < rows.n * E; ++i) x[i] = x[i] + proj[i];  // the residual add, add's x + y
}

void MultiHeadAttention::prepare_cross_step(StepState& s, const Tensor& memory, const Tensor& kpm, AttentionCache& c) {
  const int64_t B = *s.rows;
  if (c.length == 0) append_kv(memory, memory, c);
  if (c.k.size(0) != B)
    fail<ShapeError>("decode_step", "the cross-attention cache holds {} rows, the step {}; hint: reset() the cache "
                     "for a new batch", c.k.size(0), B);
  if (kpm.defined() && (kpm.dim() != 2 || kpm.size(0) != B || kpm.size(1) != c.length || kpm.dtype() != DType::b8))
    fail<ShapeError>("decode_step", "memory_key_padding_mask must be b8 [{}, {}], got {} {}", B, c.length,
                     dtype_name(kpm.dtype()), shape_str(kpm.shape()));
  reserve_step_scores(s, num_heads, c.length);
}

template <class T>
void MultiHeadAttention::cross_step_rows(StepState& s, const StepLayer& w, const T* in, T* x, const AttentionCache& c,
                                         const PaddingRows& pad, RowBlock rows) const {
  const int64_t E = embed_dim;
  T* proj = s.proj.data<T>() + rows.first * E;
  Linear::forward_rows(proj, in, rows.n, w.cross_q);  // q [n, E], read by attend_rows only
  attend_rows<T>(s, s.proj.data<T>(), E, c, c.length, pad, rows);
  Linear::forward_rows(proj, s.heads.data<T>() + rows.first * E, rows.n, w.cross_out);
  for (int64_t i = 0; i < rows.n * E; ++i) x[i] = x[i] + proj[i];
}

template void MultiHeadAttention::self_step_rows<float>(StepState&, const StepLayer&, const float*, float*,
                                                        AttentionCache&, int64_t, RowBlock) const;
template void MultiHeadAttention::self_step_rows<double>(StepState&, const StepLayer&, const double*, double*,
                                                         AttentionCache&, int64_t, RowBlock) const;
template void MultiHeadAttention::cross_step_rows<float>(StepState&, const StepLayer&, const float*, float*,
                                                         const AttentionCache&, const PaddingRows&, RowBlock) const;
template void MultiHeadAttention::cross_step_rows<double>(StepState&, const StepLayer&, const double*, double*,
                                                          const AttentionCache&, const PaddingRows&, RowBlock) const;

std::string MultiHeadAttention::extra_repr() const {
  std::string s = fmt::format("embed_dim={}, num_heads={}, dropout={}", embed_dim, num_heads, dropout);
  if (num_kv_heads != num_heads) s += fmt::format(", num_kv_heads={}", num_kv_heads);
  if (kdim != embed_dim || vdim != embed_dim) s += fmt::format(", kdim={}, vdim={}", kdim, vdim);
  return s;
}

Tensor mean_pool_kv_heads(const Tensor& proj, int64_t heads, int64_t kv_heads) {
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0)
    fail<ValueError>("mean_pool_kv_heads", "kv_heads {} must be positive and divide heads {}", kv_heads, heads);
  if ((proj.dim() != 1 && proj.dim() != 2) || proj.size(0) % heads != 0)
    fail<ShapeError>("mean_pool_kv_heads", "expected a projection weight [heads·D, in] or bias [heads·D] with heads = "
                     "{}, got {}", heads, shape_str(proj.shape()));
  NoGradGuard no_grad;
  const int64_t D = proj.size(0) / heads, in = proj.dim() == 2 ? proj.size(1) : 1;
  // [H·D, in] -> [G, R, D, in], mean over R -> [G·D, in]
  const Tensor pooled = mean(proj.reshape({kv_heads, heads / kv_heads, D, in}), {1});
  Shape out = proj.shape();
  out[0] = kv_heads * D;
  return pooled.reshape(out).contiguous();
}

// ---- observers on every attention module ----------------------------------------------

namespace {

void collect_attention(const Module& m, const std::string& prefix,
                       std::vector<std::pair<std::string, std::shared_ptr<MultiHeadAttention>>>& out) {
  for (const auto& [name, child] : m.named_children()) {
    const std::string path = prefix.empty() ? name : prefix + "." + name;
    if (auto mha = std::dynamic_pointer_cast<MultiHeadAttention>(child)) out.emplace_back(path, std::move(mha));
    collect_attention(*child, path, out);
  }
}

}  // namespace

std::vector<std::pair<std::string, std::shared_ptr<MultiHeadAttention>>> attention_modules(const Module& root) {
  std::vector<std::pair<std::string, std::shared_ptr<MultiHeadAttention>>> out;
  collect_attention(root, "", out);
  return out;
}

AttentionObserverGuard::AttentionObserverGuard(const Module& root,
                                               const std::function<AttentionObserver(const std::string&)>& make) {
  for (auto& [name, m] : attention_modules(root)) {
    AttentionObserver next = make(name);
    saved_.emplace_back(m, std::exchange(m->observer, std::move(next)));
  }
}

AttentionObserverGuard::~AttentionObserverGuard() {
  for (auto& [m, observer] : saved_) m->observer = std::move(observer);
}

}  // namespace attograd
