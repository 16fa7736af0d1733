#include <attograd/nn/layers.h>

#include <attograd/autograd/ops/dropout.h>
#include <attograd/autograd/ops/layer_norm.h>

namespace attograd {

LayerNorm::LayerNorm(Shape shape, double eps_, bool affine, DType dtype)
    : UnaryModule("LayerNorm"), normalized_shape(std::move(shape)), eps(eps_) {
  if (normalized_shape.empty()) fail<ValueError>("LayerNorm", "normalized_shape must not be empty");
  if (affine) {
    weight = register_parameter("weight", Tensor::ones(normalized_shape, dtype));
    bias = register_parameter("bias", Tensor::zeros(normalized_shape, dtype));
  }
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, normalized_shape, weight, bias, eps); }

std::string LayerNorm::extra_repr() const {
  return fmt::format("{}, eps={}, elementwise_affine={}", shape_str(normalized_shape), eps, weight.defined());
}

Dropout::Dropout(double p_, std::shared_ptr<Generator> gen) : UnaryModule("Dropout"), p(p_), gen_(std::move(gen)) {
  if (!(p >= 0.0 && p <= 1.0)) fail<ValueError>("Dropout", "p must be in [0, 1], got {}", p);
  if (p > 0 && !gen_) fail<ValueError>("Dropout", "p = {} needs a Generator", p);
}

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training() || p == 0.0) return x;
  return dropout(x, p, true, *gen_);
}

std::string Dropout::extra_repr() const { return fmt::format("p={}", p); }

}  // namespace attograd
