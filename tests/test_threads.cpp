// The thread pool (attograd/autograd/backend/threads.h), the GEMM split across it, and the
// promise that a training step gives the same numbers with 1 or 2 threads.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include <attograd/autograd/backend/blas.h>
#include <attograd/autograd/generator.h>
#include <attograd/autograd/autograd.h>
#include <attograd/nn/transformer.h>
#include <attograd/optim/adam.h>
#include <attograd/version.h>
#include "test_util.h"

using namespace attograd;
using attograd::testing::expect_error;

namespace {

// Restores the thread count a test changed.
struct ThreadsGuard {
  int before = num_threads();
  ~ThreadsGuard() { set_num_threads(before); }
};

}  // namespace

TEST(ThreadPool, CoversEveryIndexOnceInAtMostFourChunksPerThread) {
  ThreadsGuard guard;
  for (int threads : {1, 2, 3, 4}) {
    set_num_threads(threads);
    EXPECT_EQ(num_threads(), threads);
    for (int64_t n : {0, 1, 7, 100, 1000, 12345}) {
      for (int64_t grain : {1, 16, 1000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::mutex mu;
        std::vector<std::pair<int64_t, int64_t>> chunks;
        std::set<std::thread::id> ids;
        parallel_for(n, grain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
          std::lock_guard<std::mutex> lock(mu);
          chunks.emplace_back(b, e);
          ids.insert(std::this_thread::get_id());
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)], 1) << "n " << n << " index " << i;
        const int64_t most = threads == 1 ? 1 : kChunksPerThread * threads;
        EXPECT_LE(chunks.size(), static_cast<size_t>(most));
        EXPECT_LE(ids.size(), static_cast<size_t>(threads));
        if (chunks.size() > 1) {
          for (auto [b, e] : chunks) EXPECT_GE(e - b, grain) << "n " << n << " grain " << grain;
        }
        if (n >= grain * most && n > 0) {
          EXPECT_EQ(chunks.size(), static_cast<size_t>(most)) << "n " << n;
        }
      }
    }
  }
}

TEST(ThreadPool, RethrowsAChunksExceptionAndStaysUsable) {
  ThreadsGuard guard;
  set_num_threads(2);
  EXPECT_THROW(parallel_for(100, 1, [](int64_t b, int64_t) {
                 if (b > 0) throw std::runtime_error("chunk failed");
               }),
               std::runtime_error);
  std::atomic<int64_t> total{0};
  parallel_for(100, 1, [&](int64_t b, int64_t e) { total += e - b; });
  EXPECT_EQ(total, 100);
}

TEST(ThreadPool, NestedLoopsRunInlineOnTheCallingThread) {
  ThreadsGuard guard;
  set_num_threads(2);
  EXPECT_FALSE(in_parallel_region());
  std::atomic<int> nested_chunks{0}, outer_in_region{0};
  parallel_for(2, 1, [&](int64_t, int64_t) {
    outer_in_region += in_parallel_region();
    const auto me = std::this_thread::get_id();
    parallel_for(1000, 1, [&](int64_t, int64_t) {
      EXPECT_EQ(std::this_thread::get_id(), me);
      ++nested_chunks;
    });
  });
  EXPECT_EQ(outer_in_region, 2);
  EXPECT_EQ(nested_chunks, 2);  // one inline chunk per outer chunk
  EXPECT_FALSE(in_parallel_region());
}

TEST(ThreadPool, BadThreadCountsAreValueErrors) {
  ThreadsGuard guard;
  expect_error<ValueError>([] { set_num_threads(0); }, {"set_num_threads", ">= 1", "got 0"});
  set_num_threads(2);
  parallel_for(2, 1, [](int64_t, int64_t) {
    expect_error<ValueError>([] { set_num_threads(1); }, {"set_num_threads", "inside a parallel_for"});
  });
}

// A large GEMM is cut into pieces by its shape alone, so the result must be
// the same, bit for bit, with 1, 2 or 3 threads: for every transpose
// combination, for sizes that do not divide into whole pieces, and for an
// output side under 128 (two or three pieces of 32).
TEST(ThreadPool, SplitGemmEqualsTheSingleThreadedProductExactly) {
  ThreadsGuard guard;
  Generator gen(5);
  struct Case { int64_t M, N, K; };
  for (Case c : {Case{1000, 70, 33}, Case{65, 300, 129}, Case{257, 257, 64}, Case{64, 1024, 40}, Case{64, 64, 1024},
                 Case{96, 40, 700}}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Tensor a = Tensor::randn({ta ? c.K : c.M, ta ? c.M : c.K}, gen);
        const Tensor b = Tensor::randn({tb ? c.N : c.K, tb ? c.K : c.N}, gen);
        const Tensor init = Tensor::randn({c.M, c.N}, gen);
        std::vector<float> out[3];
        for (int threads : {1, 2, 3}) {
          set_num_threads(threads);
          Tensor o = init.clone();
          gemm<float>(o.data<float>(), a.data<float>(), b.data<float>(), c.M, c.N, c.K, ta, tb, a.shape()[1],
                      b.shape()[1], c.N, 0.5f, 0.25f);
          out[threads - 1] = o.to_vector<float>();
        }
        EXPECT_EQ(out[0], out[1]) << c.M << "x" << c.N << "x" << c.K << " ta " << ta << " tb " << tb;
        EXPECT_EQ(out[0], out[2]) << c.M << "x" << c.N << "x" << c.K << " ta " << ta << " tb " << tb;
        // and it is the product: against the naive kernel
        Tensor ref = init.clone();
        gemm_naive<float>(ref.data<float>(), a.data<float>(), b.data<float>(), c.M, c.N, c.K, ta, tb, a.shape()[1],
                          b.shape()[1], c.N, 0.5f, 0.25f);
        const std::vector<float> want = ref.to_vector<float>();
        for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out[1][i], want[i], 1e-4 * (1 + std::abs(want[i])));
      }
  }
}

