// matmul, linear and the GEMM layer (attograd/autograd/backend/blas.h).
#include <gtest/gtest.h>

#include <cmath>

#include <attograd/autograd/backend/blas.h>
#include <attograd/autograd/autograd.h>
#include <attograd/autograd/ops/matmul.h>
#include "test_util.h"

using namespace attograd;
using attograd::testing::expect_error;

namespace {

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << "element " << i;
}

// torch.matmul's semantics by plain index arithmetic, in double: the oracle.
std::vector<double> ref_matmul(const Tensor& a, const Tensor& b, Shape& out_shape) {
  Shape sa = a.shape(), sb = b.shape();
  const bool av = sa.size() == 1, bv = sb.size() == 1;
  if (av) sa.insert(sa.begin(), 1);
  if (bv) sb.push_back(1);
  const int64_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
  Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  const size_t nd = std::max(ba.size(), bb.size());
  ba.insert(ba.begin(), nd - ba.size(), 1);
  bb.insert(bb.begin(), nd - bb.size(), 1);
  Shape batch(nd);
  for (size_t i = 0; i < nd; ++i) batch[i] = ba[i] == 1 ? bb[i] : ba[i];
  const std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  std::vector<double> out;
  for (int64_t t = 0; t < shape_numel(batch); ++t) {
    int64_t rest = t, ia = 0, ib = 0, sa_acc = 1, sb_acc = 1;
    for (size_t d = nd; d-- > 0;) {
      const int64_t i = rest % batch[d];
      rest /= batch[d];
      ia += (ba[d] == 1 ? 0 : i) * sa_acc;
      ib += (bb[d] == 1 ? 0 : i) * sb_acc;
      sa_acc *= ba[d];
      sb_acc *= bb[d];
    }
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += va[(ia * M + i) * K + k] * vb[(ib * K + k) * N + j];
        out.push_back(s);
      }
  }
  out_shape = batch;
  if (!av) out_shape.push_back(M);
  if (!bv) out_shape.push_back(N);
  return out;
}

void expect_matches_ref(const Tensor& a, const Tensor& b, double tol) {
  Shape want_shape;
  const std::vector<double> want = ref_matmul(a, b, want_shape);
  const Tensor out = matmul(a, b);
  EXPECT_EQ(out.shape(), want_shape) << shape_str(a.shape()) << " @ " << shape_str(b.shape());
  expect_close(out.to_vector<double>(), want, tol);
}

// Every allocation the tensors make while it is installed.
class CountingAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    sizes.push_back(bytes);
    return inner_->allocate(bytes);
  }
  void deallocate(void* p, size_t bytes) noexcept override { inner_->deallocate(p, bytes); }
  size_t bytes_in_use() const override { return inner_->bytes_in_use(); }
  size_t peak_bytes() const override { return inner_->peak_bytes(); }
  std::vector<size_t> sizes;

 private:
  std::shared_ptr<Allocator> inner_ = make_system_allocator();
};

// The allocation sizes made by f.
template <class F>
std::vector<size_t> allocations_of(F&& f) {
  auto counter = std::make_shared<CountingAllocator>();
  const auto prev = current_allocator();
  set_allocator(counter);
  try {
    f();
  } catch (...) {
    set_allocator(prev);
    throw;
  }
  set_allocator(prev);
  return counter->sizes;
}

struct ShapePair {
  Shape a, b;
};

// Every kind of operand pair: vectors, matrices, batches, broadcast batches, empty.
const std::vector<ShapePair> kShapes = {
    {{3}, {3}},           {{2, 3}, {3, 4}},        {{3}, {3, 4}},       {{2, 3}, {3}},
    {{5, 2, 3}, {3, 4}},  {{2, 3}, {5, 3, 4}},     {{3}, {5, 3, 4}},    {{5, 2, 3}, {3}},
    {{2, 1, 2, 3}, {4, 3, 2}}, {{1, 2, 3}, {4, 3, 2}}, {{4, 2, 3}, {1, 3, 2}}, {{3, 2, 2, 3}, {3, 1, 3, 1}},
    {{0, 3}, {3, 4}},     {{2, 0}, {0, 3}},        {{0, 2, 3}, {3, 4}},  {{1, 3}, {3, 1}},
};

}  // namespace

