// RMSNorm, a layer that attograd does not ship, written the way you would
// write your own: a custom Function with a hand-derived backward, a composite
// twin built from primitives to check it against, and a Module around it.
//
//   y = x / rms(x) · g,   rms(x) = √(mean(x²) + eps)   over the last dim
//
// Shape legend: x [..., E] is read as a contiguous [R, E] block (R rows of E
// features); g [E] is the learned gain; rms [R] holds one value per row.
#pragma once
#include <cmath>
#include <vector>

#include <attograd/autograd/function.h>
#include <attograd/autograd/ops/elementwise.h>
#include <attograd/autograd/ops/reduction.h>
#include <attograd/nn/module.h>

namespace attograd::custom_layer {

namespace detail {

// x [..., E], g [E]: the checks that make a bad call fail with a clear message.
inline void check_rms_norm(std::string_view op, const Tensor& x, const Tensor& g) {
  if (x.dim() < 1) fail<ShapeError>(op, "x must have at least one dim [..., E], got a 0-d tensor");
  if (g.dim() != 1 || g.size(0) != x.size(-1))
    fail<ShapeError>(op, "gain has shape {}, expected [{}] to match x {}; hint: the gain has one entry per "
                     "feature of the last dim", shape_str(g.shape()), x.size(-1), shape_str(x.shape()));
  if (g.dtype() != x.dtype())
    fail<DTypeError>(op, "gain is {} but x is {}; hint: convert with .to()", dtype_name(g.dtype()),
                     dtype_name(x.dtype()));
}

// out [R, E] = x · g / rms,  rms [R] = √(mean(x²) + eps);  x [R, E], g [E]
template <class T>
void rms_norm_rows(T* out, T* rms, const T* x, const T* g, int64_t rows, int64_t e, double eps) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* xr = x + i * e;
    double ss = 0;
    for (int64_t k = 0; k < e; ++k) ss += static_cast<double>(xr[k]) * xr[k];
    const T r = static_cast<T>(std::sqrt(ss / static_cast<double>(e) + eps));
    for (int64_t k = 0; k < e; ++k) out[i * e + k] = xr[k] / r * g[k];
    rms[i] = r;
  }
}

// dx [R, E] (or null) and dg [E] (or null, summed over rows in double) from grad [R, E].
// second_term = false is the deliberate bug of RMSNormBuggy: rms treated as a constant.
template <class T>
void rms_norm_backward_rows(T* dx, double* dg, const T* grad, const T* x, const T* g, const T* rms, int64_t rows,
                            int64_t e, bool second_term) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* gr = grad + i * e;
    const T* xr = x + i * e;
    const double r = rms[i];
    if (dg)
      for (int64_t k = 0; k < e; ++k) dg[k] += static_cast<double>(gr[k]) * xr[k] / r;
    if (!dx) continue;
    double s = 0;  // mean(x ⊙ g ⊙ grad) over the row
    for (int64_t k = 0; k < e; ++k) s += static_cast<double>(xr[k]) * g[k] * gr[k];
    s /= static_cast<double>(e);
    const double c = second_term ? s / (r * r * r) : 0.0;
    for (int64_t k = 0; k < e; ++k) dx[i * e + k] = static_cast<T>(g[k] * gr[k] / r - xr[k] * c);
  }
}

// The backward shared by RMSNorm and its buggy twin. saved: x [R, E], g [E], rms [R].
inline std::vector<Tensor> rms_norm_backward(FunctionCtx& ctx, const Tensor& grad, bool second_term) {
  const Tensor &x = ctx.saved(0), &g = ctx.saved(1), &rms = ctx.saved(2);
  const int64_t e = x.size(-1), rows = rms.numel();
  const Tensor gc = grad.contiguous();
  Tensor dx = ctx.needs_input_grad(0) ? Tensor::empty(x.shape(), x.dtype()) : Tensor();
  std::vector<double> dg(ctx.needs_input_grad(1) ? e : 0);
  dispatch_float(x.dtype(), "rms_norm", [&]<class T>() {
    rms_norm_backward_rows<T>(dx.defined() ? dx.data<T>() : nullptr, dg.empty() ? nullptr : dg.data(),
                              gc.data<T>(), x.data<T>(), g.data<T>(), rms.data<T>(), rows, e, second_term);
  });
  return {dx, dg.empty() ? Tensor() : Tensor::from_vector(dg, {e}, x.dtype())};
}

}  // namespace detail

