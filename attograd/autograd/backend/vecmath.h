// Float32 vector math: exp, tanh and erf over arrays, from SLEEF (Debian's
// libsleef-dev), for the softmax rows, the fused cross-entropy and attention,
// and the GELU / tanh / sigmoid loops. Float64 never comes here: it stays
// std:: math (gradcheck runs in float64).
//
// Accuracy: SLEEF's u10 functions, 1.0 ulp over the whole float range
// (tests/test_vecmath.cpp checks the bound against std:: float64 math, edges
// included: exp(-∞) = 0, tiny results become denormals then 0, large
// arguments give ∞, NaN stays NaN).
//
// The kernel is chosen once, from the CPU at run time (cpu_features() of
// backend/cpu.h): AVX-512 (16 lanes), AVX2 + FMA (8 lanes), or the scalar
// std:: loop on older CPUs. The AVX-512 and AVX2 kernels are the same SLEEF
// algorithm and give the same bits; the scalar fallback may differ from them
// within the bound. ATTOGRAD_VECMATH=scalar|avx2|avx512 in the environment
// picks a kernel set for A/B measurements (one the CPU lacks falls back to
// the best it has, with a warning; any other name is a ValueError).
// settings.h lists it with every other switch. A build without SLEEF
// (-DATTOGRAD_SLEEF=OFF, or libsleef-dev missing) has only the scalar set:
// glibc's expf, and tanh and erf in double rounded to float, within the same
// bound; asking it for avx2 or avx512 warns once.
//
// Shape legend: y and x are n floats; y may alias x (in place).
#pragma once
#include <cstdint>
#include <string_view>

namespace attograd {

// The instruction set a kernel set runs on: SLEEF's scalar functions (any
// CPU), AVX2 + FMA, or AVX-512 (F, DQ) + FMA.
enum class VecIsa { scalar, avx2, avx512 };

// One kernel set: y[i] = f(x[i]) for i < n.
struct VecMath {
  VecIsa isa;             // what the CPU needs to run it
  std::string_view name;  // "scalar", "avx2", "avx512"
  void (*exp)(float* y, const float* x, int64_t n);   // y = e^x
  void (*tanh)(float* y, const float* x, int64_t n);  // y = tanh x
  void (*erf)(float* y, const float* x, int64_t n);   // y = erf x
};

// The set for isa, or nullptr when this CPU cannot run it.
const VecMath* vecmath_for(VecIsa isa);

// The set this process uses: the widest the CPU runs, or ATTOGRAD_VECMATH's.
const VecMath& vecmath();

// The set a name means ("scalar", "avx2", "avx512"), or the widest this CPU
// runs when it lacks that one (with a warning on stderr); ValueError for any
// other name. vecmath() reads ATTOGRAD_VECMATH through it.
const VecMath& vecmath_named(std::string_view name);

// Floats per call where a caller works through stack blocks (the row and
// elementwise kernels): small enough to stay in L1 beside its inputs.
inline constexpr int64_t kVecBlock = 256;

// y = e^x with the set this process uses.
inline void vec_exp(float* y, const float* x, int64_t n) { vecmath().exp(y, x, n); }
// y = tanh x with the set this process uses.
inline void vec_tanh(float* y, const float* x, int64_t n) { vecmath().tanh(y, x, n); }
// y = erf x with the set this process uses.
inline void vec_erf(float* y, const float* x, int64_t n) { vecmath().erf(y, x, n); }

}  // namespace attograd
