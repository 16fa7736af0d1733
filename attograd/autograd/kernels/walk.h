// The strided walk: the one loop in attograd that visits the elements of a
// shape through strides (views, transposes, broadcasts). Every strided loop in
// the library calls it: Tensor's copies and fills, map/zip, the batch loop of
// matmul, the indexing ops, the loaders.
//
// Shape legend: `shape` is [d0, ..., dk-1], walked in row-major logical order.
// A Strided layout gives, for each of those dims, the step in elements of one
// operand (0 where it is broadcast), and the offset of its element [0, ..., 0].
// Several layouts walked in step share the shape: fn gets one offset per layout.
//
//   for_each_offset(shape, fn, Strided{a_strides, a_base}, Strided{b_strides, b_base}, ...)
//       fn(a_offset, b_offset, ...) for every index of `shape`
//   for_each_offset(shape, strides, base, fn)
//       the one-layout form: fn(offset)
//
// A 0-d shape visits one element (the bases); a shape with a zero-size dim
// visits none. The last dim runs as a tight inner loop (offset + i · stride);
// the odometer over the outer dims only carries between rows.
#pragma once
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace attograd {

// One operand of a walk: strides (one per walked dim) and the base offset, in
// elements. It refers to the strides, so build it in the call that walks
// (a temporary vector lives until that call returns); do not keep one.
struct Strided {
  const std::vector<int64_t>& strides;  // in elements, one per walked dim (a reference: see above)
  int64_t base;                          // offset of index (0, ..., 0), in elements
};

// Calls fn(offset_1, ..., offset_K) for every index of shape in row-major
// order, one offset per layout (see above).
template <class F, std::same_as<Strided>... L>
void for_each_offset(const std::vector<int64_t>& shape, F&& fn, const L&... layouts) {
  constexpr size_t K = sizeof...(L);
  using Offsets = std::array<int64_t, K>;
  const int64_t nd = static_cast<int64_t>(shape.size());
  Offsets off{layouts.base...};
  auto each = [&]<size_t... k>(std::index_sequence<k...>, int64_t inner, const Offsets& step) {
    const Offsets row = off;
    for (int64_t i = 0; i < inner; ++i) fn((row[k] + i * step[k])...);
  };
  if (nd == 0) {
    each(std::make_index_sequence<K>{}, 1, Offsets{});
    return;
  }
  for (int64_t s : shape)
    if (s == 0) return;
  const std::array<const int64_t*, K> strides{layouts.strides.data()...};
  Offsets inner_step;
  for (size_t k = 0; k < K; ++k) inner_step[k] = strides[k][nd - 1];
  std::vector<int64_t> idx(static_cast<size_t>(nd), 0);
  const int64_t inner = shape[nd - 1];
  while (true) {
    each(std::make_index_sequence<K>{}, inner, inner_step);
    int64_t d = nd - 2;
    for (; d >= 0; --d) {
      for (size_t k = 0; k < K; ++k) off[k] += strides[k][d];
      if (++idx[d] < shape[d]) break;
      for (size_t k = 0; k < K; ++k) off[k] -= strides[k][d] * shape[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

// The one-layout form: fn(offset) for every index of shape.
template <class F>
void for_each_offset(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, int64_t base, F&& fn) {
  for_each_offset(shape, std::forward<F>(fn), Strided{strides, base});
}

}  // namespace attograd
