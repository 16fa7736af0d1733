// OpenBLAS kernel selection (autograd/backend/blas_kernel.h): the decision, CPUID
// against the kernel's view of the CPU, and GEMM under the chosen kernel
// against the naive reference at the model's shapes.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include <attograd/autograd/backend/blas.h>
#include <attograd/autograd/backend/blas_kernel.h>
#include <attograd/autograd/generator.h>
#include <attograd/autograd/tensor.h>

using namespace attograd;

namespace {

// Like every program, this test selects the kernel before anything else runs
// (it may re-execute itself once here).
const bool kKernelSelected = (ensure_fast_blas_kernel(), true);

CpuFeatures features(bool avx2, bool avx512, bool bf16) {
  CpuFeatures f;
  f.avx2 = f.fma = avx2;
  f.avx512 = avx512;
  f.avx512_bf16 = bf16;
  return f;
}

std::set<std::string> proc_cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      std::set<std::string> flags;
      for (std::string w; words >> w;) flags.insert(w);
      return flags;
    }
  return {};
}

}  // namespace

TEST(BlasKernel, BestCoreFollowsTheFeatures) {
  EXPECT_EQ(best_openblas_core(features(true, true, true)), "Cooperlake");
  EXPECT_EQ(best_openblas_core(features(true, true, false)), "SkylakeX");
  EXPECT_EQ(best_openblas_core(features(true, false, false)), "Haswell");
  EXPECT_EQ(best_openblas_core(features(false, false, false)), "");
}

TEST(BlasKernel, GenericCores) {
  for (const char* g : {"Prescott", "prescott", "Core2", "Nehalem", ""}) EXPECT_TRUE(is_generic_openblas_core(g)) << g;
  for (const char* f : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"})
    EXPECT_FALSE(is_generic_openblas_core(f)) << f;
}

TEST(BlasKernel, RequestsACoreOnlyForAGenericKernelWithoutAUserSetting) {
  const CpuFeatures zen5 = features(true, true, true);
  EXPECT_EQ(openblas_core_to_request("Prescott", zen5, std::nullopt, true, false), "Cooperlake");
  EXPECT_EQ(openblas_core_to_request("Prescott", features(true, true, false), std::nullopt, true, false), "SkylakeX");
  EXPECT_EQ(openblas_core_to_request("Core2", features(true, false, false), std::nullopt, true, false), "Haswell");
  // The user's choice stands, even a slow one.
  EXPECT_EQ(openblas_core_to_request("Prescott", zen5, std::string("Prescott"), true, false), std::nullopt);
  EXPECT_EQ(openblas_core_to_request("Prescott", zen5, std::string(""), true, false), std::nullopt);
  // A recognised CPU, a static build, an old CPU, or a second try: nothing to do.
  EXPECT_EQ(openblas_core_to_request("Haswell", zen5, std::nullopt, true, false), std::nullopt);
  EXPECT_EQ(openblas_core_to_request("Prescott", zen5, std::nullopt, false, false), std::nullopt);
  EXPECT_EQ(openblas_core_to_request("Prescott", features(false, false, false), std::nullopt, true, false), std::nullopt);
  EXPECT_EQ(openblas_core_to_request("Prescott", zen5, std::nullopt, true, true), std::nullopt);
}

TEST(BlasKernel, CpuidAgreesWithTheKernel) {
  const std::set<std::string> flags = proc_cpu_flags();
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags";
  const CpuFeatures f = cpu_features();
  EXPECT_EQ(f.avx2, flags.count("avx2") == 1);
  EXPECT_EQ(f.fma, flags.count("fma") == 1);
  const bool avx512 = flags.count("avx512f") && flags.count("avx512bw") && flags.count("avx512dq") &&
                      flags.count("avx512vl");
  EXPECT_EQ(f.avx512, avx512);
  EXPECT_EQ(f.avx512_bf16, avx512 && flags.count("avx512_bf16") == 1);
}

// Unless the user chose a core, the selection leaves no generic kernel on a CPU
// that supports a better one.
TEST(BlasKernel, SelectedKernelIsNotGeneric) {
  ASSERT_TRUE(kKernelSelected);
  const char* user = std::getenv("OPENBLAS_CORETYPE");
  const bool set_by_us = std::getenv("ATTOGRAD_SET_OPENBLAS_CORETYPE") != nullptr;
  RecordProperty("corename", blas_corename());
  if (user && !set_by_us) GTEST_SKIP() << "OPENBLAS_CORETYPE=" << user << " set by the user";
  if (best_openblas_core(cpu_features()).empty()) GTEST_SKIP() << "CPU has no AVX2";
  EXPECT_FALSE(is_generic_openblas_core(blas_corename())) << blas_corename();
}

// GEMM through the selected kernel matches the naive kernel: rows B·T = 1024
// of the base model, a K past the kernels' K blocking, odd sizes that leave
// edge tiles, attention-score shapes; every transpose pairing, 1 and 2 threads.
TEST(BlasKernel, GemmMatchesNaiveAtModelShapes) {
  struct Case { int64_t M, N, K; };
  const Case cases[] = {{1024, 64, 256}, {64, 96, 640}, {33, 65, 17}, {256, 256, 32}};
  Generator gen(11);
  const int threads_before = blas_num_threads();
  for (int threads : {1, 2}) {
    blas_set_num_threads(threads);
    for (const Case& c : cases)
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          SCOPED_TRACE(fmt::format("{} threads, M={} N={} K={} ta={} tb={} kernel {}", threads, c.M, c.N, c.K, ta, tb,
                                   blas_corename()));
          const std::vector<float> a = Tensor::randn({c.M * c.K}, gen).to_vector<float>();
          const std::vector<float> b = Tensor::randn({c.K * c.N}, gen).to_vector<float>();
          std::vector<float> fast = Tensor::randn({c.M * c.N}, gen).to_vector<float>(), ref = fast;
          const int64_t lda = ta ? c.M : c.K, ldb = tb ? c.K : c.N;
          gemm<float>(fast.data(), a.data(), b.data(), c.M, c.N, c.K, ta, tb, lda, ldb, c.N, 1.f, 0.5f);
          gemm_naive<float>(ref.data(), a.data(), b.data(), c.M, c.N, c.K, ta, tb, lda, ldb, c.N, 1.f, 0.5f);
          // float sums of K products of unit normals: error grows like √K·ε.
          const double tol = 1e-5 * std::sqrt(static_cast<double>(c.K)) * 4;
          double worst = 0;
          for (size_t i = 0; i < fast.size(); ++i) worst = std::max(worst, std::abs(double(fast[i]) - ref[i]));
          EXPECT_LT(worst, tol);
        }
  }
  blas_set_num_threads(threads_before);
}