// ---- forward values ----------------------------------------------------------------

TEST(Matmul, HandComputed2D) {
  const Tensor a = Tensor::from_list({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = Tensor::from_list({7, 8, 9, 10, 11, 12}, {3, 2});
  const Tensor out = matmul(a, b);
  EXPECT_EQ(out.shape(), (Shape{2, 2}));
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{58, 64, 139, 154}));
}

TEST(Matmul, HandComputedVectors) {
  const Tensor v = Tensor::from_list({1, 2, 3}, {3}, DType::f64);
  const Tensor m = Tensor::from_list({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64);
  const Tensor dot = matmul(v, Tensor::from_list({4, 5, 6}, {3}, DType::f64));
  EXPECT_EQ(dot.shape(), Shape{});
  EXPECT_EQ(dot.item(), 32.0);
  const Tensor mv = matmul(m, Tensor::from_list({1, 0, -1}, {3}, DType::f64));  // [2, 3] @ [3] -> [2]
  EXPECT_EQ(mv.shape(), Shape{2});
  EXPECT_EQ(mv.to_vector<double>(), (std::vector<double>{-2, -2}));
  const Tensor vm = matmul(Tensor::from_list({1, 2}, {2}, DType::f64), m);  // [2] @ [2, 3] -> [3]
  EXPECT_EQ(vm.shape(), Shape{3});
  EXPECT_EQ(vm.to_vector<double>(), (std::vector<double>{9, 12, 15}));
}

TEST(Matmul, HandComputedBroadcastBatch) {
  // a [2, 1, 2]: two row vectors; b [2, 2]: shared. out[i] = a[i] @ b.
  const Tensor a = Tensor::from_list({1, 0, 0, 1}, {2, 1, 2});
  const Tensor b = Tensor::from_list({1, 2, 3, 4}, {2, 2});
  const Tensor out = matmul(a, b);
  EXPECT_EQ(out.shape(), (Shape{2, 1, 2}));
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
}

TEST(Matmul, EveryShapeMatchesReference) {
  Generator gen(7);
  for (const auto& [sa, sb] : kShapes) {
    SCOPED_TRACE(shape_str(sa) + " @ " + shape_str(sb));
    expect_matches_ref(Tensor::randn(sa, gen, DType::f64), Tensor::randn(sb, gen, DType::f64), 1e-12);
  }
}

TEST(Matmul, EmptyInnerDimGivesZeros) {
  const Tensor out = matmul(Tensor::empty({2, 0}), Tensor::empty({0, 3}));
  EXPECT_EQ(out.shape(), (Shape{2, 3}));
  EXPECT_EQ(out.to_vector<float>(), std::vector<float>(6, 0.0f));
}

// Non-contiguous operands: transposed views, k.transpose(-2, -1), stepped
// slices (not GEMM-able: copied), stride-0 broadcast batches, strided vectors.
TEST(Matmul, StridedOperandsMatchReference) {
  Generator gen(11);
  const Tensor w = Tensor::randn({6, 4}, gen, DType::f64);
  const Tensor x = Tensor::randn({3, 6}, gen, DType::f64);
  expect_matches_ref(x, w, 1e-12);
  expect_matches_ref(w.transpose(0, 1), x.transpose(0, 1), 1e-12);  // both transposed
  const Tensor q = Tensor::randn({2, 3, 5, 4}, gen, DType::f64), k = Tensor::randn({2, 3, 6, 4}, gen, DType::f64);
  expect_matches_ref(q, k.transpose(-2, -1), 1e-12);
  expect_matches_ref(k.transpose(-2, -1).transpose(0, 1), k.transpose(0, 1), 1e-12);
  expect_matches_ref(x.slice(1, 0, 6, 2), w.slice(0, 0, 6, 2), 1e-12);        // stepped columns and rows
  expect_matches_ref(x.slice(0, 0, 3, 2).transpose(0, 1).slice(0, 1, 6, 2), x.slice(0, 1, 3), 1e-12);
  const Tensor row = Tensor::randn({1, 5, 6}, gen, DType::f64);
  expect_matches_ref(row.expand({4, 5, 6}), w, 1e-12);                         // stride-0 batch
  expect_matches_ref(row.expand({4, 5, 6}), w.unsqueeze(0).expand({4, 6, 4}), 1e-12);
  expect_matches_ref(x.slice(1, 0, 6, 2).contiguous(), w.slice(1, 0, 4, 3).slice(0, 0, 3), 1e-12);
  const Tensor v = Tensor::randn({12}, gen, DType::f64);
  expect_matches_ref(v.slice(0, 0, 12, 2), w, 1e-12);                          // strided vectors
  expect_matches_ref(x, v.slice(0, 1, 12, 2), 1e-12);
  expect_matches_ref(v.slice(0, 0, 12, 2), v.slice(0, 1, 12, 2), 1e-12);
}

// ---- the GEMM layer ------------------------------------------------------------------

// gemm and gemm_naive against a loop written from the contract in blas.h, for
// every transpose combination, padded leading dims, alpha and beta.
TEST(Gemm, BothBackendsFollowTheContract) {
  Generator gen(3);
  const int64_t M = 5, N = 4, K = 3, pad = 2;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(fmt::format("trans_a={} trans_b={}", ta, tb));
      const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
      const std::vector<double> a = Tensor::randn({(ta ? K : M) * lda}, gen, DType::f64).to_vector<double>();
      const std::vector<double> b = Tensor::randn({(tb ? N : K) * ldb}, gen, DType::f64).to_vector<double>();
      const std::vector<double> c0 = Tensor::randn({M * ldc}, gen, DType::f64).to_vector<double>();
      const double alpha = 0.5, beta = -2.0;
      std::vector<double> want = c0;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k) s += (ta ? a[k * lda + i] : a[i * lda + k]) * (tb ? b[j * ldb + k] : b[k * ldb + j]);
          want[i * ldc + j] = alpha * s + beta * c0[i * ldc + j];
        }
      std::vector<double> blas = c0, naive = c0;
      gemm<double>(blas.data(), a.data(), b.data(), M, N, K, ta, tb, lda, ldb, ldc, alpha, beta);
      gemm_naive<double>(naive.data(), a.data(), b.data(), M, N, K, ta, tb, lda, ldb, ldc, alpha, beta);
      expect_close(blas, want, 1e-12);  // padding columns keep c0: the kernels stay inside their rows
      expect_close(naive, want, 1e-12);
      std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end()), cf(c0.begin(), c0.end());
      gemm<float>(cf.data(), af.data(), bf.data(), M, N, K, ta, tb, lda, ldb, ldc, 0.5f, -2.0f);
      expect_close(std::vector<double>(cf.begin(), cf.end()), want, 1e-5);
    }
}

