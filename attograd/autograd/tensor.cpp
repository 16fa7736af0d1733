#include <attograd/autograd/tensor.h>
#include <attograd/autograd/tensor_impl.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include <attograd/autograd/kernels/add.h>

namespace attograd {

Storage::Storage(size_t n, std::shared_ptr<Allocator> alloc)
    : nbytes(n), allocator(std::move(alloc)) {
  data = allocator->allocate(nbytes);
}
Storage::~Storage() { allocator->deallocate(data, nbytes); }

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::optional<int64_t> try_mul(int64_t a, int64_t b) {
  int64_t out;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

std::optional<int64_t> try_numel(const Shape& s) {
  if (std::find(s.begin(), s.end(), 0) != s.end()) return 0;  // [0, 2^62, 2^62] holds nothing
  std::optional<int64_t> n = 1;
  for (int64_t d : s)
    if (!(n = try_mul(*n, d))) return std::nullopt;
  return n;
}

std::optional<int64_t> try_nbytes(const Shape& s, DType dtype) {
  const std::optional<int64_t> n = try_numel(s);
  return n ? try_mul(*n, static_cast<int64_t>(dtype_size(dtype))) : std::nullopt;
}

int64_t checked_mul(int64_t a, int64_t b, std::string_view op, std::string_view what) {
  if (const auto out = try_mul(a, b)) return *out;
  fail<ShapeError>(op, "{} overflows int64 ({} x {}); hint: the sizes are corrupt or far too large", what, a, b);
}

int64_t checked_add(int64_t a, int64_t b, std::string_view op, std::string_view what) {
  int64_t out;
  if (!__builtin_add_overflow(a, b, &out)) return out;
  fail<ShapeError>(op, "{} overflows int64 ({} + {}); hint: the sizes are corrupt or far too large", what, a, b);
}

int64_t checked_numel(const Shape& s, std::string_view op, std::string_view what) {
  if (const auto n = try_numel(s)) return *n;
  fail<ShapeError>(op, "the element count of {} shape {} overflows int64; hint: the sizes are corrupt or far too "
                   "large", what, shape_str(s));
}

int64_t checked_nbytes(const Shape& s, DType dtype, std::string_view op, std::string_view what) {
  if (const auto n = try_nbytes(s, dtype)) return *n;
  fail<ShapeError>(op, "{} shape {} of {} needs more than 2^63 bytes; hint: the sizes are corrupt or far too large",
                   what, shape_str(s), dtype_name(dtype));
}

int64_t shape_numel(const Shape& s) { return checked_numel(s, "shape_numel", "a"); }

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, std::string_view op) {
  const int64_t lo = -std::max<int64_t>(ndim, 1), hi = std::max<int64_t>(ndim, 1) - 1;
  if (dim < lo || dim > hi)
    fail<IndexError>(op, "dim {} is out of range for a {}-d tensor (expected [{}, {}])", dim, ndim,
                     lo, hi);
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

Tensor make_view(const Tensor& t, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.impl()->storage;
  impl->offset = offset;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = t.dtype();
  return Tensor(std::move(impl));
}

namespace {
// A fresh contiguous copy of t's values (not recorded).
Tensor contiguous_copy(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  out.copy_(t);
  return out;
}
}  // namespace

Tensor contiguous_values(const Tensor& t) {
  if (!t.defined()) return t;
  return t.is_contiguous() ? t.detach() : contiguous_copy(t);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      fail<ShapeError>(op, "shapes {} and {} do not broadcast (dim {}: {} vs {}); hint: sizes must "
                       "match or be 1, aligned from the right", shape_str(a), shape_str(b), i, da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Shape broadcast_strides(const Tensor& t, const Shape& out) {
  const size_t lead = out.size() - t.shape().size();
  Shape st(out.size(), 0);
  for (size_t i = 0; i < t.shape().size(); ++i)
    st[lead + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  return st;
}

void add_(Tensor& acc, const Tensor& g) {
  if (acc.dtype() != g.dtype())
    fail<DTypeError>("add_", "operands have dtypes {} {} and {} {}; hint: convert one with .to()",
                     dtype_name(acc.dtype()), shape_str(acc.shape()), dtype_name(g.dtype()), shape_str(g.shape()));
  if (broadcast_shapes(acc.shape(), g.shape(), "add_") != acc.shape())
    fail<ShapeError>("add_", "cannot add shape {} into shape {} in place", shape_str(g.shape()), shape_str(acc.shape()));
  dispatch_float(acc.dtype(), "add_", [&]<class T>() {
    if (acc.is_contiguous() && g.is_contiguous() && g.shape() == acc.shape()) {
      T* pa = acc.data<T>();
      add_into(pa, pa, g.data<T>(), acc.numel());
      return;
    }
    const Tensor src = acc.shares_storage(g) ? contiguous_copy(g) : g;  // overlapping views: a temporary
    add_into(acc.data<T>() - acc.offset(), src.data<T>() - src.offset(), acc.shape(),
             Strided{acc.strides(), acc.offset()}, Strided{broadcast_strides(src, acc.shape()), src.offset()});
  });
  acc.bump_version();
}

Tensor add_values(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape() || !a.is_contiguous() || !b.is_contiguous()) {
    Tensor out = contiguous_copy(a);
    add_(out, b);
    return out;
  }
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  dispatch_float(a.dtype(), "add_values", [&]<class T>() { add_into(out.data<T>(), a.data<T>(), b.data<T>(), a.numel()); });
  return out;
}

// ---- creation ---------------------------------------------------------------

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  for (int64_t d : shape)
    if (d < 0) fail<ShapeError>("empty", "negative size in shape {}", shape_str(shape));
  const int64_t nbytes = checked_nbytes(shape, dtype, "empty", "tensor");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(nbytes), current_allocator());
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.fill_(value);
  return t;
}
Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memset(t.raw_data(), 0, t.numel() * dtype_size(dtype));
  return t;
}
Tensor Tensor::ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }
Tensor Tensor::scalar(double value, DType dtype) { return full({}, value, dtype); }

