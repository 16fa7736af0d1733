// vecmath_isa.h's AVX-512 kernels (compiled with -mavx512f -mavx512dq -mfma).
#include <attograd/autograd/backend/vecmath_isa.h>

#if defined(__AVX512F__)
#include <sleef.h>

namespace attograd::vecmath_isa {

namespace {

// y[i] = f(x[i]): 16 lanes at a time, the tail through a masked load and store.
template <auto F>
void apply(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, F(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, tail, F(_mm512_maskz_loadu_ps(tail, x + i)));
  }
}

}  // namespace

void exp_avx512(float* y, const float* x, int64_t n) { apply<Sleef_expf16_u10avx512f>(y, x, n); }
void tanh_avx512(float* y, const float* x, int64_t n) { apply<Sleef_tanhf16_u10avx512f>(y, x, n); }
void erf_avx512(float* y, const float* x, int64_t n) { apply<Sleef_erff16_u10avx512f>(y, x, n); }

}  // namespace attograd::vecmath_isa

#endif  // __AVX512F__: compiled for x86-64 only (CMakeLists.txt)
