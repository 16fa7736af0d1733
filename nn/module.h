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

namespace attograd {

using TensorMap = std::map<std::string, Tensor>;

class Module {
 public:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Dotted names in registration order: "encoder.layers.0.self_attn.q_proj.weight".
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }
  int64_t num_parameters() const;

  // train() / eval() reach every submodule.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();

  // Parameters and persistent buffers by dotted name.
  TensorMap state_dict() const;
  // Copies values in. strict: every key must match both ways. A missing or
  // unexpected key, or a shape/dtype mismatch, is an error naming the key.
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
  const std::string& type_name() const { return type_name_; }

 protected:
  // One-line summary of the module's own settings, shown in repr().
  virtual std::string extra_repr() const { return ""; }
  // Called by train(); modules with mode-dependent state may override.
  virtual void on_train(bool) {}

  Tensor register_parameter(const std::string& name, Tensor t);
  Tensor register_buffer(const std::string& name, Tensor t, bool persistent = true);
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
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
};

// Children named "0", "1", ...
template <class M>
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  void push_back(std::shared_ptr<M> m) {
    register_module(std::to_string(items_.size()), m);
    items_.push_back(std::move(m));
  }
  size_t size() const { return items_.size(); }
  M& operator[](size_t i) const { return *items_.at(i); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

// Runs its children in order.
class Sequential : public UnaryModule {
 public:
  Sequential() : UnaryModule("Sequential") {}
  explicit Sequential(std::vector<std::shared_ptr<UnaryModule>> items);
  void push_back(std::shared_ptr<UnaryModule> m);
  Tensor forward(const Tensor& x) override;
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
