// gemm_bf16 (gemm.h): products of bfloat16 operands summed in float32, the
// matrix products of bf16 autocast (autocast.h). Its kernels, each with the
// row-major contract of gemm<float>:
//   native   libxsmm's AVX512-BF16 kernels (small_gemm.h), where the CPU has
//            them: b packed to VNNI pairs once per call, then 64 x 64 blocks
//            of out, one JIT call each, the blocks of a large product split
//            across the pool as gemm<float>'s are (gemm_pieces.h);
//   widened  both operands widened to f32 (exact), then gemm<float>: the same
//            numbers up to summation order, at f32 speed, on any CPU;
//   naive    the reference loop (sums in double), kept beside the others.
// Why libxsmm and not oneDNN (what PyTorch uses): bench/bf16_gemm_probe.cpp
// measured both on Zen 5 (docs/design/bf16.md); libxsmm with 64 x 64 blocks
// was as fast as oneDNN's matmul on the Linear shapes (within 15%; oneDNN
// ahead on K >= 2048) and 1.5-2.5x faster on the per-head attention
// products, without a second threading runtime (oneDNN's Debian build is
// OpenMP) or a new 38 MB dependency.
#include <algorithm>
#include <vector>

#include <attograd/autograd/backend/blas.h>
#include <attograd/autograd/backend/gemm.h>
#include <attograd/autograd/backend/gemm_pieces.h>
#include <attograd/autograd/backend/small_gemm.h>
#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/error.h>

namespace attograd {

namespace {

// dst [rows, cols] (ld cols) = src [rows, cols] (rows ld apart) as floats.
void widen(std::vector<float>& dst, const BFloat16* src, int64_t rows, int64_t cols, int64_t ld) {
  dst.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = static_cast<float>(src[r * ld + c]);
}

// dst [Kp/2, N] = op(b) [K, N] as VNNI pairs (rows k and k+1 of a column
// side by side), Kp = K rounded up to even, the pad row zero. op(b)[k, j] is
// b[k·ldb + j], or b[j·ldb + k] when b is stored transposed ([N, K]). A
// transposed b with an even ldb stores each pair as two adjacent values, so
// its packing is a transpose of [N, K/2] 4-byte pairs; a plain b interleaves
// two rows per packed row. Either runs across the pool.
void pack_vnni(std::vector<VnniPair>& dst, const BFloat16* b, int64_t K, int64_t N, bool trans_b, int64_t ldb) {
  const int64_t full = K / 2, pairs = (K + 1) / 2;
  dst.resize(static_cast<size_t>(pairs * N));
  VnniPair* d = dst.data();
  if (trans_b && ldb % 2 == 0) {
    transpose_tiles(d, b, N, full, ldb / 2, N, sizeof(VnniPair));
  } else {
    parallel_for(full, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(N, 1)), [=](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        VnniPair* row = d + p * N;
        const int64_t k = 2 * p;
        if (trans_b)
          for (int64_t j = 0; j < N; ++j) row[j] = {b[j * ldb + k], b[j * ldb + k + 1]};
        else
          for (int64_t j = 0; j < N; ++j) row[j] = {b[k * ldb + j], b[(k + 1) * ldb + j]};
      }
    });
  }
  if (pairs > full) {  // K odd: the last row pairs with zeros
    const int64_t k = K - 1;
    for (int64_t j = 0; j < N; ++j) d[full * N + j] = {trans_b ? b[j * ldb + k] : b[k * ldb + j], BFloat16::from_bits(0)};
  }
}

// dst [M, Kp] = op(a) [M, K] with a zero pad column when Kp > K; op(a)[i, k]
// is a[i·lda + k], or a[k·lda + i] when a is stored transposed ([K, M]: a
// tiled transpose across the pool).
void rows_of(std::vector<BFloat16>& dst, const BFloat16* a, int64_t M, int64_t K, int64_t Kp, bool trans_a,
             int64_t lda) {
  dst.resize(static_cast<size_t>(M * Kp));
  BFloat16* d = dst.data();
  if (trans_a)
    transpose_tiles(d, a, K, M, lda, Kp, sizeof(BFloat16));
  else
    for (int64_t i = 0; i < M; ++i) std::copy(a + i * lda, a + i * lda + K, d + i * Kp);
  if (Kp > K)
    for (int64_t i = 0; i < M; ++i) d[i * Kp + K] = BFloat16::from_bits(0);
}

// The native kernel's block of out (see the file comment).
constexpr int64_t kBlock = 64;

// out [M, N] = (or +=, !beta0) alpha · a [M, Kp] · b (VNNI pairs, ldb pairs
// a row), in kBlock x kBlock blocks; alpha != 1 only with beta0.
void native_blocks(float* out, const BFloat16* a, const VnniPair* b, int64_t M, int64_t N, int64_t Kp, int64_t lda,
                   int64_t ldb, int64_t ldc, float alpha, bool beta0) {
  for (int64_t j0 = 0; j0 < N; j0 += kBlock)  // a Kp x 64 panel of b stays in cache over the rows
    for (int64_t i0 = 0; i0 < M; i0 += kBlock) {
      const int64_t m = std::min(kBlock, M - i0), n = std::min(kBlock, N - j0);
      const XsmmBf16Kernel kernel = xsmm_bf16_kernel(m, n, Kp, lda, ldb, ldc, beta0);
      if (!kernel)
        fail<AutogradError>("gemm_bf16", "libxsmm made no bf16 kernel for a {}x{}x{} block (lda {}, ldb {}, ldc {}); "
                            "hint: ATTOGRAD_GEMM=naive runs the reference loop", m, n, Kp, lda, ldb, ldc);
      float* o = out + i0 * ldc + j0;
      kernel(o, a + i0 * lda, b + j0);
      if (alpha != 1.0f)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) o[i * ldc + j] *= alpha;
    }
}

}  // namespace