Tensor Tensor::arange(double start, double end, double step, DType dtype) {
  if (step == 0) fail<ValueError>("arange", "step must be non-zero");
  const double span = (end - start) / step;
  const int64_t n = span > 0 ? static_cast<int64_t>(std::ceil(span)) : 0;
  Tensor t = empty({n}, dtype);
  dispatch_all(dtype, [&]<class T>() {
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(start + step * static_cast<double>(i));
  });
  return t;
}

namespace {
template <class Fill>
Tensor random_tensor(const Shape& shape, DType dtype, std::string_view op, Fill&& next) {
  Tensor t = Tensor::empty(shape, dtype);
  dispatch_float(dtype, op, [&]<class T>() {
    T* p = t.data<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = static_cast<T>(next());
  });
  return t;
}
}  // namespace

Tensor Tensor::rand(const Shape& shape, Generator& gen, DType dtype) {
  return random_tensor(shape, dtype, "rand", [&] { return gen.uniform(); });
}
Tensor Tensor::randn(const Shape& shape, Generator& gen, DType dtype) {
  return random_tensor(shape, dtype, "randn", [&] { return gen.normal(); });
}
Tensor Tensor::uniform(const Shape& shape, double lo, double hi, Generator& gen, DType dtype) {
  if (!(lo <= hi)) fail<ValueError>("uniform", "expected lo <= hi, got lo={} hi={}", lo, hi);
  return random_tensor(shape, dtype, "uniform", [&] { return lo + (hi - lo) * gen.uniform(); });
}
Tensor Tensor::normal(const Shape& shape, double mean, double std, Generator& gen, DType dtype) {
  if (!(std >= 0)) fail<ValueError>("normal", "expected std >= 0, got {}", std);
  return random_tensor(shape, dtype, "normal", [&] { return mean + std * gen.normal(); });
}

