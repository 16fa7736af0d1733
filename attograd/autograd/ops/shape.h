// Shape ops. Views share storage with their input (see tensor.h for the
// aliasing rules); cat/stack/contiguous/clone/to copy.
#pragma once
#include <vector>

#include <attograd/autograd/tensor.h>

namespace attograd {

// reshape: a view when x is contiguous, otherwise a copy. One size may be -1.
Tensor reshape(const Tensor& x, const Shape& shape);
// view: like reshape but refuses (ShapeError) instead of copying.
Tensor view(const Tensor& x, const Shape& shape);
// A view with dims d0 and d1 swapped (negative dims count from the end).
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
// A view whose dim i is x's dim dims[i]; a wrong count or a repeated dim is
// a ShapeError or IndexError.
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
// A view with a new size-1 dim at position dim (in [-(n+1), n]).
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor squeeze(const Tensor& x, int64_t dim);   // no-op when that size is not 1
Tensor squeeze(const Tensor& x);                // every size-1 dim
Tensor expand(const Tensor& x, const Shape& shape);  // size-1 dims repeat with stride 0; -1 keeps
// Elements start, start+step, ... < end along dim (start/end clamp like Python; negative wrap).
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
// A view of x[..., start : start + length, ...] along dim; a range outside the
// dim is an IndexError.
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
// Concatenation along an existing dim: shapes must match elsewhere and dtypes
// agree (ShapeError, DTypeError); a copy. An empty list is a ValueError.
Tensor cat(const std::vector<Tensor>& xs, int64_t dim);
// xs (equal shapes [*]) joined along a new dim: out [..., len(xs), ...]; a copy.
Tensor stack(const std::vector<Tensor>& xs, int64_t dim);
// Pieces of `size` along dim (the last may be smaller); views.
std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim);
// n nearly equal pieces along dim (PyTorch's chunk: size = ceil(len / n)); views.
std::vector<Tensor> chunk(const Tensor& x, int64_t n, int64_t dim);
// x itself when contiguous, else a row-major copy (differentiable).
Tensor contiguous(const Tensor& x);
// A contiguous copy that owns its storage (differentiable).
Tensor clone(const Tensor& x);
// A copy converted to dtype; differentiable between f32 and f64 (x.to(dtype)).
Tensor to_dtype(const Tensor& x, DType dtype);

}  // namespace attograd
