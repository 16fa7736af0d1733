// Losses: forward, then the backward closure right under it.
//
// Shape legend: N rows, V classes. logits / logp [*, V] are read as a
// contiguous [N, V] block (N = product of *), targets [*] i64 as [N].
// grad is [] for mean and sum, [*] for none. g_i = dL/dloss_i is grad / n_valid
// (mean), grad (sum) or grad[i] (none); rows whose target is ignore_index get 0.
//
// Higher-order gradients, while a graph is being created: cross_entropy falls
// back to its composite twin (cross_entropy_composite, through twin_backward);
// nll_loss multiplies grad by its constant one-hot rows; mse_loss writes its
// formula in differentiable ops on its inputs.
#include <attograd/autograd/ops/loss.h>

#include <cmath>

#include <attograd/autograd/engine.h>
#include <attograd/autograd/kernels/rows.h>
#include <attograd/autograd/ops/elementwise.h>
#include <attograd/autograd/ops/map_zip.h>
#include <attograd/autograd/ops/reduction.h>
#include <attograd/autograd/ops/softmax.h>

namespace attograd {

namespace {

struct ClassRows {
  int64_t n = 1, v = 1;
  Shape row_shape;  // [*], the targets' shape
};

// Checks logits-like x [*, V] against targets [*] i64.
ClassRows check_class_inputs(std::string_view op, const Tensor& x, const Tensor& targets) {
  if (!is_floating(x.dtype()))
    fail<DTypeError>(op, "input must be f32 or f64, got {} {}", dtype_name(x.dtype()), shape_str(x.shape()));
  if (targets.dtype() != DType::i64)
    fail<DTypeError>(op, "targets must be i64 class indices, got {} {}; hint: build them with "
                     "Tensor::from_vector(std::vector<int64_t>) or .to(DType::i64)",
                     dtype_name(targets.dtype()), shape_str(targets.shape()));
  if (x.dim() == 0 || x.shape().back() == 0)
    fail<ShapeError>(op, "expected input [*, V] with V > 0 classes in the last dim, got {}", shape_str(x.shape()));
  ClassRows r;
  r.row_shape.assign(x.shape().begin(), x.shape().end() - 1);
  if (targets.shape() != r.row_shape)
    fail<ShapeError>(op, "input {} (classes in the last dim) needs targets {}, got {}; hint: one class index "
                     "per row, e.g. logits [B, T, V] with targets [B, T]",
                     shape_str(x.shape()), shape_str(r.row_shape), shape_str(targets.shape()));
  r.n = shape_numel(r.row_shape);
  r.v = x.shape().back();
  return r;
}

// The number of rows whose target is not ignore_index; any other target
// outside [0, V) is an IndexError.
int64_t count_valid(std::string_view op, const int64_t* t, const ClassRows& r, int64_t ignore) {
  int64_t valid = 0;
  for (int64_t i = 0; i < r.n; ++i) {
    if (t[i] == ignore) continue;
    if (t[i] < 0 || t[i] >= r.v)
      fail<IndexError>(op, "target {} (row {}) is out of range for V = {} classes; hint: targets must be in "
                       "[0, {}) or equal ignore_index ({})", t[i], i, r.v, r.v, ignore);
    ++valid;
  }
  return valid;
}

// Per-row losses [N] -> out: [] for mean and sum, [*] for none.
// Mean over zero valid rows is 0 (our choice; PyTorch gives NaN).
Tensor reduce_rows(const std::vector<double>& loss, Reduction red, int64_t n_valid, const ClassRows& r, DType dtype) {
  if (red == Reduction::none) return Tensor::from_vector(loss, r.row_shape, dtype);
  double total = 0;
  for (double l : loss) total += l;
  if (red == Reduction::mean) total = n_valid > 0 ? total / static_cast<double>(n_valid) : 0.0;
  return Tensor::scalar(total, dtype);
}

// g_i = dL/dloss_i for every row (ignored rows are skipped by the callers).
std::vector<double> row_grads(const Tensor& grad, Reduction red, int64_t n, int64_t n_valid) {
  if (red == Reduction::none) return grad.to_vector<double>();
  double g = grad.item();
  if (red == Reduction::mean) g = n_valid > 0 ? g / static_cast<double>(n_valid) : 0.0;
  return std::vector<double>(n, g);
}

// loss [N], lse [N] for x [N, V]:
//   lse = log Σ_v exp(x_v),  loss = (1 − ε)(lse − x_t) + ε(lse − mean_v x_v);  ignored rows: 0
template <class T>
void cross_entropy_rows(double* loss, T* lse, const T* x, const int64_t* t, const ClassRows& r, int64_t ignore,
                        double eps) {
  for (int64_t i = 0; i < r.n; ++i) {
    loss[i] = 0;
    lse[i] = 0;
    if (t[i] == ignore) continue;
    const T* row = x + i * r.v;
    const double l = logsumexp_row(row, r.v);
    loss[i] = (1 - eps) * (l - row[t[i]]);
    if (eps > 0) {  // skipped at ε = 0 so that a -inf logit does not give inf · 0
      double mean_x = 0;
      for (int64_t k = 0; k < r.v; ++k) mean_x += row[k];
      loss[i] += eps * (l - mean_x / static_cast<double>(r.v));
    }
    lse[i] = static_cast<T>(l);
  }
}

// dx [N, V] = g_i (p_iv − (1 − ε)[v = t_i] − ε / V),  p_iv = exp(x_iv − lse_i);  ignored rows: 0
template <class T>
void cross_entropy_backward_rows(T* dx, const T* x, const T* lse, const int64_t* t, const double* g,
                                 const ClassRows& r, int64_t ignore, double eps) {
  const double off = eps / static_cast<double>(r.v);
  for (int64_t i = 0; i < r.n; ++i) {
    T* d = dx + i * r.v;
    if (t[i] == ignore) {
      for (int64_t k = 0; k < r.v; ++k) d[k] = 0;
      continue;
    }
    const T* row = x + i * r.v;
    const T gi = static_cast<T>(g[i]), l = lse[i], shift = static_cast<T>(off);
    exp_shifted_row(d, row, r.v, l);
    for (int64_t k = 0; k < r.v; ++k) d[k] = gi * (d[k] - shift);
    d[t[i]] -= gi * static_cast<T>(1 - eps);
  }
}

}  // namespace

// cross_entropy: logits [*, V], targets [*] -> loss [] or [*]
//   loss_i = (1 − ε)(lse_i − x_i,t) + ε(lse_i − mean_v x_iv),  lse_i = log Σ_v exp(x_iv)
// Saves the logits (a view when already contiguous: no copy), lse [N] and targets [N];
// backward recomputes the probabilities from them instead of keeping an [N, V] buffer.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& opt) {
  constexpr std::string_view op = "cross_entropy";
  const ClassRows r = check_class_inputs(op, logits, targets);
  const double eps = opt.label_smoothing;
  if (!(eps >= 0 && eps <= 1)) fail<ValueError>(op, "label_smoothing must be in [0, 1], got {}", eps);
  const Tensor x = contiguous_values(logits).detach();  // [N, V] block
  const Tensor t = targets.contiguous();                // [N]
  const int64_t n_valid = count_valid(op, t.data<int64_t>(), r, opt.ignore_index);
  std::vector<double> loss(r.n);
  Tensor lse = Tensor::empty({r.n}, logits.dtype());
  dispatch_float(logits.dtype(), op, [&]<class T>() {
    cross_entropy_rows<T>(loss.data(), lse.data<T>(), x.data<T>(), t.data<int64_t>(), r, opt.ignore_index, eps);
  });
  Tensor out = reduce_rows(loss, opt.reduction, n_valid, r, logits.dtype());
  if (!any_requires_grad({logits})) return out;
  return record(op, out, {logits}, {{"logits", x}, {"lse", lse}, {"targets", t}},
                [r, opt, n_valid, shape = logits.shape()](const Tensor& grad, Grads& dx, const Tensor& x_,
                                                          const Tensor& lse_, const Tensor& t_) {
    // out = Σ_i w_i [(1 − ε)(lse_i − x_i,t) + ε(lse_i − mean_v x_iv)],  ∂lse_i/∂x_iv = p_iv
    //   =>  dx_iv = g_i (p_iv − (1 − ε)[v = t_i] − ε / V)
    if (dx.create_graph()) {
      twin_backward(dx, grad, {dx.input(0, x_)},
                    [&](const std::vector<Tensor>& in) { return cross_entropy_composite(in[0], t_, opt); });
      return;
    }
    const std::vector<double> g = row_grads(grad, opt.reduction, r.n, n_valid);
    Tensor d = Tensor::empty(shape, x_.dtype());
    dispatch_float(x_.dtype(), "cross_entropy", [&]<class T>() {
      cross_entropy_backward_rows<T>(d.data<T>(), x_.data<T>(), lse_.data<T>(), t_.data<int64_t>(), g.data(), r,
                                     opt.ignore_index, opt.label_smoothing);
    });
    dx[0] += d;
  });
}

