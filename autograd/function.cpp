#include <attograd/autograd/function.h>

namespace attograd {

void FunctionCtx::save_for_backward(std::vector<Tensor> ts) {
  saved_.clear();
  for (const Tensor& t : ts) saved_.push_back(t.defined() ? t.detach() : t);
}

const Tensor& FunctionCtx::saved(size_t i) const {
  if (i >= saved_.size())
    fail<IndexError>("FunctionCtx::saved", "asked for saved tensor {}, but only {} were saved", i, saved_.size());
  return saved_[i];
}

Tensor custom_op(std::string name, const std::vector<Tensor>& inputs,
                 std::function<Tensor(FunctionCtx&, const std::vector<Tensor>&)> forward,
                 std::function<std::vector<Tensor>(FunctionCtx&, const Tensor&)> backward) {
  auto ctx = std::make_shared<FunctionCtx>();
  std::vector<Tensor> detached;
  for (const Tensor& t : inputs) {
    ctx->needs_.push_back(GradMode::enabled() && t.defined() && t.requires_grad());
    detached.push_back(t.defined() ? t.detach() : t);
  }
  Tensor out;
  {
    NoGradGuard no_grad;
    out = forward(*ctx, detached);
  }
  if (!out.defined()) fail<ValueError>(name, "custom forward returned an undefined tensor");
  if (!is_floating(out.dtype()))
    fail<DTypeError>(name, "custom forward must return a floating tensor, got {}", dtype_name(out.dtype()));
  out = out.detach();  // a fresh handle, even if forward returned an input
  const size_t n = inputs.size();
  return record(name, out, inputs, [ctx, backward = std::move(backward), n, name](const Tensor& grad, Grads& dx) {
    std::vector<Tensor> grads = backward(*ctx, grad);
    if (grads.size() != n)
      fail<AutogradError>(name, "custom backward returned {} gradients for {} inputs", grads.size(), n);
    for (size_t i = 0; i < n; ++i)
      if (dx.needs(i) && grads[i].defined()) dx[i] += grads[i];
  });
}

}  // namespace attograd
