#include <attograd/optim/clip.h>

#include <cmath>

#include <attograd/autograd/error.h>

namespace attograd::optim {

namespace {

// Calls f(x) with a reference to every element of a floating tensor.
template <class T, class F>
void for_each_element(const Tensor& t, F&& f) {
  if (t.is_contiguous()) {
    for (T& x : t.span<T>()) f(x);
    return;
  }
  T* p = t.data<T>();  // element [0, ..., 0]: the walk's offsets count from it
  for_each_offset(t.shape(), t.strides(), 0, [&](int64_t o) { f(p[o]); });
}

std::vector<Tensor> grads_of(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  return grads;
}

}  // namespace

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type,
                      bool error_if_nonfinite) {
  if (!(max_norm >= 0))
    fail<ValueError>("clip_grad_norm", "expected max_norm >= 0, got {}", max_norm);
  if (!(norm_type > 0))
    fail<ValueError>("clip_grad_norm", "expected norm_type > 0 (or INFINITY), got {}", norm_type);
  const std::vector<Tensor> grads = grads_of(params);
  if (grads.empty()) return 0.0;

  const bool is_inf = std::isinf(norm_type);
  double acc = 0;  // sum of |g|^p, or max |g|
  bool nan = false;
  for (const Tensor& g : grads) {
    dispatch_float(g.dtype(), "clip_grad_norm", [&]<class T>() {
      for_each_element<T>(g, [&](T& x) {
        const double a = std::abs(static_cast<double>(x));
        if (a != a) nan = true;
        else if (is_inf) acc = a > acc ? a : acc;
        else if (norm_type == 2) acc += a * a;
        else if (norm_type == 1) acc += a;
        else acc += std::pow(a, norm_type);
      });
    });
  }
  const double total = nan ? NAN : is_inf ? acc : std::pow(acc, 1.0 / norm_type);
  if (error_if_nonfinite && !std::isfinite(total))
    fail<ValueError>("clip_grad_norm", "the total norm of order {} of the gradients is {}, so they "
                     "cannot be clipped; hint: pass error_if_nonfinite=false to scale them anyway, "
                     "or find where the NaN/Inf comes from with AnomalyGuard", norm_type, total);
  const double coef = max_norm / (total + 1e-6);
  const double clamped = coef > 1.0 ? 1.0 : coef;  // NaN stays NaN, as torch.clamp
  for (const Tensor& g : grads) {
    dispatch_float(g.dtype(), "clip_grad_norm", [&]<class T>() {
      const T c = static_cast<T>(clamped);
      for_each_element<T>(g, [&](T& x) { x *= c; });
    });
  }
  return total;
}

void clip_grad_value(const std::vector<Tensor>& params, double clip) {
  if (!(clip >= 0)) fail<ValueError>("clip_grad_value", "expected clip >= 0, got {}", clip);
  for (const Tensor& g : grads_of(params)) {
    dispatch_float(g.dtype(), "clip_grad_value", [&]<class T>() {
      const T hi = static_cast<T>(clip), lo = -hi;
      for_each_element<T>(g, [&](T& x) { x = x < lo ? lo : (x > hi ? hi : x); });
    });
  }
}

}  // namespace attograd::optim
