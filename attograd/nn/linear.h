// Linear: y = x Wᵀ + b.
// Shape legend: x [..., in], weight [out, in], bias [out], y [..., out].
#pragma once
#include <attograd/nn/module.h>

namespace attograd {

struct StepLinear;

// A fully connected layer, y = x Wᵀ + b (nn.Linear).
class Linear : public UnaryModule {
 public:
  // PyTorch's init: weight ~ kaiming-uniform(a=√5) = U(±1/√in), bias ~ U(±1/√in).
  Linear(int64_t in_features, int64_t out_features, Generator& gen, bool bias = true, DType dtype = DType::f32);
  // x [..., in] -> [..., out] (one fused linear op); another last dim is a ShapeError.
  Tensor forward(const Tensor& x) override;
  // forward's decode step (attograd/nn/inference.h): out [rows, O] = x [rows, I] · Wᵀ + b
  // as linear() computes it, the bias copied into every row first and one GEMM
  // adding the product, into a buffer. w: this layer's weights, or several
  // layers' stacked (pack_linears); T the weights' float type.
  template <class T>
  static void forward_rows(T* out, const T* x, int64_t rows, const StepLinear& w);
  // Input width `in` (the last dim x must have).
  int64_t in_features, out_features;  // output width `out` (y's last dim)
  Tensor weight;  // [out, in]
  Tensor bias;    // [out], undefined without bias

 protected:
  std::string extra_repr() const override;
};

}  // namespace attograd
