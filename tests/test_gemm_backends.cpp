// The GEMM layer's libraries (attograd/autograd/backend/blas.h, small_gemm.h): each of
// OpenBLAS, libxsmm and the shape-class routing agrees with the naive
// kernel on every transpose pairing, odd sizes, padded leading dims, alpha and
// beta; float64 goes to OpenBLAS' dgemm whatever is forced; libxsmm's kernels
// are cached per thread and safe on the pool. (ctest also reruns test_matmul
// and test_attention with each backend forced; the names and ATTOGRAD_GEMM:
// test_settings.cpp.)
#include <dlfcn.h>

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <attograd/autograd/backend/blas.h>
#include <attograd/autograd/backend/small_gemm.h>
#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/error.h>
#include <attograd/version.h>

#include "test_util.h"

using namespace attograd;
using namespace attograd::testing;

namespace {

// The backends this build has (libxsmm only with ATTOGRAD_XSMM).
std::vector<GemmBackend> libraries() {
  std::vector<GemmBackend> out = {GemmBackend::blas, GemmBackend::openblas};
  if (build_features().xsmm) out.push_back(GemmBackend::xsmm);
  return out;
}

struct Case {
  int64_t M, N, K;
};

// Odd sizes that leave edge tiles in every kernel, the per-head attention
// products, and a product gemm cuts into pieces (1024 rows).
constexpr Case kCases[] = {{1, 1, 1}, {7, 5, 3}, {33, 65, 17}, {17, 16, 31}, {16, 16, 16},
                           {32, 32, 32}, {64, 64, 64}, {130, 9, 257}, {1024, 64, 64}};

struct Scale {
  float alpha, beta;
};
constexpr Scale kScales[] = {{1.f, 0.f}, {1.f, 1.f}, {0.125f, 0.f}, {0.5f, -2.f}};

// One call of gemm<T> with padded leading dims on unit normals, against
// gemm_naive (which sums in double); padding must be left alone.
template <class T>
void expect_matches_naive(GemmBackend backend, const Case& c, bool ta, bool tb, Scale s, Generator& gen) {
  SCOPED_TRACE(fmt::format("{} M={} N={} K={} trans_a={} trans_b={} alpha={} beta={}", gemm_backend_name(backend),
                           c.M, c.N, c.K, ta, tb, s.alpha, s.beta));
  const int64_t pad = 3, lda = (ta ? c.M : c.K) + pad, ldb = (tb ? c.K : c.N) + pad, ldc = c.N + pad;
  const DType dt = sizeof(T) == 4 ? DType::f32 : DType::f64;
  const std::vector<T> a = Tensor::randn({(ta ? c.K : c.M) * lda}, gen, dt).to_vector<T>();
  const std::vector<T> b = Tensor::randn({(tb ? c.N : c.K) * ldb}, gen, dt).to_vector<T>();
  std::vector<T> out = Tensor::randn({c.M * ldc}, gen, dt).to_vector<T>();
  if (s.beta == 0.f)  // beta == 0: old contents, even NaN, are ignored
    for (int64_t i = 0; i < c.M; ++i) out[i * ldc] = NAN;
  std::vector<T> ref = out;
  {
    const GemmBackendGuard use(backend);
    gemm<T>(out.data(), a.data(), b.data(), c.M, c.N, c.K, ta, tb, lda, ldb, ldc, T(s.alpha), T(s.beta));
  }
  gemm_naive<T>(ref.data(), a.data(), b.data(), c.M, c.N, c.K, ta, tb, lda, ldb, ldc, T(s.alpha), T(s.beta));
  // float32: sums of K products of unit normals, error growing like √K·ε (as in test_blas_kernel.cpp),
  // scaled by alpha, plus beta's rounding; float64 (always dgemm or naive) to 1e-12.
  const double tol = sizeof(T) == 4 ? 4e-5 * std::sqrt(static_cast<double>(c.K)) * std::max(1.f, std::abs(s.alpha)) +
                                          1e-6 * std::abs(s.beta)
                                    : 1e-12 * std::sqrt(static_cast<double>(c.K));
  double worst = 0;
  for (int64_t i = 0; i < c.M; ++i) {
    for (int64_t j = 0; j < c.N; ++j) worst = std::max(worst, std::abs(double(out[i * ldc + j]) - ref[i * ldc + j]));
    for (int64_t j = c.N; j < ldc; ++j) ASSERT_EQ(out[i * ldc + j], ref[i * ldc + j]) << "padding written, row " << i;
  }
  EXPECT_LT(worst, tol);
}

}  // namespace

TEST(GemmBackends, EveryLibraryMatchesNaiveFloat32) {
  Generator gen(21);
  for (GemmBackend backend : libraries())
    for (const Case& c : kCases)
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (Scale s : kScales) expect_matches_naive<float>(backend, c, ta, tb, s, gen);
}

TEST(GemmBackends, Float64GoesToDgemmWhateverIsForced) {
  Generator gen(22);
  for (GemmBackend backend : libraries())
    for (const Case& c : {Case{7, 5, 3}, Case{33, 65, 17}, Case{1024, 64, 64}})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) expect_matches_naive<double>(backend, c, ta, tb, {0.5f, -2.f}, gen);
}

