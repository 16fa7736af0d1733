// The reverse-mode engine: backward entry points, accumulation, graph
// lifetime, deep graphs, the gradient shape/dtype check, memory, anomaly mode.
#include <gtest/gtest.h>
#include <pthread.h>

#include <cmath>
#include <map>

#include <attograd/autograd/autograd.h>
#include <attograd/autograd/trace.h>
#include "test_util.h"

using namespace attograd;
using namespace attograd::testing;

namespace {

// Installs a fresh caching allocator for one test, so bytes_in_use counts only
// that test's tensors.
struct FreshAllocator {
  std::shared_ptr<Allocator> saved = current_allocator();
  std::shared_ptr<Allocator> mine = make_caching_allocator();
  FreshAllocator() { set_allocator(mine); }
  ~FreshAllocator() { set_allocator(saved); }
  size_t in_use() const { return mine->bytes_in_use(); }
};

// Runs fn on a thread with a small stack: recursion proportional to graph
// depth would overflow it.
void run_with_small_stack(void (*fn)(), size_t bytes) {
  struct Job {
    void (*fn)();
  } job{fn};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, bytes);
  pthread_t th;
  auto body = [](void* j) -> void* {
    static_cast<Job*>(j)->fn();
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&th, &attr, body, &job), 0);
  pthread_join(th, nullptr);
  pthread_attr_destroy(&attr);
}

}  // namespace

// ---- entry points ------------------------------------------------------------------

TEST(Backward, ScalarRoot) {
  Tensor x = Tensor::scalar(2.0, DType::f64).requires_grad_();
  Tensor y = x * x + 3.0 * x;  // dy/dx = 2x + 3
  y.backward();
  EXPECT_EQ(x.grad().item(), 7.0);
  EXPECT_EQ(x.grad().dtype(), DType::f64);
  EXPECT_EQ(x.grad().shape(), Shape{});
  // A one-element non-0-d root works too.
  Tensor w = f64({1, 2, 3}, {3}).requires_grad_();
  sum(w * w, {0}, /*keepdim=*/true).backward();
  EXPECT_EQ(vals(w.grad()), (std::vector<double>{2, 4, 6}));
}

TEST(Backward, WithGradOnAnyShape) {
  Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor w = f64({1, -1, 2}, {3}).requires_grad_();
  Tensor y = x * w;  // [2, 3]
  Tensor g = f64({1, 10, 100, 2, 20, 200}, {2, 3});
  y.backward(g);
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{1, -10, 200, 2, -20, 400}));
  // dw = Σ_rows g * x
  EXPECT_EQ(vals(w.grad()), (std::vector<double>{1 + 8, 20 + 100, 300 + 1200}));
  // 3-d root, and a 0-d root with an explicit gradient
  Tensor a = Tensor::ones({2, 2, 2}, DType::f64).requires_grad_();
  (a * 2.0).backward(Tensor::full({2, 2, 2}, 3.0, DType::f64));
  EXPECT_EQ(vals(a.grad()), std::vector<double>(8, 6.0));
  Tensor s = Tensor::scalar(3, DType::f64).requires_grad_();
  (s * s).backward(Tensor::scalar(0.5, DType::f64));
  EXPECT_EQ(s.grad().item(), 3.0);
}

TEST(Backward, NonScalarWithoutGradThrows) {
  Tensor x = Tensor::ones({2, 3}).requires_grad_();
  Tensor y = x * 2.0;
  expect_error<AutogradError>([&] { y.backward(); }, {"backward", "one-element", "[2, 3]"});
  expect_error<ShapeError>([&] { y.backward(Tensor::ones({3, 2})); }, {"backward", "[3, 2]", "[2, 3]"});
  expect_error<DTypeError>([&] { y.backward(Tensor::ones({2, 3}, DType::f64)); }, {"backward", "f64", "f32"});
  expect_error<AutogradError>([] { Tensor::ones({1}).backward(); }, {"backward", "does not require grad"});
  // The failed calls did not run anything: the graph still works.
  y.backward(Tensor::ones({2, 3}));
  EXPECT_EQ(vals(x.grad()), std::vector<double>(6, 2.0));
}

