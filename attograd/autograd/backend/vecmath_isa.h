// The SLEEF kernels of attograd/autograd/backend/vecmath.h, one translation unit per
// instruction set (vecmath_avx2.cpp, vecmath_avx512.cpp, each compiled with
// its -m flags, see CMakeLists.txt). Those units include nothing but this
// header and sleef.h: an inline function they instantiated with AVX-512
// instructions could be picked by the linker for the whole program and crash
// an older CPU. Only vecmath.cpp calls these, after checking the CPU.
#pragma once
#include <cstdint>

namespace attograd::vecmath_isa {

void exp_avx2(float* y, const float* x, int64_t n);
void tanh_avx2(float* y, const float* x, int64_t n);
void erf_avx2(float* y, const float* x, int64_t n);

void exp_avx512(float* y, const float* x, int64_t n);
void tanh_avx512(float* y, const float* x, int64_t n);
void erf_avx512(float* y, const float* x, int64_t n);

}  // namespace attograd::vecmath_isa
