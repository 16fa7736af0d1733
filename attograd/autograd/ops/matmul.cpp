// Matrix products: forward, then the backward closure right under it.
//
// Shape legend: M rows of out, N columns of out, K the contracted dim;
// batch... the broadcast batch dims of matmul. For linear: R flattened rows
// of x, I in features, O out features. grad has out's shape.
//
// How a product reaches BLAS without copies. Each operand's matrices are
// described by strides (MatRef): a row stride rs, a column stride cs and one
// stride per batch dim (0 where the operand is broadcast). A matrix with
// cs == 1 is a plain row-major GEMM operand (ld = rs); one with rs == 1 is a
// transposed view and goes in with the trans flag (ld = cs). Transposing an
// operand for a backward product swaps rs and cs, so it costs nothing either.
// Only other layouts (a stepped slice, an expanded matrix dim) are copied
// with contiguous(). Batch dims are looped over by offset, so broadcast ones
// are never materialised; where the strides allow, the innermost batch dims
// are folded into M or K, so [B, T, E] @ [E, F] is one GEMM of B·T rows.
//
// Higher-order gradients: while a graph is being created, both backwards
// write their formula with the differentiable ops themselves (matmul,
// transpose, reshape, sum_to) on the saved operands rejoined to the graph.
//
// Under bf16 autocast (autocast.h) both ops round their f32 operands to bf16
// (bf16_rounded), run the mixed product (gemm_bf16: f32 sums, f32 out) and
// save the bf16 copies; their backward rounds grad to bf16 too. `low` below
// is that decision, made in forward and kept by the closure; a create_graph
// formula runs under it too (its matmuls round as the forward's did).
#include <attograd/autograd/ops/matmul.h>

#include <algorithm>

#include <attograd/autograd/autocast.h>
#include <attograd/autograd/backend/blas.h>
#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/engine.h>
#include <attograd/autograd/kernels/add.h>
#include <attograd/autograd/ops/elementwise.h>
#include <attograd/autograd/settings.h>
#include <attograd/autograd/tensor_impl.h>