// The same on libxsmm with a transposed b, which the GEMM layer copies
// transposed once before it cuts the product (by rows, and by columns when
// N > M), each pool thread taking the next piece: with 1, 2 or 3 threads the
// pieces, whoever ran them, give the same numbers, and they are the product.
TEST(ThreadPool, SplitXsmmGemmWithTransposedBIsExactAndTheProduct) {
  if (!build_features().xsmm) GTEST_SKIP() << "built without libxsmm (ATTOGRAD_XSMM=OFF)";
  ThreadsGuard guard;
  const GemmBackendGuard use(GemmBackend::xsmm);
  Generator gen(6);
  struct Case { int64_t M, N, K; };
  for (Case c : {Case{1000, 70, 33}, Case{65, 1030, 40}, Case{256, 256, 32}})
    for (float alpha : {1.f, 0.5f}) {
      const Tensor a = Tensor::randn({c.M, c.K}, gen), b = Tensor::randn({c.N, c.K}, gen);
      std::vector<float> out[3];
      for (int threads : {1, 2, 3}) {
        set_num_threads(threads);
        Tensor o = Tensor::full({c.M, c.N}, NAN);  // beta 0: never read
        gemm<float>(o.data<float>(), a.data<float>(), b.data<float>(), c.M, c.N, c.K, false, true, c.K, c.K, c.N,
                    alpha, 0.f);
        out[threads - 1] = o.to_vector<float>();
      }
      EXPECT_EQ(out[0], out[1]) << c.M << "x" << c.N << "x" << c.K << " alpha " << alpha;
      EXPECT_EQ(out[0], out[2]) << c.M << "x" << c.N << "x" << c.K << " alpha " << alpha;
      std::vector<float> ref(c.M * c.N);
      gemm_naive<float>(ref.data(), a.data<float>(), b.data<float>(), c.M, c.N, c.K, false, true, c.K, c.K, c.N,
                        alpha, 0.f);
      for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(out[1][i], ref[i], 1e-4 * (1 + std::abs(ref[i])));
    }
}

// Three Adam steps of a small transformer (dropout on, padding, causal
// decoder): every op's parallel loop, the GEMM split and the fixed-block
// reductions together. The loss and every parameter must match bit for bit.
TEST(ThreadPool, TrainingStepsAreIdenticalWithOneOrTwoThreads) {
  ThreadsGuard guard;
  auto run = [](int threads) {
    set_num_threads(threads);
    Generator gen(11);
    TransformerConfig cfg;
    cfg.src_vocab = cfg.tgt_vocab = 13;
    cfg.d_model = 64;
    cfg.heads = 4;
    cfg.enc_layers = cfg.dec_layers = 2;
    cfg.d_ff = 256;
    cfg.dropout = 0.1;
    cfg.max_len = 64;
    auto dropout_gen = std::make_shared<Generator>(3);
    Seq2SeqTransformer model(cfg, gen, dropout_gen);
    model.train();
    optim::Adam opt(model.parameters());
    std::vector<int64_t> src, tgt_in, tgt_out;
    for (int64_t i = 0; i < 32 * 40; ++i) {
      src.push_back(1 + (i * 7) % 12);
      tgt_in.push_back(1 + (i * 5) % 12);
      tgt_out.push_back(i % 40 > 35 ? 0 : 1 + (i * 3) % 12);  // some padding targets
    }
    const Tensor s = Tensor::from_vector(src, {32, 40}), ti = Tensor::from_vector(tgt_in, {32, 40});
    const Tensor to = Tensor::from_vector(tgt_out, {32 * 40});
    CrossEntropyOptions ce;
    ce.ignore_index = 0;
    std::vector<float> losses;
    for (int step = 0; step < 3; ++step) {
      Tensor loss = cross_entropy(model.forward(s, ti).reshape({-1, 13}), to, ce);
      loss.backward();
      opt.step();
      opt.zero_grad();
      losses.push_back(static_cast<float>(loss.item()));
    }
    std::vector<float> params;
    for (const Tensor& p : model.parameters())
      for (float v : p.to_vector<float>()) params.push_back(v);
    return std::pair{losses, params};
  };
  const auto one = run(1), two = run(2);
  EXPECT_EQ(one.first, two.first);
  ASSERT_EQ(one.second.size(), two.second.size());
  size_t differ = 0;
  for (size_t i = 0; i < one.second.size(); ++i) differ += one.second[i] != two.second[i];
  EXPECT_EQ(differ, 0u) << "of " << one.second.size() << " parameters";
}
