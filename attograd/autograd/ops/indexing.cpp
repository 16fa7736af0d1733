// Indexing ops: forward, then the backward closure right under it.
//
// Shape legend: x [..., n, ...] with n at `dim`; L index length; V vocab
// (table rows), E embedding width; grad has out's shape. Each forward reads
// x through its strides (no copy); each backward scatter-adds grad into a
// zeroed buffer of x's shape with `+=`, so repeated indices accumulate.
//
// Higher-order gradients: each backward is linear in grad and records its
// scatter as an op whose own backward is the forward selection again
// (index_select, embedding, gather), so it is differentiable to any order.
#include <attograd/autograd/ops/indexing.h>

#include <attograd/autograd/engine.h>
#include <attograd/autograd/ops/elementwise.h>
#include <attograd/autograd/tensor_impl.h>

namespace attograd {

namespace {

void check_index(std::string_view op, const Tensor& index) {
  if (!index.defined()) fail<ValueError>(op, "index is an undefined tensor");
  if (index.dtype() != DType::i64)
    fail<DTypeError>(op, "index must be i64, got {} {}; hint: build it with Tensor::from_vector(std::vector<int64_t>) "
                     "or convert with .to(DType::i64)", dtype_name(index.dtype()), shape_str(index.shape()));
}

void check_in_range(std::string_view op, int64_t i, int64_t n, int64_t dim, const Tensor& x) {
  if (i < 0 || i >= n)
    fail<IndexError>(op, "index {} is out of range for dim {} of size {} (input {}); valid range is [0, {})", i, dim, n,
                     shape_str(x.shape()), n);
}

// Calls fn(k, o) for the elements of t's slices idx[0], idx[1], ... along
// dim, in the row-major order of the selection [..., L, ...]: k counts 0, 1,
// 2, ... and o is the element's offset in t's storage.
template <class F>
void for_each_selected(const Tensor& t, int64_t dim, const std::vector<int64_t>& idx, F&& fn) {
  const Shape &s = t.shape(), &st = t.strides();
  const Shape outer(s.begin(), s.begin() + dim), outer_st(st.begin(), st.begin() + dim);
  const Shape inner(s.begin() + dim + 1, s.end()), inner_st(st.begin() + dim + 1, st.end());
  int64_t k = 0;
  for_each_offset(outer, outer_st, t.offset(), [&](int64_t o) {
    for (int64_t i : idx) for_each_offset(inner, inner_st, o + i * st[dim], [&](int64_t e) { fn(k++, e); });
  });
}

}  // namespace

// index_select: x [..., n, ...], index [L] -> out [..., L, ...]
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  check_index("index_select", index);
  if (index.dim() > 1)
    fail<ShapeError>("index_select", "index must be 1-d, got shape {}; hint: flatten it, or use gather for an "
                     "index per element", shape_str(index.shape()));
  if (x.dim() == 0) fail<ShapeError>("index_select", "input must have at least 1 dim, got a 0-d tensor");
  dim = wrap_dim(dim, x.dim(), "index_select");
  const std::vector<int64_t> idx = index.to_vector<int64_t>();  // [L]
  for (int64_t i : idx) check_in_range("index_select", i, x.shape()[dim], dim, x);
  Shape out_shape = x.shape();
  out_shape[dim] = static_cast<int64_t>(idx.size());
  Tensor out = Tensor::empty(out_shape, x.dtype());
  dispatch_all(x.dtype(), [&]<class T>() {
    const T* px = storage_base<T>(x);
    T* po = out.data<T>();
    for_each_selected(x, dim, idx, [&](int64_t k, int64_t o) { po[k] = px[o]; });
  });
  return record("index_select", out, {x}, {{"index", Tensor::from_vector(idx, {static_cast<int64_t>(idx.size())})}},
                [dim, sx = x.shape()](const Tensor& grad, Grads& dx, const Tensor& index_) {
    // out = x[..., index, ...] along dim  =>  dx[..., index[j], ...] += grad[..., j, ...]
    const std::vector<int64_t> at = index_.to_vector<int64_t>();
    Tensor acc = Tensor::zeros(sx, grad.dtype());  // x's shape
    const Tensor g = grad.contiguous();
    dispatch_float(grad.dtype(), "index_select", [&]<class T>() {
      const T* pg = g.data<T>();
      T* pa = storage_base<T>(acc);
      for_each_selected(acc, dim, at, [&](int64_t k, int64_t o) { pa[o] += pg[k]; });
    });
    if (!dx.create_graph()) {
      dx[0] += acc;
      return;
    }
    dx[0] += record("index_select_backward", acc, {grad}, {{"index", index_}},
                    [dim](const Tensor& gg, Grads& d, const Tensor& at_) {
      // out = grad scatter-added at index  =>  dgrad = gg[..., index, ...]
      d[0] += index_select(gg, dim, at_);
    });
  });
}

