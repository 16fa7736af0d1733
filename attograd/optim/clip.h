// Gradient clipping, as torch.nn.utils.clip_grad_norm_ / clip_grad_value_.
// Both change the parameters' .grad in place; parameters without a gradient
// are left out.
#pragma once
#include <vector>

#include <attograd/autograd/tensor.h>

namespace attograd::optim {

// Treats all gradients as one vector g and returns its norm
//   total = (sum_i |g_i|^norm_type)^(1/norm_type)        (max_i |g_i| for norm_type = INFINITY)
// then scales every gradient by
//   coef = min(max_norm / (total + 1e-6), 1).
// A non-finite total throws a ValueError when error_if_nonfinite; otherwise the
// gradients are scaled by the resulting coef anyway (NaN/0), as PyTorch does.
// No gradients at all: returns 0.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                      bool error_if_nonfinite = false);

// Clamps every gradient element into [-clip, clip] (NaN stays NaN).
void clip_grad_value(const std::vector<Tensor>& params, double clip);

}  // namespace attograd::optim
