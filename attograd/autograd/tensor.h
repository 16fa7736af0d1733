// Tensor: an N-dimensional, row-major array with a runtime dtype, plus the
// autograd fields that let it take part in a graph.
//
// Layout, said once for the whole project: tensors are row-major and sequence
// data is [B, T, E] (batch, time, features); attention splits E into [B, H, T, D].
//
// Aliasing. A Tensor is a cheap shared handle (a shared_ptr to TensorImpl):
//  - copying a Tensor copies the handle; both names are the same tensor;
//  - views (reshape of a contiguous tensor, view, transpose, permute, slice,
//    narrow, expand, squeeze, unsqueeze, detach) make a new TensorImpl that
//    shares the Storage: writing through one is seen through the other;
//  - contiguous() returns the same tensor when already contiguous, otherwise a
//    copy; clone() and to(dtype) always copy;
//  - reshape() of a non-contiguous tensor copies (view() refuses instead);
//  - data<T>() and span<T>() point into the storage: writes through them are
//    seen by every view, are not recorded by autograd, and the pointer lives as
//    long as some tensor holds the storage; such a write does not change
//    version() unless the writer calls bump_version() (the optimizers do);
//  - set_data_(src) makes this tensor a view of src's storage in place: every
//    copy of the handle sees the new data, views made before keep the old.
// Identity: is_same() is true for copies of one handle and false for views,
// even of the same elements (shares_storage() says whether the bytes are shared).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <attograd/autograd/backend/allocator.h>
#include <attograd/autograd/dtype.h>
#include <attograd/autograd/generator.h>
#include <attograd/autograd/kernels/walk.h>

