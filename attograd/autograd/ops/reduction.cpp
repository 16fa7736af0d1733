// Reductions: forward, then the backward closure right under it.
//
// Shape legend: x is [d0, ..., dn-1]; `dims` are the reduced dims. out has
// x's shape with reduced dims removed (or kept as 1 with keepdim); grad has
// out's shape. Every backward first views grad with the reduced dims kept
// as 1, then broadcasts it back over x's shape.
//
// Higher-order gradients: sum, mean, var and max over all elements are
// differentiable ops in both modes; max along a dim scatters grad with a
// kernel, and while a graph is being created multiplies the broadcast grad by
// the (constant) one-hot mask of the maxima instead.
#include <attograd/autograd/ops/reduction.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/engine.h>
#include <attograd/autograd/kernels/add.h>
#include <attograd/autograd/ops/elementwise.h>
#include <attograd/autograd/ops/shape.h>

namespace attograd {

namespace {

// The plan for reducing `dims` of x: x is permuted so kept dims come first and
// reduced dims last, then read as a contiguous [outer, inner] block.
struct Plan {
  std::vector<bool> reduced;  // per dim of x
  Shape kept_shape;           // out's shape with keepdim
  Shape out_shape;            // out's shape as asked
  std::vector<int64_t> order; // kept dims then reduced dims
  int64_t outer = 1, inner = 1;
};

Plan make_plan(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, std::string_view op) {
  Plan p;
  const int64_t n = x.dim();
  p.reduced.assign(n, false);
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, n, op);
    if (n == 0) continue;
    if (p.reduced[w]) fail<IndexError>(op, "dim {} appears twice", d);
    p.reduced[w] = true;
  }
  for (int64_t d = 0; d < n; ++d) {
    if (p.reduced[d]) {
      p.kept_shape.push_back(1);
      p.inner *= x.shape()[d];
      if (keepdim) p.out_shape.push_back(1);
    } else {
      p.kept_shape.push_back(x.shape()[d]);
      p.out_shape.push_back(x.shape()[d]);
      p.outer *= x.shape()[d];
      p.order.push_back(d);
    }
  }
  for (int64_t d = 0; d < n; ++d)
    if (p.reduced[d]) p.order.push_back(d);
  return p;
}

// x as a contiguous [outer, inner] block in the plan's order (no graph).
Tensor blocked(const Tensor& x, const Plan& p) {
  NoGradGuard no_grad;
  return permute(x, p.order).contiguous();
}

// grad (out's shape) broadcast back to x's shape.
Tensor expand_back(const Tensor& grad, const Plan& p, const Shape& x_shape) {
  return expand(reshape(grad, p.kept_shape), x_shape);
}

std::vector<int64_t> all_dims(const Tensor& x) {
  std::vector<int64_t> d(x.dim());
  for (int64_t i = 0; i < x.dim(); ++i) d[i] = i;
  return d;
}

// True when x is contiguous and the reduced dims are its leading ones, so x
// already is a contiguous [inner, outer] block (the batch sums of bias
// gradients and sum_to): no transposed copy is needed.
bool leading_block(const Tensor& x, const Plan& p) {
  size_t k = 0;
  while (k < p.reduced.size() && p.reduced[k]) ++k;
  for (size_t d = k; d < p.reduced.size(); ++d)
    if (p.reduced[d]) return false;
  return k > 0 && k < p.reduced.size() && x.is_contiguous();
}

