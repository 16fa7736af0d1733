// The GEMM layer's implementation: every matrix product in attograd goes
// through gemm<T>() (its contract and shape legend: backend/gemm.h, public),
// which runs on the backend GemmBackend (there too) names.
//
// Backends with the same contract: OpenBLAS (cblas_sgemm/cblas_dgemm, loaded
// at its first use: blas_kernel.h), the small-GEMM library libxsmm
// (small_gemm.h), and gemm_naive, a plain loop kept as reference and fallback. By default (GemmBackend::blas)
// each float product goes to the library measured fastest for its shape class
// (kGemmRoutes in blas.cpp; the measurements are in docs/performance.md);
// float64 always goes to OpenBLAS' dgemm. Every library runs single-threaded:
// a large product is cut into pieces by its shape and the pieces run on
// attograd's thread pool (attograd/autograd/backend/threads.h).
//
// The backend's layers, each using only the ones below it:
//   blas (this file) -> blas_kernel (loading OpenBLAS, its kernel choice),
//   small_gemm (libxsmm), threads (the pool); allocator (storage), on its own
#pragma once
#include <cstdint>

#include <attograd/autograd/backend/blas_kernel.h>
#include <attograd/autograd/backend/gemm.h>

namespace attograd {

class Tensor;

// out [M, N] = alpha · a [M, K] · wᵀ + beta · out for a contiguous weight
// w [N, K] (a decode step's layers): where the library would copy w
// transposed on every call (libxsmm) the layer reads wᵀ [K, N] from a copy it
// keeps with w's storage, remade when w.version() has changed since (so a
// weight written in place is never read stale; the copy dies with the
// storage; a hit takes no memory); elsewhere it reads w, so on OpenBLAS the
// bits are gemm()'s with w. The caller has checked w's dtype is T.
template <class T>
void gemm_weight(T* out, const T* a, const Tensor& w, int64_t M, T alpha, T beta);

// gemm's argument checks (gemm.h): a ValueError naming "gemm" for negative
// sizes, leading dims too small, or a size past the 32-bit BLAS integer.
void check_gemm_args(int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b, int64_t lda, int64_t ldb,
                     int64_t ldc);

// The reference kernel: same contract, no argument checks, sums in double.
template <class T>
void gemm_naive(T* out, const T* a, const T* b, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b,
                int64_t lda, int64_t ldb, int64_t ldc, T alpha, T beta);

// gemm_bf16's kernels (gemm.h's Bf16Gemm), callable one by one for tests
// and benchmarks: same contract as gemm_bf16, no argument checks.
void gemm_bf16_naive(float* out, const BFloat16* a, const BFloat16* b, int64_t M, int64_t N, int64_t K, bool trans_a,
                     bool trans_b, int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta);
void gemm_bf16_widened(float* out, const BFloat16* a, const BFloat16* b, int64_t M, int64_t N, int64_t K,
                       bool trans_a, bool trans_b, int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta);
// The native kernel returns false, doing nothing, where it cannot run this
// call: no AVX512-BF16 here (or no libxsmm), K = 0, or alpha and beta other
// than (any, 0) and (1, 1).
bool gemm_bf16_native(float* out, const BFloat16* a, const BFloat16* b, int64_t M, int64_t N, int64_t K, bool trans_a,
                      bool trans_b, int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta);

// OpenBLAS' own thread count: 1 from load time on (the pool splits large
// GEMMs instead). Tests and benchmarks may change it; blas_corename() (the
// kernel family OpenBLAS picked) is public, in gemm.h.
void blas_set_num_threads(int n);
int blas_num_threads();

}  // namespace attograd