// The custom op. Inputs: x [..., E], g [E]. Output: y [..., E].
struct RMSNormFunction : Function<RMSNormFunction> {
  static constexpr const char* name = "rms_norm";
  double eps = 1e-6;

  explicit RMSNormFunction(double epsilon = 1e-6) : eps(epsilon) {}

  // Runs with recording off on detached inputs. Saves x and g (the inputs:
  // no new memory when x is already contiguous) and rms [R]; nothing [R, E].
  Tensor forward(FunctionCtx& ctx, const std::vector<Tensor>& in) const {
    detail::check_rms_norm(name, in[0], in[1]);
    const Tensor x = in[0].contiguous(), g = in[1].contiguous();
    const int64_t e = x.size(-1), rows = e == 0 ? 0 : x.numel() / e;
    Tensor y = Tensor::empty(x.shape(), x.dtype()), rms = Tensor::empty({rows}, x.dtype());
    dispatch_float(x.dtype(), name, [&]<class T>() {
      detail::rms_norm_rows<T>(y.data<T>(), rms.data<T>(), x.data<T>(), g.data<T>(), rows, e, eps);
    });
    ctx.save_for_backward({x, g, rms});
    return y;
  }

  // Per row, with r = rms(x) = √(Σ_j x_j² / E + eps) and y_j = x_j g_j / r:
  //   ∂r/∂x_k   = x_k / (E r)
  //   ∂y_j/∂x_k = g_j δ_jk / r − x_j g_j x_k / (E r³)
  //   dx_k = Σ_j grad_j ∂y_j/∂x_k = g_k grad_k / r − x_k · mean(x ⊙ g ⊙ grad) / r³
  //   dg_k = Σ_rows grad_k x_k / r
  std::vector<Tensor> backward(FunctionCtx& ctx, const Tensor& grad) const {
    return detail::rms_norm_backward(ctx, grad, /*second_term=*/true);
  }
};

// The same op with a classic mistake: its backward treats r as a constant and
// so drops dx's second term (the path through ∂r/∂x). Forward is correct, so
// only gradcheck can tell; `custom_layer check` shows the report it gets.
struct RMSNormBuggy : Function<RMSNormBuggy> {
  static constexpr const char* name = "rms_norm_buggy";
  double eps = 1e-6;

  explicit RMSNormBuggy(double epsilon = 1e-6) : eps(epsilon) {}

  Tensor forward(FunctionCtx& ctx, const std::vector<Tensor>& in) const {
    return RMSNormFunction(eps).forward(ctx, in);
  }
  std::vector<Tensor> backward(FunctionCtx& ctx, const Tensor& grad) const {
    return detail::rms_norm_backward(ctx, grad, /*second_term=*/false);  // BUG: dx = g ⊙ grad / r only
  }
};

// rms_norm: x [..., E], g [E] -> y [..., E], one recorded node.
inline Tensor rms_norm(const Tensor& x, const Tensor& g, double eps = 1e-6) { return RMSNormFunction(eps)(x, g); }

// The composite twin: the same math as recorded primitives (mul, mean, sqrt,
// div), differentiated by the engine. Five nodes and two [R, E] temporaries.
inline Tensor rms_norm_composite(const Tensor& x, const Tensor& g, double eps = 1e-6) {
  detail::check_rms_norm("rms_norm_composite", x, g);
  const Tensor rms = sqrt(mean(x * x, {-1}, /*keepdim=*/true) + eps);  // [..., 1]
  return x / rms * g;
}

// The layer, as torch.nn.RMSNorm: the gain is a parameter named "weight",
// ones at init. `composite` selects the reference implementation.
class RMSNorm : public UnaryModule {
 public:
  explicit RMSNorm(int64_t dim, double epsilon = 1e-6, bool use_composite = false, DType dtype = DType::f32)
      : UnaryModule("RMSNorm"), eps(epsilon), composite(use_composite) {
    weight = register_parameter("weight", Tensor::ones({dim}, dtype));
  }
  Tensor forward(const Tensor& x) override {
    return composite ? rms_norm_composite(x, weight, eps) : rms_norm(x, weight, eps);
  }
  double eps;
  bool composite;
  Tensor weight;  // [E], the gain g

 protected:
  std::string extra_repr() const override {
    return fmt::format("({},), eps={}{}", weight.size(0), eps, composite ? ", composite" : "");
  }
};

}  // namespace attograd::custom_layer
