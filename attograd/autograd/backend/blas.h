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
#include <string_view>

#include <attograd/autograd/backend/blas_kernel.h>

namespace attograd {

class Tensor;

// blas: route by shape class (the default). openblas, xsmm: every float
// product to that library (xsmm: OpenBLAS where libxsmm has no kernel), for
// tests and A/B runs. naive: the reference loop, float64 too.
enum class GemmBackend { blas, openblas, xsmm, naive };

// Process-wide. The default is GemmBackend::blas, or what the environment
// variable ATTOGRAD_GEMM names (blas, openblas, xsmm or naive; empty is
// unset), read at the first call of either function; another name is a
// ValueError there.
void set_gemm_backend(GemmBackend backend);
GemmBackend gemm_backend();

// The backend a name means (the names above); ValueError for any other.
GemmBackend parse_gemm_backend(std::string_view name);
std::string_view gemm_backend_name(GemmBackend backend);

// The library GemmBackend::blas runs a float product of this shape on
// (openblas or xsmm; xsmm only where libxsmm has a kernel for it).
GemmBackend routed_gemm_backend(int64_t M, int64_t N, int64_t K, bool trans_b, float alpha, float beta);

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

// out [M, N] = alpha · a [M, K] · wᵀ + beta · out for a contiguous weight
// w [N, K] (a decode step's layers): where the library would copy w
// transposed on every call (libxsmm) the layer reads wᵀ [K, N] from a copy it
// keeps with w's storage, remade when w.version() has changed since (so a
// weight written in place is never read stale; the copy dies with the
// storage; a hit takes no memory); elsewhere it reads w, so on OpenBLAS the
// bits are gemm()'s with w. The caller has checked w's dtype is T.
template <class T>
void gemm_weight(T* out, const T* a, const Tensor& w, int64_t M, T alpha, T beta);

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
