// Custom ops with a hand-written backward, like torch.autograd.Function.
// A custom op joins the graph exactly like a built-in one, and gradcheck
// validates it. Two ways to write one:
//
// 1. A struct deriving from Function<Self>; its members are the op's
//    non-tensor parameters:
//
//      struct Square : attograd::Function<Square> {
//        static constexpr const char* name = "square";
//        Tensor forward(FunctionCtx& ctx, const std::vector<Tensor>& in) const {
//          ctx.save_for_backward({in[0]});
//          return in[0] * in[0];
//        }
//        std::vector<Tensor> backward(FunctionCtx& ctx, const Tensor& grad) const {
//          // out = x²  =>  dx = 2 x grad
//          return {grad * ctx.saved(0) * 2.0};
//        }
//      };
//      Tensor y = Square{}(x);
//
// 2. custom_op(name, inputs, forward, backward) with two lambdas.
//
// forward runs with gradient recording off and sees detached inputs; it must
// return a new floating tensor. backward gets dL/dout and returns one
// gradient per input, each with that input's shape (an undefined Tensor means
// "no gradient"); the engine checks shapes and skips inputs that need none.
//
// Higher-order gradients: under backward(create_graph=true) or grad(...,
// create_graph) the backward runs with recording on, and the saved tensors
// that are forward's inputs (as given to forward) or its output come back
// joined to the graph, so a backward written in differentiable ops (like
// Square's) can be differentiated again. A backward that computes its result
// with raw loops over data() has no second derivative: gradgradcheck finds it.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <attograd/autograd/engine.h>

namespace attograd {

// What a custom op's forward hands its backward: saved tensors, and which
// inputs need a gradient.
class FunctionCtx {
 public:
  // Tensors that backward needs (kept until backward has run).
  void save_for_backward(std::vector<Tensor> ts);
  // Everything save_for_backward kept, in order.
  const std::vector<Tensor>& saved_tensors() const { return saved_; }
  // The i-th saved tensor; out of range is an IndexError.
  const Tensor& saved(size_t i) const;
  // Whether input i needs a gradient: skip the work for the ones that do not.
  bool needs_input_grad(size_t i) const { return i < needs_.size() && needs_[i]; }

 private:
  friend Tensor custom_op(std::string name, const std::vector<Tensor>& inputs,
                          std::function<Tensor(FunctionCtx&, const std::vector<Tensor>&)> forward,
                          std::function<std::vector<Tensor>(FunctionCtx&, const Tensor&)> backward);
  std::vector<Tensor> saved_;
  std::vector<bool> needs_;
  std::vector<Tensor> inputs_;                // forward's (detached) inputs, to recognise saved ones
  std::vector<std::optional<size_t>> from_input_;  // per saved tensor: the input it is, if any
  std::vector<bool> is_output_;                // per saved tensor: it is forward's output
};

// Runs forward(ctx, detached inputs) without recording, then records one node
// `name` whose backward calls backward(ctx, grad). forward must return a
// floating tensor (DTypeError); backward, one gradient per input (a wrong
// count is an AutogradError, a wrong shape a ShapeError).
Tensor custom_op(std::string name, const std::vector<Tensor>& inputs,
                 std::function<Tensor(FunctionCtx&, const std::vector<Tensor>&)> forward,
                 std::function<std::vector<Tensor>(FunctionCtx&, const Tensor&)> backward);

// CRTP base of a custom op with a hand-written backward (see above): Derived
// has a static `name`, forward(ctx, inputs) and backward(ctx, grad).
template <class Derived>
class Function {
 public:
  // Square{}(x), Op{...}(a, b): apply() on the tensors given.
  template <class... Ts>
  Tensor operator()(const Ts&... inputs) const {
    return apply(std::vector<Tensor>{inputs...});
  }
  // custom_op with Derived::name, this object's forward and backward (a copy of
  // the object, with its parameters, lives in the graph).
  Tensor apply(const std::vector<Tensor>& inputs) const {
    const Derived self = static_cast<const Derived&>(*this);
    return custom_op(
        Derived::name, inputs,
        [self](FunctionCtx& ctx, const std::vector<Tensor>& in) { return self.forward(ctx, in); },
        [self](FunctionCtx& ctx, const Tensor& grad) { return self.backward(ctx, grad); });
  }
};

}  // namespace attograd
