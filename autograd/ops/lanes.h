// Reductions written so that the compiler vectorizes them without
// -ffast-math. A plain `for (i) s += x[i]` is a chain of dependent adds that
// may not be reordered; lane_sum keeps kLanes independent partial sums (one
// SIMD register's worth or more) and adds them pairwise at the end. The
// result is a fixed function of the inputs: it does not depend on the
// machine, the vector width or the thread count.
#pragma once
#include <cstdint>

namespace attograd {

// Σ_{i < n} term(i), accumulated in A (double for float rows keeps the
// row statistics as exact as the old sequential double loop).
template <class A, class F>
A lane_sum(int64_t n, F term) {
  constexpr int kLanes = 16;
  A acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += static_cast<A>(term(i + l));
  A tail = 0;
  for (; i < n; ++i) tail += static_cast<A>(term(i));
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0] + tail;
}

}  // namespace attograd
