// Module: the base of every layer. A module registers its parameters, buffers
// and submodules by name; everything else (named_parameters, state_dict,
// train/eval, to(dtype), printing) walks that registry.
//
//   class MyLayer : public Module {
//    public:
//     MyLayer(int64_t n, Generator& gen) : Module("MyLayer") {
//       weight = register_parameter("weight", Tensor::randn({n}, gen));
//       proj = register_module("proj", std::make_shared<Linear>(n, n, gen));
//     }
//     Tensor forward(const Tensor& x) { return proj->forward(x) * weight; }
//     Tensor weight;
//     std::shared_ptr<Linear> proj;
//   };
//
// Parameters are Tensor handles shared between the member and the registry:
// to(dtype) and load_state_dict change them in place, so members stay valid.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <attograd/autograd/tensor.h>
#include <attograd/autograd/trace.h>

namespace attograd {

using TensorMap = std::map<std::string, Tensor>;

// Base of every layer: a registry of named parameters, buffers and submodules
// (see above).
class Module {
 public:
  // type_name is what repr() and error messages show ("Linear", "MyLayer").
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Dotted names in registration order: "encoder.layers.0.self_attn.q_proj.weight".
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  // The same tensors without names (what an optimizer takes).
  std::vector<Tensor> parameters() const;
  // The same names by tensor identity, for to_dot and BackwardTrace.
  TensorNames parameter_names() const;
  // Every buffer (persistent or not) by dotted name, in registration order.
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  // The direct submodules by name, in registration order.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }
  // The number of parameter elements (the sum of their numel()).
  int64_t num_parameters() const;

  // train() / eval() reach every submodule.
  void train(bool on = true);
  // Evaluation mode (dropout off), recursively: train(false).
  void eval() { train(false); }
  // True in training mode (the default).
  bool is_training() const { return training_; }
  // Drops the .grad of every parameter below this module.
  void zero_grad();

  // Parameters and persistent buffers by dotted name.
  TensorMap state_dict() const;
  // Copies values in. strict: every key must match both ways. A missing or
  // unexpected key, or a shape/dtype mismatch, is an error naming the key;
  // bf16 values widen exactly into f32/f64 parameters (PyTorch's copy_).
  void load_state_dict(const TensorMap& state, bool strict = true);

  // Converts every parameter and buffer in place (f64 for gradchecks).
  void to(DType dtype);
  DType dtype() const;  // dtype of the first parameter (f32 if none)

  // Point an already registered parameter at another tensor (weight tying:
  // one matrix shared by two modules). Returns the new tensor.
  Tensor replace_parameter(const std::string& name, Tensor t);

  // PyTorch-style tree: "Linear(in_features=4, out_features=8, bias=true)" with
  // each submodule indented under "(name): ".
  std::string repr() const;
  // The name given to the constructor.
  const std::string& type_name() const { return type_name_; }

 protected:
  // One-line summary of the module's own settings, shown in repr().
  virtual std::string extra_repr() const { return ""; }
  // Called by train(); modules with mode-dependent state may override.
  virtual void on_train(bool) {}

  // Registers t (defined) as parameter `name` and returns it; the name must be
  // new and non-empty, with no dot in it (ValueError otherwise).
  Tensor register_parameter(const std::string& name, Tensor t);
  // Registers a buffer: state that is not trained (a mask, a table); persistent
  // ones are in state_dict(). Same naming rules as parameters.
  Tensor register_buffer(const std::string& name, Tensor t, bool persistent = true);
  // Registers submodule m as `name` (its parameters become "name.*") and returns it.
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    check_new_name(name);
    children_.emplace_back(name, m);
    return m;
  }

 private:
  void check_new_name(const std::string& name) const;
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out, bool params,
               bool persistent_only) const;
  std::string type_name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor>> params_;
  struct Buffer { std::string name; Tensor t; bool persistent; };
  std::vector<Buffer> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

// A module with one input and one output, so it can live in a Sequential.
class UnaryModule : public Module {
 public:
  using Module::Module;
  // The module applied to x; shapes are the subclass's.
  virtual Tensor forward(const Tensor& x) = 0;
  // Same as forward(x).
  Tensor operator()(const Tensor& x) { return forward(x); }
};

// Children named "0", "1", ...
template <class M>
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  // Appends m as child "<size()>".
  void push_back(std::shared_ptr<M> m) {
    register_module(std::to_string(items_.size()), m);
    items_.push_back(std::move(m));
  }
  // Number of modules held.
  size_t size() const { return items_.size(); }
  // Module i; out of range throws std::out_of_range.
  M& operator[](size_t i) const { return *items_.at(i); }
  // Iteration over the modules (shared_ptrs), in order.
  auto begin() const { return items_.begin(); }
  // End of the iteration.
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

// Runs its children in order.
class Sequential : public UnaryModule {
 public:
  Sequential() : UnaryModule("Sequential") {}
  // The modules of items, in order, as children "0", "1", ...
  explicit Sequential(std::vector<std::shared_ptr<UnaryModule>> items);
  // Appends m as the next child.
  void push_back(std::shared_ptr<UnaryModule> m);
  // Each child's forward on the previous one's output (x itself when empty).
  Tensor forward(const Tensor& x) override;
  // Number of children.
  size_t size() const { return items_.size(); }

 private:
  std::vector<std::shared_ptr<UnaryModule>> items_;
};

}  // namespace attograd

template <>
struct fmt::formatter<attograd::Module> : fmt::formatter<std::string_view> {
  fmt::format_context::iterator format(const attograd::Module& m, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(m.repr(), ctx);
  }
};
