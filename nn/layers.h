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
  LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true, DType dtype = DType::f32);
  Tensor forward(const Tensor& x) override;
  Shape normalized_shape;
  double eps;
  Tensor weight, bias;  // [E...], undefined without affine

 protected:
  std::string extra_repr() const override;
};

// Inverted dropout: zeroes each element with probability p and scales the rest
// by 1/(1−p) in training; identity in eval. Draws from a shared Generator, so a
// seed (and a saved generator state) reproduces the masks.
class Dropout : public UnaryModule {
 public:
  Dropout(double p, std::shared_ptr<Generator> gen);
  Tensor forward(const Tensor& x) override;
  double p;

 protected:
  std::string extra_repr() const override;

 private:
  std::shared_ptr<Generator> gen_;
};

class ReLU : public UnaryModule {
 public:
  ReLU() : UnaryModule("ReLU") {}
  Tensor forward(const Tensor& x) override { return relu(x); }
};

class GELU : public UnaryModule {
 public:
  explicit GELU(GeluApprox a = GeluApprox::none) : UnaryModule("GELU"), approx(a) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approx); }
  GeluApprox approx;

 protected:
  std::string extra_repr() const override { return approx == GeluApprox::tanh ? "approximate='tanh'" : ""; }
};

}  // namespace attograd