TEST(Gemm, BetaZeroIgnoresOldOutput) {
  const std::vector<double> a{1, 2}, b{3, 4};
  for (GemmBackend be : {GemmBackend::blas, GemmBackend::naive}) {
    GemmBackendGuard guard(be);
    std::vector<double> c{NAN};
    gemm<double>(c.data(), a.data(), b.data(), 1, 1, 2, false, false, 2, 1, 1, 1.0, 0.0);
    EXPECT_EQ(c[0], 11.0);
    std::vector<double> z{NAN};
    gemm<double>(z.data(), a.data(), b.data(), 1, 1, 0, false, false, 1, 1, 1, 1.0, 0.0);  // K = 0
    EXPECT_EQ(z[0], 0.0);
  }
}

TEST(Gemm, BadLeadingDimIsAValueError) {
  std::vector<float> a(6), b(6), c(4);
  expect_error<ValueError>([&] { gemm<float>(c.data(), a.data(), b.data(), 2, 2, 3, false, false, 2, 2, 2, 1.f, 0.f); },
                           {"gemm", "lda=2", ">= 3"});
}

TEST(Gemm, OpenBlasInfo) {
  EXPECT_FALSE(blas_corename().empty());
  const int before = blas_num_threads();
  EXPECT_GE(before, 1);
  blas_set_num_threads(1);
  EXPECT_EQ(blas_num_threads(), 1);
  blas_set_num_threads(before);
  EXPECT_EQ(blas_num_threads(), before);
  EXPECT_THROW(blas_set_num_threads(0), ValueError);
}

