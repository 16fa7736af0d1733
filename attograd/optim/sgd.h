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

// SGD's hyper-parameters, as torch.optim.SGD's arguments.
struct SGDOptions {
  double lr = 1e-3;       // step size
  double momentum = 0;    // factor on the momentum buffer b; 0: plain SGD, no buffer
  double dampening = 0;   // b takes (1 - dampening)·g each step after the first
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
  double weight_decay = 0;  // L2 penalty: weight_decay·p added to g
};

// Stochastic gradient descent with optional momentum (torch.optim.SGD).
class SGD : public Optimizer {
 public:
  // SGD over params with options. An empty list, a non-floating parameter or a
  // bad option (negative lr or momentum, nesterov without momentum) is a
  // ValueError or DTypeError.
  SGD(std::vector<Tensor> params, SGDOptions options = {});
  // Groups may override lr and weight_decay; the rest of `options` is shared.
  SGD(std::vector<ParamGroup> groups, SGDOptions options = {});
  // The hyper-parameters given (groups may override lr and weight_decay).
  const SGDOptions& sgd_options() const { return opt_; }

 protected:
  void update(const Group& group, size_t index, const Tensor& param, const Tensor& grad) override;
  std::vector<std::pair<std::string, double>> options() const override;

 private:
  SGDOptions opt_;
};

}  // namespace attograd::optim
