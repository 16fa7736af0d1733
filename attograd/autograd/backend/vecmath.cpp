#include <attograd/autograd/backend/vecmath.h>

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include <attograd/autograd/backend/cpu.h>
#include <attograd/autograd/backend/vecmath_isa.h>
#include <attograd/autograd/error.h>
#include <attograd/version.h>

#if ATTOGRAD_HAS_SLEEF
#include <sleef.h>
#endif

namespace attograd {

namespace {

template <auto F>
void scalar_loop(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = F(x[i]);
}

#if ATTOGRAD_HAS_SLEEF
// The fallback for CPUs without AVX2: SLEEF's scalar functions, the same
// 1.0 ulp bound (the C library's tanhf is off by up to 2 ulp).
constexpr VecMath kScalar{VecIsa::scalar, "scalar", scalar_loop<Sleef_expf_u10>,
                           scalar_loop<Sleef_tanhf_u10>, scalar_loop<Sleef_erff_u10>};
// Why a named vector set may be missing: only the CPU.
constexpr std::string_view kNoVectorSet = "needs a CPU this one is not";
#else
// A build without SLEEF (ATTOGRAD_SLEEF=OFF) has the scalar set only, the C
// library's functions within 1.0 ulp like SLEEF's: float expf, and tanh and
// erf in double rounded to float (its float tanhf is off by up to 2 ulp;
// in double they cost what the float ones do, while double exp costs twice expf).
float exp_f(float v) { return std::exp(v); }
float tanh_f(float v) { return static_cast<float>(std::tanh(static_cast<double>(v))); }
float erf_f(float v) { return static_cast<float>(std::erf(static_cast<double>(v))); }
constexpr VecMath kScalar{VecIsa::scalar, "scalar", scalar_loop<exp_f>, scalar_loop<tanh_f>, scalar_loop<erf_f>};
constexpr std::string_view kNoVectorSet =
    "needs SLEEF, which this build has not (-DATTOGRAD_SLEEF=OFF or libsleef-dev missing)";
#endif
// The vector sets exist only with SLEEF, on x86-64 (vecmath_isa.h).
#if ATTOGRAD_HAS_SLEEF && defined(__x86_64__)
constexpr bool kVectorSets = true;
constexpr VecMath kAvx2{VecIsa::avx2, "avx2", vecmath_isa::exp_avx2, vecmath_isa::tanh_avx2, vecmath_isa::erf_avx2};
constexpr VecMath kAvx512{VecIsa::avx512, "avx512", vecmath_isa::exp_avx512, vecmath_isa::tanh_avx512,
                          vecmath_isa::erf_avx512};
#else
constexpr bool kVectorSets = false;
constexpr VecMath kAvx2{VecIsa::avx2, "avx2", nullptr, nullptr, nullptr}, kAvx512{VecIsa::avx512, "avx512", nullptr, nullptr, nullptr};
#endif

const VecMath& best_supported() {
  for (VecIsa isa : {VecIsa::avx512, VecIsa::avx2})
    if (const VecMath* m = vecmath_for(isa)) return *m;
  return kScalar;
}

const VecMath& choose() {
  const char* want = std::getenv("ATTOGRAD_VECMATH");
  return want && *want ? vecmath_named(want) : best_supported();
}

}  // namespace

const VecMath* vecmath_for(VecIsa isa) {
  const CpuFeatures f = cpu_features();
  switch (isa) {
    case VecIsa::scalar: return &kScalar;
    case VecIsa::avx2: return kVectorSets && f.avx2 && f.fma ? &kAvx2 : nullptr;
    case VecIsa::avx512: return kVectorSets && f.avx512 && f.fma ? &kAvx512 : nullptr;
  }
  return nullptr;
}

const VecMath& vecmath_named(std::string_view name) {
  for (const VecMath* m : {&kScalar, &kAvx2, &kAvx512})
    if (m->name == name) {
      if (const VecMath* ok = vecmath_for(m->isa)) return *ok;
      fmt::print(stderr, "attograd: warning: ATTOGRAD_VECMATH={} {}; using {}\n", name, kNoVectorSet,
                 best_supported().name);
      return best_supported();
    }
  fail<ValueError>("vecmath", "unknown kernel set '{}' (from ATTOGRAD_VECMATH); expected one of scalar, avx2, avx512; "
                   "hint: unset it to use the widest set this CPU runs", name);
}

const VecMath& vecmath() {
  static const VecMath& chosen = choose();
  return chosen;
}

}  // namespace attograd
