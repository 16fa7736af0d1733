// dist/: the world of one, and the gradient buckets checked against a
// stand-in communicator of three ranks that all hold the same gradients (so
// a sum is 3x and a mean is 1x, and every collective call is counted).
// The real multi-process runs are in tests/mpi/.
#include <numeric>

#include <attograd/autograd/autograd.h>
#include <attograd/dist/communicator.h>
#include <attograd/dist/reducer.h>

#include "test_util.h"

using namespace attograd;
using namespace attograd::dist;
using namespace attograd::testing;

namespace {

class ThreeSameRanks : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 3; }
  void broadcast(std::span<float> data, int) override {
    ++calls;
    std::fill(data.begin(), data.end(), 7.0f);  // "rank 0's values"
  }
  void allreduce_sum(std::span<float> data) override {
    ++calls;
    sizes.push_back(data.size());
    for (float& x : data) x *= 3;
  }
  void allgather(std::span<const float> in, std::span<float> out) override {
    ++calls;
    sizes.push_back(in.size());
    for (size_t r = 0; r < 3; ++r) std::copy(in.begin(), in.end(), out.begin() + static_cast<std::ptrdiff_t>(r * in.size()));
  }
  int calls = 0;
  std::vector<size_t> sizes;
};

// Leaves of 3, 5 and 7 elements whose grads hold 1, 2, ..., 15 in flat order.
std::vector<Tensor> leaves_with_grads() {
  std::vector<Tensor> ps;
  float next = 1;
  for (int64_t n : {3, 5, 7}) {
    Tensor p = Tensor::zeros({n}).requires_grad_();
    std::vector<float> g(static_cast<size_t>(n));
    std::iota(g.begin(), g.end(), next);
    next += static_cast<float>(n);
    p.set_grad(Tensor::from_vector(std::vector<double>(g.begin(), g.end()), {n}));
    ps.push_back(p);
  }
  return ps;
}

std::vector<double> flat_grads(const std::vector<Tensor>& ps) {
  std::vector<double> all;
  for (const Tensor& p : ps)
    for (double v : vals(p.grad())) all.push_back(v);
  return all;
}

std::vector<double> one_to_fifteen_times(double k) {
  std::vector<double> v(15);
  for (size_t i = 0; i < v.size(); ++i) v[i] = k * static_cast<double>(i + 1);
  return v;
}

}  // namespace