TEST(Backward, LeafRootGetsACopyOfTheGradient) {
  Tensor x = Tensor::zeros({3}).requires_grad_();
  Tensor g = Tensor::from_list({1, 2, 3}, {3});
  x.backward(g);
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{1, 2, 3}));
  EXPECT_FALSE(x.grad().shares_storage(g));
  // A gradient that is the incoming gradient itself (clone's backward) is copied too.
  Tensor y = x.clone();
  Tensor g2 = Tensor::from_list({4, 5, 6}, {3});
  x.zero_grad();
  y.backward(g2);
  EXPECT_FALSE(x.grad().shares_storage(g2));
  g2.fill_(0);
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{4, 5, 6}));
}

// ---- accumulation, zero_grad, requires_grad, detach, no_grad -----------------------------

TEST(Backward, GradientsAccumulateAcrossCalls) {
  Tensor x = f64({1, 2}, {2}).requires_grad_();
  sum(x * x).backward();  // 2x
  Tensor first = x.grad();
  sum(x * 3.0).backward();  // + 3
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{5, 7}));
  EXPECT_EQ(vals(first), (std::vector<double>{5, 7}));  // accumulated in place, like PyTorch
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
  sum(x).backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{1, 1}));
  EXPECT_EQ(vals(first), (std::vector<double>{5, 7}));  // a new buffer after zero_grad
}

TEST(Backward, SetGradThenAccumulate) {
  Tensor x = f64({1, 2}, {2}).requires_grad_();
  x.set_grad(f64({10, 20}, {2}));
  sum(x * x).backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{12, 24}));
  x.set_grad(Tensor());
  EXPECT_FALSE(x.grad().defined());
  expect_error<ShapeError>([&] { x.set_grad(f64({1, 2, 3}, {3})); }, {"set_grad", "[3]", "[2]"});
  expect_error<DTypeError>([&] { x.set_grad(Tensor::zeros({2})); }, {"set_grad", "f32", "f64"});
}

TEST(Backward, OnlyLeavesThatTakePartGetGrads) {
  Tensor x = f64({1, 2}, {2}).requires_grad_();
  Tensor unused = f64({1, 2}, {2}).requires_grad_();
  Tensor c = f64({3, 4}, {2});  // no requires_grad
  Tensor h = x * c;
  EXPECT_TRUE(h.requires_grad());
  EXPECT_FALSE(h.is_leaf());
  sum(h).backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{3, 4}));
  EXPECT_FALSE(unused.grad().defined());
  EXPECT_FALSE(c.grad().defined());
  EXPECT_FALSE(h.grad().defined());  // non-leaves do not keep .grad
}

TEST(Backward, RequiresGradOnlyOnFloatingLeaves) {
  Tensor i = Tensor::zeros({2}, DType::i64);
  expect_error<DTypeError>([&] { i.requires_grad_(); }, {"requires_grad_", "i64"});
  Tensor b = Tensor::zeros({2}, DType::b8);
  expect_error<DTypeError>([&] { b.requires_grad_(); }, {"requires_grad_", "b8"});
  Tensor x = Tensor::zeros({2}).requires_grad_();
  EXPECT_TRUE(x.requires_grad());
  EXPECT_TRUE(x.is_leaf());
  Tensor y = x * 2.0;
  expect_error<AutogradError>([&] { y.requires_grad_(); }, {"requires_grad_", "leaves", "<mul>"});
  x.requires_grad_(false);
  EXPECT_FALSE(x.requires_grad());
  EXPECT_FALSE((x * 2.0).requires_grad());
  EXPECT_EQ((x * 2.0).grad_fn(), nullptr);
}