// cross_entropy_composite: the same loss from primitives, recorded op by op.
//   logp = log_softmax(x);  nll_i = −Σ_v [v = t_i] logp_iv;  smooth_i = −mean_v logp_iv
//   loss_i = valid_i ? (1 − ε) nll_i + ε smooth_i : 0
Tensor cross_entropy_composite(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& opt) {
  constexpr std::string_view op = "cross_entropy_composite";
  const ClassRows r = check_class_inputs(op, logits, targets);
  const double eps = opt.label_smoothing;
  if (!(eps >= 0 && eps <= 1)) fail<ValueError>(op, "label_smoothing must be in [0, 1], got {}", eps);
  const Tensor t = targets.reshape({r.n});                                           // [N]
  const int64_t n_valid = count_valid(op, t.contiguous().data<int64_t>(), r, opt.ignore_index);
  const Tensor logp = log_softmax(logits.reshape({r.n, r.v}), 1);                     // [N, V]
  const Tensor onehot = eq(t.unsqueeze(1), Tensor::arange(0, static_cast<double>(r.v), 1, DType::i64));  // [N, V] b8
  const Tensor valid = logical_not(eq(t, Tensor::scalar(static_cast<double>(opt.ignore_index), DType::i64)));  // [N] b8
  const Tensor zero = Tensor::zeros({}, logits.dtype());
  Tensor row = -sum(where(onehot, logp, zero), {1});                                   // [N]
  if (eps > 0) row = row * (1 - eps) + (-mean(logp, {1})) * eps;
  row = where(valid, row, zero);
  switch (opt.reduction) {
    case Reduction::none: return row.reshape(r.row_shape);
    case Reduction::sum: return sum(row);
    case Reduction::mean: break;
  }
  return n_valid > 0 ? sum(row) / static_cast<double>(n_valid) : sum(row) * 0.0;
}

