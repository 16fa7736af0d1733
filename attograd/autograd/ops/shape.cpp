// Shape ops: forward, then the backward closure right under it.
//
// Shape legend: x is [d0, ..., dn-1]; grad always has the output's shape.
// Views (reshape of a contiguous x, view, transpose, permute, unsqueeze,
// squeeze, expand, slice, narrow, split, chunk) alias x's storage; their
// backward only moves grad back into x's shape.
//
// Higher-order gradients: every backward here is a shape op itself, so it is
// differentiable as written; slice's writes grad into zeros with the
// recorded op unslice, whose own backward is slice again.
#include <attograd/autograd/ops/shape.h>

#include <algorithm>
#include <numeric>

#include <attograd/autograd/engine.h>
#include <attograd/autograd/ops/elementwise.h>

namespace attograd {

namespace {

Shape infer_shape(const Shape& want, int64_t numel, std::string_view op, const Shape& from) {
  Shape out = want;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0) fail<ShapeError>(op, "only one size may be -1, got {}", shape_str(want));
      infer = static_cast<int64_t>(i);
    } else if (out[i] < 0) {
      fail<ShapeError>(op, "invalid size {} in {}", out[i], shape_str(want));
    } else {
      known = checked_mul(known, out[i], op, "the element count of the new shape");
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      fail<ShapeError>(op, "cannot infer -1 in {} for {} elements (from {})", shape_str(want), numel, shape_str(from));
    out[infer] = numel / known;
  }
  if (shape_numel(out) != numel)
    fail<ShapeError>(op, "shape {} ({} elements) does not fit input {} ({} elements)", shape_str(out),
                     shape_numel(out), shape_str(from), numel);
  return out;
}

// wrap_dim accepts dim 0 (or -1) of a 0-d tensor, as reductions want; ops that
// index the size of that dim need a real one.
int64_t wrap_sized_dim(const Tensor& x, int64_t dim, std::string_view op) {
  if (x.dim() == 0) fail<IndexError>(op, "needs a tensor with at least one dim, got a 0-d tensor (dim {})", dim);
  return wrap_dim(dim, x.dim(), op);
}

// unslice: grad [slice's shape] -> out [sx], zeros with grad written into x[start:end:step] along dim
Tensor unslice(const Tensor& grad, const Shape& sx, int64_t dim, int64_t start, int64_t end, int64_t step) {
  Tensor full = Tensor::zeros(sx, grad.dtype());
  slice(full.detach(), dim, start, end, step).copy_(grad);
  return record("unslice", full, {grad}, [dim, start, end, step](const Tensor& g, Grads& dx) {
    // out = zeros with grad in the slice  =>  dgrad = g's slice
    dx[0] += slice(g, dim, start, end, step);
  });
}

// reshape/view share one backward: grad back to x's shape.
Tensor record_reshape(std::string_view op, Tensor out, const Tensor& x) {
  return record(op, out, {x}, [sx = x.shape()](const Tensor& grad, Grads& dx) {
    // out = x viewed as another shape  =>  dx = grad viewed as x's shape
    dx[0] += reshape(grad, sx);
  });
}

}  // namespace

// reshape: x [...] -> out [shape], a view when x is contiguous
Tensor reshape(const Tensor& x, const Shape& shape) {
  const Shape s = infer_shape(shape, x.numel(), "reshape", x.shape());
  if (s == x.shape()) return x;
  const Tensor src = x.is_contiguous() ? x : clone(x);
  return record_reshape("reshape", make_view(src, s, contiguous_strides(s), src.offset()), src);
}

// view: as reshape, but only on contiguous x
Tensor view(const Tensor& x, const Shape& shape) {
  const Shape s = infer_shape(shape, x.numel(), "view", x.shape());
  if (!x.is_contiguous())
    fail<ShapeError>("view", "input {} with strides {} is not contiguous; hint: use reshape() or "
                     "contiguous().view()", shape_str(x.shape()), shape_str(x.strides()));
  return record_reshape("view", make_view(x, s, contiguous_strides(s), x.offset()), x);
}

// transpose: swaps dims d0 and d1 (a view)
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  d0 = wrap_dim(d0, x.dim(), "transpose");
  d1 = wrap_dim(d1, x.dim(), "transpose");
  if (d0 == d1) return x;  // nothing to swap (also the only case for a 0-d x)
  Shape s = x.shape(), st = x.strides();
  std::swap(s[d0], s[d1]);
  std::swap(st[d0], st[d1]);
  return record("transpose", make_view(x, s, st, x.offset()), {x}, [d0, d1](const Tensor& grad, Grads& dx) {
    // out = x with d0, d1 swapped  =>  dx = grad with d0, d1 swapped back
    dx[0] += transpose(grad, d0, d1);
  });
}