TEST(Backward, DetachStopsGradient) {
  Tensor x = f64({1, 2, 3}, {3}).requires_grad_();
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_TRUE(d.shares_storage(x));
  Tensor y = x * x;
  Tensor yd = y.detach();
  EXPECT_EQ(yd.grad_fn(), nullptr);
  EXPECT_EQ(vals(yd), (std::vector<double>{1, 4, 9}));
  sum(x * d).backward();  // only the x factor contributes: d/dx = d = x
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{1, 2, 3}));
}

TEST(Backward, NoGradGuardRecordsNothing) {
  Tensor x = Tensor::ones({2}).requires_grad_();
  EXPECT_TRUE(GradMode::enabled());
  {
    NoGradGuard ng;
    EXPECT_FALSE(GradMode::enabled());
    Tensor y = exp(x * 2.0 + x);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    EXPECT_EQ(y.grad_fn_name(), "");
    {
      NoGradGuard nested;
    }
    EXPECT_FALSE(GradMode::enabled());  // the inner guard restores "off"
    expect_error<AutogradError>([&] { y.backward(); }, {"does not require grad"});
  }
  EXPECT_TRUE(GradMode::enabled());
  Tensor z = x * 2.0;
  EXPECT_EQ(z.grad_fn_name(), "mul");
}

// ---- graph lifetime ---------------------------------------------------------------------

TEST(Backward, SecondBackwardNeedsRetainGraph) {
  Tensor x = f64({1, 2}, {2}).requires_grad_();
  Tensor y = sum(exp(x) * x);
  y.backward();
  const std::vector<double> once = vals(x.grad());
  expect_error<AutogradError>([&] { y.backward(); }, {"second time", "retain_graph"});
  EXPECT_EQ(vals(x.grad()), once);  // the failed call added nothing

  Tensor x2 = f64({1, 2}, {2}).requires_grad_();
  Tensor y2 = sum(exp(x2) * x2);
  y2.backward(Tensor(), /*retain_graph=*/true);
  y2.backward();
  for (size_t i = 0; i < 2; ++i) {
    const double xi = i + 1.0;
    EXPECT_DOUBLE_EQ(vals(x2.grad())[i], 2 * (std::exp(xi) * xi + std::exp(xi)));
  }
  expect_error<AutogradError>([&] { y2.backward(); }, {"second time"});
}

TEST(Backward, DiamondSumsBothPaths) {
  Tensor x = f64({1, -2}, {2}).requires_grad_();
  Tensor a = x * 2.0, b = x * 3.0;
  sum(a * b).backward();  // 6x² -> 12x
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{12, -24}));
  // A deeper diamond: h = tanh(x) feeds three consumers at different depths.
  Tensor t = f64({0.5}, {1}).requires_grad_();
  Tensor h = tanh(t);
  Tensor y = sum(h * h + exp(h) + h);  // dy/dh = 2h + e^h + 1
  y.backward();
  const double hv = std::tanh(0.5);
  EXPECT_NEAR(t.grad().item(), (2 * hv + std::exp(hv) + 1) * (1 - hv * hv), 1e-14);
  // x used twice by the same op
  Tensor z = f64({3}, {1}).requires_grad_();
  sum(z * z).backward();
  EXPECT_EQ(z.grad().item(), 6.0);
}

