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

// Copies the parts into x.w and x.b (made anew in the parts' dtype if it
// changed) and records the parts' versions.
void stack_parts(StepLinear& x) {
  const DType dt = x.parts.front().dtype();
  if (x.w.dtype() != dt) {
    x.w = Tensor::empty(x.w.shape(), dt);
    if (x.b.defined()) x.b = Tensor::empty(x.b.shape(), dt);
  }
  int64_t at = 0, at_b = 0;
  for (const Tensor& p : x.parts) {
    if (p.dim() == 2) {
      x.w.narrow(0, at, p.size(0)).copy_(p);
      at += p.size(0);
    } else {
      x.b.narrow(0, at_b, p.size(0)).copy_(p);
      at_b += p.size(0);
    }
  }
  x.versions.clear();
  for (const Tensor& p : x.parts) x.versions.push_back(p.version());
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
  if (parts.size() == 1) return {first.weight, first.bias, {}, {}};
  int64_t O = 0;
  for (const Linear* l : parts) O += l->out_features;
  const DType dt = first.weight.dtype();
  StepLinear t{Tensor::empty({O, first.in_features}, dt), first.bias.defined() ? Tensor::empty({O}, dt) : Tensor(),
               {}, {}};
  for (const Linear* l : parts) t.parts.push_back(l->weight);
  if (t.b.defined())
    for (const Linear* l : parts) t.parts.push_back(l->bias);
  stack_parts(t);
  return t;
}

void refresh_step_weights(StepState& s) {
  NoGradGuard no_grad;
  for (StepLayer& l : s.layers)
    for (StepLinear* x : {&l.qkv, &l.out, &l.cross_q, &l.cross_out, &l.ff1, &l.ff2})
      for (size_t i = 0; i < x->parts.size(); ++i)
        if (x->parts[i].version() != x->versions[i] || x->parts[i].dtype() != x->w.dtype()) {
          stack_parts(*x);
          break;
        }
}

void size_step_buffers(StepState& s, int64_t B, int64_t E, int64_t F, int64_t V, DType dtype) {
  if (s.rows == B && s.dtype == dtype) return;
  const int64_t W = s.layers.at(0).qkv.w.size(0);
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