// matmul on the BLAS backend against the naive one: f32 and f64, transposed
// views, broadcast batches, 1-d operands; forward and both gradients.
TEST(Matmul, BlasAgreesWithNaive) {
  for (DType dt : {DType::f32, DType::f64}) {
    Generator gen(5);
    const double tol = dt == DType::f32 ? 1e-4 : 1e-12;
    const Tensor w = Tensor::randn({16, 24}, gen, dt), x = Tensor::randn({3, 7, 24}, gen, dt);
    const Tensor q = Tensor::randn({2, 3, 9, 8}, gen, dt), k = Tensor::randn({2, 1, 10, 8}, gen, dt);
    const Tensor v = Tensor::randn({24}, gen, dt);
    const std::vector<std::pair<Tensor, Tensor>> cases = {
        {x, w.transpose(0, 1)},                         // [3, 7, 24] @ wᵀ: folds into one GEMM
        {q, k.transpose(-2, -1)},                       // broadcast head dim, transposed keys
        {k.expand({2, 3, 10, 8}), q.transpose(-2, -1)}, // stride-0 batch
        {w, v},                                         // [16, 24] @ [24]
        {v, x.transpose(-2, -1)},                       // [24] @ [3, 24, 7]
        {x.transpose(0, 1), w.slice(0, 0, 16, 2).transpose(0, 1)},
    };
    for (const auto& [a, b] : cases) {
      SCOPED_TRACE(fmt::format("{} {} @ {}", dtype_name(dt), shape_str(a.shape()), shape_str(b.shape())));
      std::vector<double> outs[2], das[2], dbs[2];
      for (int be = 0; be < 2; ++be) {
        GemmBackendGuard guard(be == 0 ? GemmBackend::blas : GemmBackend::naive);
        const Tensor la = a.detach().requires_grad_(), lb = b.detach().requires_grad_();
        const Tensor out = matmul(la, lb);
        out.backward(out.detach());
        outs[be] = out.to_vector<double>();
        das[be] = la.grad().to_vector<double>();
        dbs[be] = lb.grad().to_vector<double>();
      }
      expect_close(outs[0], outs[1], tol);
      expect_close(das[0], das[1], tol);
      expect_close(dbs[0], dbs[1], tol);
    }
  }
}

// ---- gradients -------------------------------------------------------------------------

TEST(Matmul, GradcheckEveryShape) {
  Generator gen(13);
  for (const auto& [sa, sb] : kShapes) {
    SCOPED_TRACE(shape_str(sa) + " @ " + shape_str(sb));
    const Tensor a = Tensor::randn(sa, gen, DType::f64).requires_grad_();
    const Tensor b = Tensor::randn(sb, gen, DType::f64).requires_grad_();
    const auto r = gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {a, b});
    EXPECT_TRUE(r.ok) << r.summary();
  }
}

TEST(Matmul, GradcheckNonContiguousLeaves) {
  Generator gen(17);
  auto leaf = [](const Tensor& t) { return t.detach().requires_grad_(); };
  const Tensor w = Tensor::randn({4, 3}, gen, DType::f64), x = Tensor::randn({2, 5, 4}, gen, DType::f64);
  const Tensor s = Tensor::randn({6, 8}, gen, DType::f64), s2 = Tensor::randn({6, 8}, gen, DType::f64);
  const std::vector<std::pair<Tensor, Tensor>> cases = {
      {leaf(w.transpose(0, 1)), leaf(x.transpose(-2, -1))},   // [3, 4] @ [2, 4, 5]
      {leaf(x), leaf(w)},                                      // folds the batch into M
      {leaf(x.transpose(0, 1)), leaf(w)},                      // [5, 2, 4]: batch dims not mergeable
      {leaf(s.slice(1, 0, 8, 2)), leaf(s2.slice(0, 0, 4).transpose(0, 1).slice(0, 0, 4))},  // stepped: copied
      {leaf(s.slice(1, 1, 8, 2).slice(0, 2, 3).squeeze(0)), leaf(w)},  // a stride-2 vector
      {leaf(x), leaf(s.slice(1, 1, 8, 2).slice(0, 2, 3).squeeze(0))},
  };
  for (const auto& [a, b] : cases) {
    SCOPED_TRACE(shape_str(a.shape()) + " @ " + shape_str(b.shape()));
    const auto r = gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {a, b});
    EXPECT_TRUE(r.ok) << r.summary();
  }
}

