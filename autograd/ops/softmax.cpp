// Softmax and log-softmax: forward, then the backward closure right under it.
//
// Shape legend: x is [d0, ..., dk-1] and `dim` has size n. The kernels see a
// contiguous x as an [outer, n, inner] block: row (o, i) is x[o, :, i], n
// elements `inner` apart. The last dim (inner == 1) is the contiguous fast
// path; any other dim walks its rows with stride inner.
// Both ops save only their output y [x's shape].
#include "autograd/ops/softmax.h"

#include <cmath>

#include "autograd/node.h"

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

// x's values in a contiguous buffer, without recording the copy.
Tensor contiguous_values(const Tensor& x) {
  NoGradGuard no_grad;
  return x.contiguous();
}

// out = softmax (kLog false) or log_softmax (kLog true) of each row of x.
// out, x: [outer, n, inner] contiguous
template <class T, bool kLog>
void softmax_rows(T* out, const T* x, const Rows& r) {
  const int64_t s = r.inner;
  for_each_row(r, [&](int64_t base) {
    const T* xr = x + base;
    T* yr = out + base;
    T m = -INFINITY;
    bool masked = true;  // every input is -inf (a NaN makes the row NaN instead)
    for (int64_t k = 0; k < r.n; ++k) {
      const T v = xr[k * s];
      m = v > m ? v : m;
      masked = masked && v == -INFINITY;
    }
    if (masked) {
      for (int64_t k = 0; k < r.n; ++k) yr[k * s] = kLog ? T(-INFINITY) : T(0);
      return;
    }
    double total = 0;
    for (int64_t k = 0; k < r.n; ++k) {
      const T e = std::exp(xr[k * s] - m);
      if constexpr (!kLog) yr[k * s] = e;
      total += e;
    }
    if constexpr (kLog) {
      const T log_total = static_cast<T>(std::log(total));
      for (int64_t k = 0; k < r.n; ++k) yr[k * s] = xr[k * s] - m - log_total;
    } else {
      const T inv = static_cast<T>(1.0 / total);
      for (int64_t k = 0; k < r.n; ++k) yr[k * s] *= inv;
    }
  });
}

// dx, g, y: [outer, n, inner] contiguous
template <class T>
void softmax_backward_rows(T* dx, const T* g, const T* y, const Rows& r) {
  const int64_t s = r.inner;
  for_each_row(r, [&](int64_t base) {
    double dot = 0;
    for (int64_t k = 0; k < r.n; ++k) dot += static_cast<double>(g[base + k * s]) * y[base + k * s];
    const T d = static_cast<T>(dot);
    for (int64_t k = 0; k < r.n; ++k) dx[base + k * s] = y[base + k * s] * (g[base + k * s] - d);
  });
}

// dx, g, y: [outer, n, inner] contiguous
template <class T>
void log_softmax_backward_rows(T* dx, const T* g, const T* y, const Rows& r) {
  const int64_t s = r.inner;
  for_each_row(r, [&](int64_t base) {
    double total = 0;
    bool masked = true;
    for (int64_t k = 0; k < r.n; ++k) {
      total += g[base + k * s];
      masked = masked && y[base + k * s] == -INFINITY;
    }
    const T t = static_cast<T>(total);
    for (int64_t k = 0; k < r.n; ++k)
      dx[base + k * s] = masked ? T(0) : g[base + k * s] - std::exp(y[base + k * s]) * t;
  });
}

// The shared backward plumbing: grad made contiguous, a fresh dx of y's shape.
template <class Kernel>
Tensor rows_backward(std::string_view op, const Tensor& grad, const Tensor& y, const Rows& r, Kernel kernel) {
  const Tensor g = grad.contiguous();
  Tensor out = Tensor::empty(y.shape(), y.dtype());
  dispatch_float(y.dtype(), op, [&]<class T>() { kernel(out.data<T>(), g.data<T>(), y.data<T>(), r); });
  return out;
}

}  // namespace

// softmax: out[.., k, ..] = exp(x_k − max) / Σ_j exp(x_j − max) along dim
Tensor softmax(const Tensor& x, int64_t dim) {
  const Rows r = rows_along(x.shape(), wrap_dim(dim, x.dim(), "softmax"));
  const Tensor xc = contiguous_values(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), "softmax", [&]<class T>() { softmax_rows<T, false>(out.data<T>(), xc.data<T>(), r); });
  return record("softmax", out, {x}, [r, y = out.detach()](const Tensor& grad, Grads& dx) {
    // out = y = softmax(x)  =>  dx = y ⊙ (grad − Σ grad ⊙ y)   (a masked row has y = 0: dx = 0)
    dx[0] += rows_backward("softmax", grad, y, r, []<class T>(T* d, const T* g, const T* yy, const Rows& rr) {
      softmax_backward_rows<T>(d, g, yy, rr);
    });
  });
}

// log_softmax: out[.., k, ..] = (x_k − max) − log Σ_j exp(x_j − max) along dim
Tensor log_softmax(const Tensor& x, int64_t dim) {
  const Rows r = rows_along(x.shape(), wrap_dim(dim, x.dim(), "log_softmax"));
  const Tensor xc = contiguous_values(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), "log_softmax", [&]<class T>() { softmax_rows<T, true>(out.data<T>(), xc.data<T>(), r); });
  return record("log_softmax", out, {x}, [r, y = out.detach()](const Tensor& grad, Grads& dx) {
    // out = y = log_softmax(x)  =>  dx = grad − exp(y) Σ grad   (a masked row: dx = 0, our choice)
    dx[0] += rows_backward("log_softmax", grad, y, r, []<class T>(T* d, const T* g, const T* yy, const Rows& rr) {
      log_softmax_backward_rows<T>(d, g, yy, rr);
    });
  });
}

}  // namespace attograd
