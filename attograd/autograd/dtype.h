// Runtime element types. Differentiable math runs in f32 or f64; i64 holds
// indices and targets, b8 holds bool masks (one byte per element).
#pragma once
#include <cstdint>
#include <string_view>

#include <attograd/autograd/error.h>

namespace attograd {

// A tensor's element type: f32 float, f64 double, i64 int64_t, b8 bool.
enum class DType : uint8_t { f32, f64, i64, b8 };

// Bytes per element: f32 4, f64 8, i64 8, b8 1.
constexpr size_t dtype_size(DType d) {
  switch (d) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i64: return 8;
    case DType::b8: return 1;
  }
  return 0;
}

// "f32", "f64", "i64" or "b8", as error messages and printing show them.
constexpr std::string_view dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i64: return "i64";
    case DType::b8: return "b8";
  }
  return "?";
}

// True for f32 and f64, the dtypes that can require grad.
constexpr bool is_floating(DType d) { return d == DType::f32 || d == DType::f64; }

// The DType of C++ element type T: float, double, int64_t or bool.
template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<bool>() { return DType::b8; }

// Calls fn.template operator()<T>() with T = float or double for a floating
// dtype; anything else is a DTypeError naming `op`.
//   dispatch_float(x.dtype(), "exp", [&]<class T>() { ... });
template <class F>
decltype(auto) dispatch_float(DType d, std::string_view op, F&& fn) {
  if (d == DType::f32) return fn.template operator()<float>();
  if (d == DType::f64) return fn.template operator()<double>();
  fail<DTypeError>(op, "expected a floating tensor (f32 or f64), got {}; hint: call .to(DType::f32)",
                   dtype_name(d));
}

// Same, over every dtype (bool is stored as uint8_t-sized bool).
template <class F>
decltype(auto) dispatch_all(DType d, F&& fn) {
  switch (d) {
    case DType::f32: return fn.template operator()<float>();
    case DType::f64: return fn.template operator()<double>();
    case DType::i64: return fn.template operator()<int64_t>();
    case DType::b8: break;
  }
  return fn.template operator()<bool>();
}

}  // namespace attograd
