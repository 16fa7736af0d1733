#include <attograd/autograd/backend/blas.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <attograd/autograd/backend/blas_kernel.h>
#include <attograd/autograd/backend/gemm_pieces.h>
#include <attograd/autograd/backend/small_gemm.h>
#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/error.h>
#include <attograd/autograd/tensor.h>
#include <attograd/autograd/tensor_impl.h>

namespace attograd {

namespace {

std::atomic<GemmBackend> g_backend{GemmBackend::blas};

constexpr std::array<std::pair<GemmBackend, std::string_view>, 4> kBackendNames = {{
    {GemmBackend::blas, "blas"},
    {GemmBackend::openblas, "openblas"},
    {GemmBackend::xsmm, "xsmm"},
    {GemmBackend::naive, "naive"},
}};

// ATTOGRAD_GEMM, once, before the backend is first read or set (empty: unset).
void read_backend_from_env() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (const char* name = std::getenv("ATTOGRAD_GEMM"); name && *name) g_backend = parse_gemm_backend(name);
  });
}


// Float products by shape class, for GemmBackend::blas: the first row whose
// max_work (M·N·K) is not exceeded decides; trans_b is the library for a
// transposed b (libxsmm copies it transposed first, which stops paying off
// above 1024×64×64). Measured per product with bench/ops_bench's BM_gemm on
// Zen 4 (docs/performance.md): libxsmm 0.96-1.47x OpenBLAS' speed from the
// per-head attention products up to 1024×256×1024. (BLIS, measured too, never
// beat both others by more than noise and was dropped: docs/performance.md.)
// OpenBLAS keeps the largest products, beyond what was measured. The first
// row is decoding's per-head scores (one query row against t ≤ 128 cached
// keys of width 32, work t·32): there libxsmm's copy of the transposed keys
// costs up to 10x OpenBLAS' whole product (1.9 µs against 0.1 µs at 1×32×32,
// 7.5 against 0.7 at 1×128×32); the largest training product it takes, tiny's
// per-head 16×16×16 Q Kᵀ, ran at the same speed on both (0.45-0.48 µs).
struct GemmRoute {
  int64_t max_work;
  GemmBackend plain, trans_b;
};
constexpr std::array<GemmRoute, 4> kGemmRoutes = {{
    {int64_t{1} << 12, GemmBackend::xsmm, GemmBackend::openblas},
    {int64_t{1} << 22, GemmBackend::xsmm, GemmBackend::xsmm},
    {int64_t{1} << 28, GemmBackend::xsmm, GemmBackend::openblas},
    {std::numeric_limits<int64_t>::max(), GemmBackend::openblas, GemmBackend::openblas},
}};

// One single-threaded float call on library `lib` (openblas or xsmm).
void library_gemm(GemmBackend lib, float* out, const float* a, const float* b, int64_t M, int64_t N, int64_t K,
                  bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta) {
  if (lib == GemmBackend::xsmm) {
    if (const XsmmKernel kernel = xsmm_kernel(M, N, K, ta, tb, lda, ldb, ldc, alpha, beta)) {
      kernel(out, a, b);
      return;
    }
    lib = GemmBackend::openblas;
  }
  openblas_gemm(out, a, b, M, N, K, ta, tb, lda, ldb, ldc, alpha, beta);
}

// float64 has OpenBLAS only.
void library_gemm(GemmBackend, double* out, const double* a, const double* b, int64_t M, int64_t N, int64_t K,
                  bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc, double alpha, double beta) {
  openblas_gemm(out, a, b, M, N, K, ta, tb, lda, ldb, ldc, alpha, beta);
}

}  // namespace

void check_gemm_args(int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b, int64_t lda, int64_t ldb,
                     int64_t ldc) {
  if (M < 0 || N < 0 || K < 0) fail<ValueError>("gemm", "sizes must be >= 0, got M={} N={} K={}", M, N, K);
  // Row-major: a leading dim spans at least one stored row.
  const int64_t need_a = std::max<int64_t>(1, trans_a ? M : K);
  const int64_t need_b = std::max<int64_t>(1, trans_b ? K : N);
  const int64_t need_c = std::max<int64_t>(1, N);
  if (lda < need_a || ldb < need_b || ldc < need_c)
    fail<ValueError>("gemm", "leading dims too small: lda={} (needs >= {}), ldb={} (needs >= {}), ldc={} (needs >= {}) "
                     "for M={} N={} K={} trans_a={} trans_b={}", lda, need_a, ldb, need_b, ldc, need_c, M, N, K,
                     trans_a, trans_b);
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();  // OpenBLAS' blasint (not the ILP64 build)
  if (std::max({M, N, K, lda, ldb, ldc}) > kMax)
    fail<ValueError>("gemm", "sizes M={} N={} K={} lda={} ldb={} ldc={} exceed the BLAS integer limit {}", M, N, K,
                     lda, ldb, ldc, kMax);
}

