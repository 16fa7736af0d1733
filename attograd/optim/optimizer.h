// Optimizer: the base of SGD, Adam and AdamW (PyTorch's torch.optim.Optimizer).
//
// An optimizer holds parameter groups, each a list of leaf tensors with its own
// lr and weight decay. step() updates every parameter that has a gradient, in
// place and under NoGradGuard; a parameter without a gradient is skipped (its
// state, including any step count, does not advance).
//
//   optim::Adam opt(model_params, {.lr = 1e-3});
//   for (...) { loss.backward(); opt.step(); opt.zero_grad(); }
//
// Per-parameter state (moment buffers, step counts) is allocated on the
// parameter's first update and reused after that: a step allocates nothing.
// Buffers have the parameter's shape and dtype, are contiguous, and are read
// in the parameter's row-major element order.
//
// state_dict() is a flat name -> tensor map that save_safetensors can write:
//   "param_groups.<g>.lr", "param_groups.<g>.weight_decay"   f64 0-d
//   "param_groups.<g>.params"                                 i64 [n]: the parameter indices of group g
//   "options.<name>"                                          f64 0-d: the other hyper-parameters
//   "state.<i>.<slot>"                                        parameter i's state; "step" is an i64
//                                                             0-d count, the rest are buffers
// Parameters are numbered over all groups in order (the <i> above).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/tensor.h>

namespace attograd::optim {

// An optimizer's state as flat name -> tensor entries (see above).
using StateDict = std::map<std::string, Tensor>;

// What a caller passes in: the parameters, and optionally this group's own lr
// and weight decay (unset: the optimizer's defaults).
struct ParamGroup {
  std::vector<Tensor> params;          // the tensors this group updates (floating leaves, each once)
  std::optional<double> lr;            // this group's learning rate; unset: the optimizer's lr
  std::optional<double> weight_decay;  // this group's weight decay; unset: the optimizer's
};

// All of `params` as one group with the optimizer's lr and weight decay.
inline std::vector<ParamGroup> one_group(std::vector<Tensor> params) {
  return {ParamGroup{std::move(params), std::nullopt, std::nullopt}};
}

// Base of SGD, Adam and AdamW (see above); a subclass writes update() and options().
class Optimizer {
 public:
  // A parameter group with its lr and weight decay resolved.
  struct Group {
    std::vector<Tensor> params;  // the tensors this group updates
    double lr;                   // learning rate in effect (a scheduler may change it between steps)
    double weight_decay;         // weight decay in effect (its meaning is the optimizer's: L2 or decoupled)
  };

  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient.
  void step();
  // Drops every parameter's gradient (PyTorch's zero_grad(set_to_none=True)).
  void zero_grad();

  double lr() const { return groups_.front().lr; }  // the first group's
  void set_lr(double lr);                             // every group's
  // Every group with its resolved lr and weight decay, in the order added.
  const std::vector<Group>& param_groups() const { return groups_; }
  Group& param_group(size_t g);                       // e.g. to set one group's lr
  // Appends a group; its parameters must not already be optimized here.
  void add_param_group(ParamGroup group);
  // Parameters over all groups (the <i> of state_dict's "state.<i>" keys).
  size_t num_params() const { return state_.size(); }
  // "SGD", "Adam" or "AdamW", as error messages name the optimizer.
  const std::string& name() const { return name_; }

  // A deep copy of the state (see the layout above); later steps do not change it.
  StateDict state_dict() const;
  // Restores lr/weight_decay per group and every parameter's state. The other
  // hyper-parameters ("options.*") must equal this optimizer's. The dict is
  // checked in full before anything changes: an unknown or missing key, a
  // wrong shape or dtype throws a ValueError/ShapeError/DTypeError naming the key.
  void load_state_dict(const StateDict& dict);

 protected:
  // slots: the names of one parameter's state, e.g. {"step", "exp_avg", "exp_avg_sq"}.
  Optimizer(std::string name, std::vector<ParamGroup> groups, double default_lr,
            double default_weight_decay, std::vector<std::string> slots);

  // Updates one parameter in place. index numbers the parameter over all groups;
  // state(index) is empty before its first update and the optimizer fills it.
  virtual void update(const Group& group, size_t index, const Tensor& param,
                      const Tensor& grad) = 0;
  // Hyper-parameters other than lr and weight_decay, saved as "options.<name>".
  virtual std::vector<std::pair<std::string, double>> options() const = 0;

  // Parameter index's state buffers, one per slot (empty before its first update).
  std::vector<Tensor>& state(size_t index) { return state_[index]; }
  // A zero-filled buffer with param's shape and dtype.
  static Tensor zeros_like(const Tensor& param) { return Tensor::zeros(param.shape(), param.dtype()); }
  // A zero i64 0-d tensor: a parameter's "step" count before its first update.
  static Tensor zero_step() { return Tensor::zeros({}, DType::i64); }
  // Throws a ValueError naming this optimizer unless ok, e.g. "SGD: invalid momentum -1 (expected >= 0)".
  void check_arg(bool ok, std::string_view what, double value, std::string_view expected) const;

 private:
  void validate(const StateDict& dict) const;

  std::string name_;
  double default_lr_, default_weight_decay_;
  std::vector<std::string> slots_;
  std::vector<Group> groups_;
  std::vector<std::vector<Tensor>> state_;  // [parameter][slot]; empty until the first update
};

// Calls f(p, g, i) for every element of a parameter: p is a reference to the
// element, g the gradient's value and i the row-major element index (the index
// into contiguous state buffers). Contiguous tensors take one flat loop, split
// across the thread pool; f must touch element i only.
template <class T, class F>
void for_each_param_element(const Tensor& param, const Tensor& grad, F&& f) {
  if (param.is_contiguous() && grad.is_contiguous()) {
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    // Elements are independent: the pool takes them in ranges.
    parallel_for(param.numel(), kElementwiseGrain, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) f(p[i], g[i], i);
    });
    return;
  }
  const Tensor gc = grad.is_contiguous() ? grad : grad.clone();  // strided leaves only
  const T* g = gc.data<T>();
  T* p = param.data<T>();  // element [0, ..., 0]: the walk's offsets count from it
  int64_t i = 0;
  for_each_offset(param.shape(), param.strides(), 0, [&](int64_t o) {
    f(p[o], g[i], i);
    ++i;
  });
}

}  // namespace attograd::optim
