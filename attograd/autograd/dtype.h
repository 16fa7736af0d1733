// Runtime element types. Differentiable math runs in f32 or f64; i64 holds
// indices and targets, b8 holds bool masks (one byte per element).
//
// bf16 (bfloat16.h) is storage only, for now. A tensor can be made in it and
// converted to and from it (.to(), copy_, from_vector, to_vector, item, fill_;
// the rounding is PyTorch's), printed and saved (safetensors "BF16"); views,
// clone, cat/stack and index_select/gather/embedding move its elements as
// they are. No math runs in it: dispatch_float refuses it, so every op that
// computes (arithmetic, reductions, comparisons, random fills) is a
// DTypeError on bf16, and it cannot require grad (is_floating is false).
// bf16 autocast (autocast.h) reads bf16 operands only in its matrix products
// (gemm_bf16, f32 sums), and everything else (master weights, softmax, norms,
// the loss, optimizer state) stays f32, so no op needs a bf16 kernel; one
// that computed in bf16 would round after every step.
#pragma once
#include <cstdint>
#include <string_view>

#include <attograd/autograd/bfloat16.h>
#include <attograd/autograd/error.h>

namespace attograd {

// A tensor's element type: f32 float, f64 double, i64 int64_t, b8 bool,
// bf16 BFloat16 (storage only, see above).
enum class DType : uint8_t { f32, f64, i64, b8, bf16 };

// Bytes per element: f32 4, f64 8, i64 8, b8 1, bf16 2.
constexpr size_t dtype_size(DType d) {
  switch (d) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i64: return 8;
    case DType::b8: return 1;
    case DType::bf16: return 2;
  }
  return 0;
}

// "f32", "f64", "i64", "b8" or "bf16", as error messages and printing show them.
constexpr std::string_view dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i64: return "i64";
    case DType::b8: return "b8";
    case DType::bf16: return "bf16";
  }
  return "?";
}

// True for f32 and f64, the dtypes that math runs in and that can require
// grad; false for bf16, which is storage only.
constexpr bool is_floating(DType d) { return d == DType::f32 || d == DType::f64; }

// The DType of C++ element type T: float, double, int64_t, bool or BFloat16.
template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<bool>() { return DType::b8; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::bf16; }

// The DTypeError `op` raises for a bf16 operand, which it cannot compute in.
[[noreturn]] inline void fail_bf16_math(std::string_view op) {
  fail<DTypeError>(op, "expected a floating tensor (f32 or f64), got bf16, which is for storage only (no math runs "
                   "in it); hint: compute in f32: call .to(DType::f32), and .to(DType::bf16) on the result to "
                   "store it");
}

// Calls fn.template operator()<T>() with T = float or double for a floating
// dtype; anything else (bf16 too) is a DTypeError naming `op`.
//   dispatch_float(x.dtype(), "exp", [&]<class T>() { ... });
template <class F>
decltype(auto) dispatch_float(DType d, std::string_view op, F&& fn) {
  if (d == DType::f32) return fn.template operator()<float>();
  if (d == DType::f64) return fn.template operator()<double>();
  if (d == DType::bf16) fail_bf16_math(op);
  fail<DTypeError>(op, "expected a floating tensor (f32 or f64), got {}; hint: call .to(DType::f32)",
                   dtype_name(d));
}

// Same, over every dtype (bool is stored as uint8_t-sized bool, bf16 as
// BFloat16, which converts but has no arithmetic).
template <class F>
decltype(auto) dispatch_all(DType d, F&& fn) {
  switch (d) {
    case DType::f32: return fn.template operator()<float>();
    case DType::f64: return fn.template operator()<double>();
    case DType::i64: return fn.template operator()<int64_t>();
    case DType::bf16: return fn.template operator()<BFloat16>();
    case DType::b8: break;
  }
  return fn.template operator()<bool>();
}

}  // namespace attograd
