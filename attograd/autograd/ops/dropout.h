// Dropout (inverted): in training each element is zeroed with probability p
// and the survivors are scaled by 1 / (1 − p), so evaluation needs no scaling.
#pragma once
#include <attograd/autograd/generator.h>
#include <attograd/autograd/tensor.h>

namespace attograd {

// dropout: x [*] -> out [*]
//   train && 0 < p < 1: out = keep ? x / (1 − p) : 0,  keep ~ Bernoulli(1 − p), one draw per element
//                       of gen in x's logical (row-major) order, so one seed gives one mask
//   !train or p == 0:   returns x itself (no copy, no graph node)
//   p == 1:             zeros, with a zero gradient
// p outside [0, 1] is a ValueError.
Tensor dropout(const Tensor& x, double p, bool train, Generator& gen);

}  // namespace attograd
