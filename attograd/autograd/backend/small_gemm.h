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

// bt [K, N] (row-major, ld N) = the stored b [N, K] (rows ldb apart) transposed,
// in tiles: how a transposed b reaches a libxsmm kernel.
void xsmm_transpose_b(float* bt, const float* b, int64_t N, int64_t K, int64_t ldb);

}  // namespace attograd