// nll_loss: logp [*, V], targets [*] -> loss [] or [*];  loss_i = −logp_i,t
// Saves only the targets [N].
Tensor nll_loss(const Tensor& logp, const Tensor& targets, const NllLossOptions& opt) {
  constexpr std::string_view op = "nll_loss";
  const ClassRows r = check_class_inputs(op, logp, targets);
  const Tensor x = contiguous_values(logp);  // [N, V]
  const Tensor t = targets.contiguous();     // [N]
  const int64_t* pt = t.data<int64_t>();
  const int64_t n_valid = count_valid(op, pt, r, opt.ignore_index);
  std::vector<double> loss(r.n, 0.0);
  dispatch_float(logp.dtype(), op, [&]<class T>() {
    const T* px = x.data<T>();
    for (int64_t i = 0; i < r.n; ++i)
      if (pt[i] != opt.ignore_index) loss[i] = -static_cast<double>(px[i * r.v + pt[i]]);
  });
  Tensor out = reduce_rows(loss, opt.reduction, n_valid, r, logp.dtype());
  if (!any_requires_grad({logp})) return out;
  return record(op, out, {logp}, {{"targets", t}},
                [r, opt, n_valid, shape = logp.shape(), dtype = logp.dtype()](const Tensor& grad, Grads& dx,
                                                                              const Tensor& t_) {
    // out = Σ_i w_i (−logp_i,t_i)  =>  dlogp_iv = −g_i [v = t_i]
    auto scatter = [&](const std::vector<double>& g) {  // d [N, V]: −g_i at [i, t_i] of the valid rows
      Tensor d = Tensor::zeros({r.n, r.v}, dtype);
      dispatch_float(dtype, "nll_loss", [&]<class T>() {
        T* pd = d.data<T>();
        const int64_t* ti = t_.data<int64_t>();
        for (int64_t i = 0; i < r.n; ++i)
          if (ti[i] != opt.ignore_index) pd[i * r.v + ti[i]] = static_cast<T>(-g[i]);
      });
      return d;
    };
    if (dx.create_graph()) {  // grad times the constant −[v = t_i]
      Tensor g = grad;
      if (opt.reduction == Reduction::none) g = grad.reshape({r.n, 1});
      if (opt.reduction == Reduction::mean) g = grad * (n_valid > 0 ? 1.0 / static_cast<double>(n_valid) : 0.0);
      dx[0] += mul(scatter(std::vector<double>(r.n, 1.0)), g).reshape(shape);
      return;
    }
    dx[0] += scatter(row_grads(grad, opt.reduction, r.n, n_valid)).reshape(shape);
  });
}

