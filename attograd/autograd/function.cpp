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
  // The node holds the saved tensors (to_dot lists them); ctx gets them back for each backward run.
  std::vector<SavedTensor> saved;
  for (size_t j = 0; j < ctx->saved_.size(); ++j) saved.push_back({fmt::format("saved({})", j), ctx->saved_[j]});
  ctx->saved_.clear();
  return record(name, out, inputs, std::move(saved),
                [ctx, backward = std::move(backward), n, name](const Tensor& grad, Grads& dx) {
    ctx->saved_.clear();
    for (size_t j = 0; j < ctx->from_input_.size(); ++j) {
      const Tensor& plain = dx.saved(j);  // while a graph is created, saved inputs and output rejoin it
      if (ctx->from_input_[j]) ctx->saved_.push_back(dx.input(*ctx->from_input_[j], plain));
      else if (ctx->is_output_[j]) ctx->saved_.push_back(dx.output(plain));
      else ctx->saved_.push_back(plain);
    }
    std::vector<Tensor> grads = backward(*ctx, grad);
    ctx->saved_.clear();
    if (grads.size() != n)
      fail<AutogradError>(name, "custom backward returned {} gradients for {} inputs", grads.size(), n);
    for (size_t i = 0; i < n; ++i)
      if (dx.needs(i) && grads[i].defined()) dx[i] += grads[i];
  });
}

}  // namespace attograd
