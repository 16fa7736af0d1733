// Elementwise ops with NumPy broadcasting. Both operands of a binary op must
// have the same dtype (no silent promotion); a double on either side becomes
// a 0-d tensor of the other operand's dtype.
#pragma once
#include <optional>

#include <attograd/autograd/tensor.h>

namespace attograd {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
enum class GeluApprox { none, tanh };  // none: exact erf form (PyTorch's default)
Tensor gelu(const Tensor& x, GeluApprox approx = GeluApprox::none);
// Limits values to [lo, hi]; either bound may be absent.
Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi);
// out = cond ? a : b, all three broadcast together; cond is a b8 tensor.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// out = mask ? value : x; mask (b8) broadcasts to x's shape.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// sum_to(x, shape): sums x over the dims along which `shape` was broadcast to
// x's shape. The one helper that brings broadcast operands' gradients home.
Tensor sum_to(const Tensor& x, const Shape& shape);

// Comparisons give b8 tensors and are not differentiable.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& mask);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);

}  // namespace attograd