// The engine adds a second gradient into the first in place, and keeps a
// leaf's first gradient without copying it, only when no other tensor sees
// that buffer. add's backward hands the same grad tensor to both inputs, so
// these graphs make one buffer reach two nodes and two leaves.
TEST(Backward, InPlaceAccumulationNeverWritesIntoASharedGradient) {
  Tensor a = f64({1, 2}, {2}).requires_grad_(), b = f64({10, 20}, {2}).requires_grad_();
  Tensor s = a + b;                       // d(s)/da and d(s)/db are the same tensor
  Tensor y = sum((s + a) * f64({1, 3}, {2}));  // a reached twice: through s and directly
  y.backward();
  EXPECT_EQ(vals(a.grad()), (std::vector<double>{2, 6}));
  EXPECT_EQ(vals(b.grad()), (std::vector<double>{1, 3}));
  // The two leaves never share a buffer: writing one leaves the other alone.
  EXPECT_NE(a.grad().data<double>(), b.grad().data<double>());
  Tensor ga = a.grad();
  add_(ga, f64({100, 100}, {2}));
  EXPECT_EQ(vals(b.grad()), (std::vector<double>{1, 3}));
  // A gradient the caller passes in is never kept: the leaf gets its own copy.
  Tensor x = f64({1, 2}, {2}).requires_grad_();
  Tensor g = f64({5, 7}, {2});
  (x * 1.0).backward(g);
  Tensor gg = g;
  add_(gg, f64({1, 1}, {2}));
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{5, 7}));
  // Second backward accumulates into the kept buffer: 5+5, 7+7.
  (x * 1.0).backward(f64({5, 7}, {2}));
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{10, 14}));
}

TEST(Backward, LeafDroppedBeforeBackward) {
  Tensor y;
  {
    Tensor x = Tensor::ones({2}).requires_grad_();
    y = sum(x * 2.0);
  }
  EXPECT_NO_THROW(y.backward());  // the gradient of a gone leaf goes nowhere
}

// ---- deep graphs ---------------------------------------------------------------------------

namespace {
constexpr int kChain = 100000;

void mul_chain_backward_and_destroy() {
  Tensor x = Tensor::scalar(1.5, DType::f64).requires_grad_();
  Tensor y = x;
  for (int i = 0; i < kChain; ++i) y = y * 1.0001;
  double expect = 1.0;
  for (int i = 0; i < kChain; ++i) expect *= 1.0001;
  EXPECT_NEAR(y.item(), 1.5 * expect, 1e-9 * expect);
  y.backward();
  EXPECT_DOUBLE_EQ(x.grad().item(), expect);
  y = Tensor();  // tears down 100,000 nodes
}

void add_chain_destroy_without_backward() {
  Tensor x = Tensor::ones({4}, DType::f64).requires_grad_();
  Tensor y = x;
  for (int i = 0; i < kChain; ++i) y = y + x;
  EXPECT_EQ(vals(y)[0], kChain + 1.0);
  // never run backward: the closures still hold their saved state
}
}  // namespace

TEST(DeepGraph, HundredThousandAddChainSharedLeaf) {
  Tensor x = Tensor::ones({3}, DType::f64).requires_grad_();
  Tensor y = x;
  for (int i = 0; i < kChain; ++i) y = y + x;
  sum(y).backward();
  EXPECT_EQ(vals(x.grad()), std::vector<double>(3, kChain + 1.0));
}

TEST(DeepGraph, HundredThousandMulChainOnASmallStack) {
  // 256 KiB of stack: a recursive backward or destructor needs far more for
  // 100,000 nodes (and ASan's frames are larger still).
  run_with_small_stack(&add_chain_destroy_without_backward, 256 * 1024);
  run_with_small_stack(&mul_chain_backward_and_destroy, 256 * 1024);
}

// ---- where gradients meet: the shape/dtype check ----------------------------------------------

TEST(GradCheckInEngine, CustomOpWrongShapeNamesOpAndShapes) {
  Tensor x = Tensor::ones({2, 3}, DType::f64).requires_grad_();
  Tensor y = custom_op(
      "my_bad_op", {x}, [](FunctionCtx&, const std::vector<Tensor>& in) { return in[0] * 2.0; },
      [](FunctionCtx&, const Tensor& grad) { return std::vector<Tensor>{sum(grad, {0})}; });  // [3], not [2, 3]
  EXPECT_EQ(y.grad_fn_name(), "my_bad_op");
  expect_error<ShapeError>([&] { sum(y).backward(); }, {"my_bad_op", "[3]", "[2, 3]", "input 0"});
}

