// Layer norm: forward, then the backward closure right under it.
//
// Shape legend: x [..., *normalized_shape] is read as a contiguous [R, E]
// block: R rows, E = product of normalized_shape. weight, bias [E] (stored as
// [*normalized_shape]); mean, rstd [R]. grad and dx have x's shape.
//
// What the fused op saves: mean [R], rstd [R], weight and bias, and one [R, E]
// tensor that gives x̂ back, as memory_options().layer_norm (attograd/autograd/memory.h)
// chooses:
//   output (default): y, which the op after it (a Linear) keeps anyway, so the
//           input x is not held only for this op: in a pre-LN block that is
//           the residual stream, freed as soon as the next residual add has
//           read it. Backward takes x̂ = (y − b) / w, within a few ulps of
//           the forward's x̂ while |b| ≤ 16·|w| and w ≠ 0 everywhere; a call
//           whose weight and bias break that keeps x instead.
//   input:  x (a view when already contiguous); backward recomputes
//           x̂ = (x − mean) · rstd exactly as the forward did.
// Neither keeps an [R, E] x̂ buffer of its own.
//
// Higher-order gradients: while a graph is being created, the fused op falls
// back to its composite twin (layer_norm_composite, differentiated by
// twin_backward), since its own backward is a row kernel. Saving y, the twin
// runs on x rebuilt as x̂ / rstd + mean (to float rounding).
#include <attograd/autograd/ops/layer_norm.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/engine.h>
#include <attograd/autograd/kernels/rows.h>
#include <attograd/autograd/memory.h>
#include <attograd/autograd/ops/elementwise.h>
#include <attograd/autograd/ops/reduction.h>

namespace attograd {

namespace {

struct NormRows {
  int64_t rows = 1, e = 1;
};

NormRows check_layer_norm(std::string_view op, const Tensor& x, const Shape& ns, const Tensor& weight,
                          const Tensor& bias, double eps) {
  const size_t k = ns.size();
  if (k == 0) fail<ShapeError>(op, "normalized_shape must name at least one dim, got []");
  if (x.shape().size() < k || !std::equal(ns.begin(), ns.end(), x.shape().end() - static_cast<int64_t>(k)))
    fail<ShapeError>(op, "input {} does not end with normalized_shape {}; hint: layer_norm normalizes the last "
                     "dims, e.g. x [B, T, E] with normalized_shape [E]", shape_str(x.shape()), shape_str(ns));
  for (const auto& [p, name] : {std::pair{weight, "weight"}, std::pair{bias, "bias"}}) {
    if (!p.defined()) continue;
    if (p.shape() != ns)
      fail<ShapeError>(op, "{} has shape {}, expected normalized_shape {} (input {})", name, shape_str(p.shape()),
                       shape_str(ns), shape_str(x.shape()));
    if (p.dtype() != x.dtype())
      fail<DTypeError>(op, "{} is {} but the input is {}; hint: convert with .to()", name, dtype_name(p.dtype()),
                       dtype_name(x.dtype()));
  }
  if (!(eps >= 0)) fail<ValueError>(op, "eps must be >= 0, got {}", eps);
  NormRows r;
  r.e = shape_numel(ns);
  r.rows = r.e == 0 ? 0 : x.numel() / r.e;
  return r;
}

template <class T>
T* data_or_null(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }

// out [R, E] = x̂ · w + b,  x̂ = (x − mean) · rstd,  rstd = 1 / √(var + eps);  mean, rstd: [R]
// w, b: [E] or null. Rows are independent: the pool takes them in ranges.
template <class T>
void layer_norm_rows(T* out, T* mean, T* rstd, const T* x, const T* w, const T* b, const NormRows& r, double eps) {
  const double inv_e = 1.0 / static_cast<double>(r.e);
  parallel_for(r.rows, 16, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const T* xr = x + i * r.e;
      T* yr = out + i * r.e;
      const double m = lane_sum<double>(r.e, [&](int64_t k) { return xr[k]; }) * inv_e;
      const double ss = lane_sum<double>(r.e, [&](int64_t k) { return (xr[k] - m) * (xr[k] - m); });
      const T tm = static_cast<T>(m), trs = static_cast<T>(1.0 / std::sqrt(ss * inv_e + eps));
      for (int64_t k = 0; k < r.e; ++k) yr[k] = (xr[k] - tm) * trs;
      if (w)
        for (int64_t k = 0; k < r.e; ++k) yr[k] *= w[k];
      if (b)
        for (int64_t k = 0; k < r.e; ++k) yr[k] += b[k];
      mean[i] = tm;
      rstd[i] = trs;
    }
  });
}