// permute: out.dim(i) = x.dim(dims[i]) (a view)
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  const int64_t n = x.dim();
  if (static_cast<int64_t>(dims.size()) != n)
    fail<ShapeError>("permute", "got {} dims for a {}-d tensor {}", dims.size(), n, shape_str(x.shape()));
  std::vector<int64_t> p(n), inverse(n, -1);
  Shape s(n), st(n);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = wrap_dim(dims[i], n, "permute");
    if (inverse[p[i]] != -1) fail<IndexError>("permute", "dim {} appears twice", p[i]);
    inverse[p[i]] = i;
    s[i] = x.shape()[p[i]];
    st[i] = x.strides()[p[i]];
  }
  return record("permute", make_view(x, s, st, x.offset()), {x}, [inverse](const Tensor& grad, Grads& dx) {
    // out = permute(x, p)  =>  dx = permute(grad, p⁻¹)
    dx[0] += permute(grad, inverse);
  });
}

// unsqueeze: inserts a size-1 dim at `dim` (a view)
Tensor unsqueeze(const Tensor& x, int64_t dim) {
  dim = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape s = x.shape(), st = x.strides();
  const int64_t stride = dim < x.dim() ? x.strides()[dim] * x.shape()[dim] : 1;
  s.insert(s.begin() + dim, 1);
  st.insert(st.begin() + dim, stride);
  return record_reshape("unsqueeze", make_view(x, s, st, x.offset()), x);
}

// squeeze: removes dim if its size is 1 (a view)
Tensor squeeze(const Tensor& x, int64_t dim) {
  if (x.dim() == 0) return x;
  dim = wrap_dim(dim, x.dim(), "squeeze");
  if (x.shape()[dim] != 1) return x;
  Shape s = x.shape(), st = x.strides();
  s.erase(s.begin() + dim);
  st.erase(st.begin() + dim);
  return record_reshape("squeeze", make_view(x, s, st, x.offset()), x);
}

Tensor squeeze(const Tensor& x) {
  Shape s, st;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (x.shape()[i] != 1) {
      s.push_back(x.shape()[i]);
      st.push_back(x.strides()[i]);
    }
  if (s.size() == x.shape().size()) return x;
  return record_reshape("squeeze", make_view(x, s, st, x.offset()), x);
}

// expand: x [.., 1, ..] -> out [.., n, ..] with stride 0 on the repeated dims (a view)
Tensor expand(const Tensor& x, const Shape& shape) {
  if (shape.size() < x.shape().size())
    fail<ShapeError>("expand", "target {} has fewer dims than input {}", shape_str(shape), shape_str(x.shape()));
  const size_t lead = shape.size() - x.shape().size();
  Shape s(shape.size()), st(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      if (shape[i] < 0) fail<ShapeError>("expand", "-1 is not allowed for a new leading dim in {}", shape_str(shape));
      s[i] = shape[i];
      continue;
    }
    const int64_t have = x.shape()[i - lead];
    const int64_t want = shape[i] == -1 ? have : shape[i];
    if (want < 0) fail<ShapeError>("expand", "invalid size {} in {}", shape[i], shape_str(shape));
    if (have != want && have != 1)
      fail<ShapeError>("expand", "cannot expand {} to {} (dim {}: {} is not 1); hint: only size-1 dims repeat",
                       shape_str(x.shape()), shape_str(shape), i, have);
    s[i] = want;
    st[i] = have == want ? x.strides()[i - lead] : 0;
  }
  if (s == x.shape()) return x;
  return record("expand", make_view(x, s, st, x.offset()), {x}, [sx = x.shape()](const Tensor& grad, Grads& dx) {
    // out = x repeated along broadcast dims  =>  dx = grad summed over them
    dx[0] += sum_to(grad, sx);
  });
}

// slice: out = x[..., start:end:step, ...] along dim (a view)
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  dim = wrap_sized_dim(x, dim, "slice");
  if (step <= 0) fail<ValueError>("slice", "step must be positive, got {}", step);
  const int64_t n = x.shape()[dim];
  auto clip = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  start = clip(start);
  end = std::max(clip(end), start);
  Shape s = x.shape(), st = x.strides();
  s[dim] = (end - start + step - 1) / step;
  st[dim] *= step;
  Tensor out = make_view(x, s, st, x.offset() + start * x.strides()[dim]);
  return record("slice", out, {x}, [sx = x.shape(), dim, start, end, step](const Tensor& grad, Grads& dx) {
    // out = x[start:end:step] along dim  =>  dx = zeros with grad written into that slice
    dx[0] += unslice(grad, sx, dim, start, end, step);
  });
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  const int64_t d = wrap_sized_dim(x, dim, "narrow");
  if (start < 0 || length < 0 || start + length > x.shape()[d])
    fail<IndexError>("narrow", "[{}, {}) is outside dim {} of size {}", start, start + length, d, x.shape()[d]);
  return slice(x, d, start, start + length);
}

