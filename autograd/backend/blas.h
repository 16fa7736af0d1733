// The GEMM layer: every matrix product in attograd goes through gemm<T>().
//
//   out = alpha · op(a) @ op(b) + beta · out          (row-major)
//
//   out  [M, N], rows ldc apart (ldc >= N)
//   a    op(a) = a  [M, K], rows lda apart (lda >= K)       when !trans_a
//        op(a) = aᵀ: a is stored [K, M], lda >= M           when  trans_a
//   b    op(b) = b  [K, N], ldb >= N                        when !trans_b
//        op(b) = bᵀ: b is stored [N, K], ldb >= K           when  trans_b
//
// A transposed view of a row-major matrix is exactly a "trans" operand, so
// callers pass views with a flag and a leading dim instead of copying them.
// beta == 0 means out is write-only (its old contents, even NaN, are ignored).
// Cost: 2·M·N·K flops.
//
// Two backends with the same contract: OpenBLAS (cblas_sgemm/cblas_dgemm, the
// default) and gemm_naive, a plain loop kept as reference and fallback.
// OpenBLAS always runs single-threaded: a large product is cut into pieces by
// its shape and the pieces run on attograd's thread pool (autograd/backend/threads.h).
//
// The backend's layers, each using only the ones below it:
//   blas (this file) -> blas_kernel (OpenBLAS kernel choice), threads (the pool)
//   allocator (storage), on its own
#pragma once
#include <cstdint>

#include <attograd/autograd/backend/blas_kernel.h>

namespace attograd {

enum class GemmBackend { blas, naive };

// Process-wide; the default is GemmBackend::blas.
void set_gemm_backend(GemmBackend backend);
GemmBackend gemm_backend();

// Sets the backend for a scope and restores the previous one.
class GemmBackendGuard {
 public:
  explicit GemmBackendGuard(GemmBackend backend) : prev_(gemm_backend()) { set_gemm_backend(backend); }
  ~GemmBackendGuard() { set_gemm_backend(prev_); }
  GemmBackendGuard(const GemmBackendGuard&) = delete;
  GemmBackendGuard& operator=(const GemmBackendGuard&) = delete;

 private:
  GemmBackend prev_;
};

// Checks the arguments (ValueError naming "gemm"), then runs the current backend.
template <class T>
void gemm(T* out, const T* a, const T* b, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b,
          int64_t lda, int64_t ldb, int64_t ldc, T alpha, T beta);

// The reference kernel: same contract, no argument checks, sums in double.
template <class T>
void gemm_naive(T* out, const T* a, const T* b, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b,
                int64_t lda, int64_t ldb, int64_t ldc, T alpha, T beta);

// OpenBLAS' own thread count: 1 from load time on (the pool splits large
// GEMMs instead). Tests and benchmarks may change it; blas_corename() (the
// kernel family OpenBLAS picked) is in blas_kernel.h.
void blas_set_num_threads(int n);
int blas_num_threads();

}  // namespace attograd