// mse_loss: a [*], b [*] -> loss [] (mean, sum) or [*] (none);  loss = (a − b)²
// Saves diff = a − b [*].
Tensor mse_loss(const Tensor& a, const Tensor& b, Reduction red) {
  constexpr std::string_view op = "mse_loss";
  if (a.dtype() != b.dtype())
    fail<DTypeError>(op, "input and target have dtypes {} {} and {} {}; hint: convert one with .to()",
                     dtype_name(a.dtype()), shape_str(a.shape()), dtype_name(b.dtype()), shape_str(b.shape()));
  if (a.shape() != b.shape())
    fail<ShapeError>(op, "input {} and target {} must have the same shape; hint: mse_loss does not broadcast, "
                     "reshape or expand the target explicitly", shape_str(a.shape()), shape_str(b.shape()));
  const double n = static_cast<double>(a.numel());
  Tensor diff, out;
  dispatch_float(a.dtype(), op, [&]<class T>() {
    diff = zip<T>(op, a, b, [](T x, T y) { return x - y; });
    if (red == Reduction::none) {
      out = map<T>(diff, [](T d) { return d * d; });
      return;
    }
    double total = 0;
    const T* pd = diff.data<T>();
    for (int64_t i = 0; i < diff.numel(); ++i) total += static_cast<double>(pd[i]) * pd[i];
    out = Tensor::scalar(red == Reduction::mean ? total / n : total, a.dtype());
  });
  if (!any_requires_grad({a, b})) return out;
  return record(op, out, {a, b}, {{"diff", diff}, {"a", a.detach()}, {"b", b.detach()}},
                [red, n](const Tensor& grad, Grads& dx, const Tensor& diff_, const Tensor& a_, const Tensor& b_) {
    // out = Σ (a − b)² / n  =>  da = 2 (a − b) · grad / n,  db = −da   (n = 1 for sum; none: no sum)
    if (dx.create_graph()) {
      const Tensor da = (dx.input(0, a_) - dx.input(1, b_)) * grad * (2.0 / (red == Reduction::mean ? n : 1.0));
      if (dx.needs(1)) dx[1] += neg(da);
      if (dx.needs(0)) dx[0] += da;
      return;
    }
    Tensor da = dispatch_float(diff_.dtype(), "mse_loss", [&]<class T>() {
      if (red == Reduction::none) return zip<T>("mse_loss", diff_, grad, [](T d, T g) { return 2 * d * g; });
      const T s = static_cast<T>(2 * grad.item() / (red == Reduction::mean ? n : 1.0));
      return map<T>(diff_, [s](T d) { return s * d; });
    });
    if (dx.needs(1)) dx[1] += neg(da);
    if (dx.needs(0)) dx[0] += da;
  });
}

}  // namespace attograd
