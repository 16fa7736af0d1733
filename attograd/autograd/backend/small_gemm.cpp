#include <attograd/autograd/backend/small_gemm.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include <attograd/autograd/backend/cpu.h>
#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/error.h>
#include <attograd/version.h>

#if ATTOGRAD_HAS_XSMM
#include <libxsmm.h>
#endif

namespace attograd {

#if ATTOGRAD_HAS_XSMM

namespace {

// What makes one libxsmm kernel: the column-major call below, plus beta.
struct XsmmKey {
  int64_t m, n, k, lda, ldb, ldc;
  int flags;
  bool operator==(const XsmmKey&) const = default;
};

struct XsmmKeyHash {
  size_t operator()(const XsmmKey& key) const {
    size_t h = static_cast<size_t>(key.flags);
    for (int64_t v : {key.m, key.n, key.k, key.lda, key.ldb, key.ldc}) h = h * 1000003u ^ static_cast<size_t>(v);
    return h;
  }
};

using XsmmCache = std::unordered_map<XsmmKey, XsmmKernel::Fn, XsmmKeyHash>;

XsmmCache& xsmm_cache() {
  thread_local XsmmCache cache;
  return cache;
}

// Set up at the first use only (libxsmm's registry takes about 12 MB).
void init_xsmm() {
  static std::once_flag once;
  std::call_once(once, [] { libxsmm_init(); });
}

// The kernel for `key` from `cache`, made on a miss by make(m, n, k, lda,
// ldb, ldc, flags), the key's fields as libxsmm's integers (null when
// libxsmm has no kernel: kept too, so it is asked once).
template <class Fn, class Make>
Fn cached_kernel(std::unordered_map<XsmmKey, Fn, XsmmKeyHash>& cache, const XsmmKey& key, const Make& make) {
  auto it = cache.find(key);
  if (it == cache.end()) {
    init_xsmm();
    const auto blas_int = [](int64_t v) { return static_cast<libxsmm_blasint>(v); };
    const auto fn = make(blas_int(key.m), blas_int(key.n), blas_int(key.k), blas_int(key.lda), blas_int(key.ldb),
                         blas_int(key.ldc), key.flags);
    it = cache.emplace(key, reinterpret_cast<Fn>(fn)).first;
  }
  return it->second;
}

}  // namespace

void XsmmKernel::operator()(float* out, const float* a, const float* b) const {
  const auto [M, N, K, ldb, ldc, trans_b, scale] = call_;
  if (trans_b) {  // b [N, K] -> bt [K, N]
    thread_local std::vector<float> bt;
    bt.resize(static_cast<size_t>(K * N));
    xsmm_transpose_b(bt.data(), b, N, K, ldb);
    b = bt.data();
  }
  fn_(b, a, out);  // row-major out = a·b is column-major outᵀ = bᵀ·aᵀ
  if (scale == 1.f) return;
  for (int64_t i = 0; i < M; ++i)
    for (float *o = out + i * ldc, *end = o + N; o != end; ++o) *o *= scale;
}

bool xsmm_supports(float alpha, float beta) { return beta == 0.f || (beta == 1.f && alpha == 1.f); }

XsmmKernel xsmm_kernel(int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b, int64_t lda, int64_t ldb,
                       int64_t ldc, float alpha, float beta) {
  if (!xsmm_supports(alpha, beta)) return {};
  const bool beta0 = beta == 0.f;
  // Column-major: m = N, n = M, A = op(b)ᵀ (b [K, N] as stored, or the transposed copy, ld N), B = op(a)ᵀ
  // (flagged transposed when trans_a).
  const int flags = (trans_a ? LIBXSMM_GEMM_FLAG_TRANS_B : 0) | (beta0 ? LIBXSMM_GEMM_FLAG_BETA_0 : 0);
  const XsmmKey key{N, M, K, trans_b ? N : ldb, lda, ldc, flags};
  const XsmmKernel::Fn fn = cached_kernel(xsmm_cache(), key, [beta0](libxsmm_blasint m, libxsmm_blasint n,
                                                                      libxsmm_blasint k, libxsmm_blasint la,
                                                                      libxsmm_blasint lb, libxsmm_blasint lc, int fl) {
    const float one = 1.f;
    return libxsmm_smmdispatch(m, n, k, &la, &lb, &lc, &one, beta0 ? nullptr : &one, &fl, nullptr);
  });
  if (!fn) return {};
  return XsmmKernel(fn, {M, N, K, ldb, ldc, trans_b, beta0 ? alpha : 1.f});
}

size_t xsmm_cached_kernels() { return xsmm_cache().size(); }

bool xsmm_bf16_native() {
  static const bool native = [] {
    init_xsmm();
    return cpu_features().avx512_bf16 && libxsmm_get_target_archid() >= LIBXSMM_X86_AVX512_CPX;
  }();
  return native;
}

const char* xsmm_target_arch() {
  init_xsmm();
  return libxsmm_get_target_arch();
}

std::string xsmm_bf16_missing() {
  if (xsmm_bf16_native()) return "";
  if (!cpu_features().avx512_bf16) return "this CPU has no AVX512-BF16 instructions";
  return fmt::format("libxsmm targets {} here, which has no AVX512-BF16 kernels", xsmm_target_arch());
}

XsmmBf16Kernel xsmm_bf16_kernel(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc, bool beta0) {
  // Column-major, as the float kernels: m = N, n = M, its A = the packed b (VNNI_A, ld ldb), its B = a.
  const int flags = LIBXSMM_GEMM_FLAG_VNNI_A | (beta0 ? LIBXSMM_GEMM_FLAG_BETA_0 : 0);
  const XsmmKey key{N, M, K, ldb, lda, ldc, flags};
  thread_local std::unordered_map<XsmmKey, XsmmBf16Kernel::Fn, XsmmKeyHash> cache;
  return XsmmBf16Kernel(cached_kernel(cache, key, [beta0](libxsmm_blasint m, libxsmm_blasint n, libxsmm_blasint k,
                                                          libxsmm_blasint la, libxsmm_blasint lb, libxsmm_blasint lc,
                                                          int fl) {
    const float one = 1.f, zero = 0.f;
    return libxsmm_bsmmdispatch(m, n, k, &la, &lb, &lc, &one, beta0 ? &zero : &one, &fl, nullptr);
  }));
}

#else  // a build without libxsmm (ATTOGRAD_XSMM=OFF): no kernel, so the router picks OpenBLAS

void XsmmKernel::operator()(float*, const float*, const float*) const {
  fail<ValueError>("gemm", "a libxsmm kernel was called, but this library was built without libxsmm "
                   "(-DATTOGRAD_XSMM=OFF or libxsmm-dev missing)");
}

bool xsmm_supports(float, float) { return false; }

XsmmKernel xsmm_kernel(int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t, int64_t, float, float) {
  fail<ValueError>("gemm", "GemmBackend::xsmm was asked for, but this library was built without libxsmm "
                   "(-DATTOGRAD_XSMM=OFF or libxsmm-dev missing); hint: ATTOGRAD_GEMM=blas or openblas");
}

size_t xsmm_cached_kernels() { return 0; }

bool xsmm_bf16_native() { return false; }

std::string xsmm_bf16_missing() {
  return cpu_features().avx512_bf16 ? "this build has no libxsmm (ATTOGRAD_XSMM=OFF or libxsmm-dev missing)"
                                    : "this CPU has no AVX512-BF16 instructions";
}

const char* xsmm_target_arch() { return "none"; }

XsmmBf16Kernel xsmm_bf16_kernel(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool) { return {}; }

#endif  // ATTOGRAD_HAS_XSMM

namespace {

// transpose_tiles for elements of `Bytes` bytes, over the rows [c0, c1) of out, 16 x 16 tiles at a time.
// Each element moves by a fixed-size memcpy (one load and one store): no alignment is assumed, so a bf16
// pair at any even address is one element.
template <int Bytes>
void transpose_range(unsigned char* out, const unsigned char* in, int64_t rows, int64_t ldi, int64_t ldo, int64_t c0,
                     int64_t c1) {
  constexpr int64_t kTile = 16;
  for (int64_t cb = c0; cb < c1; cb += kTile)
    for (int64_t r0 = 0; r0 < rows; r0 += kTile)
      for (int64_t c = cb, ce = std::min(c1, cb + kTile); c < ce; ++c)
        for (int64_t r = r0, r1 = std::min(rows, r0 + kTile); r < r1; ++r)
          std::memcpy(out + (c * ldo + r) * Bytes, in + (r * ldi + c) * Bytes, Bytes);
}

}  // namespace

void transpose_tiles(void* out, const void* in, int64_t rows, int64_t cols, int64_t ldi, int64_t ldo, int bytes) {
  constexpr int64_t kTile = 16;
  // A chunk is a band of 16 rows of out (16 columns of in): its tiles go down the band.
  parallel_for(block_count(cols, kTile), std::max<int64_t>(1, kElementwiseGrain / (kTile * std::max<int64_t>(rows, 1))),
               [=](int64_t first, int64_t last) {
    const int64_t c0 = first * kTile, c1 = std::min(cols, last * kTile);
    auto* o = static_cast<unsigned char*>(out);
    const auto* i = static_cast<const unsigned char*>(in);
    switch (bytes) {
      case 2: return transpose_range<2>(o, i, rows, ldi, ldo, c0, c1);
      case 4: return transpose_range<4>(o, i, rows, ldi, ldo, c0, c1);
      default: fail<ValueError>("transpose_tiles", "expected elements of 2 or 4 bytes, got {}", bytes);
    }
  });
}

void xsmm_transpose_b(float* bt, const float* b, int64_t N, int64_t K, int64_t ldb) {
  transpose_tiles(bt, b, N, K, ldb, N, sizeof(float));
}

}  // namespace attograd
