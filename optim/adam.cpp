#include "optim/adam.h"

#include <cmath>

namespace attograd::optim {

namespace {
std::vector<std::string> adam_slots(const AdamOptions& o) {
  if (o.amsgrad) return {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"step", "exp_avg", "exp_avg_sq"};
}
AdamOptions from_adamw(const AdamWOptions& o) {
  return {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.amsgrad};
}
std::vector<ParamGroup> one_group(std::vector<Tensor> params) {
  return {ParamGroup{std::move(params), std::nullopt, std::nullopt}};
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam("Adam", one_group(std::move(params)), options, false) {}
Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options)
    : Adam("Adam", std::move(groups), options, false) {}

Adam::Adam(std::string name, std::vector<ParamGroup> groups, AdamOptions options, bool decoupled)
    : Optimizer(std::move(name), std::move(groups), options.lr, options.weight_decay, adam_slots(options)),
      opt_(options),
      decoupled_(decoupled) {
  check_arg(options.eps >= 0, "eps", options.eps, ">= 0");
  check_arg(options.beta1 >= 0 && options.beta1 < 1, "beta1", options.beta1, "in [0, 1)");
  check_arg(options.beta2 >= 0 && options.beta2 < 1, "beta2", options.beta2, "in [0, 1)");
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Adam("AdamW", one_group(std::move(params)), from_adamw(options), true) {}
AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options)
    : Adam("AdamW", std::move(groups), from_adamw(options), true) {}

std::vector<std::pair<std::string, double>> Adam::options() const {
  return {{"beta1", opt_.beta1}, {"beta2", opt_.beta2}, {"eps", opt_.eps},
          {"amsgrad", opt_.amsgrad ? 1.0 : 0.0}};
}

void Adam::update(const Group& group, size_t index, const Tensor& param, const Tensor& grad) {
  std::vector<Tensor>& st = state(index);
  if (st.empty()) {
    st.push_back(zero_step());
    for (size_t k = opt_.amsgrad ? 3 : 2; k > 0; --k) st.push_back(zeros_like(param));
  }
  const int64_t t = ++*st[0].data<int64_t>();
  // Scalars in double as PyTorch computes them; elements in the parameter's dtype.
  const double bias_correction1 = 1 - std::pow(opt_.beta1, static_cast<double>(t));
  const double bias_correction2 = 1 - std::pow(opt_.beta2, static_cast<double>(t));
  const double step_size = group.lr / bias_correction1;
  const double decay = 1 - group.lr * group.weight_decay;  // AdamW's p *= (1 - lr * wd)
  dispatch_float(param.dtype(), name(), [&]<class T>() {
    const T b1 = static_cast<T>(opt_.beta1), b2 = static_cast<T>(opt_.beta2);
    const T one_minus_b1 = static_cast<T>(1 - opt_.beta1), one_minus_b2 = static_cast<T>(1 - opt_.beta2);
    const T eps = static_cast<T>(opt_.eps), wd = static_cast<T>(group.weight_decay);
    const T bc2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
    const T neg_step = static_cast<T>(-step_size), shrink = static_cast<T>(decay);
    const bool coupled = !decoupled_ && group.weight_decay != 0;
    const bool decoupled = decoupled_ && group.weight_decay != 0;
    T* m = st[1].data<T>();                                   // exp_avg    [p's shape]
    T* v = st[2].data<T>();                                   // exp_avg_sq [p's shape]
    T* vmax = opt_.amsgrad ? st[3].data<T>() : nullptr;       // max_exp_avg_sq [p's shape]
    if (!coupled && !decoupled && !vmax && param.is_contiguous() && grad.is_contiguous()) {
      // Plain Adam on flat buffers: a branch-free loop the compiler vectorizes.
      T* const p = param.data<T>();
      const T* const g = grad.data<T>();
      parallel_for(param.numel(), int64_t{1} << 14, [=](int64_t first, int64_t last) {
        for (int64_t i = first; i < last; ++i) {
          const T mi = m[i] * b1 + one_minus_b1 * g[i];
          const T vi = v[i] * b2 + one_minus_b2 * g[i] * g[i];
          m[i] = mi;
          v[i] = vi;
          p[i] += neg_step * (mi / (std::sqrt(vi) / bc2_sqrt + eps));
        }
      });
      return;
    }
    for_each_param_element<T>(param, grad, [&](T& p, T g, int64_t i) {
      if (coupled) g += wd * p;
      if (decoupled) p *= shrink;
      m[i] = m[i] * b1 + one_minus_b1 * g;
      v[i] = v[i] * b2 + one_minus_b2 * g * g;
      T second = v[i];
      if (vmax) {
        if (vmax[i] < v[i] || v[i] != v[i]) vmax[i] = v[i];  // torch.maximum keeps NaN
        second = vmax[i];
      }
      const T denom = std::sqrt(second) / bc2_sqrt + eps;
      p += neg_step * (m[i] / denom);
    });
  });
}

}  // namespace attograd::optim
