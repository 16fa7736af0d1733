// Google Benchmark microbenchmarks of the hot ops at the base model's shapes
// (examples/bench "base": B 32, L 32, E 256, H 8, D 32, F 1024, V 64), forward
// and forward+backward. Each reports its rate (GFLOP/s for products, GB/s for
// memory-bound ops) and, for products, the raw cblas_sgemm rate of the same
// GEMM next to it (counter "sgemm_GFLOPs").
//
//   build/bin/ops_bench [--benchmark_filter=matmul]      (cmake -DATTOGRAD_BUILD_BENCHMARKS=ON)
//
// BM_vecmath times the float32 transcendental kernels alone on n = R·F
// floats: arg 0 is the scalar std:: loop the ops used before (glibc), then
// vecmath.h's sets (1 SLEEF scalar, 2 AVX2, 3 AVX-512; a set this CPU lacks
// is skipped).
//
// BM_gemm times gemm<float> itself on each library (openblas, xsmm) at
// the shapes the tiny and base models run, single-threaded and on the pool;
// its numbers decide the routing table in attograd/autograd/backend/blas.cpp:
//
//   build/bin/ops_bench --benchmark_filter=BM_gemm --benchmark_min_time=0.05 --benchmark_repetitions=3
//       --benchmark_enable_random_interleaving=true
//
// real_time is the wall time of one iteration (batch products), cpu_time the
// whole process' CPU time in it (all pool threads): on a loaded machine the
// CPU time per product is the steadier number, the wall time shows threads
// waiting for each other.
//
// Shape legend: R = B·L rows, E width, F ffn width, V vocab, H heads, D head width.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <string>

#include <attograd/autograd/backend/blas.h>
#include <attograd/autograd/backend/blas_kernel.h>
#include <attograd/autograd/backend/small_gemm.h>
#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/backend/vecmath.h>
#include <attograd/autograd/generator.h>
#include <attograd/autograd/ops/attention.h>
#include <attograd/autograd/ops/elementwise.h>
#include <attograd/autograd/ops/layer_norm.h>
#include <attograd/autograd/ops/loss.h>
#include <attograd/autograd/ops/matmul.h>
#include <attograd/autograd/ops/reduction.h>
#include <attograd/autograd/ops/softmax.h>
#include <attograd/autograd/settings.h>

using namespace attograd;

