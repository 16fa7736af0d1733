// In-place add: the kernel under Tensor's add_ (attograd/autograd/tensor.h), which the
// engine uses to accumulate gradients and the optimizers to update buffers.
//
// Shape legend: acc and g are walked over one `shape`, each through its own
// Strided layout (g's strides are 0 along the dims it is broadcast over).
//
//   add_into(out, a, b, n)                        out[i] = a[i] + b[i], i < n, all contiguous
//                                                 (out == a: in place)
//   add_into(acc, g, shape, acc_layout, g_layout) acc += g through strides
//
// The contiguous form is one flat loop, split across the thread pool when it
// is long; each element is one add, so the result does not depend on the split.
#pragma once
#include <cstdint>
#include <vector>

#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/kernels/walk.h>

namespace attograd {

template <class T>
void add_into(T* out, const T* a, const T* b, int64_t n) {
  parallel_for(n, kElementwiseGrain, [=](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) out[i] = a[i] + b[i];
  });
}

// acc and g index one storage each from their layouts' bases; they must not
// overlap unless their layouts are the same.
template <class T>
void add_into(T* acc, const T* g, const std::vector<int64_t>& shape, const Strided& acc_layout,
              const Strided& g_layout) {
  for_each_offset(shape, [=](int64_t a, int64_t b) { acc[a] += g[b]; }, acc_layout, g_layout);
}

}  // namespace attograd