// Broadcast batch dims reach matmul with stride 0 (expand inside the function),
// so their gradients are reduced inside the GEMMs.
TEST(Matmul, GradcheckStrideZeroBatches) {
  Generator gen(19);
  const Tensor a = Tensor::randn({1, 3, 4}, gen, DType::f64).requires_grad_();
  const Tensor b = Tensor::randn({4, 2}, gen, DType::f64).requires_grad_();
  const Tensor c = Tensor::randn({2, 1, 4, 2}, gen, DType::f64).requires_grad_();
  auto r = gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0].expand({5, 3, 4}), in[1]); }, {a, b});
  EXPECT_TRUE(r.ok) << r.summary();
  r = gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0].expand({5, 3, 4}), in[1].expand({5, 4, 2})); }, {a, b});
  EXPECT_TRUE(r.ok) << r.summary();
  r = gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1].transpose(-2, -1).transpose(-2, -1)); }, {a, c});
  EXPECT_TRUE(r.ok) << r.summary();
}

TEST(Matmul, GradcheckOnNaiveBackend) {
  GemmBackendGuard guard(GemmBackend::naive);
  Generator gen(23);
  const Tensor a = Tensor::randn({2, 3, 4}, gen, DType::f64).requires_grad_();
  const Tensor b = Tensor::randn({2, 4}, gen, DType::f64).requires_grad_();
  const auto r = gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1].transpose(0, 1)); }, {a, b});
  EXPECT_TRUE(r.ok) << r.summary();
}

TEST(Matmul, GradientsOnlyWhereNeeded) {
  Generator gen(29);
  const Tensor a = Tensor::randn({3, 4}, gen, DType::f64).requires_grad_();
  const Tensor b = Tensor::randn({4, 2}, gen, DType::f64);
  matmul(a, b).backward(Tensor::ones({3, 2}, DType::f64));
  EXPECT_TRUE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  // da = grad @ bᵀ with grad = ones: every row is the row sums of b.
  const std::vector<double> bv = b.to_vector<double>(), da = a.grad().to_vector<double>();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t k = 0; k < 4; ++k) EXPECT_NEAR(da[i * 4 + k], bv[k * 2] + bv[k * 2 + 1], 1e-12);
  EXPECT_EQ(matmul(b, b.transpose(0, 1)).grad_fn_name(), "");
  EXPECT_EQ(matmul(a, b).grad_fn_name(), "matmul");
}

// ---- errors ----------------------------------------------------------------------------

TEST(Matmul, Errors) {
  const Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4, 5});
  expect_error<ShapeError>([&] { matmul(a, b); }, {"matmul", "[2, 3]", "[4, 5]"});
  expect_error<ShapeError>([&] { matmul(Tensor::zeros({3}), Tensor::zeros({4})); }, {"matmul", "[3]", "[4]"});
  expect_error<ShapeError>([&] { matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 4})); },
                           {"matmul", "[2, 2, 3]", "[3, 3, 4]", "broadcast"});
  expect_error<ShapeError>([&] { matmul(Tensor::scalar(2), a); }, {"matmul", "[]", "[2, 3]"});
  expect_error<ShapeError>([&] { matmul(a, Tensor::scalar(2)); }, {"matmul", "at least 1 dim"});
  expect_error<DTypeError>([&] { matmul(a, Tensor::zeros({3, 2}, DType::f64)); }, {"matmul", "f32", "f64"});
  expect_error<DTypeError>([&] { matmul(Tensor::zeros({2, 3}, DType::i64), Tensor::zeros({3, 2}, DType::i64)); },
                           {"matmul", "i64"});
}

// ---- no copies for transposed or broadcast operands ----------------------------------------

