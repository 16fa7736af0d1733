// Matrix products. Every product is a GEMM call (attograd/autograd/backend/gemm.h) on the
// operands' own strides: transposed views go in as "trans" operands and
// broadcast batch dims are looped over, never copied.
#pragma once
#include <attograd/autograd/tensor.h>

namespace attograd {

// matmul: PyTorch's torch.matmul.
//   [K] @ [K]                     -> []                 dot product
//   [M, K] @ [K, N]               -> [M, N]
//   [K] @ [K, N]                  -> [N]                a as [1, K], then the 1 dropped
//   [M, K] @ [K]                  -> [M]                b as [K, 1], then the 1 dropped
//   [..., M, K] @ [..., K, N]     -> [batch..., M, N]   batch dims broadcast (NumPy rules);
//                                                       a 1-d operand is promoted as above
// Both operands must share a floating dtype. Cost: 2·M·N·K flops per batch element.
Tensor matmul(const Tensor& a, const Tensor& b);

// linear: torch.nn.functional.linear, one op.
//   x [..., I], w [O, I], bias [O] (undefined: no bias)  ->  out [..., O] = x @ wᵀ + bias
// One GEMM over the R = numel(x) / I flattened rows (2·R·O·I flops), with the
// bias add fused into it.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor());

}  // namespace attograd