// Row sums of the [outer, inner] block, accumulated in double. Each output
// element is one thread's sum in a fixed order, so the pool splits the
// outputs (at least kElementwiseGrain elements read per chunk) and the numbers
// do not depend on the thread count.
Tensor reduce_sum(const Tensor& x, const Plan& p, std::string_view op) {
  Tensor out = Tensor::empty(p.out_shape, x.dtype());
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(p.inner, 1));
  if (leading_block(x, p)) {
    dispatch_float(x.dtype(), op, [&]<class T>() {
      const T* px = x.data<T>();  // [inner, outer]
      T* po = out.data<T>();
      parallel_for(p.outer, grain, [&](int64_t first, int64_t last) {
        std::vector<double> acc(last - first, 0.0);
        for (int64_t i = 0; i < p.inner; ++i) {
          const T* row = px + i * p.outer + first;
          for (int64_t o = 0; o < last - first; ++o) acc[o] += row[o];
        }
        for (int64_t o = first; o < last; ++o) po[o] = static_cast<T>(acc[o - first]);
      });
    });
    return out;
  }
  const Tensor b = blocked(x, p);
  dispatch_float(x.dtype(), op, [&]<class T>() {
    const T* px = b.data<T>();
    T* po = out.data<T>();
    parallel_for(p.outer, grain, [&](int64_t first, int64_t last) {
      for (int64_t o = first; o < last; ++o) {
        double acc = 0;
        for (int64_t i = 0; i < p.inner; ++i) acc += px[o * p.inner + i];
        po[o] = static_cast<T>(acc);
      }
    });
  });
  return out;
}

}  // namespace

// sum: out = Σ_dims x
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const Plan p = make_plan(x, dims, keepdim, "sum");
  Tensor out = reduce_sum(x, p, "sum");
  return record("sum", out, {x}, [p, sx = x.shape()](const Tensor& grad, Grads& dx) {
    // out = Σ_dims x  =>  dx = grad broadcast over the summed dims
    dx[0] += expand_back(grad, p, sx);
  });
}
Tensor sum(const Tensor& x) { return sum(x, all_dims(x)); }

// mean: out = Σ_dims x / N,  N = number of elements reduced
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const Plan p = make_plan(x, dims, keepdim, "mean");
  Tensor out = reduce_sum(x, p, "mean");
  const double n = static_cast<double>(p.inner);
  dispatch_float(out.dtype(), "mean", [&]<class T>() {
    T* po = out.data<T>();
    for (int64_t i = 0, m = out.numel(); i < m; ++i) po[i] = static_cast<T>(po[i] / n);
  });
  return record("mean", out, {x}, [p, sx = x.shape(), n](const Tensor& grad, Grads& dx) {
    // out = Σ x / N  =>  dx = grad / N, broadcast over the reduced dims
    dx[0] += expand_back(grad / n, p, sx);
  });
}
Tensor mean(const Tensor& x) { return mean(x, all_dims(x)); }

// var: out = Σ_dims (x - x̄)² / (N - correction)
Tensor var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  const Plan p = make_plan(x, dims, keepdim, "var");
  const double denom = static_cast<double>(p.inner - correction);
  const Tensor b = blocked(x, p);
  Tensor out = Tensor::empty(p.out_shape, x.dtype());
  dispatch_float(x.dtype(), "var", [&]<class T>() {
    const T* px = b.data<T>();
    T* po = out.data<T>();
    for (int64_t o = 0; o < p.outer; ++o) {
      const T* row = px + o * p.inner;
      double m = 0, ss = 0;
      for (int64_t i = 0; i < p.inner; ++i) m += row[i];
      m /= static_cast<double>(p.inner);
      for (int64_t i = 0; i < p.inner; ++i) ss += (row[i] - m) * (row[i] - m);
      po[o] = static_cast<T>(denom > 0 ? ss / denom : std::numeric_limits<double>::quiet_NaN());
    }
  });
  if (!any_requires_grad({x})) return out;
  return record("var", out, {x}, {{"x", x.detach()}}, [p, denom](const Tensor& grad, Grads& dx, const Tensor& x_) {
    // out = Σ (x - x̄)² / (N - c)  =>  dx = grad · 2 (x - x̄) / (N - c)
    // (the x̄ term's own derivative sums to zero: Σ (x - x̄) = 0)
    std::vector<int64_t> rdims;
    for (size_t d = 0; d < p.reduced.size(); ++d)
      if (p.reduced[d]) rdims.push_back(static_cast<int64_t>(d));
    const Tensor xg = dx.input(0, x_);
    const Tensor centered = xg - mean(xg, rdims, /*keepdim=*/true);
    dx[0] += mul(expand_back(grad, p, x_.shape()), centered * (2.0 / denom));
  });
}
Tensor var(const Tensor& x) { return var(x, all_dims(x)); }

