// vecmath_isa.h's AVX2 kernels (compiled with -mavx2 -mfma).
#include <attograd/autograd/backend/vecmath_isa.h>

#if defined(__AVX2__)
#include <sleef.h>

namespace attograd::vecmath_isa {

namespace {

// y[i] = f(x[i]): 8 lanes at a time, the tail through a masked load and store.
template <auto F>
void apply(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, F(_mm256_loadu_ps(x + i)));
  if (i < n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - i)), lane);
    _mm256_maskstore_ps(y + i, tail, F(_mm256_maskload_ps(x + i, tail)));
  }
}

}  // namespace

void exp_avx2(float* y, const float* x, int64_t n) { apply<Sleef_expf8_u10avx2>(y, x, n); }
void tanh_avx2(float* y, const float* x, int64_t n) { apply<Sleef_tanhf8_u10avx2>(y, x, n); }
void erf_avx2(float* y, const float* x, int64_t n) { apply<Sleef_erff8_u10avx2>(y, x, n); }

}  // namespace attograd::vecmath_isa

#endif  // __AVX2__: compiled for x86-64 only (CMakeLists.txt)
