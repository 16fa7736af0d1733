// The small-GEMM library behind gemm<float>() (blas.h): libxsmm's JIT
// kernels, with blas.h's row-major contract
//
//   out = alpha · op(a) @ op(b) + beta · out     out [M, N], op(a) [M, K], op(b) [K, N]
//
// on one thread each (the pool in threads.h runs them side by side).
//
// libxsmm generates one kernel per (M, N, K, leading dims, transposes, beta)
// and keeps it; xsmm_kernel() looks it up in a per-thread cache first, so a
// hot loop never re-enters libxsmm's dispatcher (its registry takes a lock on
// a miss). libxsmm 1.17 JITs alpha = 1 and beta ∈ {0, 1} only; alpha ≠ 1
// with beta = 0 scales out afterwards, and the rest (alpha ≠ 1 with beta = 1)
// gets an empty XsmmKernel: the caller picks another library. Nor can it read
// a transposed b (row-major; its column-major "trans A"): such a b is first
// copied transposed (xsmm_transpose_b; K·N floats, cheap next to the K·M·N
// product at the shapes routed here). gemm<float>() makes that copy once
// before it cuts a product into pieces; a kernel made for a transposed b
// copies into a per-thread buffer on every call.
//
// Only these two files include libxsmm.h. libxsmm's own BLAS fallback (which
// attograd never calls) is linked to libxsmmnoblas' stubs: OpenBLAS is not
// linked but loaded at run time (blas_kernel.h, cmake/small_gemm.cmake).
// A build without libxsmm (ATTOGRAD_XSMM=OFF, build_features().xsmm false)
// supports nothing, so the router sends every product to OpenBLAS, and
// xsmm_kernel() (reached only when GemmBackend::xsmm is forced) is a
// ValueError naming the option.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <attograd/autograd/bfloat16.h>

namespace attograd {

// A libxsmm kernel bound to one call shape; empty when libxsmm has none.
class XsmmKernel {
 public:
  using Fn = void (*)(const float* a, const float* b, float* c, ...);
  XsmmKernel() = default;
  struct Call {
    int64_t M, N, K, ldb, ldc;
    bool trans_b;
    float scale;  // alpha when beta == 0: out is scaled after the alpha = 1 kernel
  };
  XsmmKernel(Fn fn, const Call& call) : fn_(fn), call_(call) {}
  explicit operator bool() const { return fn_ != nullptr; }
  // out = alpha · op(a) @ op(b) + beta · out for the call it was made for.
  void operator()(float* out, const float* a, const float* b) const;

 private:
  Fn fn_ = nullptr;
  Call call_{};
};

// Whether xsmm_kernel() can make a kernel for this alpha and beta (see above).
bool xsmm_supports(float alpha, float beta);

// The kernel for this call (blas.h's arguments), from the calling thread's
// cache or made once; empty when libxsmm cannot run it.
XsmmKernel xsmm_kernel(int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b, int64_t lda, int64_t ldb,
                       int64_t ldc, float alpha, float beta);

// How many kernels the calling thread's cache holds (one per call shape seen).
size_t xsmm_cached_kernels();

// ---- bf16 kernels (gemm_bf16's native kernel, backend/gemm_bf16.cpp) ----------------
//
// libxsmm 1.17 JITs bf16 x bf16 -> f32 products with AVX512-BF16 dot-product
// instructions when its target is Cooper Lake or later ("cpx"; Zen 4 and 5
// are detected as such). Its bf16 kernels read b only VNNI-packed: op(b)
// [K, N] stored as [K/2][N][2], rows k and k+1 interleaved (K even), and
// neither operand transposed (measured: every other flag gives no kernel);
// alpha = 1, beta 0 or 1.

// Whether libxsmm runs bf16 products with AVX512-BF16 instructions here:
// this CPU has them and libxsmm's target is cpx or later. False in a build
// without libxsmm.
bool xsmm_bf16_native();
// Why xsmm_bf16_native() is false, in words for a one-line message ("" when it is true).
std::string xsmm_bf16_missing();
// libxsmm's target architecture ("cpx", "skx", "hsw", ...; "none" without libxsmm).
const char* xsmm_target_arch();

// Two bf16 values of one column of b, rows k and k+1: one element of the
// VNNI-packed b, so a column offset j into it is a pointer offset j.
struct VnniPair {
  BFloat16 lo, hi;
};

// A libxsmm bf16 kernel bound to one block shape; empty when libxsmm has none.
class XsmmBf16Kernel {
 public:
  using Fn = void (*)(const void* b_vnni, const void* a, float* c, ...);
  XsmmBf16Kernel() = default;
  explicit XsmmBf16Kernel(Fn fn) : fn_(fn) {}
  explicit operator bool() const { return fn_ != nullptr; }
  // out [M, N] (= or +=, as made) a [M, K] · b, b VNNI-packed from column 0 of b_vnni.
  void operator()(float* out, const BFloat16* a, const VnniPair* b_vnni) const { fn_(b_vnni, a, out); }

 private:
  Fn fn_ = nullptr;
};

// The kernel for out [M, N] (rows ldc apart) = a [M, K] (row-major, rows lda
// apart) · b, b VNNI-packed with ldb pairs per packed row (ldb >= N), K even;
// beta0: out = the product, else out += it. From the calling thread's cache.
XsmmBf16Kernel xsmm_bf16_kernel(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc, bool beta0);

// out [cols, rows] (rows ldo elements apart) = in [rows, cols] (rows ldi
// apart) transposed, for elements of `bytes` bytes (2: bf16, 4: float or a
// VNNI pair), in 16 x 16 tiles so both sides of a tile stay in L1; the rows of
// out are spread across the pool (the copy is exact, so the thread count
// never changes a number).
void transpose_tiles(void* out, const void* in, int64_t rows, int64_t cols, int64_t ldi, int64_t ldo, int bytes);

// bt [K, N] (row-major, ld N) = the stored b [N, K] (rows ldb apart) transposed
// (transpose_tiles): how a transposed b reaches a libxsmm kernel.
void xsmm_transpose_b(float* bt, const float* b, int64_t N, int64_t K, int64_t ldb);

}  // namespace attograd
