// The GEMM layer's public face: which library runs the matrix products
// (GemmBackend, one of the switches settings.h lists), the OpenBLAS kernel
// family it runs, and the product every op's GEMM goes through, on raw
// row-major arrays:
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
// Cost: 2·M·N·K flops. It runs on the library GemmBackend (below) names; a
// large product is split across the thread pool (threads.h). Programs use the
// tensor ops (matmul, linear); this is public for benchmarks that time the
// products a model issues at their own shapes (examples/bench --sgemm-rate).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace attograd {

// The library every matrix product runs on (settings.h lists it with the
// other switches; GemmBackendGuard sets it for a scope). blas: route each
// float product by its shape class to the library measured fastest for it
// (docs/performance.md); openblas, xsmm: every float product to that library
// (xsmm: OpenBLAS where libxsmm has no kernel), for tests and A/B runs;
// naive: the reference loop, float64 too. float64 goes to OpenBLAS' dgemm
// under every other choice.
enum class GemmBackend { blas, openblas, xsmm, naive };

// The backend in force (ATTOGRAD_GEMM at the first get or set, else blas).
GemmBackend gemm_backend();
// Replaces the backend for every thread.
void set_gemm_backend(GemmBackend backend);
// The backend a name means (the enum's names); a ValueError naming
// ATTOGRAD_GEMM and the accepted names for any other.
GemmBackend parse_gemm_backend(std::string_view name);
// The name parse_gemm_backend reads back: "blas", "openblas", "xsmm", "naive".
std::string_view gemm_backend_name(GemmBackend backend);

// The library GemmBackend::blas runs a float product of this shape on
// (openblas or xsmm; xsmm only where libxsmm has a kernel for it): what a
// benchmark names beside its timing. Arguments as gemm's below.
GemmBackend routed_gemm_backend(int64_t M, int64_t N, int64_t K, bool trans_b, float alpha, float beta);

// The kernel family OpenBLAS runs ("Haswell", "SkylakeX", "Prescott", ...),
// for a program's summary line; loads OpenBLAS if nothing has yet. The
// library picks the fastest family for the CPU itself (and warns once on
// stderr when OpenBLAS runs a generic one on a CPU that could do better).
std::string blas_corename();

// Checks the arguments (a ValueError naming "gemm": negative sizes, leading
// dims too small, a size past the 32-bit BLAS integer), then runs the
// current backend. T is float or double.
template <class T>
void gemm(T* out, const T* a, const T* b, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b,
          int64_t lda, int64_t ldb, int64_t ldc, T alpha, T beta);

}  // namespace attograd