// The routing table at the shapes the models use (docs/performance.md);
// a build without libxsmm sends them all to OpenBLAS.
TEST(GemmBackends, RoutesByShapeClass) {
  const GemmBackend xsmm = build_features().xsmm ? GemmBackend::xsmm : GemmBackend::openblas;
  EXPECT_EQ(routed_gemm_backend(32, 32, 32, true, 0.17f, 0.f), xsmm);  // Q Kᵀ, scaled
  EXPECT_EQ(routed_gemm_backend(1, 128, 32, true, 0.17f, 0.f), GemmBackend::openblas);  // decode: one query row
  EXPECT_EQ(routed_gemm_backend(32, 32, 32, false, 1.f, 1.f), xsmm);   // dV accumulating
  EXPECT_EQ(routed_gemm_backend(32, 32, 32, false, 0.17f, 1.f), GemmBackend::openblas);  // libxsmm: alpha 1 with beta 1
  EXPECT_EQ(routed_gemm_backend(1024, 64, 64, true, 1.f, 0.f), xsmm);        // tiny's x Wᵀ
  EXPECT_EQ(routed_gemm_backend(1024, 256, 256, false, 1.f, 0.f), xsmm);     // base's dx = grad W
  EXPECT_EQ(routed_gemm_backend(1024, 256, 256, true, 1.f, 0.f), GemmBackend::openblas);  // base's x Wᵀ
  EXPECT_EQ(routed_gemm_backend(4096, 4096, 1024, false, 1.f, 0.f), GemmBackend::openblas);  // beyond the measured
}

TEST(GemmBackends, XsmmKernelsAreMadeOncePerShapeAndThread) {
  if (!build_features().xsmm) GTEST_SKIP() << "built without libxsmm (ATTOGRAD_XSMM=OFF)";
  Generator gen(23);
  const std::vector<float> a = Tensor::randn({48 * 40}, gen).to_vector<float>();
  const std::vector<float> b = Tensor::randn({40 * 24}, gen).to_vector<float>();
  std::vector<float> out(48 * 24);
  const GemmBackendGuard use(GemmBackend::xsmm);
  gemm<float>(out.data(), a.data(), b.data(), 48, 24, 40, false, false, 40, 24, 24, 1.f, 0.f);
  const size_t kernels = xsmm_cached_kernels();
  for (int i = 0; i < 100; ++i)
    gemm<float>(out.data(), a.data(), b.data(), 48, 24, 40, false, false, 40, 24, 24, 1.f, 0.f);
  EXPECT_EQ(xsmm_cached_kernels(), kernels);
  gemm<float>(out.data(), a.data(), b.data(), 48, 24, 40, false, false, 40, 24, 24, 1.f, 1.f);  // beta 1: another
  EXPECT_EQ(xsmm_cached_kernels(), kernels + 1);
}

// Many shapes at once from two pool threads, each thread filling its own cache.
TEST(GemmBackends, LibrariesAreSafeOnThePool) {
  const int threads_before = num_threads();
  set_num_threads(2);
  for (GemmBackend backend : libraries()) {
    const GemmBackendGuard use(backend);
    constexpr int64_t kProducts = 64;
    std::vector<double> worst(kProducts, 0.0);
    parallel_for(kProducts, 1, [&](int64_t first, int64_t last) {
      for (int64_t p = first; p < last; ++p) {
        const int64_t M = 5 + p % 7, N = 3 + p % 5, K = 9 + p % 11;
        Generator gen(static_cast<uint64_t>(100 + p));
        const std::vector<float> a = Tensor::randn({M * K}, gen).to_vector<float>();
        const std::vector<float> b = Tensor::randn({N * K}, gen).to_vector<float>();
        std::vector<float> out(M * N), ref(M * N);
        gemm<float>(out.data(), a.data(), b.data(), M, N, K, p % 2 == 1, true, p % 2 ? M : K, K, N, 1.f, 0.f);
        gemm_naive<float>(ref.data(), a.data(), b.data(), M, N, K, p % 2 == 1, true, p % 2 ? M : K, K, N, 1.f, 0.f);
        for (int64_t i = 0; i < M * N; ++i) worst[p] = std::max(worst[p], std::abs(double(out[i]) - ref[i]));
      }
    });
    for (int64_t p = 0; p < kProducts; ++p) EXPECT_LT(worst[p], 1e-4) << gemm_backend_name(backend) << " product " << p;
  }
  set_num_threads(threads_before);
}

// attograd links no BLAS: its BLAS calls reach the OpenBLAS it loaded
// (blas_kernel.h), whose names stay out of the process' global scope.
TEST(GemmBackends, BlasCallsReachTheLoadedOpenBlas) {
  const GemmBackendGuard use(GemmBackend::openblas);
  const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6, 7, 8};
  std::vector<float> out(4);
  gemm<float>(out.data(), a.data(), b.data(), 2, 2, 2, false, false, 2, 2, 2, 1.f, 0.f);
  EXPECT_EQ(out, (std::vector<float>{19, 22, 43, 50}));
  EXPECT_NE(openblas_library_path().find("openblas"), std::string::npos) << openblas_library_path();
  for (const char* name : {"cblas_sgemm", "cblas_dgemm"}) EXPECT_EQ(dlsym(RTLD_DEFAULT, name), nullptr) << name;
}
