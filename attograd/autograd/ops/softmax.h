// Softmax and log-softmax along one dim, max-subtracted so large logits do
// not overflow.
//
// Fully masked rows. A row (along dim) whose inputs are all -INFINITY has no
// softmax (PyTorch returns NaN there). We return softmax 0 and log_softmax
// -INFINITY for such a row, and its gradient is zero, so a padding row in
// attention never spreads NaN through a batch.
#pragma once
#include <attograd/autograd/tensor.h>

namespace attograd {

// x [..., n, ...] -> out [same], normalized along dim (negative counts from the end)
Tensor softmax(const Tensor& x, int64_t dim);
// log(softmax(x, dim)) in one stable pass (x − max − log Σ exp); same shape as x.
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace attograd