TEST(GradCheckInEngine, CustomOpWrongDtype) {
  Tensor x = Tensor::ones({2}, DType::f64).requires_grad_();
  Tensor y = custom_op(
      "my_f32_op", {x}, [](FunctionCtx&, const std::vector<Tensor>& in) { return in[0].clone(); },
      [](FunctionCtx&, const Tensor& grad) { return std::vector<Tensor>{grad.to(DType::f32)}; });
  expect_error<DTypeError>([&] { sum(y).backward(); }, {"my_f32_op", "f32", "f64"});
}

TEST(GradCheckInEngine, CustomOpWrongGradientCount) {
  Tensor x = Tensor::ones({2}, DType::f64).requires_grad_();
  Tensor y = custom_op(
      "two_grads", {x}, [](FunctionCtx&, const std::vector<Tensor>& in) { return in[0].clone(); },
      [](FunctionCtx&, const Tensor& grad) { return std::vector<Tensor>{grad, grad}; });
  expect_error<AutogradError>([&] { sum(y).backward(); }, {"two_grads", "2 gradients", "1 inputs"});
}

TEST(GradCheckInEngine, RecordedBackwardWritingAMissingInput) {
  Tensor x = Tensor::ones({2}).requires_grad_();
  Tensor y = record("lonely", Tensor::ones({2}), {x}, [](const Tensor& grad, Grads& dx) { dx[1] += grad; });
  expect_error<AutogradError>([&] { y.backward(Tensor::ones({2})); }, {"lonely", "input 1", "1 inputs"});
}

// ---- memory ------------------------------------------------------------------------------------

TEST(Memory, SavedTensorsFreedAfterBackward) {
  FreshAllocator alloc;
  Tensor x = Tensor::ones({1024}, DType::f64).requires_grad_();  // 8 KiB
  const size_t base = alloc.in_use();
  {
    Tensor z = sum(exp(x));  // exp's output (8 KiB) lives only in exp's closure
    const size_t z_bytes = 64;
    EXPECT_EQ(alloc.in_use(), base + 8192 + z_bytes);
    z.backward();
    x.zero_grad();
    EXPECT_EQ(alloc.in_use(), base + z_bytes);  // the saved output is gone
  }
  EXPECT_EQ(alloc.in_use(), base);
  {
    Tensor z = sum(exp(x));
    z.backward(Tensor(), /*retain_graph=*/true);
    x.zero_grad();
    EXPECT_EQ(alloc.in_use(), base + 8192 + 64);  // retained for another backward
  }
  EXPECT_EQ(alloc.in_use(), base);  // and freed with the graph
}

TEST(Memory, DroppedGraphReturnsToBaseline) {
  FreshAllocator alloc;
  Generator gen(3);
  Tensor w = Tensor::randn({8, 8}, gen).requires_grad_();
  const size_t base = alloc.in_use();
  {
    Tensor h = tanh(w * 2.0).transpose(0, 1);
    Tensor y = mean(pow(h - sigmoid(w), 2.0), {1});
    EXPECT_GT(alloc.in_use(), base);
  }
  EXPECT_EQ(alloc.in_use(), base);  // no cycle keeps anything alive
}

TEST(Memory, FlatOverManyIterations) {
  FreshAllocator alloc;
  Generator gen(4);
  Tensor w = Tensor::randn({16}, gen).requires_grad_();
  Tensor x = Tensor::randn({4, 16}, gen);
  auto step = [&] {
    Tensor loss = mean(pow(tanh(x * w) - 1.0, 2.0)) + var(w) * 0.1;
    loss.backward();
    w.zero_grad();
  };
  for (int i = 0; i < 10; ++i) step();
  const size_t in_use = alloc.in_use(), peak = alloc.mine->peak_bytes();
  for (int i = 0; i < 1000; ++i) step();
  EXPECT_EQ(alloc.in_use(), in_use);
  EXPECT_EQ(alloc.mine->peak_bytes(), peak);
}