namespace {
template <class V>
Tensor from_values(const V& values, const Shape& shape, DType dtype) {
  if (static_cast<int64_t>(values.size()) != shape_numel(shape))
    fail<ShapeError>("from_vector", "{} values do not fill shape {} ({} elements)", values.size(),
                     shape_str(shape), shape_numel(shape));
  Tensor t = Tensor::empty(shape, dtype);
  dispatch_all(dtype, [&]<class T>() {
    T* p = t.data<T>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = static_cast<T>(values[i]);
  });
  return t;
}
}  // namespace

Tensor Tensor::from_vector(const std::vector<double>& v, const Shape& s, DType d) { return from_values(v, s, d); }
Tensor Tensor::from_vector(const std::vector<float>& v, const Shape& s) { return from_values(v, s, DType::f32); }
Tensor Tensor::from_vector(const std::vector<int64_t>& v, const Shape& s) { return from_values(v, s, DType::i64); }
Tensor Tensor::from_vector(const std::vector<bool>& v, const Shape& s) { return from_values(v, s, DType::b8); }
Tensor Tensor::from_list(std::initializer_list<double> v, const Shape& s, DType d) {
  return from_values(std::vector<double>(v), s, d);
}

// ---- metadata ---------------------------------------------------------------

void Tensor::check_defined(std::string_view what) const {
  if (!impl_) fail<ValueError>(what, "called on an undefined tensor");
}
const Shape& Tensor::shape() const { check_defined("shape"); return impl_->shape; }
const Shape& Tensor::strides() const { check_defined("strides"); return impl_->strides; }
int64_t Tensor::size(int64_t d) const {
  // wrap_dim accepts dim 0 of a 0-d tensor (as PyTorch's reductions do), but a
  // 0-d tensor has no size to index.
  if (dim() == 0) fail<IndexError>("size", "a 0-d tensor has no dims (asked for dim {})", d);
  return shape()[wrap_dim(d, dim(), "size")];
}
int64_t Tensor::numel() const { return shape_numel(shape()); }
DType Tensor::dtype() const { check_defined("dtype"); return impl_->dtype; }
int64_t Tensor::offset() const { check_defined("offset"); return impl_->offset; }
bool Tensor::shares_storage(const Tensor& o) const {
  return impl_ && o.impl_ && impl_->storage == o.impl_->storage;
}

bool Tensor::is_contiguous() const {
  const Shape& s = shape();
  const Shape& st = strides();
  int64_t expect = 1;
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] == 1) continue;
    if (st[i] != expect) return false;
    expect *= s[i];
  }
  return true;
}

void Tensor::check_element_type(DType asked, std::string_view op) const {
  check_defined(op);
  if (asked != impl_->dtype)
    fail<DTypeError>(op, "asked for {} elements of a {} tensor; hint: ask for the tensor's own element "
                     "type (dispatch on dtype()), or convert a copy with .to(DType::{})",
                     dtype_name(asked), dtype_name(impl_->dtype), dtype_name(asked));
}