TEST(Dist, WorldOfOneIsTheDefaultAndLeavesDataAlone) {
  Communicator& w = world();  // ctest does not run under mpirun
  EXPECT_EQ(w.rank(), 0);
  EXPECT_EQ(w.size(), 1);
  std::vector<float> x{1, 2, 3};
  w.allreduce_sum(std::span<float>(x));
  w.broadcast(std::span<float>(x), 0);
  EXPECT_EQ(x, (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(w.allgather_bytes("abc"), std::vector<std::string>{"abc"});
  expect_error<ValueError>([&] { w.broadcast(std::span<float>(x), 1); }, {"broadcast", "root"});
}

TEST(Dist, WorldOfOneMakesNoCall) {
  Communicator one;
  std::vector<Tensor> ps = leaves_with_grads();
  GradientReducer reducer(one, ps);
  reducer.allreduce(ReduceOp::mean);
  EXPECT_EQ(reducer.calls(), 0);
  expect_near_all(flat_grads(ps), one_to_fifteen_times(1), 0);
}

TEST(Dist, BucketsSpanAndShareParametersWithOneCallPerBucket) {
  for (int64_t floats : {1, 4, 6, 15, 100}) {
    ThreeSameRanks comm;
    std::vector<Tensor> ps = leaves_with_grads();
    GradientReducer reducer(comm, ps, {.bucket_bytes = floats * 4});
    reducer.allreduce(ReduceOp::sum);
    const int64_t buckets = (15 + std::min<int64_t>(floats, 15) - 1) / std::min<int64_t>(floats, 15);
    EXPECT_EQ(reducer.num_buckets(), buckets) << floats;
    EXPECT_EQ(comm.calls, buckets) << floats;
    EXPECT_EQ(reducer.calls(), buckets) << floats;
    for (size_t s : comm.sizes) EXPECT_LE(s, static_cast<size_t>(floats));
    expect_near_all(flat_grads(ps), one_to_fifteen_times(3), 0);
  }
}

TEST(Dist, MeanDividesBySizeAndPooledBuffersAreReused) {
  ThreeSameRanks comm;
  std::vector<Tensor> ps = leaves_with_grads();
  GradientReducer reducer(comm, ps, {.bucket_bytes = 16});
  for (int i = 0; i < 3; ++i) reducer.allreduce(ReduceOp::mean);  // 3x then /3: unchanged, three times
  expect_near_all(flat_grads(ps), one_to_fifteen_times(1), 1e-6);
  EXPECT_EQ(reducer.calls(), 3 * 4);
}

TEST(Dist, FixedOrderAddsTheGatheredRanksInRankOrder) {
  ThreeSameRanks comm;
  std::vector<Tensor> ps = leaves_with_grads();
  GradientReducer reducer(comm, ps, {.bucket_bytes = 32, .order = ReduceOrder::fixed});
  reducer.allreduce(ReduceOp::sum);
  EXPECT_EQ(comm.calls, 2);
  expect_near_all(flat_grads(ps), one_to_fifteen_times(3), 0);
}

TEST(Dist, MissingGradCountsAsZerosAndIsSet) {
  ThreeSameRanks comm;
  Tensor a = Tensor::zeros({2}).requires_grad_(), b = Tensor::zeros({2}).requires_grad_();
  b.set_grad(Tensor::from_list({1, 2}, {2}));
  GradientReducer reducer(comm, {a, b});
  reducer.allreduce(ReduceOp::sum);
  ASSERT_TRUE(a.grad().defined());
  expect_near_all(vals(a.grad()), {0, 0}, 0);
  expect_near_all(vals(b.grad()), {3, 6}, 0);
}

TEST(Dist, BroadcastWritesEveryParameterInBuckets) {
  ThreeSameRanks comm;
  std::vector<Tensor> ps = leaves_with_grads();
  broadcast_parameters(comm, ps, 24);
  EXPECT_EQ(comm.calls, 3);
  for (const Tensor& p : ps)
    for (double v : vals(p)) EXPECT_EQ(v, 7.0);
}

TEST(Dist, RejectsOtherDtypesAndTinyBuckets) {
  Communicator one;
  expect_error<DTypeError>([&] { GradientReducer(one, {Tensor::zeros({2}, DType::f64)}); }, {"parameter 0", "f64"});
  expect_error<ValueError>([&] { GradientReducer(one, {Tensor::zeros({2})}, {.bucket_bytes = 3}); },
                           {"bucket_bytes"});
}

namespace {
// loss = Σ w1·a + Σ w2·b + Σ w3·c over leaves of 3, 5 and 7 elements: the
// engine finishes w3 first, so the buckets holding only w3 can start at once.
struct ThreeLeafModel {
  std::vector<Tensor> ps{Tensor::zeros({3}).requires_grad_(), Tensor::zeros({5}).requires_grad_(),
                         Tensor::zeros({7}).requires_grad_()};
  Tensor loss(double k) const {
    Tensor total;
    for (size_t i = 0; i < ps.size(); ++i) {
      const Tensor c = iota({ps[i].numel()}, DType::f32) * k + static_cast<double>(i);
      total = total.defined() ? total + sum(ps[i] * c) : sum(ps[i] * c);
    }
    return total;
  }
};
}  // namespace

TEST(Dist, OverlapStartsBucketsDuringBackwardWithTheBlockingResult) {
  for (ReduceOrder order : {ReduceOrder::native, ReduceOrder::fixed}) {
    ThreeLeafModel blocking_model, overlap_model;
    ThreeSameRanks c1, c2;
    GradientReducer blocking(c1, blocking_model.ps, {.bucket_bytes = 16, .order = order, .overlap = false});
    GradientReducer overlap(c2, overlap_model.ps, {.bucket_bytes = 16, .order = order});
    blocking_model.loss(0.5).backward();
    EXPECT_EQ(c1.calls, 0);
    overlap_model.loss(0.5).backward();
    // Buckets [8, 12) and [12, 15) hold only w3, which is final first; the others wait for w1 and w2.
    EXPECT_EQ(overlap.overlapped(), 4) << "every bucket is ready before backward ends";
    EXPECT_EQ(c2.calls, 4);
    blocking.allreduce(ReduceOp::mean);
    overlap.allreduce(ReduceOp::mean);
    EXPECT_EQ(c2.calls, 4);  // nothing left to start
    EXPECT_EQ(flat_grads(overlap_model.ps), flat_grads(blocking_model.ps));
    // The waits are a part of the reducer's time, and only the overlap waits.
    EXPECT_LE(overlap.wait_seconds(), overlap.seconds());
    EXPECT_EQ(blocking.wait_seconds(), 0.0);
  }
}

TEST(Dist, OverlapWithUnreachedParametersAndASkippedStep) {
  ThreeLeafModel m, ref;
  ThreeSameRanks comm, ref_comm;
  GradientReducer reducer(comm, m.ps, {.bucket_bytes = 16});
  GradientReducer blocking(ref_comm, ref.ps, {.bucket_bytes = 16, .overlap = false});
  (sum(m.ps[2] * 2.0)).backward();  // only w3: its two buckets start, then the step is skipped (no allreduce)
  EXPECT_EQ(reducer.overlapped(), 2);
  for (Tensor& p : m.ps) p.zero_grad();
  m.loss(1.0).backward();  // the next backward drops the skipped step's sums and starts afresh
  sum(m.ps[0] * 1.0).backward();  // w1 again: its .grad changed after it was final once, so this starts afresh too
  reducer.allreduce(ReduceOp::sum);
  ref.loss(1.0).backward();
  sum(ref.ps[0] * 1.0).backward();
  blocking.allreduce(ReduceOp::sum);
  EXPECT_EQ(flat_grads(m.ps), flat_grads(ref.ps));
}
