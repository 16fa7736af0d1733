// Layer normalization over the last dim(s), as torch.nn.functional.layer_norm:
//   y = (x − mean) / √(var + eps) · weight + bias,   var biased (divides by E)
// with mean and var taken over the trailing normalized_shape dims of each row.
#pragma once
#include <attograd/autograd/tensor.h>

namespace attograd {

// layer_norm: x [..., *normalized_shape] -> out [x's shape]
//   weight, bias: [*normalized_shape], or undefined (Tensor{}) for none
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

// The same op composed from mean / var (correction 0) / sqrt / div; the
// reference that tests hold the fused op to.
Tensor layer_norm_composite(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                            const Tensor& bias = {}, double eps = 1e-5);

}  // namespace attograd