template <class T>
T* Tensor::data() const {
  check_element_type(dtype_of<T>(), "data");
  return static_cast<T*>(impl_->storage->data) + impl_->offset;
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template int64_t* Tensor::data<int64_t>() const;
template bool* Tensor::data<bool>() const;
template BFloat16* Tensor::data<BFloat16>() const;

template <class T>
std::span<T> Tensor::span() const {
  check_element_type(dtype_of<T>(), "span");
  if (!is_contiguous())
    fail<ValueError>("span", "expected a contiguous tensor, got shape {} with strides {}; hint: call "
                     ".contiguous() first (a copy: copy_ it back if the writes must reach this tensor)",
                     shape_str(impl_->shape), shape_str(impl_->strides));
  return {static_cast<T*>(impl_->storage->data) + impl_->offset, static_cast<size_t>(numel())};
}
template std::span<float> Tensor::span<float>() const;
template std::span<double> Tensor::span<double>() const;
template std::span<int64_t> Tensor::span<int64_t>() const;
template std::span<bool> Tensor::span<bool>() const;
template std::span<BFloat16> Tensor::span<BFloat16>() const;

void* Tensor::raw_data() const {
  check_defined("raw_data");
  return static_cast<char*>(impl_->storage->data) + impl_->offset * dtype_size(impl_->dtype);
}

double Tensor::item() const {
  if (numel() != 1)
    fail<ShapeError>("item", "expected a one-element tensor, got shape {}", shape_str(shape()));
  return dispatch_all(dtype(), [&]<class T>() { return static_cast<double>(*data<T>()); });
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  std::vector<T> out;
  out.reserve(numel());
  dispatch_all(dtype(), [&]<class S>() {
    const S* p = static_cast<const S*>(impl_->storage->data);
    for_each_offset(shape(), strides(), offset(), [&](int64_t o) { out.push_back(static_cast<T>(p[o])); });
  });
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<bool> Tensor::to_vector<bool>() const;

void Tensor::copy_(const Tensor& src) {
  if (shape() != src.shape())
    fail<ShapeError>("copy_", "source shape {} does not match destination shape {}",
                     shape_str(src.shape()), shape_str(shape()));
  if (impl_->storage == src.impl()->storage && src.impl() != impl()) {
    copy_(contiguous_copy(src));  // overlapping views: go through a temporary
    return;
  }
  dispatch_all(dtype(), [&]<class D>() {
    D* dst = static_cast<D*>(impl_->storage->data);
    dispatch_all(src.dtype(), [&]<class S>() {
      const S* s = static_cast<const S*>(src.impl()->storage->data);
      if (is_contiguous() && src.is_contiguous()) {
        D* d = dst + offset();
        const S* sp = s + src.offset();
        for (int64_t i = 0, n = numel(); i < n; ++i) d[i] = static_cast<D>(sp[i]);
        return;
      }
      for_each_offset(shape(), [&](int64_t d, int64_t o) { dst[d] = static_cast<D>(s[o]); },
                      Strided{strides(), offset()}, Strided{src.strides(), src.offset()});
    });
  });
  bump_version();
}

void Tensor::fill_(double value) {
  dispatch_all(dtype(), [&]<class T>() {
    T* p = static_cast<T*>(impl_->storage->data);
    const T v = static_cast<T>(value);
    for_each_offset(shape(), strides(), offset(), [&](int64_t o) { p[o] = v; });
  });
  bump_version();
}

int64_t Tensor::version() const {
  check_defined("version");
  return impl_->storage->version.load(std::memory_order_acquire);
}

void Tensor::bump_version() const {
  check_defined("bump_version");
  impl_->storage->version.store(next_storage_version(), std::memory_order_release);
}

// ---- autograd accessors -----------------------------------------------------

bool Tensor::requires_grad() const { return impl_ && impl_->requires_grad; }
bool Tensor::is_leaf() const { return !impl_ || !impl_->grad_fn; }
Tensor Tensor::grad() const { check_defined("grad"); return Tensor(impl_->grad); }
void Tensor::set_grad(const Tensor& g) {
  check_defined("set_grad");
  if (g.defined() && g.shape() != shape())
    fail<ShapeError>("set_grad", "gradient shape {} does not match tensor shape {}", shape_str(g.shape()),
                     shape_str(shape()));
  if (g.defined() && g.dtype() != dtype())
    fail<DTypeError>("set_grad", "gradient dtype {} does not match tensor dtype {}", dtype_name(g.dtype()),
                     dtype_name(dtype()));
  impl_->grad = g.impl_ptr();
}
void Tensor::zero_grad() { check_defined("zero_grad"); impl_->grad.reset(); }
const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> none;
  return impl_ ? impl_->grad_fn : none;
}

Tensor Tensor::detach() const {
  check_defined("detach");
  return make_view(*this, shape(), strides(), offset());
}

}  // namespace attograd