// The only storage a forward matmul allocates is its output: transposed views
// go to GEMM with the trans flag and stride-0 batches are looped over.
TEST(Matmul, TransposedAndBroadcastOperandsAreNotCopied) {
  Generator gen(31);
  const Tensor x = Tensor::randn({32, 64}, gen), w = Tensor::randn({48, 64}, gen);
  const Tensor q = Tensor::randn({2, 3, 5, 64}, gen), k = Tensor::randn({2, 3, 6, 64}, gen);
  const Tensor row = Tensor::randn({1, 32, 64}, gen);
  auto only_output = [](const std::function<Tensor()>& f, size_t out_bytes) {
    const std::vector<size_t> sizes = allocations_of(f);
    ASSERT_EQ(sizes.size(), 1u);
    EXPECT_EQ(sizes[0], out_bytes);
  };
  only_output([&] { return matmul(x, w.transpose(0, 1)); }, 32 * 48 * 4);               // x @ wᵀ
  only_output([&] { return matmul(w, x.transpose(0, 1)); }, 48 * 32 * 4);
  only_output([&] { return matmul(x.transpose(0, 1), x); }, 64 * 64 * 4);               // xᵀ @ x
  only_output([&] { return matmul(q, k.transpose(-2, -1)); }, 2 * 3 * 5 * 6 * 4);       // q kᵀ
  only_output([&] { return matmul(row.expand({8, 32, 64}), w.transpose(0, 1)); }, 8 * 32 * 48 * 4);
  only_output([&] { return linear(x, w); }, 32 * 48 * 4);
  const Tensor w_in_out = w.transpose(0, 1).contiguous();  // [64, 48], as a tied embedding table is stored
  only_output([&] { return linear(x, w_in_out.transpose(0, 1)); }, 32 * 48 * 4);
}

// Backward through a transposed leaf allocates exactly what backward through
// a contiguous one does (the two gradient buffers and the engine's own).
TEST(Matmul, BackwardThroughTransposedLeafCopiesNothing) {
  Generator gen(37);
  const Tensor x0 = Tensor::randn({32, 64}, gen), wt = Tensor::randn({48, 64}, gen);
  const Tensor g = Tensor::randn({32, 48}, gen);
  auto backward_allocs = [&](const Tensor& w_leaf) {
    const Tensor x = x0.detach().requires_grad_();
    const Tensor out = matmul(x, w_leaf);
    return allocations_of([&] { out.backward(g); });
  };
  const std::vector<size_t> transposed = backward_allocs(wt.transpose(0, 1).detach().requires_grad_());
  const std::vector<size_t> contiguous = backward_allocs(wt.transpose(0, 1).contiguous().detach().requires_grad_());
  EXPECT_EQ(transposed, contiguous);
}

// The gradient of a broadcast operand is summed inside the GEMMs: backward
// never allocates the per-batch gradient that sum_to would have reduced.
TEST(Matmul, BroadcastGradientIsNotMaterialised) {
  Generator gen(41);
  auto check = [&](const Shape& sa, const Shape& sb, size_t per_batch_bytes) {
    SCOPED_TRACE(shape_str(sa) + " @ " + shape_str(sb));
    const Tensor a = Tensor::randn(sa, gen).requires_grad_(), b = Tensor::randn(sb, gen).requires_grad_();
    const Tensor out = matmul(a, b);
    const Tensor g = Tensor::randn(out.shape(), gen);
    for (size_t bytes : allocations_of([&] { out.backward(g); })) EXPECT_LT(bytes, per_batch_bytes);
    Shape s;  // against the oracle: da = Σ_batch g @ bᵀ, db = Σ_batch aᵀ @ g
    const Tensor at = a.detach().transpose(-2, -1).contiguous(), bt = b.detach().transpose(-2, -1).contiguous();
    expect_close(a.grad().to_vector<double>(), sum_to(Tensor::from_vector(ref_matmul(g, bt, s), s, DType::f32), sa).to_vector<double>(), 1e-4);
    expect_close(b.grad().to_vector<double>(), sum_to(Tensor::from_vector(ref_matmul(at, g, s), s, DType::f32), sb).to_vector<double>(), 1e-4);
  };
  check({1, 32, 64}, {8, 64, 2}, 8 * 32 * 64 * 4);  // da per batch [8, 32, 64]; reduced by looping with beta = 1
  check({8, 32, 2}, {2, 64}, 8 * 2 * 64 * 4);       // db per batch [8, 2, 64]; reduced by one GEMM with K = 8·32
  check({4, 1, 3, 5}, {2, 5, 6}, 4 * 2 * 3 * 5 * 4);  // both operands broadcast
}

// ---- linear ------------------------------------------------------------------------------