namespace {

constexpr int64_t B = 32, L = 32, E = 256, H = 8, D = 32, F = 1024, V = 64, R = B * L;

// Raw sgemm rate for out [M, N] = a [M, K] @ b [K, N], best of a few runs.
double sgemm_gflops(int64_t M, int64_t N, int64_t K, int64_t batch = 1) {
  Generator gen(1);
  const std::vector<float> a = Tensor::randn({M * K}, gen).to_vector<float>();
  const std::vector<float> b = Tensor::randn({K * N}, gen).to_vector<float>();
  std::vector<float> c(M * N);
  double best = 1e30;
  for (int rep = 0; rep < 20; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < batch; ++i) gemm<float>(c.data(), a.data(), b.data(), M, N, K, false, false, K, N, N, 1.f, 0.f);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * M * N * K * batch / best / 1e9;
}

void set_rate(benchmark::State& s, double flops_per_iter, double sgemm) {
  s.counters["GFLOPs"] = benchmark::Counter(flops_per_iter * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  s.counters["sgemm_GFLOPs"] = sgemm;
}

void set_bytes(benchmark::State& s, double bytes_per_iter) {
  s.counters["GBs"] = benchmark::Counter(bytes_per_iter * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// linear [R, E] @ [F, E]ᵀ + b: the FFN's first product.
void BM_linear(benchmark::State& s) {
  Generator gen(1);
  const bool backward = s.range(0);
  Tensor x = Tensor::randn({R, E}, gen).requires_grad_(backward), w = Tensor::randn({F, E}, gen).requires_grad_(backward),
         b = Tensor::randn({F}, gen).requires_grad_(backward);
  for (auto _ : s) {
    Tensor y = linear(x, w, b);
    if (backward) sum(y).backward();
    benchmark::DoNotOptimize(y.data<float>());
  }
  set_rate(s, (backward ? 3 : 1) * 2.0 * R * E * F, sgemm_gflops(R, F, E));
}

// matmul [B·H, L, D] @ [B·H, D, L]: attention scores as a batched product.
void BM_matmul(benchmark::State& s) {
  Generator gen(1);
  const bool backward = s.range(0);
  Tensor a = Tensor::randn({B * H, L, D}, gen).requires_grad_(backward),
         b = Tensor::randn({B * H, D, L}, gen).requires_grad_(backward);
  for (auto _ : s) {
    Tensor y = matmul(a, b);
    if (backward) sum(y).backward();
    benchmark::DoNotOptimize(y.data<float>());
  }
  set_rate(s, (backward ? 3 : 1) * 2.0 * B * H * L * L * D, sgemm_gflops(L, L, D, B * H));
}

void BM_softmax(benchmark::State& s) {
  Generator gen(1);
  const bool backward = s.range(0);
  Tensor x = Tensor::randn({B, H, L, L}, gen).requires_grad_(backward);
  for (auto _ : s) {
    Tensor y = softmax(x, -1);
    if (backward) sum(y * y).backward();
    benchmark::DoNotOptimize(y.data<float>());
  }
  set_bytes(s, (backward ? 3 : 2) * 4.0 * x.numel());  // read x, write y (+ read y, grad, write dx)
}

void BM_layer_norm(benchmark::State& s) {
  Generator gen(1);
  const bool backward = s.range(0);
  Tensor x = Tensor::randn({R, E}, gen).requires_grad_(backward), w = Tensor::ones({E}).requires_grad_(backward),
         b = Tensor::zeros({E}).requires_grad_(backward);
  for (auto _ : s) {
    Tensor y = layer_norm(x, {E}, w, b, 1e-5);
    if (backward) sum(y * y).backward();
    benchmark::DoNotOptimize(y.data<float>());
  }
  set_bytes(s, (backward ? 5 : 2) * 4.0 * x.numel());
}

void BM_cross_entropy(benchmark::State& s) {
  Generator gen(1);
  const bool backward = s.range(0);
  Tensor x = Tensor::randn({R, V}, gen).requires_grad_(backward);
  std::vector<int64_t> t(R);
  for (int64_t i = 0; i < R; ++i) t[i] = i % V;
  const Tensor targets = Tensor::from_vector(t, {R});
  for (auto _ : s) {
    Tensor loss = cross_entropy(x, targets);
    if (backward) loss.backward();
    benchmark::DoNotOptimize(loss.data<float>());
  }
  set_bytes(s, (backward ? 3 : 1) * 4.0 * x.numel());
}

// Fused attention, causal, q/k/v [B, H, L, D].
void BM_attention(benchmark::State& s) {
  Generator gen(1);
  const bool backward = s.range(0);
  Tensor q = Tensor::randn({B, H, L, D}, gen).requires_grad_(backward),
         k = Tensor::randn({B, H, L, D}, gen).requires_grad_(backward),
         v = Tensor::randn({B, H, L, D}, gen).requires_grad_(backward);
  AttentionOptions o;
  o.is_causal = true;
  for (auto _ : s) {
    Tensor y = scaled_dot_product_attention(q, k, v, o).out;
    if (backward) sum(y).backward();
    benchmark::DoNotOptimize(y.data<float>());
  }
  // forward: Q Kᵀ and P V; backward: dV, dP, dQ, dK
  set_rate(s, (backward ? 6 : 2) * 2.0 * B * H * L * L * D, sgemm_gflops(L, L, D, B * H));
}

// gelu [R, F]: the GPT MLP's activation; arg 1 is the tanh approximation.
void BM_gelu(benchmark::State& s) {
  Generator gen(1);
  const bool backward = s.range(0);
  const GeluApprox approx = s.range(1) ? GeluApprox::tanh : GeluApprox::none;
  Tensor x = Tensor::randn({R, F}, gen).requires_grad_(backward);
  for (auto _ : s) {
    Tensor y = gelu(x, approx);
    if (backward) sum(y).backward();
    benchmark::DoNotOptimize(y.data<float>());
  }
  set_bytes(s, (backward ? 4 : 2) * 4.0 * x.numel());
}

template <float (*F)(float)>
void std_loop(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = F(x[i]);
}
float std_exp(float v) { return std::exp(v); }
float std_tanh(float v) { return std::tanh(v); }
float std_erf(float v) { return std::erf(v); }

// y = f(x) over R·F floats: arg 0 function (exp, tanh, erf), arg 1 kernel set.
void BM_vecmath(benchmark::State& s) {
  using Kernel = void (*)(float*, const float*, int64_t);
  const int fn = static_cast<int>(s.range(0));
  Kernel kernel = fn == 0 ? std_loop<std_exp> : fn == 1 ? std_loop<std_tanh> : std_loop<std_erf>;
  std::string label = "std";
  if (s.range(1) > 0) {
    const VecMath* m = vecmath_for(static_cast<VecIsa>(s.range(1) - 1));
    if (!m) {
      s.SkipWithError("this CPU lacks the instruction set");
      return;
    }
    kernel = fn == 0 ? m->exp : fn == 1 ? m->tanh : m->erf;
    label = std::string(m->name);
  }
  s.SetLabel(std::string(fn == 0 ? "exp " : fn == 1 ? "tanh " : "erf ") + label);
  Generator gen(1);
  const std::vector<float> x = Tensor::randn({R * F}, gen).to_vector<float>();
  std::vector<float> y(x.size());
  for (auto _ : s) {
    kernel(y.data(), x.data(), static_cast<int64_t>(x.size()));
    benchmark::DoNotOptimize(y.data());
  }
  s.counters["Gelem_s"] = benchmark::Counter(x.size() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// out [M, N] = op(a) @ op(b) on one library, `batch` independent products per
// iteration spread over the pool as the attention's per-head loop does (batch
// 1: one product, which gemm itself cuts into pieces when large).
// Args: backend, M, N, K, transposes (0 NN, 1 TN, 2 NT), batch, threads.
void BM_gemm(benchmark::State& s) {
  const auto backend = static_cast<GemmBackend>(s.range(0));
  const int64_t M = s.range(1), N = s.range(2), K = s.range(3), batch = s.range(5);
  const bool ta = s.range(4) == 1, tb = s.range(4) == 2;
  const int threads = static_cast<int>(s.range(6));
  Generator gen(1);
  const std::vector<float> a = Tensor::randn({batch * M * K}, gen).to_vector<float>();
  const std::vector<float> b = Tensor::randn({batch * K * N}, gen).to_vector<float>();
  std::vector<float> c(batch * M * N);
  const GemmBackendGuard use(backend);
  set_num_threads(threads);
  for (auto _ : s) {
    parallel_for(batch, 1, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i)
        gemm<float>(c.data() + i * M * N, a.data() + i * M * K, b.data() + i * K * N, M, N, K, ta, tb, ta ? M : K,
                    tb ? K : N, N, 1.f, 0.f);
    });
    benchmark::DoNotOptimize(c.data());
  }
  set_num_threads(1);
  s.counters["GFLOPs"] = benchmark::Counter(2.0 * M * N * K * batch * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  s.counters["products"] = static_cast<double>(batch);
  s.SetLabel(std::string(gemm_backend_name(backend)) + " " + (ta ? "TN" : tb ? "NT" : "NN"));
}

// The shapes of examples/bench tiny (L 16, E 64, H 4, D 16, F 256) and base
// (L 32, E 256, H 8, D 32, F 1024), both with B·L = 1024 rows, plus longer
// attention (T = S = 64, 128 with D 64). Attention per head, B·H = 256 of them:
// Q Kᵀ [T, D]·[S, D]ᵀ (NT), P V [T, S]·[S, D] (NN), dV = Pᵀ dO (TN).
// Projections x Wᵀ (NT), dx = grad W (NN), dW = gradᵀ x (TN).
void gemm_shapes(benchmark::internal::Benchmark* bm) {
  for (int64_t threads : {1, 2})
    for (GemmBackend backend : {GemmBackend::openblas, GemmBackend::xsmm}) {
      const auto lib = static_cast<int64_t>(backend);
      for (auto [t, d] : {std::pair<int64_t, int64_t>{16, 16}, {32, 32}, {64, 64}, {128, 64}}) {
        const int64_t heads = t <= 32 ? 256 : 64;
        bm->Args({lib, t, t, d, 2, heads, threads});
        bm->Args({lib, t, d, t, 0, heads, threads});
        bm->Args({lib, t, d, t, 1, heads, threads});
      }
      for (auto [in, out] : {std::pair<int64_t, int64_t>{64, 64}, {64, 256}, {256, 256}, {256, 1024}}) {
        bm->Args({lib, 1024, out, in, 2, 1, threads});
        bm->Args({lib, 1024, in, out, 0, 1, threads});
        bm->Args({lib, out, in, 1024, 1, 1, threads});
      }
    }
}

// A transposed b on libxsmm, out [M, N] = a [M, K] @ b [N, K]ᵀ cut into the
// GEMM layer's 4 row pieces, `batch` products over the pool. Arg 0 is how it
// ran before: each piece a libxsmm kernel made for the transposed b, which
// copies b transposed on every call (4 copies per product); arg 1 is
// gemm<float> now: b copied once (in tiles), then the pieces.
void BM_xsmm_transposed_b(benchmark::State& s) {
  const bool once = s.range(0) == 1;
  const int64_t M = s.range(1), N = s.range(2), K = s.range(3), batch = s.range(4);
  Generator gen(1);
  const std::vector<float> a = Tensor::randn({batch * M * K}, gen).to_vector<float>();
  const std::vector<float> b = Tensor::randn({batch * N * K}, gen).to_vector<float>();
  std::vector<float> c(batch * M * N);
  const GemmBackendGuard use(GemmBackend::xsmm);
  const int64_t piece = M / 4;
  for (auto _ : s) {
    parallel_for(batch, 1, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) {
        float* o = c.data() + i * M * N;
        const float *pa = a.data() + i * M * K, *pb = b.data() + i * N * K;
        if (once) {
          gemm<float>(o, pa, pb, M, N, K, false, true, K, K, N, 1.f, 0.f);
          continue;
        }
        const XsmmKernel kernel = xsmm_kernel(piece, N, K, false, true, K, K, N, 1.f, 0.f);
        for (int64_t p = 0; p < 4; ++p) kernel(o + p * piece * N, pa + p * piece * K, pb);
      }
    });
    benchmark::DoNotOptimize(c.data());
  }
  s.counters["GFLOPs"] = benchmark::Counter(2.0 * M * N * K * batch * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  s.SetLabel(once ? "copy once, gemm<float>" : "copy per piece (before)");
}

}  // namespace

BENCHMARK(BM_xsmm_transposed_b)->ArgNames({"once", "M", "N", "K", "batch"})
    ->ArgsProduct({{0, 1}, {256}, {256}, {32}, {64}})->Args({0, 1024, 64, 64, 1})->Args({1, 1024, 64, 64, 1})
    ->Unit(benchmark::kMicrosecond)->MeasureProcessCPUTime();
BENCHMARK(BM_gemm)->ArgNames({"lib", "M", "N", "K", "trans", "batch", "threads"})->Apply(gemm_shapes)
    ->Unit(benchmark::kMicrosecond)->UseRealTime()->MeasureProcessCPUTime();
BENCHMARK(BM_linear)->ArgName("backward")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_matmul)->ArgName("backward")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_softmax)->ArgName("backward")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_layer_norm)->ArgName("backward")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_cross_entropy)->ArgName("backward")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_attention)->ArgName("backward")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_gelu)->ArgNames({"backward", "tanh"})->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_vecmath)->ArgNames({"fn", "set"})->ArgsProduct({{0, 1, 2}, {0, 1, 2, 3}})->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) {
  blas_set_num_threads(1);
  benchmark::AddCustomContext("openblas_kernel", blas_corename());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