namespace attograd {

namespace {

// Where one operand's matrices sit in its storage.
struct MatRef {
  int64_t offset = 0;   // element offset of batch 0's [0, 0]
  Shape batch_strides;  // one per batch dim of the product; 0 where broadcast
  int64_t rs = 0, cs = 0;
  MatRef t() const { return {offset, batch_strides, cs, rs}; }  // the transposed matrices
};

// out[i] = op(a[i]) @ op(b[i]) + beta · out[i] for every batch index i, with
// a[i] [M, K], b[i] [K, N], out[i] [M, N]. Where out has batch stride 0 the
// products of those indices add up: the caller zeroes out and passes beta = 1.
struct Product {
  Shape batch;
  int64_t M = 0, N = 0, K = 0;
  MatRef a, b, out;
};

struct Layout {
  bool trans = false;
  int64_t ld = 1;
};

// The GEMM layout of a [rows, cols] matrix with strides (rs, cs); false when
// BLAS cannot read it in place. Strides of size-1 dims do not matter.
bool gemm_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, Layout& l) {
  l = {false, std::max<int64_t>(cols, 1)};
  if (rows == 0 || cols == 0) return true;  // nothing is read
  if ((cols == 1 || cs == 1) && (rows == 1 || rs >= l.ld)) {  // row-major, rows rs apart
    if (rows > 1) l.ld = rs;
    return true;
  }
  if ((rows == 1 || rs == 1) && (cols == 1 || cs >= rows)) {  // a transposed row-major matrix
    l = {true, cols > 1 ? cs : rows};
    return true;
  }
  return false;
}

bool layouts(const Product& p, Layout& la, Layout& lb, Layout& lo) {
  return gemm_layout(p.M, p.K, p.a.rs, p.a.cs, la) && gemm_layout(p.K, p.N, p.b.rs, p.b.cs, lb) &&
         gemm_layout(p.M, p.N, p.out.rs, p.out.cs, lo) && !lo.trans;
}

// A batch dim (stride t) merged with the matrix dim just inside it (size n,
// stride u) into one dim of stride u; false when they are not evenly spaced.
bool merge(int64_t t, int64_t n, int64_t& u) {
  if (n == 1) {
    u = t;
    return true;
  }
  return t == n * u;
}

// Folds the innermost batch dim (size s) into M when b is broadcast along it,
// or into K when out is (then the products sum). False when strides forbid it.
bool fold_innermost(Product& p) {
  const size_t d = p.batch.size() - 1;
  const int64_t s = p.batch[d];
  auto attempt = [&](bool into_m) {
    Product f = p;
    for (Shape* st : {&f.batch, &f.a.batch_strides, &f.b.batch_strides, &f.out.batch_strides}) st->pop_back();
    const bool ok = into_m ? p.b.batch_strides[d] == 0 && merge(p.a.batch_strides[d], p.M, f.a.rs) &&
                                 merge(p.out.batch_strides[d], p.M, f.out.rs)
                           : p.out.batch_strides[d] == 0 && merge(p.a.batch_strides[d], p.K, f.a.cs) &&
                                 merge(p.b.batch_strides[d], p.K, f.b.rs);
    (into_m ? f.M : f.K) *= s;
    Layout la, lb, lo;
    if (!ok || !layouts(f, la, lb, lo)) return false;
    p = std::move(f);
    return true;
  };
  return attempt(true) || attempt(false);
}

// Operands In are T, or BFloat16 with T = float (autocast's mixed product).
template <class T, class In>
void run(Product p, T* out, const In* a, const In* b, T beta) {
  for (size_t d = p.batch.size(); d-- > 0;) {
    if (p.batch[d] == 0) return;
    if (p.batch[d] != 1) continue;
    for (Shape* st : {&p.batch, &p.a.batch_strides, &p.b.batch_strides, &p.out.batch_strides})
      st->erase(st->begin() + static_cast<int64_t>(d));
  }
  while (!p.batch.empty() && fold_innermost(p)) {}
  Layout la, lb, lo;
  if (!layouts(p, la, lb, lo))
    fail<AutogradError>("matmul", "internal error: an operand reached GEMM with strides BLAS cannot read");
  // Every remaining batch index, carrying the three offsets.
  for_each_offset(
      p.batch,
      [&](int64_t oa, int64_t ob, int64_t oo) {
        gemm(out + oo, a + oa, b + ob, p.M, p.N, p.K, la.trans, lb.trans, la.ld, lb.ld, lo.ld, T(1), beta);
      },
      Strided{p.a.batch_strides, p.a.offset}, Strided{p.b.batch_strides, p.b.offset},
      Strided{p.out.batch_strides, p.out.offset});
}

// t [tbatch..., rows, cols] seen from a product over `batch` (tbatch broadcasts to it).
MatRef mat_ref(const Tensor& t, const Shape& batch) {
  const int64_t nd = t.dim(), lead = static_cast<int64_t>(batch.size()) - (nd - 2);
  MatRef m{t.offset(), Shape(batch.size(), 0), t.strides()[nd - 2], t.strides()[nd - 1]};
  for (int64_t i = 0; i < nd - 2; ++i)
    if (t.shape()[i] != 1) m.batch_strides[lead + i] = t.strides()[i];
  return m;
}

// t detached, copied to contiguous only when its matrices are not GEMM-able in place.
Tensor operand(const Tensor& t) {
  Layout l;
  if (gemm_layout(t.size(-2), t.size(-1), t.strides()[t.dim() - 2], t.strides()[t.dim() - 1], l)) return t.detach();
  return t.detach().contiguous();
}

Tensor with_shape(const Tensor& t, const Shape& shape) { return make_view(t, shape, contiguous_strides(shape), t.offset()); }

// op(x) @ op(y) for every index of `batch`, written into out [obatch..., M, N]
// with beta (see Product). x and y come from operand() or bf16_rounded() (then
// out is f32).
void run_product(const Tensor& x, bool tx, const Tensor& y, bool ty, const Shape& batch, const Tensor& out,
                 double beta) {
  Product p{batch, out.size(-2), out.size(-1), tx ? x.size(-2) : x.size(-1), {}, {}, mat_ref(out, batch)};
  p.a = tx ? mat_ref(x, batch).t() : mat_ref(x, batch);
  p.b = ty ? mat_ref(y, batch).t() : mat_ref(y, batch);
  if (x.dtype() == DType::bf16)
    run<float, BFloat16>(p, storage_base<float>(out), storage_base<BFloat16>(x), storage_base<BFloat16>(y),
                         static_cast<float>(beta));
  else
    dispatch_float(out.dtype(), "matmul", [&]<class T>() {
      run<T, T>(p, storage_base<T>(out), storage_base<T>(x), storage_base<T>(y), T(beta));
    });
}

// A fresh out_shape = [obatch..., M, N] tensor holding Σ op(x) @ op(y) over
// the batch indices that obatch was broadcast along. This is how a broadcast
// operand's gradient is reduced: every GEMM of the batch accumulates straight
// into the reduced buffer (zeroed, beta = 1), instead of writing a
// [batch..., M, N] tensor and shrinking it with sum_to.
Tensor product(const Tensor& x, bool tx, const Tensor& y, bool ty, const Shape& batch, const Shape& out_shape) {
  const Shape obatch(out_shape.begin(), out_shape.end() - 2);
  const bool reduces = shape_numel(obatch) != shape_numel(batch);
  const DType dt = x.dtype() == DType::bf16 ? DType::f32 : x.dtype();
  Tensor out = reduces ? Tensor::zeros(out_shape, dt) : Tensor::empty(out_shape, dt);
  run_product(x, tx, y, ty, batch, out, reduces ? 1.0 : 0.0);
  return out;
}

// grad (out's shape) with the size-1 dims of 1-d operands put back: [batch..., M, N].
Tensor unsqueeze_vec_dims(const Tensor& g, const Shape& full, bool a_vec, bool b_vec) {
  Shape st = g.strides();
  if (a_vec) st.insert(st.end() - (b_vec ? 0 : 1), 0);
  if (b_vec) st.push_back(0);
  return make_view(g, full, st, g.offset());
}

// a and b's batch dims (all but the last two) broadcast together.
Shape batch_shape(const Tensor& a2, const Tensor& b2, const Tensor& a, const Tensor& b) {
  const Shape ba(a2.shape().begin(), a2.shape().end() - 2), bb(b2.shape().begin(), b2.shape().end() - 2);
  try {
    return broadcast_shapes(ba, bb, "matmul");
  } catch (const ShapeError&) {  // the same rule, said in matmul's terms: the operands' full shapes
    fail<ShapeError>("matmul", "batch dims {} of {} and {} of {} do not broadcast; hint: batch sizes must match "
                     "or be 1, aligned from the right", shape_str(ba), shape_str(a.shape()), shape_str(bb),
                     shape_str(b.shape()));
  }
}

// An operand as the product reads it: rounded to bf16 under autocast (low).
Tensor lowered(bool low, const Tensor& t) { return low ? bf16_rounded(t) : t; }
// A saved operand as a create_graph formula reads it: widened back to f32.
Tensor widened(bool low, const Tensor& t) { return low ? t.to(DType::f32) : t; }

void check_pair(std::string_view op, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    fail<DTypeError>(op, "operands have dtypes {} {} and {} {}; hint: convert one with .to()", dtype_name(a.dtype()),
                     shape_str(a.shape()), dtype_name(b.dtype()), shape_str(b.shape()));
  if (!is_floating(a.dtype()))
    fail<DTypeError>(op, "expected floating operands (f32 or f64), got {}; hint: call .to(DType::f32)",
                     dtype_name(a.dtype()));
}

}  // namespace

