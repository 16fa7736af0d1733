// Reductions over a list of dims (negative dims count from the end), with
// keepdim; the overloads without dims reduce everything to a 0-d tensor.
#pragma once
#include <vector>

#include <attograd/autograd/tensor.h>

namespace attograd {

// Sum over dims: [d0, ..., dn-1] -> the dims removed (size 1 with keepdim).
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
// Sum of every element: a 0-d tensor.
Tensor sum(const Tensor& x);
// Mean over dims (floating x), shaped as sum's.
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
// Mean of every element: a 0-d tensor.
Tensor mean(const Tensor& x);
// Variance with Bessel's correction by default (PyTorch's var: correction = 1).
Tensor var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction = 1, bool keepdim = false);
// Over every element, with correction 1. (No `var(x, correction)` overload: a
// braced dim list binds to an int before a vector, so var(x, {1}) would have
// silently meant "correction 1" instead of "dim 1". For another correction
// over all elements, list the dims.)
Tensor var(const Tensor& x);

// max(x, dim)'s result: the values and their positions.
struct MaxResult {
  Tensor values;   // differentiable
  Tensor indices;  // i64, position of the first maximum along dim
};
// Largest values along dim and where they are; the gradient goes to that position.
MaxResult max(const Tensor& x, int64_t dim, bool keepdim = false);
// The largest element; its gradient is shared evenly among ties (as PyTorch).
Tensor max(const Tensor& x);
// i64 index of the first maximum along dim (not differentiable).
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);

}  // namespace attograd