// max: out, idx = max over dim (first maximum; NaN wins, as in PyTorch)
MaxResult max(const Tensor& x, int64_t dim, bool keepdim) {
  dim = wrap_dim(dim, x.dim(), "max");  // before size(): its error would name "size"
  if (x.dim() > 0 && x.size(dim) == 0)
    fail<ShapeError>("max", "cannot reduce an empty dim {} of {}", dim, shape_str(x.shape()));
  const Plan p = make_plan(x, {dim}, keepdim, "max");
  const Tensor b = blocked(x, p);
  Tensor values = Tensor::empty(p.out_shape, x.dtype());
  Tensor indices = Tensor::empty(p.out_shape, DType::i64);
  dispatch_float(x.dtype(), "max", [&]<class T>() {
    const T* px = b.data<T>();
    T* pv = values.data<T>();
    int64_t* pi = indices.data<int64_t>();
    for (int64_t o = 0; o < p.outer; ++o) {
      const T* row = px + o * p.inner;
      int64_t best = 0;
      for (int64_t i = 1; i < p.inner; ++i)
        if (!std::isnan(row[best]) && (row[i] > row[best] || std::isnan(row[i]))) best = i;
      pv[o] = row[best];
      pi[o] = best;
    }
  });
  if (any_requires_grad({x})) {
    values = record("max", values, {x}, {{"indices", indices}},
                    [p, sx = x.shape()](const Tensor& grad, Grads& dx, const Tensor& indices_) {
      // out = x[idx] along dim  =>  dx = grad scattered to idx, zero elsewhere
      if (sx.empty()) {  // a 0-d x is its own maximum (no dim to scatter along)
        dx[0] += grad;
        return;
      }
      // full = zeros of x's shape with g written at the maxima
      auto scatter = [&](const Tensor& g) {
        Tensor full = Tensor::zeros(sx, g.dtype());
        dispatch_float(g.dtype(), "max", [&]<class T>() {
          const T* pg = g.data<T>();
          const int64_t* pi = indices_.data<int64_t>();
          const Tensor perm = permute(full, p.order);  // a view: [kept..., dim]
          T* base = full.data<T>();
          int64_t o = 0;
          Shape kept(perm.shape().begin(), perm.shape().end() - 1), kst(perm.strides().begin(), perm.strides().end() - 1);
          const int64_t step = perm.strides().back();
          for_each_offset(kept, kst, 0, [&](int64_t off) { base[off + pi[o] * step] = pg[o]; ++o; });
        });
        return full;
      };
      if (dx.create_graph()) dx[0] += mul(expand_back(grad, p, sx), scatter(Tensor::ones(grad.shape(), grad.dtype())));
      else dx[0] += scatter(grad.contiguous());
    });
  }
  return {values, indices};
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  wrap_dim(dim, x.dim(), "argmax");  // so a bad dim names argmax, not max
  NoGradGuard no_grad;
  return max(x, dim, keepdim).indices;
}

// max (full): out = max over every element
Tensor max(const Tensor& x) {
  if (x.numel() == 0) fail<ShapeError>("max", "cannot reduce an empty tensor {}", shape_str(x.shape()));
  Tensor out, xd = x.detach();
  {
    NoGradGuard no_grad;
    out = max(reshape(xd, {-1}), 0).values;
  }
  return record("max", out, {x}, {{"x", xd}, {"out", out.detach()}},
                [](const Tensor& grad, Grads& dx, const Tensor& x_, const Tensor& y) {
    // out = max x  =>  dx = grad / k at each of the k elements equal to the max
    const Tensor ties = eq(x_, y.expand(x_.shape()));
    const double k = static_cast<double>(sum(where(ties, Tensor::ones({}, x_.dtype()), Tensor::zeros({}, x_.dtype()))).item());
    dx[0] += where(ties, (grad / k).expand(x_.shape()), Tensor::zeros({}, x_.dtype()));
  });
}

}  // namespace attograd