// ---- anomaly mode ---------------------------------------------------------------------------------

TEST(Anomaly, NamesFirstForwardOpMakingNaN) {
  Tensor x = Tensor::from_list({1, -1}, {2}).requires_grad_();
  EXPECT_NO_THROW(log(x));  // off by default: NaN flows
  {
    AnomalyGuard guard;
    EXPECT_TRUE(AnomalyMode::enabled());
    Tensor ok = exp(x);  // finite: fine
    expect_error<AutogradError>([&] { sum(log(x) * 2.0); }, {"log", "forward", "NaN", "[2]"});
    Tensor masked = masked_fill(x, Tensor::from_vector(std::vector<bool>{true, false}, {2}), -INFINITY);  // -inf is how masks enter: allowed
  }
  EXPECT_FALSE(AnomalyMode::enabled());
}

TEST(Anomaly, NamesBackwardOpMakingNaN) {
  Tensor x = Tensor::ones({3}, DType::f64).requires_grad_();
  auto nan_grad = [&] {
    return custom_op(
        "nan_backward", {x}, [](FunctionCtx&, const std::vector<Tensor>& in) { return in[0] * 2.0; },
        [](FunctionCtx&, const Tensor& grad) { return std::vector<Tensor>{grad * NAN}; });
  };
  EXPECT_NO_THROW(sum(nan_grad()).backward());
  EXPECT_TRUE(std::isnan(vals(x.grad())[0]));
  AnomalyGuard guard;
  Tensor y = sum(nan_grad() * 3.0);  // forward is finite
  expect_error<AutogradError>([&] { y.backward(); }, {"nan_backward", "backward", "non-finite gradient", "[3]"});
}

TEST(Anomaly, BuiltinBackwardInfIsBlamedOnTheOp) {
  // a^b at a = 0, b = 0.5: the forward is finite (0), da = b a^(b-1) is inf. a is
  // broadcast, so pow's backward reduces da with sum_to, a helper op that must
  // not be reported as a failing "forward".
  Tensor a = Tensor::from_list({0, 4}, {2, 1}, DType::f64).requires_grad_();
  Tensor b = Tensor::from_list({0.5, 0.5}, {2}, DType::f64);
  AnomalyGuard guard;
  Tensor y = sum(pow(a, b));
  expect_error<AutogradError>([&] { y.backward(); }, {"pow:", "non-finite gradient", "[2, 1], [2]"});
}

// Sizes that never repeat (decoding without a KV cache grows every step) must
// not pile up in the cache: cached + in-use stays within 2x the high-water mark
// plus the slack, while a repeating size is still served from the cache.
TEST(CachingAllocator, CacheStaysBoundedWhenSizesKeepChanging) {
  auto a = make_caching_allocator();
  const size_t slack = size_t{64} << 20;
  size_t worst = 0;
  for (size_t i = 1; i <= 400; ++i) {
    const size_t bytes = i * (size_t{1} << 20);  // 1 MiB, 2 MiB, ... each used once
    void* p = a->allocate(bytes);
    a->deallocate(p, bytes);
    worst = std::max(worst, a->bytes_cached());
  }
  EXPECT_LE(worst, 2 * a->peak_bytes() + slack);
  EXPECT_LT(worst, size_t{400} * 401 / 2 * (size_t{1} << 20) / 4);  // far below keeping them all
  void* p = a->allocate(4096);
  a->deallocate(p, 4096);
  EXPECT_EQ(a->allocate(4096), p);  // reuse still works
  a->deallocate(p, 4096);
}

// ---- post-accumulate-grad hooks ----------------------------------------------

namespace {
// y = sum(w3 * (w2 * (w1 * x))) with x, w1..w3 [3] leaves; w2 read twice.
struct Chain {
  Tensor x = randn({3}, 1);
  Tensor w1 = randn_leaf({3}, 2), w2 = randn_leaf({3}, 3), w3 = randn_leaf({3}, 4), unused = randn_leaf({3}, 5);
  Tensor loss() const { return sum(w3 * (w2 * (w2 * (w1 * x)))); }
};
}  // namespace

