// Adam (Kingma & Ba 2015) and AdamW (Loshchilov & Hutter 2019), as
// torch.optim.Adam / torch.optim.AdamW in PyTorch 1.13. For each parameter p
// with gradient g, at its step t (counted per parameter, from 1):
//
//   Adam:  g <- g + weight_decay * p               (coupled L2, if weight_decay != 0)
//   AdamW: p <- p * (1 - lr * weight_decay)        (decoupled, before the moments)
//   m_t = beta1 * m_{t-1} + (1 - beta1) * g        (exp_avg)
//   v_t = beta2 * v_{t-1} + (1 - beta2) * g^2      (exp_avg_sq)
//   amsgrad: vmax_t = max(vmax_{t-1}, v_t)          (max_exp_avg_sq), used for v_t below
//   denom = sqrt(v_t) / sqrt(1 - beta2^t) + eps
//   p <- p - lr / (1 - beta1^t) * m_t / denom
//
// State per parameter: "step" (i64 0-d), "exp_avg", "exp_avg_sq", and
// "max_exp_avg_sq" with amsgrad (p's shape).
#pragma once
#include <optional>

#include <attograd/optim/optimizer.h>

namespace attograd::optim {

// Adam's and AdamW's hyper-parameters. One type for both: only the default
// weight decay differs, and it is the optimizer's (PyTorch's: 0 for Adam, 1e-2
// for AdamW), as an unset ParamGroup field is.
struct AdamOptions {
  double lr = 1e-3;                    // step size (>= 0)
  double beta1 = 0.9;                  // decay of the first-moment average m (exp_avg), in [0, 1)
  double beta2 = 0.999;                // decay of the second-moment average v (exp_avg_sq), in [0, 1)
  double eps = 1e-8;                   // added to the bias-corrected sqrt(v) in the denominator
  std::optional<double> weight_decay;  // Adam: L2 added to g; AdamW: p shrinks by lr·it; unset: Adam 0, AdamW 1e-2
  bool amsgrad = false;                // divide by the running max of v (max_exp_avg_sq) instead of v
};

// Adam with coupled L2 weight decay (torch.optim.Adam).
class Adam : public Optimizer {
 public:
  // Adam over params with options. An empty list, a non-floating parameter or a
  // bad option (negative lr or eps, beta outside [0, 1)) is a ValueError or DTypeError.
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  // Groups may override lr and weight_decay; the rest of `options` is shared.
  Adam(std::vector<ParamGroup> groups, AdamOptions options = {});
  // The hyper-parameters given (weight_decay as given, unset included; the one
  // in effect is param_groups()'s).
  const AdamOptions& adam_options() const { return opt_; }

 protected:
  // For AdamW: decoupled weight decay under another name.
  Adam(std::string name, std::vector<ParamGroup> groups, AdamOptions options, bool decoupled);
  void update(const Group& group, size_t index, const Tensor& param, const Tensor& grad) override;
  std::vector<std::pair<std::string, double>> options() const override;

 private:
  AdamOptions opt_;
  bool decoupled_;  // AdamW's weight decay
};

// Adam with decoupled weight decay (torch.optim.AdamW).
class AdamW : public Adam {
 public:
  // AdamW over params (weight_decay 1e-2 by default); the same checks as Adam.
  // The second form takes groups that may override lr and weight_decay.
  AdamW(std::vector<Tensor> params, AdamOptions options = {});
  AdamW(std::vector<ParamGroup> groups, AdamOptions options = {});
};

}  // namespace attograd::optim
