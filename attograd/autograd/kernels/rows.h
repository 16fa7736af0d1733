// Row kernels: sums, softmax, log-softmax, log-sum-exp and their backward over
// one row at a time. They compute values only, on raw pointers: ops/softmax,
// ops/attention and ops/loss call them row by row (and record the op), ops/layer_norm
// uses lane_sum, and attograd/nn/generate's beam search uses logsumexp_row.
//
// Shape legend: a row is n elements `stride` apart: x[0], x[stride], ...,
// x[(n − 1)·stride] (stride 1: contiguous, the fast path). y, g, dx are rows
// of the same n and stride. T is the element type (float or double).
//
// The fully masked row, defined once (row_max): a row whose every element is
// -inf has no softmax. Its probabilities are 0, its log-probabilities and its
// log-sum-exp are -inf, and its gradients are 0, so a masked query or an
// all-masked class row gives no NaN. A NaN anywhere makes the row NaN instead.
//
// Sums are in double. Summation order is fixed (sequential, or lane_sum's
// fixed lanes): a row's result does not depend on the thread count, nor on
// the machine beyond vecmath.h's scalar fallback. y may alias x, and dx may
// alias g (in place).
//
// Float32 exps over a contiguous row come from vec_exp (SLEEF, 1.0 ulp, see
// attograd/autograd/backend/vecmath.h), a block of kVecBlock at a time; float64 and
// strided rows take std::exp element by element.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <attograd/autograd/backend/vecmath.h>