// cat: xs[i] [.., n_i, ..] -> out [.., Σ n_i, ..] along dim (a copy)
Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  if (xs.empty()) fail<ValueError>("cat", "needs at least one tensor");
  const Tensor& first = xs[0];
  if (first.dim() == 0)
    fail<ShapeError>("cat", "cannot concatenate 0-d tensors; hint: use stack(), or unsqueeze(0) them first");
  dim = wrap_dim(dim, first.dim(), "cat");
  Shape s = first.shape();
  s[dim] = 0;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i];
    if (t.dtype() != first.dtype())
      fail<DTypeError>("cat", "tensor {} has dtype {}, tensor 0 has {}", i, dtype_name(t.dtype()), dtype_name(first.dtype()));
    bool ok = t.dim() == first.dim();
    for (int64_t d = 0; ok && d < t.dim(); ++d) ok = d == dim || t.shape()[d] == first.shape()[d];
    if (!ok)
      fail<ShapeError>("cat", "tensor {} has shape {}, which does not match tensor 0's {} outside dim {}", i,
                       shape_str(t.shape()), shape_str(first.shape()), dim);
    sizes.push_back(t.shape()[dim]);
    s[dim] += t.shape()[dim];
  }
  Tensor out = Tensor::empty(s, first.dtype());
  int64_t off = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    slice(out, dim, off, off + sizes[i]).copy_(xs[i]);
    off += sizes[i];
  }
  return record("cat", out, xs, [sizes, dim](const Tensor& grad, Grads& dx) {
    // out = [x0 | x1 | ...] along dim  =>  dx_i = the i-th block of grad
    int64_t o = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (dx.needs(i)) dx[i] += slice(grad, dim, o, o + sizes[i]);
      o += sizes[i];
    }
  });
}

// stack: xs[i] [...] -> out with a new dim of size xs.size() at `dim`
Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  if (xs.empty()) fail<ValueError>("stack", "needs at least one tensor");
  dim = wrap_dim(dim, xs[0].dim() + 1, "stack");
  for (size_t i = 1; i < xs.size(); ++i)
    if (xs[i].shape() != xs[0].shape())
      fail<ShapeError>("stack", "tensor {} has shape {}, tensor 0 has {}; all must match", i,
                       shape_str(xs[i].shape()), shape_str(xs[0].shape()));
  std::vector<Tensor> parts;
  for (const Tensor& t : xs) parts.push_back(unsqueeze(t, dim));
  return cat(parts, dim);
}

std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim) {
  dim = wrap_sized_dim(x, dim, "split");
  if (size <= 0) fail<ValueError>("split", "size must be positive, got {}", size);
  std::vector<Tensor> out;
  for (int64_t s = 0; s < x.shape()[dim]; s += size) out.push_back(slice(x, dim, s, s + size));
  return out;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t n, int64_t dim) {
  if (n <= 0) fail<ValueError>("chunk", "number of chunks must be positive, got {}", n);
  const int64_t len = x.size(wrap_sized_dim(x, dim, "chunk"));
  return split(x, std::max<int64_t>(1, (len + n - 1) / n), dim);
}

// clone: out = a contiguous copy of x
Tensor clone(const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  out.copy_(x);
  return record("clone", out, {x}, [](const Tensor& grad, Grads& dx) {
    // out = x  =>  dx = grad
    dx[0] += grad;
  });
}

Tensor contiguous(const Tensor& x) { return x.is_contiguous() ? x : clone(x); }

// to_dtype: out = x converted to dtype (x itself when it already has it)
Tensor to_dtype(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor out = Tensor::empty(x.shape(), dtype);
  out.copy_(x);
  if (!is_floating(dtype)) return out;
  return record("to", out, {x}, [from = x.dtype()](const Tensor& grad, Grads& dx) {
    // out = x in another precision  =>  dx = grad in x's precision
    dx[0] += to_dtype(grad, from);
  });
}

// ---- Tensor members that forward here ----------------------------------------------

Tensor Tensor::reshape(const Shape& s) const { return attograd::reshape(*this, s); }
Tensor Tensor::view(const Shape& s) const { return attograd::view(*this, s); }
Tensor Tensor::transpose(int64_t a, int64_t b) const { return attograd::transpose(*this, a, b); }
Tensor Tensor::permute(const std::vector<int64_t>& d) const { return attograd::permute(*this, d); }
Tensor Tensor::slice(int64_t d, int64_t s, int64_t e, int64_t st) const { return attograd::slice(*this, d, s, e, st); }
Tensor Tensor::narrow(int64_t d, int64_t s, int64_t l) const { return attograd::narrow(*this, d, s, l); }
Tensor Tensor::expand(const Shape& s) const { return attograd::expand(*this, s); }
Tensor Tensor::unsqueeze(int64_t d) const { return attograd::unsqueeze(*this, d); }
Tensor Tensor::squeeze(int64_t d) const { return attograd::squeeze(*this, d); }
Tensor Tensor::squeeze() const { return attograd::squeeze(*this); }
Tensor Tensor::contiguous() const { return attograd::contiguous(*this); }
Tensor Tensor::clone() const { return attograd::clone(*this); }
Tensor Tensor::to(DType d) const { return attograd::to_dtype(*this, d); }

}  // namespace attograd
