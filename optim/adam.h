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
#include <attograd/optim/optimizer.h>

namespace attograd::optim {

// Adam's and AdamW's hyper-parameters: the same fields, only the default weight
// decay differs (PyTorch's: 0 for Adam, 1e-2 for AdamW).
template <double DefaultWeightDecay>
struct AdamFields {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = DefaultWeightDecay;
  bool amsgrad = false;
};
using AdamOptions = AdamFields<0.0>;
using AdamWOptions = AdamFields<1e-2>;

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  // Groups may override lr and weight_decay; the rest of `options` is shared.
  Adam(std::vector<ParamGroup> groups, AdamOptions options = {});
  const AdamOptions& adam_options() const { return opt_; }

 protected:
  Adam(std::string name, std::vector<ParamGroup> groups, AdamOptions options, bool decoupled);
  void update(const Group& group, size_t index, const Tensor& param, const Tensor& grad) override;
  std::vector<std::pair<std::string, double>> options() const override;

 private:
  AdamOptions opt_;
  bool decoupled_;  // AdamW's weight decay
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options = {});
};

}  // namespace attograd::optim