namespace attograd {

// Σ_{i < n} term(i), accumulated in A, written so that the compiler
// vectorizes it without -ffast-math: a plain `for (i) s += x[i]` is a chain
// of dependent adds that may not be reordered, so lane_sum keeps kLanes
// independent partial sums (one SIMD register's worth or more) and adds them
// pairwise at the end. The result is a fixed function of the inputs.
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

namespace rows_detail {
using Unit = std::integral_constant<int64_t, 1>;
// Calls f(stride) with a compile-time 1 for contiguous rows, so that their
// loops vectorize; the arithmetic is the same either way.
template <class F>
decltype(auto) with_stride(int64_t stride, F f) {
  if (stride == 1) return f(Unit{});
  return f(stride);
}
}  // namespace rows_detail

template <class T>
struct RowMax {
  T max;        // -inf for an empty or fully masked row
  bool masked;  // every element is -inf (vacuously true for n = 0)
};

// The row's max and the masked-row rule.
template <class T>
RowMax<T> row_max(const T* x, int64_t n, int64_t stride = 1) {
  return rows_detail::with_stride(stride, [&](auto s) {
    RowMax<T> r{-INFINITY, true};
    for (int64_t k = 0; k < n; ++k) {
      const T v = x[k * s];
      r.max = v > r.max ? v : r.max;
      r.masked = r.masked && v == -INFINITY;
    }
    return r;
  });
}

// y_k = exp(x_k − shift) over a contiguous row;  y may alias x
template <class T>
void exp_shifted_row(T* y, const T* x, int64_t n, T shift) {
  if constexpr (std::is_same_v<T, float>) {
    for (int64_t k = 0; k < n; ++k) y[k] = x[k] - shift;
    vec_exp(y, y, n);
  } else {
    for (int64_t k = 0; k < n; ++k) y[k] = std::exp(x[k] - shift);
  }
}

// Σ_k exp(x_k − max) in double, each exp taken in E; sink(k, e) sees every term.
template <class E, class T, class Sink>
double row_exp_sum(const T* x, int64_t n, int64_t stride, T max, Sink sink) {
  if constexpr (std::is_same_v<E, float> && std::is_same_v<T, float>) {
    if (stride == 1) {
      float e[kVecBlock];
      double total = 0;
      for (int64_t b = 0; b < n; b += kVecBlock) {
        const int64_t m = std::min(kVecBlock, n - b);
        exp_shifted_row(e, x + b, m, max);
        for (int64_t k = 0; k < m; ++k) sink(b + k, e[k]);
        total += lane_sum<double>(m, [&](int64_t k) { return e[k]; });
      }
      return total;
    }
  }
  return rows_detail::with_stride(stride, [&](auto s) {
    double total = 0;
    for (int64_t k = 0; k < n; ++k) {
      const E e = std::exp(static_cast<E>(x[k * s]) - static_cast<E>(max));
      sink(k * s, e);
      total += e;
    }
    return total;
  });
}

// What a softmax row was made from: y_k = exp(x_k − max) · inv, inv = 1 / Σ_j exp(x_j − max).
// A masked row (every x_k = -inf) has max = -inf, inv = 0 and y = 0; no other row
// has inv = 0 (Σ_j ≥ 1 unless NaN, which gives inv = NaN).
template <class T>
struct SoftmaxRowStats {
  T max;
  T inv;
};

// y = softmax(x) = exp(x_k − max) / Σ_j exp(x_j − max);  masked row: 0. Returns the row's statistics.
template <class T>
SoftmaxRowStats<T> softmax_row(T* y, const T* x, int64_t n, int64_t stride = 1) {
  const RowMax<T> m = row_max(x, n, stride);
  return rows_detail::with_stride(stride, [&](auto s) {
    if (m.masked) {
      for (int64_t k = 0; k < n; ++k) y[k * s] = T(0);
      return SoftmaxRowStats<T>{T(-INFINITY), T(0)};
    }
    const double total = row_exp_sum<T>(x, n, s, m.max, [&](int64_t o, T e) { y[o] = e; });
    const T inv = static_cast<T>(1.0 / total);
    for (int64_t k = 0; k < n; ++k) y[k * s] *= inv;
    return SoftmaxRowStats<T>{m.max, inv};
  });
}

// The same row again from x and its statistics: y_k = exp(x_k − max) · inv, each
// exp taken as softmax_row takes it, so y equals softmax_row's bit for bit.
template <class T>
void softmax_row_from_stats(T* y, const T* x, int64_t n, SoftmaxRowStats<T> st) {
  if (st.inv == T(0)) {
    for (int64_t k = 0; k < n; ++k) y[k] = T(0);
    return;
  }
  row_exp_sum<T>(x, n, 1, st.max, [&](int64_t o, T e) { y[o] = e * st.inv; });
}

// y = log_softmax(x) = (x_k − max) − log Σ_j exp(x_j − max);  masked row: -inf
template <class T>
void log_softmax_row(T* y, const T* x, int64_t n, int64_t stride = 1) {
  const RowMax<T> m = row_max(x, n, stride);
  rows_detail::with_stride(stride, [&](auto s) {
    if (m.masked) {
      for (int64_t k = 0; k < n; ++k) y[k * s] = T(-INFINITY);
      return;
    }
    const T log_total = static_cast<T>(std::log(row_exp_sum<T>(x, n, s, m.max, [](int64_t, T) {})));
    for (int64_t k = 0; k < n; ++k) y[k * s] = x[k * s] - m.max - log_total;
  });
}

// log Σ_k exp(x_k) = max + log Σ_k exp(x_k − max), every step in double;  masked row: -inf
template <class T>
double logsumexp_row(const T* x, int64_t n, int64_t stride = 1) {
  const RowMax<T> m = row_max(x, n, stride);
  if (m.masked) return -INFINITY;
  const double mx = m.max;
  return mx + std::log(row_exp_sum<double>(x, n, stride, m.max, [](int64_t, double) {}));
}

// y = softmax(x)  =>  dx = y ⊙ (g − Σ_j g_j y_j);  a masked row has y = 0, so dx = 0
template <class T>
void softmax_backward_row(T* dx, const T* g, const T* y, int64_t n, int64_t stride = 1) {
  rows_detail::with_stride(stride, [&](auto s) {
    double dot = 0;
    for (int64_t k = 0; k < n; ++k) dot += static_cast<double>(g[k * s]) * y[k * s];
    const T d = static_cast<T>(dot);
    for (int64_t k = 0; k < n; ++k) dx[k * s] = y[k * s] * (g[k * s] - d);
  });
}

// y = log_softmax(x)  =>  dx = g − exp(y) Σ_j g_j;  a masked row (y all -inf): dx = 0
template <class T>
void log_softmax_backward_row(T* dx, const T* g, const T* y, int64_t n, int64_t stride = 1) {
  const bool masked = row_max(y, n, stride).masked;
  rows_detail::with_stride(stride, [&](auto s) {
    if (masked) {
      for (int64_t k = 0; k < n; ++k) dx[k * s] = T(0);
      return;
    }
    double total = 0;
    for (int64_t k = 0; k < n; ++k) total += g[k * s];
    const T t = static_cast<T>(total);
    // Two conditions, so that clang discards the float block for T = double
    // (one condition on both would still depend on s, and clang would check the call).
    if constexpr (std::is_same_v<T, float>) {
      if constexpr (std::is_same_v<decltype(s), rows_detail::Unit>) {
        float e[kVecBlock];
        for (int64_t b = 0; b < n; b += kVecBlock) {
          const int64_t m = std::min(kVecBlock, n - b);
          exp_shifted_row(e, y + b, m, 0.0f);
          for (int64_t k = 0; k < m; ++k) dx[b + k] = g[b + k] - e[k] * t;
        }
        return;
      }
    }
    for (int64_t k = 0; k < n; ++k) dx[k * s] = g[k * s] - std::exp(y[k * s]) * t;
  });
}

}  // namespace attograd
