// The decode step's shared loop and buffers (see inference.h).
#include <attograd/nn/inference.h>

#include <algorithm>
#include <span>

#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/engine.h>
#include <attograd/nn/linear.h>
#include <attograd/nn/transformer.h>

namespace attograd {

namespace {

// dst [cols, rows] (rows ldd apart) = src [rows, cols]ᵀ, in tiles that stay in cache.
template <class T>
void transpose_into(T* dst, int64_t ldd, const T* src, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c)
        for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r) dst[c * ldd + r] = src[r * cols + c];
}

}  // namespace

void check_decode_step(const Module& model, const char* op, const KVCache& cache, size_t layers, int64_t positions) {
  if (GradMode::enabled())
    fail<ValueError>(op, "grad mode is on, but a decode step records no graph; hint: decode under NoGradGuard, or "
                     "call forward()/decode() for gradients");
  if (model.is_training())
    fail<ValueError>(op, "the model is in training mode, but a decode step applies no dropout; hint: call eval() "
                     "first");
  if (cache.self_attn.size() != layers || cache.cross_attn.size() != layers)
    fail<ValueError>(op, "the cache has {} layers, the model {}; hint: use model.make_cache()", cache.self_attn.size(),
                     layers);
  if (cache.length() >= positions)
    fail<ShapeError>(op, "position {} is past the model's {} positions; hint: start a new cache (reset()) from a "
                     "shorter prefix", cache.length(), positions);
  if (cache.step) return;  // the weights were checked on the cache's first step
  for (const auto& [name, p] : model.named_parameters())
    if (!is_floating(p.dtype()) || !p.is_contiguous())
      fail<DTypeError>(op, "parameter {} is {}{}, but a decode step needs float contiguous weights; hint: "
                       "decode() runs the graph", name, dtype_name(p.dtype()), p.is_contiguous() ? "" : " and strided");
}

StepLinear pack_linears(std::initializer_list<const Linear*> parts) {
  NoGradGuard no_grad;
  const Linear& first = **parts.begin();
  int64_t O = 0;
  for (const Linear* l : parts) O += l->out_features;
  const DType dt = first.weight.dtype();
  const bool one = parts.size() == 1;
  StepLinear t{one ? first.weight : Tensor::empty({O, first.in_features}, dt),
               Tensor::empty({first.in_features, O}, dt), one ? first.bias : Tensor()};
  if (!one && first.bias.defined()) t.b = Tensor::empty({O}, dt);
  int64_t at = 0;
  for (const Linear* l : parts) {
    if (!one) {
      t.w.narrow(0, at, l->out_features).copy_(l->weight);
      if (t.b.defined()) t.b.narrow(0, at, l->out_features).copy_(l->bias);
    }
    at += l->out_features;
  }
  return t;
}

void transpose_step_weights(StepState& s) {
  std::vector<const StepLinear*> all{&s.head};
  for (const StepLayer& l : s.layers)
    for (const StepLinear* x : {&l.qkv, &l.out, &l.cross_q, &l.cross_out, &l.ff1, &l.ff2})
      if (x->w.defined()) all.push_back(x);
  for_row_blocks(static_cast<int64_t>(all.size()), 1, [&](RowBlock r) {
    const StepLinear& x = *all[r.first];
    dispatch_float(x.w.dtype(), "decode_step", [&]<class T>() {
      transpose_into(x.wt.data<T>(), x.w.size(0), x.w.data<T>(), x.w.size(0), x.w.size(1));
    });
  });
}

void size_step_buffers(StepState& s, int64_t B, int64_t E, int64_t F, int64_t V, DType dtype) {
  if (s.rows == B && s.dtype == dtype) return;
  const int64_t W = s.layers.at(0).qkv.wt.size(1);
  s.stream = Tensor::empty({B, E}, dtype);
  s.qkv = Tensor::empty({B, W}, dtype);
  s.heads = Tensor::empty({B, E}, dtype);
  s.proj = Tensor::empty({B, E}, dtype);
  s.hidden = Tensor::empty({B, F}, dtype);
  s.logits = Tensor::empty({B, V}, dtype);
  s.scores = Tensor();
  s.rows = B;
  s.dtype = dtype;
}

void reserve_step_scores(StepState& s, int64_t H, int64_t t) {
  if (!s.scores.defined() || s.scores.size(1) < H * t)
    s.scores = Tensor::empty({*s.rows, H * std::max<int64_t>(2 * t, 16)}, s.dtype);
}

void for_row_blocks(int64_t n, int64_t per_task, const std::function<void(RowBlock)>& f) {
  const int64_t blocks = block_count(n, per_task);
  // The pool's threads claim the blocks one at a time (threads.h), so a
  // descheduled thread holds up one block, not a fixed share.
  parallel_for(blocks, 1, [&](int64_t first, int64_t last) {
    NoGradGuard no_grad;  // grad mode is per thread
    for (int64_t i = first; i < last; ++i) f(RowBlock{i * n / blocks, (i + 1) * n / blocks - i * n / blocks});
  });
}

PaddingRows padding_rows(const Tensor& kpm) {
  if (!kpm.defined()) return {};
  return {kpm.data<bool>(), kpm.strides()[0], kpm.strides()[1]};
}

void embed_step(const Tensor& x, std::span<const int64_t> ids, const Tensor& table, double scale, const Tensor& pos,
                int64_t start, const char* op) {
  const int64_t V = table.size(0), E = table.size(1);
  dispatch_float(table.dtype(), op, [&]<class T>() {
    T* out = x.data<T>();
    const T* w = table.data<T>();
    const T* p = pos.data<T>() + start * E;
    for (size_t b = 0; b < ids.size(); ++b) {
      if (ids[b] < 0 || ids[b] >= V)
        fail<IndexError>(op, "id {} (row {}) is out of range for the embedding [{}, {}]; hint: is the vocabulary "
                         "size right?", ids[b], b, V, E);
      std::copy(w + ids[b] * E, w + ids[b] * E + E, out + b * E);
    }
    const int64_t n = static_cast<int64_t>(ids.size()) * E;
    if (scale != 1.0)
      for (int64_t i = 0; i < n; ++i) out[i] = out[i] * static_cast<T>(scale);
    for (int64_t i = 0; i < n; ++i) out[i] = out[i] + p[i % E];
  });
}

}  // namespace attograd
