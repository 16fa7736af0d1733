#include <attograd/autograd/function.h>

namespace attograd {

void FunctionCtx::save_for_backward(std::vector<Tensor> ts) {
  saved_.clear();
  from_input_.clear();
  for (const Tensor& t : ts) {
    saved_.push_back(t.defined() ? t.detach() : t);
    std::optional<size_t> from;
    for (size_t i = 0; i < inputs_.size() && t.defined(); ++i)
      if (t.is_same(inputs_[i])) from = i;
    from_input_.push_back(from);
  }
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
  ctx->inputs_ = detached;
  Tensor out;
  {
    NoGradGuard no_grad;
    out = forward(*ctx, detached);
  }
  ctx->inputs_.clear();
  for (const Tensor& s : ctx->saved_) ctx->is_output_.push_back(s.defined() && out.defined() && s.shares_storage(out) &&
                                                               s.shape() == out.shape() && s.strides() == out.strides() &&
                                                               s.offset() == out.offset());
  if (!out.defined()) fail<ValueError>(name, "custom forward returned an undefined tensor");
  if (!is_floating(out.dtype()))
    fail<DTypeError>(name, "custom forward must return a floating tensor, got {}", dtype_name(out.dtype()));
  out = out.detach();  // a fresh handle, even if forward returned an input
  const size_t n = inputs.size();
  return record(name, out, inputs, [ctx, backward = std::move(backward), n, name](const Tensor& grad, Grads& dx) {
    std::vector<Tensor> grads;
    if (dx.create_graph()) {  // the saved inputs and output rejoin the graph for this run
      const std::vector<Tensor> plain = ctx->saved_;
      for (size_t j = 0; j < plain.size(); ++j) {
        if (ctx->from_input_[j]) ctx->saved_[j] = dx.input(*ctx->from_input_[j], plain[j]);
        else if (ctx->is_output_[j]) ctx->saved_[j] = dx.output(plain[j]);
      }
      grads = backward(*ctx, grad);
      ctx->saved_ = plain;
    } else {
      grads = backward(*ctx, grad);
    }
    if (grads.size() != n)
      fail<AutogradError>(name, "custom backward returned {} gradients for {} inputs", grads.size(), n);
    for (size_t i = 0; i < n; ++i)
      if (dx.needs(i) && grads[i].defined()) dx[i] += grads[i];
  });
}

}  // namespace attograd