// matmul: a [..., M, K] @ b [..., K, N] -> out [batch..., M, N]; a 1-d a is
// [1, K] and a 1-d b is [K, 1], with that 1 dropped from out. 2·M·N·K flops
// per batch element.
Tensor matmul(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) fail<ValueError>("matmul", "called with an undefined tensor");
  if (a.dim() == 0 || b.dim() == 0)
    fail<ShapeError>("matmul", "both operands need at least 1 dim, got shapes {} and {}; hint: use mul() to scale "
                     "by a 0-d tensor", shape_str(a.shape()), shape_str(b.shape()));
  check_pair("matmul", a, b);
  const bool low = autocast_to_bf16(a.dtype());
  const bool a_vec = a.dim() == 1, b_vec = b.dim() == 1;
  const Tensor a2 = lowered(low, operand(a_vec ? make_view(a, {1, a.size(0)}, {0, a.strides()[0]}, a.offset()) : a));  // [..., M, K]
  const Tensor b2 = lowered(low, operand(b_vec ? make_view(b, {b.size(0), 1}, {b.strides()[0], 0}, b.offset()) : b));  // [..., K, N]
  const int64_t M = a2.size(-2), K = a2.size(-1), N = b2.size(-1);
  if (b2.size(-2) != K)
    fail<ShapeError>("matmul", "shapes {} and {} cannot be multiplied: a has {} columns but b has {} rows; hint: "
                     "a [..., M, K] @ b [..., K, N], transpose an operand?", shape_str(a.shape()),
                     shape_str(b.shape()), K, b2.size(-2));
  const Shape batch = batch_shape(a2, b2, a, b);
  Shape full = batch, out_shape = batch;  // full: [batch..., M, N]; out_shape drops 1-d operands' dims
  full.insert(full.end(), {M, N});
  if (!a_vec) out_shape.push_back(M);
  if (!b_vec) out_shape.push_back(N);
  const Tensor out = with_shape(product(a2, false, b2, false, batch, full), out_shape);
  if (!any_requires_grad({a, b})) return out;
  return record("matmul", out, {a, b},
                {{"a", b.requires_grad() ? a2 : Tensor()}, {"b", a.requires_grad() ? b2 : Tensor()}},
                [sa2 = a2.shape(), sb2 = b2.shape(), sa = a.shape(), sb = b.shape(), batch, full, a_vec, b_vec,
                 low](const Tensor& grad, Grads& dx, const Tensor& a_, const Tensor& b_) {
                  // out = a @ b  =>  da = grad @ bᵀ,  db = aᵀ @ grad
                  // each summed over the batch dims its operand was broadcast along (see product()).
                  if (dx.create_graph()) {
                    const AutocastGuard as_forward(low ? Precision::bf16 : Precision::f32);
                    const Tensor G = grad.reshape(full);  // [batch..., M, N]
                    if (dx.needs(0)) {
                      const Tensor B = dx.input(1, widened(low, b_vec ? b_.reshape(sb) : b_)).reshape(sb2);
                      dx[0] += sum_to(matmul(G, B.transpose(-1, -2)), sa2).reshape(sa);
                    }
                    if (dx.needs(1)) {
                      const Tensor A = dx.input(0, widened(low, a_vec ? a_.reshape(sa) : a_)).reshape(sa2);
                      dx[1] += sum_to(matmul(A.transpose(-1, -2), G), sb2).reshape(sb);
                    }
                    return;
                  }
                  const Tensor g = lowered(low, operand(unsqueeze_vec_dims(grad, full, a_vec, b_vec)));  // [batch..., M, N]
                  if (dx.needs(0)) dx[0] += with_shape(product(g, false, b_, true, batch, sa2), sa);
                  if (dx.needs(1)) dx[1] += with_shape(product(a_, true, g, false, batch, sb2), sb);
                });
}

