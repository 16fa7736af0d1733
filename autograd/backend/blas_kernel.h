// Choosing OpenBLAS' kernel family for this CPU.
//
// A DYNAMIC_ARCH OpenBLAS picks its kernels (Haswell, SkylakeX, Cooperlake, ...)
// from CPUID once, in its load-time constructor. A release that does not know a
// newer processor falls back to the generic "Prescott" kernels, 5-10x slower
// on GEMM. OPENBLAS_CORETYPE overrides the choice, but only if it is set
// before the library initialises, so a program fixes it by re-executing itself:
//
//   int main(int argc, char** argv) {
//     attograd::ensure_fast_blas_kernel();   // first thing; may re-exec once
//     ...
//
// An explicit OPENBLAS_CORETYPE from the user is always respected. If the
// kernel is still generic on a CPU that could do better, the first GEMM warns
// once on stderr (warn_if_slow_blas_kernel), so attograd never runs slow silently.
#pragma once
#include <optional>
#include <string>

namespace attograd {

// The kernel family OpenBLAS picked ("Haswell", "SkylakeX", "Prescott", ...).
std::string blas_corename();

// What CPUID (and the OS, via XGETBV) says the processor can run.
struct CpuFeatures {
  bool avx2 = false, fma = false;
  bool avx512 = false;       // F, BW, DQ, VL with OS-enabled ZMM state (OpenBLAS' SkylakeX needs these)
  bool avx512_bf16 = false;  // AVX512-BF16 (OpenBLAS' Cooperlake)
};
CpuFeatures cpu_features();

// The fastest OpenBLAS 0.3.x core for these features: "Cooperlake",
// "SkylakeX", "Haswell", or "" (nothing better than generic).
std::string best_openblas_core(const CpuFeatures& f);

// True for OpenBLAS' generic x86-64 fallbacks (Prescott, Core2, ...): the
// families without AVX2 kernels.
bool is_generic_openblas_core(const std::string& corename);

// The decision ensure_fast_blas_kernel makes, as a pure function: the core to
// request via OPENBLAS_CORETYPE, or nothing (keep what the library picked).
//   current      openblas_get_corename() now
//   user_setting OPENBLAS_CORETYPE as the user set it (nullopt: unset)
//   dynamic_arch whether the library can switch kernels at all
//   already_tried the re-exec marker is present (never loop)
std::optional<std::string> openblas_core_to_request(const std::string& current, const CpuFeatures& f,
                                                    const std::optional<std::string>& user_setting,
                                                    bool dynamic_arch, bool already_tried);

// Re-executes /proc/self/exe once with OPENBLAS_CORETYPE set when the decision
// above asks for it; otherwise returns. Call it first thing in main().
void ensure_fast_blas_kernel();

// Prints one warning on stderr (at most once per process) when OpenBLAS runs
// a generic kernel although the CPU supports a faster one. gemm() calls it.
void warn_if_slow_blas_kernel();

}  // namespace attograd
