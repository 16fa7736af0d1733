// Small layers: LayerNorm, Dropout, ReLU, GELU.
// Shape legend: x [..., E...]; normalized_shape = the trailing dims E...
#pragma once
#include <memory>

#include <attograd/autograd/ops/elementwise.h>
#include <attograd/nn/module.h>

namespace attograd {

// y = (x − mean) / √(var + eps) · weight + bias over the trailing dims
// (the fused layer_norm op; weight = 1, bias = 0 at init, as PyTorch).
class LayerNorm : public UnaryModule {
 public:
  // Normalizes over the trailing dims normalized_shape (not empty: ValueError);
  // without elementwise_affine there is no weight or bias.
  LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true, DType dtype = DType::f32);
  // x [..., E...] -> the same shape; x's trailing dims must be normalized_shape.
  Tensor forward(const Tensor& x) override;
  Shape normalized_shape;  // the trailing dims E... that are normalized (and weight's and bias's shape)
  double eps;  // added to the variance before the square root (1e-5 by default)
  // The scale (ones at init); bias is the shift (zeros at init).
  Tensor weight, bias;  // [E...], undefined without affine

 protected:
  std::string extra_repr() const override;
};

// Inverted dropout: zeroes each element with probability p and scales the rest
// by 1/(1−p) in training; identity in eval. Draws from a shared Generator, so a
// seed (and a saved generator state) reproduces the masks.
class Dropout : public UnaryModule {
 public:
  // p in [0, 1] (ValueError otherwise); gen may be null only when p is 0.
  Dropout(double p, std::shared_ptr<Generator> gen);
  // x [*] -> [*]: dropout(x, p, is_training(), gen); x itself in eval.
  Tensor forward(const Tensor& x) override;
  double p;  // probability of zeroing each element in training, in [0, 1]

 protected:
  std::string extra_repr() const override;

 private:
  std::shared_ptr<Generator> gen_;
};

// max(x, 0) as a module.
class ReLU : public UnaryModule {
 public:
  ReLU() : UnaryModule("ReLU") {}
  // max(x, 0) elementwise, any shape.
  Tensor forward(const Tensor& x) override { return relu(x); }
};

// gelu(x) as a module (exact, or the tanh approximation).
class GELU : public UnaryModule {
 public:
  // Exact GELU by default; GeluApprox::tanh is PyTorch's approximate='tanh'.
  explicit GELU(GeluApprox a = GeluApprox::none) : UnaryModule("GELU"), approx(a) {}
  // gelu(x) elementwise, any shape.
  Tensor forward(const Tensor& x) override { return gelu(x, approx); }
  GeluApprox approx;  // none: the exact erf form; tanh: PyTorch's approximate='tanh'

 protected:
  std::string extra_repr() const override { return approx == GeluApprox::tanh ? "approximate='tanh'" : ""; }
};

}  // namespace attograd
