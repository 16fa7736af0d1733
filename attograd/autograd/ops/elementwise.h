// Elementwise ops with NumPy broadcasting. Both operands of a binary op must
// have the same dtype (no silent promotion); a double on either side becomes
// a 0-d tensor of the other operand's dtype.
#pragma once
#include <optional>

#include <attograd/autograd/tensor.h>

namespace attograd {

// a + b, broadcast together (NumPy rules; incompatible shapes are a ShapeError,
// mixed dtypes a DTypeError). Same as operator+.
Tensor add(const Tensor& a, const Tensor& b);
// a − b, broadcast like add.
Tensor sub(const Tensor& a, const Tensor& b);
// a ⊙ b (elementwise product), broadcast like add.
Tensor mul(const Tensor& a, const Tensor& b);
// a / b elementwise, broadcast like add (floating: x / 0 gives ±inf or NaN).
Tensor div(const Tensor& a, const Tensor& b);
// a^b elementwise, broadcast like add; the other overload takes a constant exponent.
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
// −x, same shape.
Tensor neg(const Tensor& x);
// eˣ elementwise (floating x).
Tensor exp(const Tensor& x);
// Natural log elementwise (floating x; log 0 = −inf).
Tensor log(const Tensor& x);
// √x elementwise (floating x).
Tensor sqrt(const Tensor& x);
// |x| elementwise; the gradient at 0 is 0.
Tensor abs(const Tensor& x);
// tanh(x) elementwise (floating x).
Tensor tanh(const Tensor& x);
// 1 / (1 + e^−x) elementwise (floating x).
Tensor sigmoid(const Tensor& x);
// max(x, 0) elementwise; the gradient at 0 is 0.
Tensor relu(const Tensor& x);
// How gelu computes Φ(x).
enum class GeluApprox { none, tanh };  // none: exact erf form (PyTorch's default)
// GELU, x·Φ(x): exact (erf) or PyTorch's tanh approximation.
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
// a > b elementwise, broadcast: b8.
Tensor gt(const Tensor& a, const Tensor& b);
// a < b elementwise, broadcast: b8.
Tensor lt(const Tensor& a, const Tensor& b);
// !mask for a b8 tensor (DTypeError otherwise).
Tensor logical_not(const Tensor& mask);

// Arithmetic: add, sub, mul, div and neg as operators, so x * w + b records
// the same ops. A double operand becomes a 0-d tensor of the other side's dtype.
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
