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
//    long as some tensor holds the storage;
//  - set_data_(src) makes this tensor a view of src's storage in place: every
//    copy of the handle sees the new data, views made before keep the old.
// Identity: is_same() is true for copies of one handle and false for views,
// even of the same elements (shares_storage() says whether the bytes are shared).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <attograd/autograd/backend/allocator.h>
#include <attograd/autograd/dtype.h>
#include <attograd/autograd/generator.h>
#include <attograd/autograd/kernels/walk.h>

namespace attograd {

using Shape = std::vector<int64_t>;
struct Node;

// What a Tensor handle points at: storage, layout and autograd fields. Its
// definition is internal to autograd/ (autograd/tensor_impl.h).
struct TensorImpl;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}  // autograd/ only

  // ---- creation -----------------------------------------------------------
  static Tensor empty(const Shape& shape, DType dtype = DType::f32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  static Tensor ones(const Shape& shape, DType dtype = DType::f32);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32);
  static Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::f32);
  static Tensor rand(const Shape& shape, Generator& gen, DType dtype = DType::f32);   // U[0,1)
  static Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::f32);  // N(0,1)
  static Tensor uniform(const Shape& shape, double lo, double hi, Generator& gen,
                        DType dtype = DType::f32);
  static Tensor normal(const Shape& shape, double mean, double std, Generator& gen,
                       DType dtype = DType::f32);
  // From values and a shape; the values are converted to dtype.
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape,
                            DType dtype = DType::f32);
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape);
  static Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape);
  static Tensor from_vector(const std::vector<bool>& values, const Shape& shape);
  static Tensor from_list(std::initializer_list<double> values, const Shape& shape,
                          DType dtype = DType::f32);
  static Tensor scalar(double value, DType dtype = DType::f32);

  // ---- metadata -----------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& strides() const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const;
  DType dtype() const;
  int64_t offset() const;
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
  void* raw_data() const;
  double item() const;  // a one-element tensor's value
  template <class T> std::vector<T> to_vector() const;  // converted, logical order
  Tensor to(DType dtype) const;       // a copy in another dtype (differentiable between floats)
  Tensor contiguous() const;          // self if contiguous, else a copy (differentiable)
  Tensor clone() const;               // always a copy (differentiable)
  // Copy src's values into this tensor in place (shapes must match; dtype converts).
  // Not recorded by autograd; use under NoGradGuard on parameters.
  void copy_(const Tensor& src);
  void fill_(double value);
  // PyTorch's `t.data = src`: this tensor takes src's storage, layout and
  // dtype in place, so every copy of the handle (a module's member, an
  // optimizer's list) sees them; it then shares src's storage (pass src.clone()
  // to own a copy). Keeps identity and requires_grad; drops .grad, which
  // belonged to the old data, and graphs recorded before no longer reach this
  // tensor's .grad. Only on leaves; not recorded by autograd.
  void set_data_(const Tensor& src);

  // ---- autograd (the members that need the graph's Node: requires_grad_,
  // set_data_, grad_fn_name and backward, are defined in engine.cpp) ------
  bool requires_grad() const;
  // Mark a leaf as needing a gradient. Only floating leaves can.
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const;
  Tensor grad() const;           // undefined until a backward reaches this leaf
  void set_grad(const Tensor& g);
  void zero_grad();              // drops .grad (PyTorch's set_to_none=True)
  const std::shared_ptr<Node>& grad_fn() const;
  std::string grad_fn_name() const;  // "" for leaves
  // A view of the same storage with no graph history and requires_grad false.
  Tensor detach() const;
  // Reverse-mode: without `grad` the tensor must hold one element.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;

  // ---- views and shape (differentiable; defined in ops/shape.cpp) ---------
  Tensor reshape(const Shape& shape) const;
  Tensor view(const Shape& shape) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor expand(const Shape& shape) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor flatten() const { return reshape({numel()}); }

  // Internal to autograd/: TensorImpl is defined in autograd/tensor_impl.h,
  // which nothing outside autograd/ includes. Elsewhere use the API above.
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  void check_defined(std::string_view what) const;
  void check_element_type(DType asked, std::string_view op) const;  // defined, and of dtype `asked`
  std::shared_ptr<TensorImpl> impl_;
};

// ---- helpers used by ops --------------------------------------------------
std::string shape_str(const Shape& s);        // "[2, 3]"
int64_t shape_numel(const Shape& s);
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