TEST(Linear, HandComputed) {
  const Tensor x = Tensor::from_list({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor w = Tensor::from_list({1, 0, 0, 0, 1, 1}, {2, 3});
  const Tensor b = Tensor::from_list({10, 20}, {2});
  EXPECT_EQ(linear(x, w, b).to_vector<float>(), (std::vector<float>{11, 25, 14, 31}));
  EXPECT_EQ(linear(x, w).to_vector<float>(), (std::vector<float>{1, 5, 4, 11}));
  const Tensor v = linear(Tensor::from_list({1, 2, 3}, {3}), w, b);  // 1-d input
  EXPECT_EQ(v.shape(), Shape{2});
  EXPECT_EQ(v.to_vector<float>(), (std::vector<float>{11, 25}));
}

TEST(Linear, MatchesMatmulPlusBias) {
  Generator gen(43);
  const Tensor x0 = Tensor::randn({3, 4, 5}, gen, DType::f64), w0 = Tensor::randn({6, 5}, gen, DType::f64);
  const Tensor b0 = Tensor::randn({6}, gen, DType::f64), g = Tensor::randn({4, 3, 6}, gen, DType::f64);
  std::vector<double> vals[2], grads[2][3];
  for (int fused = 0; fused < 2; ++fused) {
    const Tensor x = x0.transpose(0, 1).detach().requires_grad_();  // [4, 3, 5], non-contiguous
    const Tensor w = w0.detach().requires_grad_(), b = b0.detach().requires_grad_();
    const Tensor out = fused ? linear(x, w, b) : matmul(x, w.transpose(0, 1)) + b;
    if (fused) {
      EXPECT_EQ(out.grad_fn_name(), "linear");
    }
    out.backward(g);
    vals[fused] = out.to_vector<double>();
    grads[fused][0] = x.grad().to_vector<double>();
    grads[fused][1] = w.grad().to_vector<double>();
    grads[fused][2] = b.grad().to_vector<double>();
  }
  expect_close(vals[1], vals[0], 1e-12);
  for (int i = 0; i < 3; ++i) expect_close(grads[1][i], grads[0][i], 1e-12);
}

TEST(Linear, Gradcheck) {
  Generator gen(47);
  const Tensor x = Tensor::randn({2, 3, 4}, gen, DType::f64).transpose(0, 1).detach().requires_grad_();  // [3, 2, 4]
  const Tensor w = Tensor::randn({5, 4}, gen, DType::f64).requires_grad_();
  const Tensor b = Tensor::randn({5}, gen, DType::f64).requires_grad_();
  auto r = gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, w, b});
  EXPECT_TRUE(r.ok) << r.summary();
  r = gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1]); }, {x, w});
  EXPECT_TRUE(r.ok) << r.summary();
  const Tensor wt = Tensor::randn({4, 5}, gen, DType::f64).transpose(0, 1).detach().requires_grad_();  // tied-weight layout
  const Tensor v = Tensor::randn({4}, gen, DType::f64).requires_grad_();
  r = gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {v, wt, b});
  EXPECT_TRUE(r.ok) << r.summary();
  r = gradcheck([](const std::vector<Tensor>& in) { return linear(in[0].expand({2, 3, 4}), in[1], in[2]); },
                {Tensor::randn({3, 4}, gen, DType::f64).requires_grad_(), w, b});  // stride-0 rows: copied
  EXPECT_TRUE(r.ok) << r.summary();
}

TEST(Linear, Errors) {
  const Tensor x = Tensor::zeros({2, 3}), w = Tensor::zeros({4, 3});
  expect_error<ShapeError>([&] { linear(x, Tensor::zeros({4, 2})); }, {"linear", "[2, 3]", "[4, 2]"});
  expect_error<ShapeError>([&] { linear(x, Tensor::zeros({3})); }, {"linear", "[3]"});
  expect_error<ShapeError>([&] { linear(x, w, Tensor::zeros({3})); }, {"linear", "bias", "[3]", "[4]"});
  expect_error<DTypeError>([&] { linear(x, Tensor::zeros({4, 3}, DType::f64)); }, {"linear", "f64"});
  expect_error<DTypeError>([&] { linear(x, w, Tensor::zeros({4}, DType::f64)); }, {"linear", "f64"});
}
