// SGD with momentum, dampening, Nesterov momentum and L2 weight decay, as
// torch.optim.SGD (Sutskever et al. 2013 for the momentum form). For each
// parameter p with gradient g, at step t:
//
//   g <- g + weight_decay * p                      (if weight_decay != 0)
//   if momentum != 0:
//     b_1 = g                                      (first step: no dampening)
//     b_t = momentum * b_{t-1} + (1 - dampening) * g
//     g   <- g + momentum * b_t                    (nesterov)
//     g   <- b_t                                   (otherwise)
//   p <- p - lr * g
//
// State per parameter: "momentum_buffer" (p's shape; only when momentum != 0).
#pragma once
#include <attograd/optim/optimizer.h>

namespace attograd::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
  double weight_decay = 0;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options = {});
  // Groups may override lr and weight_decay; the rest of `options` is shared.
  SGD(std::vector<ParamGroup> groups, SGDOptions options = {});
  const SGDOptions& sgd_options() const { return opt_; }

 protected:
  void update(const Group& group, size_t index, const Tensor& param, const Tensor& grad) override;
  std::vector<std::pair<std::string, double>> options() const override;

 private:
  SGDOptions opt_;
};

}  // namespace attograd::optim
