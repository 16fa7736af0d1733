#include <attograd/optim/sgd.h>

namespace attograd::optim {

namespace {
std::vector<std::string> sgd_slots(const SGDOptions& o) {
  if (o.momentum != 0) return {"momentum_buffer"};
  return {};
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : SGD(one_group(std::move(params)), options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options)
    : Optimizer("SGD", std::move(groups), options.lr, options.weight_decay, sgd_slots(options)),
      opt_(options) {
  check_arg(options.momentum >= 0, "momentum", options.momentum, ">= 0");
  check_arg(!options.nesterov || (options.momentum > 0 && options.dampening == 0), "nesterov with momentum",
            options.momentum, "momentum > 0 and dampening == 0 for Nesterov momentum");
}

std::vector<std::pair<std::string, double>> SGD::options() const {
  return {{"momentum", opt_.momentum},
          {"dampening", opt_.dampening},
          {"nesterov", opt_.nesterov ? 1.0 : 0.0}};
}

void SGD::update(const Group& group, size_t index, const Tensor& param, const Tensor& grad) {
  std::vector<Tensor>& st = state(index);
  const bool first = opt_.momentum != 0 && st.empty();
  if (first) st.push_back(zeros_like(param));
  dispatch_float(param.dtype(), "SGD", [&]<class T>() {
    const T lr = static_cast<T>(group.lr), wd = static_cast<T>(group.weight_decay);
    const T mu = static_cast<T>(opt_.momentum), damp = static_cast<T>(1 - opt_.dampening);
    const bool nesterov = opt_.nesterov;
    if (opt_.momentum == 0) {
      for_each_param_element<T>(param, grad, [&](T& p, T g, int64_t) {
        if (wd != 0) g += wd * p;
        p -= lr * g;
      });
      return;
    }
    T* b = st[0].data<T>();  // momentum_buffer [p's shape]
    for_each_param_element<T>(param, grad, [&](T& p, T g, int64_t i) {
      if (wd != 0) g += wd * p;
      b[i] = first ? g : mu * b[i] + damp * g;
      p -= lr * (nesterov ? g + mu * b[i] : b[i]);
    });
  });
}

}  // namespace attograd::optim