namespace attograd {

// A tensor's sizes (or strides), outermost dim first.
using Shape = std::vector<int64_t>;
struct Node;

// What a Tensor handle points at: storage, layout and autograd fields. Its
// definition is internal to autograd/ (attograd/autograd/tensor_impl.h).
struct TensorImpl;

// An N-dimensional array with a dtype, and a node of the autograd graph when
// it requires grad; a cheap shared handle (see above for aliasing).
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}  // autograd/ only

  // ---- creation -----------------------------------------------------------
  // A new contiguous tensor of `shape` with uninitialized values. A negative
  // size is a ShapeError.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32);
  // A new contiguous tensor of `shape` filled with 0 (false for b8).
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  // A new contiguous tensor of `shape` filled with 1 (true for b8).
  static Tensor ones(const Shape& shape, DType dtype = DType::f32);
  // A new contiguous tensor of `shape` with every element `value`, converted to dtype.
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32);
  // 1-d: start, start + step, ... while below end (above it for a negative step),
  // ceil((end - start) / step) elements, none if that is negative; step 0 is a ValueError.
  static Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::f32);
  static Tensor rand(const Shape& shape, Generator& gen, DType dtype = DType::f32);   // U[0,1)
  static Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::f32);  // N(0,1)
  // Values drawn from U[lo, hi) by gen; floating dtypes only (DTypeError), lo > hi is a ValueError.
  static Tensor uniform(const Shape& shape, double lo, double hi, Generator& gen,
                        DType dtype = DType::f32);
  // Values drawn from N(mean, std²) by gen; floating dtypes only (DTypeError), std < 0 is a ValueError.
  static Tensor normal(const Shape& shape, double mean, double std, Generator& gen,
                       DType dtype = DType::f32);
  // From values and a shape; the values are converted to dtype.
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape,
                            DType dtype = DType::f32);
  // From float, int64_t or bool values: an f32, i64 or b8 tensor. Values that
  // do not fill shape are a ShapeError (in every from_vector).
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape);
  static Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape);
  static Tensor from_vector(const std::vector<bool>& values, const Shape& shape);
  // Tensor::from_list({1, 2, 3, 4}, {2, 2}): from_vector for a braced list.
  static Tensor from_list(std::initializer_list<double> values, const Shape& shape,
                          DType dtype = DType::f32);
  // A 0-d tensor (shape []) holding value.
  static Tensor scalar(double value, DType dtype = DType::f32);

  // ---- metadata -----------------------------------------------------------
  // False for a default-constructed Tensor (no storage); most calls on one are a ValueError.
  bool defined() const { return impl_ != nullptr; }
  // Sizes of each dim, outermost first ([] for a 0-d tensor).
  const Shape& shape() const;
  // Element (not byte) steps per dim; a view's may be non-contiguous or 0 (expand).
  const Shape& strides() const;
  // Number of dims (0 for a scalar).
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  // Number of elements: the product of the shape (1 for a 0-d tensor).
  int64_t numel() const;
  // The element type (f32, f64, i64, b8 or bf16).
  DType dtype() const;
  // Index of element [0,...,0] in the storage, in elements (non-zero for some views).
  int64_t offset() const;
  // True when the strides are the row-major strides of the shape.
  bool is_contiguous() const;
  // True when this and other share storage.
  bool shares_storage(const Tensor& other) const;
  // True when both handles name the same tensor (see Identity above).
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  // A key for sets and maps of tensors by identity, like Python's id(): equal
  // exactly when is_same; valid while the tensor lives.
  const void* id() const { return impl_.get(); }

  // ---- data access --------------------------------------------------------
  // Pointer to element [0,...,0]; checks that T matches the dtype.
  template <class T> T* data() const;
  // The numel() elements of a contiguous tensor, in row-major order: a raw
  // pointer and a size, for tight loops. Checks that T matches the dtype and
  // that the tensor is contiguous (call contiguous() first, and copy_ back if
  // the writes must reach a strided tensor).
  template <class T> std::span<T> span() const;
  // Untyped pointer to element [0,...,0] (storage plus offset), for code that
  // dispatches on dtype() itself.
  void* raw_data() const;
  double item() const;  // a one-element tensor's value
  template <class T> std::vector<T> to_vector() const;  // converted, logical order
  // A copy in another dtype, differentiable between f32 and f64; to bf16 it
  // rounds as PyTorch does (bfloat16.h) and is not recorded (bf16 cannot
  // require grad).
  Tensor to(DType dtype) const;
  Tensor contiguous() const;          // self if contiguous, else a copy (differentiable)
  Tensor clone() const;               // always a copy (differentiable)
  // Copy src's values into this tensor in place (shapes must match; dtype converts).
  // Not recorded by autograd; use under NoGradGuard on parameters.
  void copy_(const Tensor& src);
  // Sets every element to value (converted to the dtype), in place through any
  // strides. Not recorded by autograd.
  void fill_(double value);
  // PyTorch's `t.data = src`: this tensor takes src's storage, layout and
  // dtype in place, so every copy of the handle (a module's member, an
  // optimizer's list) sees them; it then shares src's storage (pass src.clone()
  // to own a copy). Keeps identity and requires_grad; drops .grad, which
  // belonged to the old data, and graphs recorded before no longer reach this
  // tensor's .grad. Only on leaves; not recorded by autograd.
  void set_data_(const Tensor& src);
  // The storage's version, shared by every view of it: a new value after every
  // in-place write the library makes (copy_, fill_, add_, the optimizers'
  // step, load_state_dict, broadcast_parameters, bump_version()), and unique
  // across storages (set_data_ changes it too), so an unchanged version means
  // unchanged bytes. What is derived from a weight and kept (the GEMM layer's
  // wᵀ, a decode step's stacked q | k | v) is remade when it changes, so a
  // stale copy is never read. Like PyTorch's `_version`.
  int64_t version() const;
  // Gives the storage a new version(): call after writing through data<T>(),
  // span<T>() or raw_data() if anything may have kept a copy of the old bytes.
  void bump_version() const;

  // ---- autograd (the members that need the graph's Node: requires_grad_,
  // set_data_, grad_fn_name and backward, are defined in engine.cpp) ------
  // True for a leaf marked with requires_grad_() and for every result of a
  // recorded op on one.
  bool requires_grad() const;
  // Mark a leaf as needing a gradient. Only f32 and f64 leaves can (not bf16:
  // storage only, see dtype.h); anything else is a DTypeError.
  Tensor& requires_grad_(bool on = true);
  // True when no recorded op made this tensor (it has no grad_fn); backward
  // fills .grad on leaves only.
  bool is_leaf() const;
  Tensor grad() const;           // undefined until a backward reaches this leaf
  // Replaces .grad (an undefined g clears it); g must have this tensor's shape
  // and dtype (ShapeError, DTypeError).
  void set_grad(const Tensor& g);
  void zero_grad();              // drops .grad (PyTorch's set_to_none=True)
  // The graph node that made this tensor (null for leaves).
  const std::shared_ptr<Node>& grad_fn() const;
  std::string grad_fn_name() const;  // "" for leaves
  // A view of the same storage with no graph history and requires_grad false.
  Tensor detach() const;
  // Reverse-mode: without `grad` the tensor must hold one element.
  // create_graph records the backward pass too (and keeps the graph), so the
  // leaves' .grad can be differentiated again (see grad() in engine.h).
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false, bool create_graph = false) const;

  // ---- views and shape (differentiable; defined in ops/shape.cpp) ---------
  // The same elements in another shape (one size may be -1, inferred): a view
  // when contiguous, else a copy. A numel mismatch is a ShapeError.
  Tensor reshape(const Shape& shape) const;
  // Like reshape, but always a view: a non-contiguous tensor is a ShapeError.
  Tensor view(const Shape& shape) const;
  // A view with dims d0 and d1 swapped (negative dims count from the end).
  Tensor transpose(int64_t d0, int64_t d1) const;
  // A view whose dim i is this tensor's dim dims[i]; dims must be a permutation.
  Tensor permute(const std::vector<int64_t>& dims) const;
  // A view of indices start, start + step, ... below end along dim (negative
  // start/end wrap, then clamp like Python's); step <= 0 is a ValueError.
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  // A view of `length` indices from start along dim; out of range is an IndexError.
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  // A view broadcast to shape (size-1 dims repeat with stride 0, new dims are
  // added on the left); the gradient sums back over them.
  Tensor expand(const Shape& shape) const;
  // A view with a new size-1 dim at position dim.
  Tensor unsqueeze(int64_t dim) const;
  // A view without dim if its size is 1; otherwise this tensor unchanged.
  Tensor squeeze(int64_t dim) const;
  // A view without any of the size-1 dims.
  Tensor squeeze() const;
  // A 1-d reshape of all numel() elements.
  Tensor flatten() const { return reshape({numel()}); }

  // Internal to autograd/: TensorImpl is defined in attograd/autograd/tensor_impl.h,
  // which nothing outside autograd/ includes. Elsewhere use the API above.
  TensorImpl* impl() const { return impl_.get(); }
  // The shared handle itself (autograd/ only).
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  void check_defined(std::string_view what) const;
  void check_element_type(DType asked, std::string_view op) const;  // defined, and of dtype `asked`
  std::shared_ptr<TensorImpl> impl_;
};

