// Indexing by i64 index tensors, with PyTorch semantics: indices must lie in
// [0, size) (no negative wrap-around); anything else is an IndexError naming
// the op, the bad index and the valid range. The backward of each op is a
// scatter-add: an index that appears k times receives k gradients, summed.
#pragma once
#include <optional>

#include <attograd/autograd/tensor.h>

namespace attograd {

// index_select: x [..., n, ...] (n at dim), index [L] -> out [..., L, ...]
//   out's j-th slice along dim is x's index[j]-th slice.
// index is 1-d (a 0-d index acts as [1], as in PyTorch).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);

// embedding: weight [V, E], ids [...] -> out [..., E], out[p] = weight[ids[p]]
// The padding_idx row (negative counts back from V) never gets a gradient;
// its forward value is whatever the row holds (nn::Embedding zeroes it).
Tensor embedding(const Tensor& weight, const Tensor& ids, std::optional<int64_t> padding_idx = std::nullopt);

// gather: x [d0, ..., dn-1], index [i0, ..., in-1] -> out [i0, ..., in-1]
//   out[p] = x[p with p[dim] replaced by index[p]]
// index has as many dims as x and i_d <= d_d for every d != dim.
// E.g. picking each row's target score: gather(logp [N, C], 1, target [N, 1]) -> [N, 1].
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);

}  // namespace attograd