// embedding: weight [V, E], ids [...] -> out [..., E]
Tensor embedding(const Tensor& weight, const Tensor& ids, std::optional<int64_t> padding_idx) {
  check_index("embedding", ids);
  if (!weight.defined() || weight.dim() != 2)
    fail<ShapeError>("embedding", "weight must be a [V, E] table, got shape {}",
                     weight.defined() ? shape_str(weight.shape()) : "undefined");
  const int64_t V = weight.size(0), E = weight.size(1);
  if (padding_idx) {
    if (*padding_idx < -V || *padding_idx >= V)
      fail<ValueError>("embedding", "padding_idx {} is outside [-{}, {}) for weight {}", *padding_idx, V, V,
                       shape_str(weight.shape()));
    if (*padding_idx < 0) *padding_idx += V;
  }
  const std::vector<int64_t> idx = ids.to_vector<int64_t>();  // [N], N = numel(ids)
  for (size_t p = 0; p < idx.size(); ++p)
    if (idx[p] < 0 || idx[p] >= V)
      fail<IndexError>("embedding", "id {} (element {} of ids {}) is out of range for weight {}; valid range is "
                       "[0, {}); hint: is the vocabulary size right?", idx[p], p, shape_str(ids.shape()),
                       shape_str(weight.shape()), V);
  Shape out_shape = ids.shape();
  out_shape.push_back(E);
  Tensor out = Tensor::empty(out_shape, weight.dtype());
  dispatch_all(weight.dtype(), [&]<class T>() {
    const T* pw = storage_base<T>(weight);
    T* po = out.data<T>();
    for_each_selected(weight, 0, idx, [&](int64_t k, int64_t o) { po[k] = pw[o]; });
  });
  return record("embedding", out, {weight}, {{"ids", Tensor::from_vector(idx, {static_cast<int64_t>(idx.size())})}},
                [padding_idx, V, E](const Tensor& grad, Grads& dx, const Tensor& ids_) {
    // out[p] = weight[ids[p]]  =>  dweight[ids[p]] += grad[p], except the padding_idx row
    const std::vector<int64_t> at = ids_.to_vector<int64_t>();
    Tensor dw = Tensor::zeros({V, E}, grad.dtype());  // [V, E]
    const Tensor g = grad.contiguous();               // [N, E]
    dispatch_float(grad.dtype(), "embedding", [&]<class T>() {
      const T* pg = g.data<T>();
      T* pd = dw.data<T>();
      for (size_t p = 0; p < at.size(); ++p) {
        if (at[p] == padding_idx) continue;
        for (int64_t e = 0; e < E; ++e) pd[at[p] * E + e] += pg[static_cast<int64_t>(p) * E + e];
      }
    });
    if (!dx.create_graph()) {
      dx[0] += dw;
      return;
    }
    dx[0] += record("embedding_backward", dw, {grad}, {{"ids", ids_}},
                    [padding_idx, gshape = grad.shape()](const Tensor& gg, Grads& d, const Tensor& at_) {
      // out[ids[p]] += grad[p] (not the padding_idx row)  =>  dgrad[p] = gg[ids[p]], 0 where ids[p] is padding_idx
      Tensor rows = embedding(gg, at_);  // [N, E]
      if (padding_idx)
        rows = masked_fill(rows, eq(at_, Tensor::scalar(static_cast<double>(*padding_idx), DType::i64)).unsqueeze(1), 0.0);
      d[0] += rows.reshape(gshape);
    });
  });
}

// gather: x [d0, ..., dn-1], index [i0, ..., in-1] -> out [i0, ..., in-1]
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  check_index("gather", index);
  if (x.dim() == 0) fail<ShapeError>("gather", "input must have at least 1 dim, got a 0-d tensor");
  dim = wrap_dim(dim, x.dim(), "gather");
  bool fits = index.dim() == x.dim();
  for (int64_t d = 0; fits && d < x.dim(); ++d) fits = d == dim || index.shape()[d] <= x.shape()[d];
  if (!fits)
    fail<ShapeError>("gather", "index {} does not fit input {} at dim {}: it needs as many dims, and no larger "
                     "sizes outside dim {}; hint: unsqueeze the index, e.g. target [N] -> [N, 1]",
                     shape_str(index.shape()), shape_str(x.shape()), dim, dim);
  Shape xst = x.strides();  // walking index's positions over x, dim's stride comes from the index value
  xst[dim] = 0;
  const int64_t n = x.shape()[dim], x_step = x.strides()[dim];
  Tensor out = Tensor::empty(index.shape(), x.dtype());
  dispatch_all(x.dtype(), [&]<class T>() {
    const T* px = storage_base<T>(x);
    const int64_t* pi = storage_base<int64_t>(index);
    T* po = out.data<T>();
    int64_t k = 0;
    for_each_offset(
        index.shape(),
        [&](int64_t ox, int64_t oi) {
          const int64_t i = pi[oi];
          check_in_range("gather", i, n, dim, x);
          po[k++] = px[ox + i * x_step];
        },
        Strided{xst, x.offset()}, Strided{index.strides(), index.offset()});
  });
  return record("gather", out, {x}, {{"index", index.detach()}},
                [dim, sx = x.shape()](const Tensor& grad, Grads& dx, const Tensor& index_) {
    // out[p] = x[p with p[dim] = index[p]]  =>  dx[p with p[dim] = index[p]] += grad[p]
    Tensor acc = Tensor::zeros(sx, grad.dtype());  // x's shape, contiguous
    Shape acc_st = acc.strides();
    const int64_t acc_step = acc_st[dim];
    acc_st[dim] = 0;
    dispatch_float(grad.dtype(), "gather", [&]<class T>() {
      const int64_t* pi = storage_base<int64_t>(index_);
      const T* pg = storage_base<T>(grad);
      T* pa = acc.data<T>();
      for_each_offset(
          index_.shape(), [&](int64_t oa, int64_t oi, int64_t og) { pa[oa + pi[oi] * acc_step] += pg[og]; },
          Strided{acc_st, 0}, Strided{index_.strides(), index_.offset()}, Strided{grad.strides(), grad.offset()});
    });
    dx[0] += record("gather_backward", acc, {grad}, {{"index", index_}},
                    [dim](const Tensor& gg, Grads& d, const Tensor& at_) {
      // out[p with p[dim] = index[p]] += grad[p]  =>  dgrad = gather(gg, dim, index)
      d[0] += gather(gg, dim, at_);
    });
  });
}

}  // namespace attograd
