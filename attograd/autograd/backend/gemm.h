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

#include <attograd/autograd/bfloat16.h>

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

// ---- bf16 operands, f32 sums (autocast's products: autocast.h) ----------------------

// The kernels gemm_bf16 can run. native: the CPU's AVX512-BF16 dot-product
// instructions (through a library); widened: both operands widened to f32,
// then gemm<float> (the same numbers up to summation order, at f32 speed: a
// bf16 x bf16 product is exact in f32); naive: the reference loop.
enum class Bf16Gemm { native, widened, naive };

// The kernel gemm_bf16 runs now: naive under GemmBackend::naive, native on a
// CPU with AVX512-BF16 when the build has a kernel for it, else widened.
Bf16Gemm bf16_gemm_kernel();
// "native", "widened" or "naive", and for native the instruction set and
// library, for a program's summary line.
std::string bf16_gemm_name(Bf16Gemm kernel);
// Why bf16_gemm_kernel() is not native here, in words for a one-line message:
// the naive backend, a CPU without AVX512-BF16, or a build without libxsmm
// ("" where it is native).
std::string bf16_gemm_fallback_reason();

// out = alpha · op(a) @ op(b) + beta · out as gemm<float> above (same
// arguments, checks and row-major contract), with a and b bfloat16 and out
// and every sum float32.
void gemm_bf16(float* out, const BFloat16* a, const BFloat16* b, int64_t M, int64_t N, int64_t K, bool trans_a,
               bool trans_b, int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta);
// gemm_bf16 under gemm's name: code templated on its operand type calls
// gemm(out, a, b, ...) (no template argument) and gets gemm<T> for float or
// double operands, this for bf16 ones.
inline void gemm(float* out, const BFloat16* a, const BFloat16* b, int64_t M, int64_t N, int64_t K, bool trans_a,
                 bool trans_b, int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta) {
  gemm_bf16(out, a, b, M, N, K, trans_a, trans_b, lda, ldb, ldc, alpha, beta);
}

}  // namespace attograd