void set_gemm_backend(GemmBackend backend) {
  read_backend_from_env();
  g_backend = backend;
}
GemmBackend gemm_backend() {
  read_backend_from_env();
  return g_backend;
}

GemmBackend parse_gemm_backend(std::string_view name) {
  for (const auto& [backend, n] : kBackendNames)
    if (n == name) return backend;
  fail<ValueError>("gemm", "unknown GEMM backend '{}' (from ATTOGRAD_GEMM or a flag); expected one of blas, openblas, "
                   "xsmm, naive; hint: blas routes each shape to the fastest library", name);
}

std::string_view gemm_backend_name(GemmBackend backend) {
  for (const auto& [b, n] : kBackendNames)
    if (b == backend) return n;
  fail<ValueError>("gemm", "GemmBackend value {} has no name; expected one of the enum's values",
                   static_cast<int>(backend));
}

GemmBackend routed_gemm_backend(int64_t M, int64_t N, int64_t K, bool trans_b, float alpha, float beta) {
  const int64_t work = M * N * K;
  const GemmRoute& route = *std::find_if(kGemmRoutes.begin(), kGemmRoutes.end(),
                                         [&](const GemmRoute& r) { return work <= r.max_work; });
  const GemmBackend lib = trans_b ? route.trans_b : route.plain;
  if (lib == GemmBackend::xsmm && !xsmm_supports(alpha, beta)) return GemmBackend::openblas;
  return lib;
}

template <class T>
void gemm_naive(T* out, const T* a, const T* b, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b,
                int64_t lda, int64_t ldb, int64_t ldc, T alpha, T beta) {
  std::vector<double> row(static_cast<size_t>(N));  // Σ_k op(a)[i, k] · op(b)[k, :]
  for (int64_t i = 0; i < M; ++i) {
    std::fill(row.begin(), row.end(), 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const double aik = trans_a ? a[k * lda + i] : a[i * lda + k];
      if (trans_b) {
        for (int64_t j = 0; j < N; ++j) row[j] += aik * b[j * ldb + k];
      } else {
        const T* bk = b + k * ldb;
        for (int64_t j = 0; j < N; ++j) row[j] += aik * bk[j];
      }
    }
    T* o = out + i * ldc;
    for (int64_t j = 0; j < N; ++j)
      o[j] = static_cast<T>(alpha * row[j] + (beta == T(0) ? 0.0 : static_cast<double>(beta) * o[j]));
  }
}

template <class T>
void gemm(T* out, const T* a, const T* b, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b, int64_t lda,
          int64_t ldb, int64_t ldc, T alpha, T beta) {
  check_gemm_args(M, N, K, trans_a, trans_b, lda, ldb, ldc);
  if (M == 0 || N == 0) return;
  GemmBackend lib = gemm_backend();
  if (lib == GemmBackend::naive || K == 0) {  // K == 0: out = beta · out, no BLAS call needed
    gemm_naive(out, a, b, M, N, K, trans_a, trans_b, lda, ldb, ldc, alpha, beta);
    return;
  }
  if (lib == GemmBackend::blas && std::is_same_v<T, float>)
    lib = routed_gemm_backend(M, N, K, trans_b, static_cast<float>(alpha), static_cast<float>(beta));
  if constexpr (std::is_same_v<T, float>) {
    // One row by a transposed b on libxsmm (decoding's per-head scores q Kᵀ
    // past 128 cached keys): the same N dot products as the column b · aᵀ
    // [N, 1], which copies a's K values instead of all of b (one row: ldc is moot).
    if (lib == GemmBackend::xsmm && trans_b && !trans_a && M == 1 && N > 1)
      return gemm<T>(out, b, a, N, 1, K, false, true, ldb, lda, 1, alpha, beta);
    // libxsmm reads b only as stored [K, N]: a transposed b is copied once here, not once per piece.
    thread_local std::vector<float> bt;
    if (lib == GemmBackend::xsmm && trans_b && xsmm_supports(alpha, beta)) {
      bt.resize(static_cast<size_t>(K * N));
      xsmm_transpose_b(bt.data(), b, N, K, ldb);
      b = bt.data();
      trans_b = false;
      ldb = N;
    }
  }
  const auto kernel = [lib](T* o, const T* a_, const T* b_, int64_t m, int64_t n, int64_t k, bool ta, bool tb,
                            int64_t la, int64_t lb, int64_t lc, T al, T be) {
    library_gemm(lib, o, a_, b_, m, n, k, ta, tb, la, lb, lc, al, be);
  };
  if (gemm_splits(M, N, K))
    gemm_in_pieces(kernel, out, a, b, M, N, K, trans_a, trans_b, lda, ldb, ldc, alpha, beta);
  else
    kernel(out, a, b, M, N, K, trans_a, trans_b, lda, ldb, ldc, alpha, beta);
}

