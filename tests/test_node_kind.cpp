// A node's kind (NodeKind) decides how the engine runs it, never its name: an
// op a user happens to call "AccumulateGrad" is still an op, in backward(),
// in grad(create_graph) and in to_dot.
#include <gtest/gtest.h>

#include <attograd/autograd/graph_dot.h>
#include <attograd/autograd/autograd.h>
#include "test_util.h"

using namespace attograd;

namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// out = 3 · x, recorded under the name a leaf's node has for display.
Tensor impostor(const Tensor& x) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = x * 3.0;
  }
  return record("AccumulateGrad", out, {x}, [](const Tensor& grad, Grads& dx) {
    // out = 3 · x  =>  dx = 3 · grad
    dx[0] += grad * 3.0;
  });
}

}  // namespace

TEST(NodeKind, LeafNodesAreAccumulatorsAndOpsAreOps) {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2}, {2}).requires_grad_();
  const Tensor y = x * 2.0;
  ASSERT_TRUE(y.grad_fn());
  EXPECT_EQ(y.grad_fn()->kind, NodeKind::op);
  ASSERT_EQ(y.grad_fn()->next.size(), 2u);
  ASSERT_TRUE(y.grad_fn()->next[0]);
  EXPECT_EQ(y.grad_fn()->next[0]->kind, NodeKind::accumulate_grad);
  EXPECT_EQ(y.grad_fn()->next[0]->name, "AccumulateGrad");  // the name stays, for display
  const Tensor z = impostor(x);
  EXPECT_EQ(z.grad_fn()->kind, NodeKind::op);
  EXPECT_EQ(z.grad_fn_name(), "AccumulateGrad");
}

TEST(NodeKind, AnOpNamedAccumulateGradRunsItsBackward) {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}).requires_grad_();
  sum(impostor(x) * impostor(x)).backward();  // d/dx Σ 9x² = 18x
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{18, 36, 54}));
}

TEST(NodeKind, GradThroughAnOpNamedAccumulateGrad) {
  Tensor x = Tensor::from_vector(std::vector<double>{1, -2}, {2}).requires_grad_();
  const std::vector<Tensor> g = grad({sum(impostor(x))}, {x});
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{3, 3}));
  EXPECT_FALSE(x.grad().defined());  // grad() leaves .grad alone
}

// mul saves its operands; under create_graph it reconnects them to the graph
// through their producer (Grads::input). The producer here is an op called
// "AccumulateGrad": taken for a leaf's node, the saved z would lose its path
// to x and the second derivative would be missing.
TEST(NodeKind, SecondDerivativeThroughAnOpNamedAccumulateGrad) {
  Tensor x = Tensor::from_vector(std::vector<double>{1, 2}, {2}).requires_grad_();
  const Tensor z = impostor(x);                                   // z = 3x
  GradOptions opt;
  opt.create_graph = true;
  const std::vector<Tensor> g = grad({sum(z * z)}, {x}, {}, opt);  // d/dx Σ z² = 6z = 18x
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{18, 36}));
  ASSERT_TRUE(g[0].requires_grad());
  sum(g[0]).backward();  // d/dx Σ 18x = 18
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{18, 18}));
}

TEST(NodeKind, ToDotDrawsAnOpNamedAccumulateGradAsAnOp) {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2}, {2}).requires_grad_();
  const std::string dot = to_dot(impostor(x), {.constants = false});
  EXPECT_EQ(count(dot, "label=\"leaf\\n"), 1u);  // x alone
  EXPECT_EQ(count(dot, "label=\"AccumulateGrad\\n"), 1u);
  EXPECT_EQ(count(dot, " -> "), 1u);
}

// After set_data_ the old graph's accumulator has no leaf to reach: it is
// still an accumulator (not run as an op), and the leaf's new data gets no
// gradient from the old graph.
TEST(NodeKind, AnUnlinkedAccumulatorStaysAnAccumulator) {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2}, {2}).requires_grad_();
  const Tensor y = sum(x * 2.0);
  const std::shared_ptr<Node> acc = y.grad_fn()->next[0]->next[0];
  ASSERT_TRUE(acc);
  x.set_data_(Tensor::from_vector(std::vector<float>{5, 6}, {2}));
  EXPECT_TRUE(acc->leaf.expired());
  EXPECT_EQ(acc->kind, NodeKind::accumulate_grad);
  y.backward();
  EXPECT_FALSE(x.grad().defined());
}