// Whether x̂ = (y − b) / w comes back from y within a few ulps: every |w_k|
// is a normal number 2^24 away from both ends of T's range (so x̂·w neither
// underflows nor overflows for |x̂| up to 2^24) and |b_k| ≤ 16·|w_k| (w, b
// null: 1 and 0). y's rounding error, about ulp(|x̂·w| + |b|), becomes
// ulp(|x̂| + |b / w|) in x̂: at most 4 bits lost where x̂ is of order 1.
template <class T>
bool output_gives_input(const T* w, const T* b, int64_t e) {
  constexpr T lo = std::numeric_limits<T>::min() * T(16777216), hi = std::numeric_limits<T>::max() / T(16777216);
  for (int64_t k = 0; k < e; ++k) {
    const T wk = w ? std::abs(w[k]) : T(1), bk = b ? std::abs(b[k]) : T(0);
    if (!(wk >= lo && wk <= hi) || !(bk <= 16 * wk)) return false;
  }
  return true;
}

// x̂ [E] of row i from the saved input, as the forward made it: (x − mean) · rstd
template <class T>
struct FromInput {
  const T *x, *mean, *rstd;
  int64_t e;
  void operator()(int64_t i, T* xh) const {
    const T* xr = x + i * e;
    const T m = mean[i], rs = rstd[i];
    for (int64_t k = 0; k < e; ++k) xh[k] = (xr[k] - m) * rs;
  }
};

// x̂ [E] of row i from the saved output: (y − b) / w   (w, b null: 1 and 0)
template <class T>
struct FromOutput {
  const T *y, *w, *b;
  int64_t e;
  void operator()(int64_t i, T* xh) const {
    const T* yr = y + i * e;
    for (int64_t k = 0; k < e; ++k) xh[k] = b ? yr[k] - b[k] : yr[k];
    if (w)
      for (int64_t k = 0; k < e; ++k) xh[k] /= w[k];
  }
};

// x [R, E] = x̂ / rstd + mean, x̂ from the saved output: the input the
// composite twin runs on when the op kept y.
template <class T>
void input_from_output(T* x, const FromOutput<T>& xhat, const T* mean, const T* rstd, const NormRows& r) {
  for (int64_t i = 0; i < r.rows; ++i) {
    T* xr = x + i * r.e;
    xhat(i, xr);
    for (int64_t k = 0; k < r.e; ++k) xr[k] = xr[k] / rstd[i] + mean[i];
  }
}

// Rows per block of the dw/db partial sums: a fixed split, so the sums do not
// depend on the thread count (see attograd/autograd/backend/threads.h).
constexpr int64_t kNormBlock = 32;

// dx [R, E] (or null), dw, db [E] (or null, accumulated in double) from g [R, E]; see layer_norm's backward.
// xhat(i, xh) writes row i's x̂ [E] (FromInput or FromOutput).
template <class T, class XHat>
void layer_norm_backward_rows(T* dx, double* dw, double* db, const T* g, const XHat& xhat, const T* rstd, const T* w,
                              const NormRows& r) {
  const double inv_e = 1.0 / static_cast<double>(r.e);
  const int64_t blocks = block_count(r.rows, kNormBlock);
  // partial[k] holds block k's [dw | db] sums, [2E] doubles.
  std::vector<double> partial((dw || db) ? static_cast<size_t>(blocks * 2 * r.e) : 0);
  parallel_for(blocks, 1, [&](int64_t first_block, int64_t last_block) {
    std::vector<T> xh(static_cast<size_t>(r.e)), dxh(static_cast<size_t>(r.e));
    for (int64_t blk = first_block; blk < last_block; ++blk) {
      double* pdw = partial.empty() ? nullptr : partial.data() + blk * 2 * r.e;
      double* pdb = pdw ? pdw + r.e : nullptr;
      for (int64_t i = blk * kNormBlock, end = std::min(r.rows, i + kNormBlock); i < end; ++i) {
        const T* gr = g + i * r.e;
        const T rs = rstd[i];
        xhat(i, xh.data());
        for (int64_t k = 0; k < r.e; ++k) dxh[k] = w ? gr[k] * w[k] : gr[k];
        if (dw)
          for (int64_t k = 0; k < r.e; ++k) pdw[k] += static_cast<double>(gr[k]) * xh[k];
        if (db)
          for (int64_t k = 0; k < r.e; ++k) pdb[k] += gr[k];
        if (!dx) continue;
        const T a = static_cast<T>(lane_sum<double>(r.e, [&](int64_t k) { return dxh[k]; }) * inv_e);
        const T c = static_cast<T>(
            lane_sum<double>(r.e, [&](int64_t k) { return static_cast<double>(dxh[k]) * xh[k]; }) * inv_e);
        T* dr = dx + i * r.e;
        for (int64_t k = 0; k < r.e; ++k) dr[k] = rs * (dxh[k] - a - xh[k] * c);
      }
    }
  });
  for (int64_t blk = 0; !partial.empty() && blk < blocks; ++blk) {  // in block order
    const double* pdw = partial.data() + blk * 2 * r.e;
    if (dw)
      for (int64_t k = 0; k < r.e; ++k) dw[k] += pdw[k];
    if (db)
      for (int64_t k = 0; k < r.e; ++k) db[k] += pdw[r.e + k];
  }
}

}  // namespace

