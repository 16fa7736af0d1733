#include <attograd/optim/adam.h>

#include <cmath>

namespace attograd::optim {

namespace {
std::vector<std::string> adam_slots(const AdamOptions& o) {
  if (o.amsgrad) return {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"step", "exp_avg", "exp_avg_sq"};
}
// The update of one element, in the parameter's dtype, given the step's
// scalars (see adam.h): the moments, then p. vmax is max_exp_avg_sq's element
// with amsgrad, else null.
template <class T>
struct AdamElement {
  T beta1, beta2, one_minus_beta1, one_minus_beta2, eps, bias_correction2_sqrt, neg_step_size;
  void operator()(T& p, T g, T& m, T& v, T* vmax) const {
    const T m_t = m * beta1 + one_minus_beta1 * g;
    const T v_t = v * beta2 + one_minus_beta2 * g * g;
    m = m_t;
    v = v_t;
    T second = v_t;
    if (vmax) {
      if (*vmax < v_t || v_t != v_t) *vmax = v_t;  // torch.maximum keeps NaN
      second = *vmax;
    }
    p += neg_step_size * (m_t / (std::sqrt(second) / bias_correction2_sqrt + eps));
  }
};

// PyTorch's defaults: torch.optim.Adam's weight_decay=0, torch.optim.AdamW's 1e-2.
double default_weight_decay(const AdamOptions& o, bool decoupled) {
  return o.weight_decay.value_or(decoupled ? 1e-2 : 0.0);
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam("Adam", one_group(std::move(params)), options, false) {}
Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options)
    : Adam("Adam", std::move(groups), options, false) {}

Adam::Adam(std::string name, std::vector<ParamGroup> groups, AdamOptions options, bool decoupled)
    : Optimizer(std::move(name), std::move(groups), options.lr, default_weight_decay(options, decoupled),
                adam_slots(options)),
      opt_(options),
      decoupled_(decoupled) {
  check_arg(options.eps >= 0, "eps", options.eps, ">= 0");
  check_arg(options.beta1 >= 0 && options.beta1 < 1, "beta1", options.beta1, "in [0, 1)");
  check_arg(options.beta2 >= 0 && options.beta2 < 1, "beta2", options.beta2, "in [0, 1)");
}

AdamW::AdamW(std::vector<Tensor> params, AdamOptions options)
    : Adam("AdamW", one_group(std::move(params)), options, true) {}
AdamW::AdamW(std::vector<ParamGroup> groups, AdamOptions options)
    : Adam("AdamW", std::move(groups), options, true) {}

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
    const AdamElement<T> adam{static_cast<T>(opt_.beta1), static_cast<T>(opt_.beta2),
                              static_cast<T>(1 - opt_.beta1), static_cast<T>(1 - opt_.beta2),
                              static_cast<T>(opt_.eps), static_cast<T>(std::sqrt(bias_correction2)),
                              static_cast<T>(-step_size)};
    const T wd = static_cast<T>(group.weight_decay), shrink = static_cast<T>(decay);
    const bool coupled = !decoupled_ && group.weight_decay != 0;
    const bool decoupled = decoupled_ && group.weight_decay != 0;
    T* m = st[1].data<T>();                                   // exp_avg    [p's shape]
    T* v = st[2].data<T>();                                   // exp_avg_sq [p's shape]
    T* vmax = opt_.amsgrad ? st[3].data<T>() : nullptr;       // max_exp_avg_sq [p's shape]
    if (!coupled && !decoupled && !vmax && param.is_contiguous() && grad.is_contiguous()) {
      // Plain Adam on flat buffers: a branch-free loop the compiler vectorizes.
      T* const p = param.data<T>();
      const T* const g = grad.data<T>();
      parallel_for(param.numel(), kElementwiseGrain, [=](int64_t first, int64_t last) {
        for (int64_t i = first; i < last; ++i) adam(p[i], g[i], m[i], v[i], nullptr);
      });
      return;
    }
    for_each_param_element<T>(param, grad, [&](T& p, T g, int64_t i) {
      if (coupled) g += wd * p;
      if (decoupled) p *= shrink;
      adam(p, g, m[i], v[i], vmax ? vmax + i : nullptr);
    });
  });
}

}  // namespace attograd::optim
