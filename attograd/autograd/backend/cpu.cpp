#include <attograd/autograd/backend/cpu.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace attograd {

CpuFeatures cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28);
  f.fma = c & (1u << 12);
  if (!osxsave || !avx) return f;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool ymm_state = (xcr0_lo & 0x6u) == 0x6u;     // SSE + AVX state
  const bool zmm_state = (xcr0_lo & 0xe6u) == 0xe6u;   // + opmask, ZMM_Hi256, Hi16_ZMM
  if (!ymm_state || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = b & (1u << 5);
  const bool avx512 = (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 30)) && (b & (1u << 31));  // F DQ BW VL
  f.avx512 = avx512 && zmm_state;
  if (f.avx512 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512_bf16 = a & (1u << 5);
#endif
  return f;
}

}  // namespace attograd
