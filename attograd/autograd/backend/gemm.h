// The matrix product every op's GEMM goes through, on raw row-major arrays:
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
// Cost: 2·M·N·K flops. It runs on the library settings.h's GemmBackend names
// (routed_gemm_backend there tells which one a shape goes to); a large
// product is split across the thread pool (threads.h). Programs use the
// tensor ops (matmul, linear); this is public for benchmarks that time the
// products a model issues at their own shapes (examples/bench --sgemm-rate).
#pragma once
#include <cstdint>

namespace attograd {

// Checks the arguments (a ValueError naming "gemm": negative sizes, leading
// dims too small, a size past the 32-bit BLAS integer), then runs the
// current backend. T is float or double.
template <class T>
void gemm(T* out, const T* a, const T* b, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b,
          int64_t lda, int64_t ldb, int64_t ldc, T alpha, T beta);

}  // namespace attograd