namespace {

// t [..., C] as an [R, C] matrix: a view when t's leading dims merge into
// one evenly spaced dim, else a contiguous copy.
Tensor rows_view(const Tensor& t) {
  const int64_t C = t.size(-1), R = shape_numel(Shape(t.shape().begin(), t.shape().end() - 1));
  int64_t rs = C, span = 1;
  bool merges = true;
  for (int64_t d = t.dim() - 2; d >= 0 && merges; --d) {
    const int64_t s = t.shape()[d];
    if (s == 1) continue;
    if (span == 1) rs = t.strides()[d];
    else merges = t.strides()[d] == span * rs;
    span *= s;
  }
  if (merges) return make_view(t, {R, C}, {rs, t.strides().back()}, t.offset());
  return with_shape(t.detach().contiguous(), {R, C});
}

}  // namespace

// linear: x [..., I], w [O, I], bias [O] -> out [..., O] = x @ wᵀ + bias.
// One GEMM: out [R, O] = x [R, I] @ wᵀ [I, O] (2·R·O·I flops), where out
// starts as bias in every row and the GEMM adds to it (beta = 1).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  if (!x.defined() || !w.defined()) fail<ValueError>("linear", "called with an undefined tensor");
  if (x.dim() == 0 || w.dim() != 2 || x.size(-1) != w.size(1))
    fail<ShapeError>("linear", "expected x [..., I] and w [O, I], got x {} and w {}; hint: w is [out_features, "
                     "in_features]", shape_str(x.shape()), shape_str(w.shape()));
  check_pair("linear", x, w);
  const int64_t O = w.size(0);
  if (bias.defined()) {
    if (bias.shape() != Shape{O})
      fail<ShapeError>("linear", "bias has shape {}, expected [{}] for w {}", shape_str(bias.shape()), O,
                       shape_str(w.shape()));
    check_pair("linear", x, bias);
  }
  const bool low = autocast_to_bf16(x.dtype());
  const Tensor wf = operand(w);                                                        // [O, I]
  const Tensor x2 = lowered(low, operand(rows_view(x))), w2 = lowered(low, wf);         // [R, I], [O, I]
  Shape out_shape = x.shape();
  out_shape.back() = O;
  const Tensor out = Tensor::empty(out_shape, x.dtype());
  const Tensor out2 = with_shape(out, {x2.size(0), O});  // [R, O]
  if (bias.defined()) {
    dispatch_float(x.dtype(), "linear", [&]<class T>() {
      // One contiguous copy of the bias row, then a memcpy per output row, the rows across the pool.
      const T* pb = storage_base<T>(bias) + bias.offset();
      const int64_t bs = bias.strides()[0];
      T* po = out.data<T>();
      const int64_t R = x2.size(0);
      if (R == 0) return;
      for (int64_t o = 0; o < O; ++o) po[o] = pb[o * bs];
      parallel_for(R - 1, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(O, 1)),
                   [&](int64_t first, int64_t last) {
                     for (int64_t r = first + 1; r <= last; ++r) std::copy(po, po + O, po + r * O);
                   });
    });
  }
  run_product(x2, false, w2, true, {}, out2, bias.defined() ? 1.0 : 0.0);
  if (!any_requires_grad({x, w, bias})) return out;
  // Under autocast backward keeps x's bf16 copy (half of x's bytes), but w itself, not its copy: a weight
  // outlives the step anyway, so a saved copy would only add bytes; backward rounds it again (the same bits,
  // unless w was written in between: backward reads w as it is then, as it does without autocast).
  const Tensor w_saved = low ? wf : w2;
  return record("linear", out, {x, w, bias},
                {{"x", w.requires_grad() ? x2 : Tensor()}, {"w", x.requires_grad() ? w_saved : Tensor()}},
                [sx = x.shape(), sw = w.shape(), O, low](const Tensor& grad, Grads& dx, const Tensor& x_,
                                                          const Tensor& w_) {
                  // out = x @ wᵀ + b  =>  dx = grad @ w,  dw = gradᵀ @ x,  db = Σ_rows grad
                  if (dx.create_graph()) {
                    const AutocastGuard as_forward(low ? Precision::bf16 : Precision::f32);
                    if (dx.needs(0)) dx[0] += matmul(grad, dx.input(1, w_));
                    if (dx.needs(1)) {
                      const Tensor X = dx.input(0, widened(low, x_.reshape(sx))).reshape({-1, sw[1]});  // [R, I]
                      dx[1] += matmul(grad.reshape({-1, O}).transpose(0, 1), X);
                    }
                    if (dx.needs(2)) dx[2] += sum_to(grad, {O});
                    return;
                  }
                  const Tensor g = lowered(low, operand(rows_view(grad)));  // [R, O]
                  if (dx.needs(0))
                    dx[0] += with_shape(product(g, false, lowered(low, w_), false, {}, {g.size(0), sw[1]}), sx);
                  if (dx.needs(1)) dx[1] += product(g, true, x_, false, {}, sw);
                  if (dx.needs(2)) dx[2] += sum_to(grad, {O});
                });
}

}  // namespace attograd
