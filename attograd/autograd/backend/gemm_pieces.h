// How a large product is cut across the thread pool, shared by every GEMM
// entry point of the backend (blas.cpp's gemm<T>, gemm_bf16.cpp's bf16
// products). Private to the backend, not installed.
#pragma once
#include <algorithm>
#include <cstdint>

#include <attograd/autograd/backend/threads.h>

namespace attograd {

// A GEMM of at least this many multiply-adds is cut into up to kPieces pieces
// along the longer side of the output, each a multiple of kPieceAlign long
// (so an output side of 64, a weight gradient [64, 64] summed over 1024 rows,
// still gives two); the pieces run across the thread pool.
// The cut depends on the shape only, never on the thread count, so the
// numbers are the same with 1 or 2 threads (OpenBLAS may pick a different
// kernel for a smaller product, so a thread-dependent cut would change them).
// Smaller GEMMs (the attention's per-head products) are one call.
constexpr int64_t kSplitWork = int64_t{1} << 21;
constexpr int64_t kPieces = 4;       // enough for up to 4 threads; each piece stays a large GEMM
constexpr int64_t kPieceAlign = 32;  // OpenBLAS' AVX-512 register blocking

// Whether a product of this shape is cut into pieces (see above).
inline bool gemm_splits(int64_t M, int64_t N, int64_t K) {
  return M * N * K >= kSplitWork && std::max(M, N) >= 2 * kPieceAlign;
}

// out [M, N] in pieces: by rows of op(a) when M >= N, else by columns of
// op(b); each piece is an ordinary single-threaded library call on
// sub-matrices (pointer offsets, same leading dims), one range of the pool's
// loop. The pool's threads claim the pieces one at a time (threads.h), so a
// thread that starts late (a worker waking up, or descheduled on a busy
// machine) takes fewer pieces instead of holding the others up; which thread
// runs a piece never changes its numbers. Out is TO (float, double), the
// operands TA and TB (the same; for gemm_bf16 bf16 rows and VNNI-packed pairs).
template <class TO, class TA, class TB, class Kernel>
void gemm_in_pieces(const Kernel& kernel, TO* out, const TA* a, const TB* b, int64_t M, int64_t N, int64_t K, bool ta,
                    bool tb, int64_t lda, int64_t ldb, int64_t ldc, TO alpha, TO beta) {
  const bool by_rows = M >= N;
  const int64_t extent = by_rows ? M : N;
  const int64_t piece_len = (extent + kPieces * kPieceAlign - 1) / (kPieces * kPieceAlign) * kPieceAlign;
  const int64_t pieces = block_count(extent, piece_len);
  parallel_for(pieces, 1, [&](int64_t first, int64_t last) {
    for (int64_t piece = first; piece < last; ++piece) {
      const int64_t lo = piece * piece_len, n = std::min(extent, lo + piece_len) - lo;
      if (by_rows)  // rows lo.. of op(a) and of out
        kernel(out + lo * ldc, ta ? a + lo : a + lo * lda, b, n, N, K, ta, tb, lda, ldb, ldc, alpha, beta);
      else  // columns lo.. of op(b) and of out
        kernel(out + lo, a, tb ? b + lo * ldb : b + lo, M, n, K, ta, tb, lda, ldb, ldc, alpha, beta);
    }
  });
}

}  // namespace attograd
