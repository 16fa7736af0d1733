// Softmax and log-softmax: forward, then the backward closure right under it.
//
// Shape legend: x is [d0, ..., dk-1] and `dim` has size n. The ops see a
// contiguous x as an [outer, n, inner] block: row (o, i) is x[o, :, i], n
// elements `inner` apart, and hand each row to a row kernel of
// attograd/autograd/kernels/rows.h (which also defines the fully masked row). The last
// dim (inner == 1) is the contiguous fast path; any other dim walks its rows
// with stride inner.
// Both ops save only their output y [x's shape].
//
// Higher-order gradients: each op has a double-backward formula of its own,
// its backward formula written in differentiable ops (sum, mul, sub, exp) on
// the output y rejoined to the graph, used while a graph is being created.
#include <attograd/autograd/ops/softmax.h>

#include <cmath>

#include <attograd/autograd/engine.h>
#include <attograd/autograd/kernels/rows.h>
#include <attograd/autograd/ops/elementwise.h>
#include <attograd/autograd/ops/reduction.h>

namespace attograd {

namespace {

struct Rows {
  int64_t outer = 1, n = 1, inner = 1;
};

Rows rows_along(const Shape& shape, int64_t dim) {
  Rows r;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < dim) r.outer *= shape[d];
    else if (d == dim) r.n = shape[d];
    else r.inner *= shape[d];
  }
  return r;
}

// Calls f(base) for every row; the row's elements sit at base + k * inner.
template <class F>
void for_each_row(const Rows& r, F f) {
  for (int64_t o = 0; o < r.outer; ++o)
    for (int64_t i = 0; i < r.inner; ++i) f(o * r.n * r.inner + i);
}

// One kernel from attograd/autograd/kernels/rows.h applied to every row:
// row_kernel(out_row, in_row, n, stride). out, in: [outer, n, inner] contiguous.
template <class T, class RowKernel>
void each_row(T* out, const T* in, const Rows& r, RowKernel row_kernel) {
  for_each_row(r, [&](int64_t base) { row_kernel(out + base, in + base, r.n, r.inner); });
}

// The shared backward plumbing: grad made contiguous, a fresh dx of y's shape,
// row_kernel(dx_row, g_row, y_row, n, stride) on every row.
template <class RowKernel>
Tensor rows_backward(std::string_view op, const Tensor& grad, const Tensor& y, const Rows& r, RowKernel row_kernel) {
  const Tensor g = grad.contiguous();
  Tensor out = Tensor::empty(y.shape(), y.dtype());
  dispatch_float(y.dtype(), op, [&]<class T>() {
    T* dx = out.data<T>();
    const T *pg = g.data<T>(), *py = y.data<T>();
    for_each_row(r, [&](int64_t base) { row_kernel(dx + base, pg + base, py + base, r.n, r.inner); });
  });
  return out;
}

}  // namespace

// softmax: out[.., k, ..] = exp(x_k − max) / Σ_j exp(x_j − max) along dim
Tensor softmax(const Tensor& x, int64_t dim) {
  dim = wrap_dim(dim, x.dim(), "softmax");
  const Rows r = rows_along(x.shape(), dim);
  const Tensor xc = contiguous_values(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), "softmax", [&]<class T>() { each_row(out.data<T>(), xc.data<T>(), r, softmax_row<T>); });
  return record("softmax", out, {x}, {{"out", out.detach()}}, [r, dim](const Tensor& grad, Grads& dx, const Tensor& y) {
    // out = y = softmax(x)  =>  dx = y ⊙ (grad − Σ grad ⊙ y)   (a masked row has y = 0: dx = 0)
    if (dx.create_graph()) {
      const Tensor yy = dx.output(y);
      dx[0] += mul(yy, grad - sum(grad * yy, {dim}, /*keepdim=*/true));
      return;
    }
    dx[0] += rows_backward("softmax", grad, y, r, []<class T>(T* d, const T* g, const T* yy, int64_t n, int64_t s) {
      softmax_backward_row<T>(d, g, yy, n, s);
    });
  });
}

// log_softmax: out[.., k, ..] = (x_k − max) − log Σ_j exp(x_j − max) along dim
Tensor log_softmax(const Tensor& x, int64_t dim) {
  dim = wrap_dim(dim, x.dim(), "log_softmax");
  const Rows r = rows_along(x.shape(), dim);
  const Tensor xc = contiguous_values(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), "log_softmax", [&]<class T>() {
    each_row(out.data<T>(), xc.data<T>(), r, log_softmax_row<T>);
  });
  return record("log_softmax", out, {x}, {{"out", out.detach()}},
                [r, dim](const Tensor& grad, Grads& dx, const Tensor& y) {
    // out = y = log_softmax(x)  =>  dx = grad − exp(y) Σ grad   (a masked row: dx = 0, our choice)
    if (dx.create_graph()) {
      const Tensor p = exp(dx.output(y));
      const Tensor masked_row = eq(sum(exp(y), {dim}, true), Tensor::zeros({}, y.dtype()));  // constant
      dx[0] += masked_fill(grad - p * sum(grad, {dim}, /*keepdim=*/true), masked_row, 0.0);
      return;
    }
    dx[0] += rows_backward("log_softmax", grad, y, r, []<class T>(T* d, const T* g, const T* yy, int64_t n, int64_t s) {
      log_softmax_backward_row<T>(d, g, yy, n, s);
    });
  });
}

}  // namespace attograd
