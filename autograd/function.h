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
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <attograd/autograd/engine.h>

namespace attograd {

class FunctionCtx {
 public:
  // Tensors that backward needs (kept until backward has run).
  void save_for_backward(std::vector<Tensor> ts);
  const std::vector<Tensor>& saved_tensors() const { return saved_; }
  const Tensor& saved(size_t i) const;
  // Whether input i needs a gradient: skip the work for the ones that do not.
  bool needs_input_grad(size_t i) const { return i < needs_.size() && needs_[i]; }

 private:
  friend Tensor custom_op(std::string name, const std::vector<Tensor>& inputs,
                          std::function<Tensor(FunctionCtx&, const std::vector<Tensor>&)> forward,
                          std::function<std::vector<Tensor>(FunctionCtx&, const Tensor&)> backward);
  std::vector<Tensor> saved_;
  std::vector<bool> needs_;
};

Tensor custom_op(std::string name, const std::vector<Tensor>& inputs,
                 std::function<Tensor(FunctionCtx&, const std::vector<Tensor>&)> forward,
                 std::function<std::vector<Tensor>(FunctionCtx&, const Tensor&)> backward);

template <class Derived>
class Function {
 public:
  template <class... Ts>
  Tensor operator()(const Ts&... inputs) const {
    return apply(std::vector<Tensor>{inputs...});
  }
  Tensor apply(const std::vector<Tensor>& inputs) const {
    const Derived self = static_cast<const Derived&>(*this);
    return custom_op(
        Derived::name, inputs,
        [self](FunctionCtx& ctx, const std::vector<Tensor>& in) { return self.forward(ctx, in); },
        [self](FunctionCtx& ctx, const Tensor& grad) { return self.backward(ctx, grad); });
  }
};

}  // namespace attograd
