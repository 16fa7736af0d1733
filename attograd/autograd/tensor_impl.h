// TensorImpl and Storage: what a Tensor handle points at.
//
// Internal to autograd/: only autograd/ sources include this header. It is not
// part of the public API; nn/, optim/, data/, the examples and the tests use
// the Tensor API in tensor.h (data<T>(), span<T>(), set_data_(), is_same()).
// Outside autograd/, Tensor::impl() and impl_ptr() yield a pointer to an
// incomplete type, good for nothing but passing back into autograd/.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include <attograd/autograd/backend/allocator.h>
#include <attograd/autograd/tensor.h>

namespace attograd {

// The next storage version, drawn from one counter so that versions are
// unique across storages (see Tensor::version()).
inline int64_t next_storage_version() {
  static std::atomic<int64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed) + 1;
}

// A block of bytes from the allocator. Views share one Storage.
struct Storage {
  Storage(size_t nbytes, std::shared_ptr<Allocator> alloc);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data = nullptr;
  size_t nbytes = 0;
  std::shared_ptr<Allocator> allocator;
  // Tensor::version(): replaced from next_storage_version() by every in-place write.
  std::atomic<int64_t> version{next_storage_version()};
  // What the GEMM layer derives from these bytes (a weight's transpose), made
  // and read under its lock, checked against version; dies with the storage.
  std::shared_ptr<void> derived;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Shape strides;       // in elements
  DType dtype = DType::f32;

  // Autograd. A leaf has no grad_fn; a leaf with requires_grad collects .grad.
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;           // the op that made this tensor
  std::shared_ptr<TensorImpl> grad;        // accumulated gradient of a leaf
  std::weak_ptr<Node> grad_accumulator;    // leaf's AccumulateGrad node, if alive
  // register_post_accumulate_grad_hook's hooks (engine.h), with their ids, in registration order.
  std::vector<std::pair<uint64_t, std::function<void(const Tensor&)>>> post_accumulate_hooks;
};

// The start of t's storage as T* (element [0, ..., 0] of t is at t.offset()):
// what autograd's strided loops index with the offsets for_each_offset gives.
// Unchecked; the caller has dispatched on t's dtype.
template <class T>
T* storage_base(const Tensor& t) { return static_cast<T*>(t.impl()->storage->data); }

}  // namespace attograd