namespace {

// dst [cols, rows] = src [rows, cols]ᵀ, in tiles that stay in cache.
template <class T>
void transpose_into(T* dst, const T* src, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c)
        for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r) dst[c * rows + r] = src[r * cols + c];
}

// A weight's transpose as kept in its Storage::derived: which bytes it was
// made from (the storage's version, the weight's offset and shape) and where.
template <class T>
struct TransposedWeight {
  int64_t version = 0, offset = 0, rows = 0, cols = 0;
  Tensor wt;  // [cols, rows], from the allocator (aligned as the weights are)
};

// Guards every Storage::derived: pool tasks of one step ask for the same weights.
std::mutex g_derived_mutex;

// wᵀ for w [N, K] contiguous, remade when w's bytes changed since it was made
// (a new version, or another view of the storage asked last). The pointer is
// valid until the weight is written or freed.
template <class T>
const T* transposed_weight(const Tensor& w) {
  Storage& s = *w.impl()->storage;
  const int64_t version = s.version.load(std::memory_order_acquire);
  const int64_t offset = w.offset(), N = w.size(0), K = w.size(1);
  std::lock_guard lock(g_derived_mutex);
  auto kept = std::static_pointer_cast<TransposedWeight<T>>(s.derived);
  if (kept && kept->version == version && kept->offset == offset && kept->rows == N && kept->cols == K)
    return kept->wt.template data<T>();
  if (!kept) {
    kept = std::make_shared<TransposedWeight<T>>();
    s.derived = kept;
  }
  if (kept->rows != N || kept->cols != K || !kept->wt.defined()) kept->wt = Tensor::empty({K, N}, dtype_of<T>());
  transpose_into(kept->wt.template data<T>(), static_cast<const T*>(s.data) + offset, N, K);
  kept->version = version;
  kept->offset = offset;
  kept->rows = N;
  kept->cols = K;
  return kept->wt.template data<T>();
}

}  // namespace

template <class T>
void gemm_weight(T* out, const T* a, const Tensor& w, int64_t M, T alpha, T beta) {
  const int64_t N = w.size(0), K = w.size(1);
  bool plain = false;  // whether the library would copy w transposed: then read wᵀ
  if constexpr (std::is_same_v<T, float>) {
    const GemmBackend lib = gemm_backend();
    plain = lib == GemmBackend::xsmm ||
            (lib == GemmBackend::blas && routed_gemm_backend(M, N, K, false, alpha, beta) == GemmBackend::xsmm);
  }
  if (plain)
    gemm<T>(out, a, transposed_weight<T>(w), M, N, K, false, false, K, N, N, alpha, beta);
  else
    gemm<T>(out, a, static_cast<const T*>(w.impl()->storage->data) + w.offset(), M, N, K, false, true, K, K, N,
            alpha, beta);
}

template void gemm<float>(float*, const float*, const float*, int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t,
                          int64_t, float, float);
template void gemm_weight<float>(float*, const float*, const Tensor&, int64_t, float, float);
template void gemm_weight<double>(double*, const double*, const Tensor&, int64_t, double, double);
template void gemm<double>(double*, const double*, const double*, int64_t, int64_t, int64_t, bool, bool, int64_t,
                           int64_t, int64_t, double, double);
template void gemm_naive<float>(float*, const float*, const float*, int64_t, int64_t, int64_t, bool, bool, int64_t,
                                int64_t, int64_t, float, float);
template void gemm_naive<double>(double*, const double*, const double*, int64_t, int64_t, int64_t, bool, bool,
                                 int64_t, int64_t, int64_t, double, double);

void blas_set_num_threads(int n) {
  if (n < 1) fail<ValueError>("blas_set_num_threads", "thread count must be >= 1, got {}", n);
  openblas_set_threads(n);
}
int blas_num_threads() { return openblas_threads(); }

}  // namespace attograd