TEST(PostAccumulateGradHook, OncePerLeafPerBackwardWithTheFinalGradInEngineOrder) {
  Chain c;
  std::vector<std::string> calls;
  std::map<std::string, std::vector<double>> seen;
  std::vector<GradHookHandle> handles;
  for (auto [t, name] : {std::pair{c.w1, "w1"}, {c.w2, "w2"}, {c.w3, "w3"}, {c.unused, "unused"}})
    handles.push_back(register_post_accumulate_grad_hook(t, [&calls, &seen, name = std::string(name)](const Tensor& leaf) {
      calls.push_back(name);
      seen[name] = leaf.grad().to_vector<double>();
    }));
  std::vector<std::string> engine_order;
  {
    BackwardTrace trace({.names = {{c.w1.id(), "w1"}, {c.w2.id(), "w2"}, {c.w3.id(), "w3"}}});
    c.loss().backward();
    for (const TraceRow& r : trace.rows())
      if (r.op == "AccumulateGrad") engine_order.push_back(r.name);
  }
  // Each leaf once, in the order the engine finished them; `unused` is not reached.
  EXPECT_EQ(calls, engine_order);
  EXPECT_EQ(calls.size(), 3u);
  EXPECT_EQ(seen["w2"], c.w2.grad().to_vector<double>());  // the sum of both uses, not the first one
  EXPECT_EQ(seen["w1"], c.w1.grad().to_vector<double>());
  EXPECT_EQ(seen["w3"], c.w3.grad().to_vector<double>());
  c.loss().backward();  // another backward: one more call each
  EXPECT_EQ(calls.size(), 6u);
  EXPECT_EQ(seen["w2"], c.w2.grad().to_vector<double>());  // after accumulating into the first backward's .grad
}

TEST(PostAccumulateGradHook, NotCalledByGradNorForLeavesNoGradientReaches) {
  Chain c;
  int calls = 0;
  auto h1 = register_post_accumulate_grad_hook(c.w1, [&](const Tensor&) { ++calls; });
  auto h2 = register_post_accumulate_grad_hook(c.w3, [&](const Tensor&) { ++calls; });
  grad({c.loss()}, {c.w1, c.w3});  // grad() leaves .grad alone, so no .grad becomes final
  EXPECT_EQ(calls, 0);
  sum(c.w2 * 2.0).backward();  // reaches w2 only
  EXPECT_EQ(calls, 0);
  {
    NoGradGuard no_grad;
    Tensor y = c.w1 * 2.0;  // not recorded: nothing to walk
    EXPECT_FALSE(y.requires_grad());
  }
  EXPECT_EQ(calls, 0);
  sum(c.w1 * 2.0).backward();
  EXPECT_EQ(calls, 1);
}

TEST(PostAccumulateGradHook, HandleRemovesAndChecksTheLeaf) {
  Chain c;
  int calls = 0;
  {
    GradHookHandle h = register_post_accumulate_grad_hook(c.w1, [&](const Tensor&) { ++calls; });
    GradHookHandle moved = std::move(h);
    h.remove();  // the moved-from handle owns nothing
    sum(c.w1).backward();
    EXPECT_EQ(calls, 1);
  }
  sum(c.w1).backward();  // the handle died: the hook is gone
  EXPECT_EQ(calls, 1);
  expect_error<AutogradError>([&] { (void)register_post_accumulate_grad_hook(c.w1 * 2.0, [](const Tensor&) {}); },
                              {"register_post_accumulate_grad_hook", "expected a leaf", "mul"});
  expect_error<AutogradError>([&] { (void)register_post_accumulate_grad_hook(c.x, [](const Tensor&) {}); },
                              {"register_post_accumulate_grad_hook", "does not require grad"});
}