// ---- helpers used by ops --------------------------------------------------
std::string shape_str(const Shape& s);        // "[2, 3]"
// Product of the sizes (1 for []); a product past int64 is a ShapeError.
int64_t shape_numel(const Shape& s);

// ---- sizes that cannot overflow ------------------------------------------
// Every element count or byte size computed from a shape, a file or a config
// goes through these. The try_ forms return nullopt when the result does not
// fit int64; the checked_ forms throw ShapeError "<op>: <what> ..." instead,
// naming the tensor or config field.

// a · b, or nullopt past int64.
std::optional<int64_t> try_mul(int64_t a, int64_t b);
// The product of s's sizes (0 when any is 0, whatever the others), or nullopt past int64.
std::optional<int64_t> try_numel(const Shape& s);
// The bytes of a tensor of shape s and dtype, or nullopt past int64.
std::optional<int64_t> try_nbytes(const Shape& s, DType dtype);
// a · b; ShapeError "<op>: <what> overflows int64 (a x b)" past int64.
int64_t checked_mul(int64_t a, int64_t b, std::string_view op, std::string_view what);
// a + b; ShapeError "<op>: <what> overflows int64 (a + b)" past int64.
int64_t checked_add(int64_t a, int64_t b, std::string_view op, std::string_view what);
// try_numel, or a ShapeError naming `what` and the shape.
int64_t checked_numel(const Shape& s, std::string_view op, std::string_view what);
// try_nbytes, or a ShapeError naming `what`, the shape and the dtype.
int64_t checked_nbytes(const Shape& s, DType dtype, std::string_view op, std::string_view what);
// Row-major strides of shape s, in elements.
Shape contiguous_strides(const Shape& s);
// Wrap a possibly negative dim into [0, ndim); IndexError names `op`.
int64_t wrap_dim(int64_t dim, int64_t ndim, std::string_view op);
// A new TensorImpl sharing t's storage with another shape/strides/offset.
Tensor make_view(const Tensor& t, Shape shape, Shape strides, int64_t offset);

// NumPy broadcasting: align from the right; sizes must match or be 1.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);
// t's strides seen from `out` (a broadcast of t's shape): 0 where t is broadcast.
Shape broadcast_strides(const Tensor& t, const Shape& out);

// In place, not recorded: acc += g (same dtype; g broadcasts to acc). Used to
// accumulate gradients and by optimizers under NoGradGuard.
void add_(Tensor& acc, const Tensor& g);
// a + g in a fresh contiguous tensor, not recorded (same rules as add_).
Tensor add_values(const Tensor& a, const Tensor& g);
// t's values in a contiguous buffer, not recorded: t itself (detached) when
// already contiguous, else a copy; undefined stays undefined.
Tensor contiguous_values(const Tensor& t);

}  // namespace attograd

template <>
struct fmt::formatter<attograd::DType> : fmt::formatter<std::string_view> {
  fmt::format_context::iterator format(attograd::DType d, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(attograd::dtype_name(d), ctx);
  }
};