void gemm_bf16_naive(float* out, const BFloat16* a, const BFloat16* b, int64_t M, int64_t N, int64_t K, bool trans_a,
                     bool trans_b, int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta) {
  std::vector<double> row(static_cast<size_t>(N));  // Σ_k op(a)[i, k] · op(b)[k, :]
  for (int64_t i = 0; i < M; ++i) {
    std::fill(row.begin(), row.end(), 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const double aik = static_cast<double>(trans_a ? a[k * lda + i] : a[i * lda + k]);
      for (int64_t j = 0; j < N; ++j) row[j] += aik * static_cast<double>(trans_b ? b[j * ldb + k] : b[k * ldb + j]);
    }
    float* o = out + i * ldc;
    for (int64_t j = 0; j < N; ++j)
      o[j] = static_cast<float>(alpha * row[j] + (beta == 0.0f ? 0.0 : static_cast<double>(beta) * o[j]));
  }
}

void gemm_bf16_widened(float* out, const BFloat16* a, const BFloat16* b, int64_t M, int64_t N, int64_t K,
                       bool trans_a, bool trans_b, int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta) {
  // Per thread, grown to the largest product seen: no allocation once warm.
  thread_local std::vector<float> wa, wb;
  widen(wa, a, trans_a ? K : M, trans_a ? M : K, lda);  // as stored: [M, K], or [K, M] when trans_a
  widen(wb, b, trans_b ? N : K, trans_b ? K : N, ldb);  // [K, N], or [N, K] when trans_b
  gemm<float>(out, wa.data(), wb.data(), M, N, K, trans_a, trans_b, trans_a ? M : K, trans_b ? K : N, ldc, alpha,
              beta);
}

bool gemm_bf16_native(float* out, const BFloat16* a, const BFloat16* b, int64_t M, int64_t N, int64_t K, bool trans_a,
                      bool trans_b, int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta) {
  const bool beta0 = beta == 0.0f;
  if (!xsmm_bf16_native() || !(beta0 || (beta == 1.0f && alpha == 1.0f)) || K == 0) return false;
  // Per thread, grown to the largest product seen: no allocation once warm.
  thread_local std::vector<VnniPair> packed_b;
  thread_local std::vector<BFloat16> rows_a;
  const int64_t Kp = K + K % 2;
  pack_vnni(packed_b, b, K, N, trans_b, ldb);
  // libxsmm reads a as plain rows of pairs: Kp long, an even number of values apart (an odd lda gives wrong
  // sums: measured, tests/test_autocast.cpp), so a transposed a, an odd K or an odd lda is copied.
  if (trans_a || Kp != K || lda % 2 != 0) {
    rows_of(rows_a, a, M, K, Kp, trans_a, lda);
    a = rows_a.data();
    lda = Kp;
  }
  const auto piece = [beta0](float* o, const BFloat16* a_, const VnniPair* b_, int64_t m, int64_t n, int64_t k, bool,
                             bool, int64_t la, int64_t lb, int64_t lc, float al, float) {
    native_blocks(o, a_, b_, m, n, k, la, lb, lc, al, beta0);
  };
  if (gemm_splits(M, N, K))
    gemm_in_pieces(piece, out, a, packed_b.data(), M, N, Kp, false, false, lda, N, ldc, alpha, beta);
  else
    piece(out, a, packed_b.data(), M, N, Kp, false, false, lda, N, ldc, alpha, beta);
  return true;
}

Bf16Gemm bf16_gemm_kernel() {
  if (gemm_backend() == GemmBackend::naive) return Bf16Gemm::naive;
  return xsmm_bf16_native() ? Bf16Gemm::native : Bf16Gemm::widened;
}

std::string bf16_gemm_fallback_reason() {
  switch (bf16_gemm_kernel()) {
    case Bf16Gemm::native: return "";
    case Bf16Gemm::widened: return xsmm_bf16_missing();
    case Bf16Gemm::naive: return "the GEMM backend is naive (ATTOGRAD_GEMM)";
  }
  return "?";
}

std::string bf16_gemm_name(Bf16Gemm kernel) {
  switch (kernel) {
    case Bf16Gemm::native: return fmt::format("native (AVX512-BF16, libxsmm target {})", xsmm_target_arch());
    case Bf16Gemm::widened: return "widened to f32";
    case Bf16Gemm::naive: return "naive";
  }
  return "?";
}

void gemm_bf16(float* out, const BFloat16* a, const BFloat16* b, int64_t M, int64_t N, int64_t K, bool trans_a,
               bool trans_b, int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta) {
  check_gemm_args(M, N, K, trans_a, trans_b, lda, ldb, ldc);
  if (M == 0 || N == 0) return;
  const Bf16Gemm kernel = bf16_gemm_kernel();
  if (kernel == Bf16Gemm::naive || K == 0) {  // K == 0: out = beta · out
    gemm_bf16_naive(out, a, b, M, N, K, trans_a, trans_b, lda, ldb, ldc, alpha, beta);
    return;
  }
  if (kernel == Bf16Gemm::native && gemm_bf16_native(out, a, b, M, N, K, trans_a, trans_b, lda, ldb, ldc, alpha, beta))
    return;
  gemm_bf16_widened(out, a, b, M, N, K, trans_a, trans_b, lda, ldb, ldc, alpha, beta);
}

}  // namespace attograd