// layer_norm: x [R, E] -> out [R, E];  out = x̂ · w + b,  x̂ = (x − mean) · rstd
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  constexpr std::string_view op = "layer_norm";
  const NormRows r = check_layer_norm(op, x, normalized_shape, weight, bias, eps);
  const Tensor xc = contiguous_values(x), wc = contiguous_values(weight), bc = contiguous_values(bias);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  Tensor mean = Tensor::empty({r.rows}, x.dtype()), rstd = Tensor::empty({r.rows}, x.dtype());
  dispatch_float(x.dtype(), op, [&]<class T>() {
    layer_norm_rows<T>(out.data<T>(), mean.data<T>(), rstd.data<T>(), xc.data<T>(), data_or_null<T>(wc),
                       data_or_null<T>(bc), r, eps);
  });
  if (!any_requires_grad({x, weight, bias})) return out;
  const bool keep_out = memory_options().layer_norm == LayerNormSaves::output &&
                        dispatch_float(x.dtype(), op, [&]<class T>() {
                          return output_gives_input<T>(data_or_null<T>(wc), data_or_null<T>(bc), r.e);
                        });
  return record(op, out, {x, weight, bias},
                {{"x", keep_out ? Tensor() : xc},
                 {"out", keep_out ? out.detach() : Tensor()},
                 {"weight", wc},
                 {"bias", bc},
                 {"mean", mean},
                 {"rstd", rstd}},
                [r, eps, ns = normalized_shape](const Tensor& grad, Grads& dx, const Tensor& x_, const Tensor& y_,
                                                const Tensor& w_, const Tensor& b_, const Tensor& mean_,
                                                const Tensor& rstd_) {
    // Per row, with x̂ = (x − μ)·r, r = 1/√(σ² + eps), σ² = mean((x − μ)²), y = x̂ ⊙ w + b:
    //   ∂x̂_j/∂x_k = r·(δ_jk − 1/E − x̂_j x̂_k / E)     (∂r/∂x_k = −r³ (x_k − μ) / E)
    //   dx̂ = grad ⊙ w
    //   dx = Σ_j dx̂_j ∂x̂_j/∂x = r · (dx̂ − mean(dx̂) − x̂ ⊙ mean(dx̂ ⊙ x̂))
    //   dw = Σ_rows grad ⊙ x̂,   db = Σ_rows grad
    //   saving y:  x̂ = (y − b) / w   (y = x̂ ⊙ w + b)
    const DType dt = grad.dtype();
    if (dx.create_graph()) {
      Tensor x_in = x_;
      if (!x_in.defined()) {
        x_in = Tensor::empty(y_.shape(), dt);
        dispatch_float(dt, "layer_norm", [&]<class T>() {
          input_from_output<T>(x_in.data<T>(), {y_.data<T>(), data_or_null<T>(w_), data_or_null<T>(b_), r.e},
                               mean_.data<T>(), rstd_.data<T>(), r);
        });
      }
      twin_backward(dx, grad, {dx.input(0, x_in), dx.input(1, w_), dx.input(2, b_)},
                    [&](const std::vector<Tensor>& in) { return layer_norm_composite(in[0], ns, in[1], in[2], eps); });
      return;
    }
    const Tensor g = grad.contiguous();
    Tensor d = dx.needs(0) ? Tensor::empty(grad.shape(), dt) : Tensor();
    std::vector<double> dw(dx.needs(1) ? r.e : 0), db(dx.needs(2) ? r.e : 0);
    dispatch_float(dt, "layer_norm", [&]<class T>() {
      const auto run = [&](const auto& xhat) {
        layer_norm_backward_rows<T>(data_or_null<T>(d), dw.empty() ? nullptr : dw.data(),
                                    db.empty() ? nullptr : db.data(), g.data<T>(), xhat, rstd_.data<T>(),
                                    data_or_null<T>(w_), r);
      };
      if (x_.defined()) run(FromInput<T>{x_.data<T>(), mean_.data<T>(), rstd_.data<T>(), r.e});
      else run(FromOutput<T>{y_.data<T>(), data_or_null<T>(w_), data_or_null<T>(b_), r.e});
    });
    if (dx.needs(0)) dx[0] += d;
    if (dx.needs(1)) dx[1] += Tensor::from_vector(dw, ns, dt);
    if (dx.needs(2)) dx[2] += Tensor::from_vector(db, ns, dt);
  });
}

// layer_norm_composite: the same op recorded as primitives.
//   y = (x − mean(x)) / √(var(x, correction 0) + eps) ⊙ w + b   over the last k dims
Tensor layer_norm_composite(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                            double eps) {
  check_layer_norm("layer_norm_composite", x, normalized_shape, weight, bias, eps);
  std::vector<int64_t> dims;
  for (int64_t k = -static_cast<int64_t>(normalized_shape.size()); k < 0; ++k) dims.push_back(k);
  const Tensor centered = x - mean(x, dims, /*keepdim=*/true);
  Tensor y = centered / sqrt(var(x, dims, /*correction=*/0, /*keepdim=*/true) + eps);
  if (weight.defined()) y = y * weight;
  if (bias.defined()) y = y + bias;
  return y;
}

}  // namespace attograd
