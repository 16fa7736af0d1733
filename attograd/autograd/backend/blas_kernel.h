// OpenBLAS, loaded by the library itself with the fastest kernel family for
// this CPU, so that no program has to call anything first.
//
// A DYNAMIC_ARCH OpenBLAS picks its kernels (Haswell, SkylakeX, Cooperlake, ...)
// from CPUID once, in its load-time constructor. A release that does not know
// a newer processor falls back to the generic "Prescott" kernels, 5-10x slower
// on GEMM. OPENBLAS_CORETYPE overrides the choice, but only if it is set
// before that constructor runs. So attograd does not link OpenBLAS: the first
// call that needs it (an OpenBLAS GEMM, blas_corename, blas_set_num_threads)
// sets OPENBLAS_CORETYPE to the decision below, dlopen()s the library, puts
// the environment back as it was, and calls cblas_sgemm/cblas_dgemm through
// the function pointers it resolved (RTLD_LOCAL: OpenBLAS' names stay out of
// the process' global scope).
//
// Why this and not the alternatives:
//   - re-executing /proc/self/exe with the variable set (what programs had to
//     ask for before, first thing in main()) needs a call from every program,
//     which an installed program could not make (the header is private), and
//     the library cannot re-exec on its own: a first GEMM comes too late (the
//     program's state would be lost) and a static initializer would re-exec
//     every host, test runners and embedders included;
//   - routing products around a generic core to another library (BLIS) leaves
//     float64 on the slow kernel, and BLIS 0.9 itself runs generic kernels on
//     this Zen 5 (19 GFLOP/s at 512³ against OpenBLAS' 171): no fallback.
//
// What stays as before: a user's OPENBLAS_CORETYPE is always respected, and if
// the kernel is generic on a CPU that could do better (the user's choice, a
// build without DYNAMIC_ARCH, or OpenBLAS already loaded into the process by
// the program or another library, where the variable can no longer take
// effect) the load prints one warning on stderr: attograd never runs slow
// silently. The variable is set only for the instant of the dlopen, on the
// first such call; a thread of the program reading the environment at that
// instant may see it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <attograd/autograd/backend/cpu.h>
// blas_corename(), the kernel family OpenBLAS runs, is declared there: a
// program's summary names it.
#include <attograd/autograd/backend/gemm.h>

namespace attograd {

// The fastest OpenBLAS 0.3.x core for sgemm and dgemm with these features,
// by a name OPENBLAS_CORETYPE accepts: "SkylakeX" (AVX-512), "Haswell" (AVX2
// and FMA), or "" (nothing better than generic). Never "Cooperlake": it adds
// only bf16 kernels to SkylakeX', and OpenBLAS 0.3.21 does not know the name
// in OPENBLAS_CORETYPE (it prints "Core not found" and detects the CPU again,
// which on a CPU it does not know gives the generic kernels).
std::string best_openblas_core(const CpuFeatures& f);

// True for OpenBLAS' generic x86-64 fallbacks (Prescott, Core2, ...): the
// families without AVX2 kernels.
bool is_generic_openblas_core(const std::string& corename);

// The decision made before OpenBLAS is loaded, as a pure function: the core
// to request via OPENBLAS_CORETYPE, or nothing (let OpenBLAS choose). It asks
// for the best core whenever the user set none, since what OpenBLAS would pick
// is unknown until it is loaded; for sgemm and dgemm its other x86-64
// families (Zen, Cooperlake, SapphireRapids) run the Haswell and SkylakeX
// kernels anyway.
//   user_setting  OPENBLAS_CORETYPE as the user set it (nullopt: unset)
//   loaded_before OpenBLAS is already in the process (its choice is made)
std::optional<std::string> openblas_core_to_request(const CpuFeatures& f,
                                                    const std::optional<std::string>& user_setting,
                                                    bool loaded_before);

// How the loaded OpenBLAS came to run its kernel.
struct OpenBlasLoad {
  std::string corename;                     // the kernel family it runs
  bool dynamic_arch = true;                 // its build can switch kernel families
  std::optional<std::string> user_setting;  // OPENBLAS_CORETYPE as the user set it
  bool loaded_before = false;               // it was in the process before attograd loaded it
};

// The warning the load prints (without the "attograd: warning: " prefix) when
// OpenBLAS runs a generic kernel although the CPU supports a faster one,
// saying why and what to do; nothing otherwise. Pure.
std::optional<std::string> slow_kernel_warning(const OpenBlasLoad& load, const CpuFeatures& f);

// How the OpenBLAS attograd uses was loaded (loads it if nothing has yet).
OpenBlasLoad openblas_load();

// The loaded OpenBLAS' file, as the dynamic loader found it.
std::string openblas_library_path();

// Row-major cblas_sgemm / cblas_dgemm of the loaded OpenBLAS, with blas.h's
// arguments (the caller checks them; each size fits a 32-bit BLAS integer).
void openblas_gemm(float* out, const float* a, const float* b, int64_t M, int64_t N, int64_t K, bool trans_a,
                   bool trans_b, int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta);
void openblas_gemm(double* out, const double* a, const double* b, int64_t M, int64_t N, int64_t K, bool trans_a,
                   bool trans_b, int64_t lda, int64_t ldb, int64_t ldc, double alpha, double beta);

// openblas_set_num_threads / openblas_get_num_threads of the loaded OpenBLAS
// (the load sets 1: attograd's pool splits large products, blas.h).
void openblas_set_threads(int n);
int openblas_threads();

}  // namespace attograd
