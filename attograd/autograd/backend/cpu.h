// What the processor can run, read from CPUID: the BLAS loader picks
// OpenBLAS' kernel family from it (blas_kernel.h) and vecmath.cpp its vector
// set. Private: an implementation detail of the backend, not installed.
#pragma once

namespace attograd {

// What CPUID (and the OS, via XGETBV) says the processor can run.
struct CpuFeatures {
  bool avx2 = false, fma = false;
  bool avx512 = false;       // F, BW, DQ, VL with OS-enabled ZMM state (OpenBLAS' SkylakeX needs these)
  bool avx512_bf16 = false;  // AVX512-BF16 (what OpenBLAS' Cooperlake adds, for its bf16 GEMM only)
};
// This processor's features (all false off x86).
CpuFeatures cpu_features();

}  // namespace attograd
