// to_dot: the exact DOT of a small known graph, parameter names, gradient and
// freed-bytes annotations, and collapsing repeated blocks of a module stack.
#include <gtest/gtest.h>

#include <attograd/autograd/graph_dot.h>
#include <attograd/autograd/autograd.h>
#include <attograd/nn/linear.h>

#include "test_util.h"

using namespace attograd;
using attograd::testing::contains;
using attograd::testing::expect_error;
using attograd::testing::randn;

namespace {
size_t count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t p = s.find(part); p != std::string::npos; p = s.find(part, p + 1)) ++n;
  return n;
}

// y = sum(relu(x W + b)) with x [4, 3] (no grad), W [3, 2], b [2].
struct SmallGraph {
  Tensor x = Tensor::from_list({1, -2, 3, 0.5, 1, -1, 2, 2, -3, 0, 1, 1}, {4, 3});
  Tensor W = Tensor::from_list({0.5, -1, 1, 0.25, -0.5, 2}, {3, 2}).requires_grad_();
  Tensor b = Tensor::from_list({0.1, -0.2}, {2}).requires_grad_();
  Tensor y = sum(relu(matmul(x, W) + b));
  TensorNames names{{W.id(), "W"}, {b.id(), "b"}};
};

// A residual stack: layers.i computes x + relu(fc(x)); then a sum.
class Block : public Module {
 public:
  Block(int64_t width, Generator& gen) : Module("Block") {
    fc = register_module("fc", std::make_shared<Linear>(width, width, gen));
  }
  Tensor forward(const Tensor& x) { return x + relu(fc->forward(x)); }
  std::shared_ptr<Linear> fc;
};

class Stack : public Module {
 public:
  Stack(int64_t n, int64_t width, Generator& gen) : Module("Stack") {
    embed = register_parameter("embed", Tensor::randn({width}, gen));
    layers = register_module("layers", std::make_shared<ModuleList<Block>>());
    for (int64_t i = 0; i < n; ++i) layers->push_back(std::make_shared<Block>(width, gen));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = x * embed;
    for (const auto& layer : *layers) h = layer->forward(h);
    return sum(h);
  }
  Tensor embed;
  std::shared_ptr<ModuleList<Block>> layers;
};
}  // namespace

// Vertices are numbered in forward order: W's leaf node is made when matmul
// records, and the constant x is drawn right before the op that reads it.
TEST(GraphDot, SmallGraphExactText) {
  SmallGraph s;
  const std::string want =
      "digraph attograd {\n"
      "  node [fontname=\"Helvetica\", fontsize=10];\n"
      "  n0 [label=\"W\\n[3, 2] f32\", shape=box, style=filled, fillcolor=\"#dbe9f6\"];\n"
      "  n1 [label=\"no grad\\n[4, 3] f32\", shape=box, style=dashed];\n"
      "  n2 [label=\"matmul\\n[4, 2] f32\"];\n"
      "  n3 [label=\"b\\n[2] f32\", shape=box, style=filled, fillcolor=\"#dbe9f6\"];\n"
      "  n4 [label=\"add\\n[4, 2] f32\"];\n"
      "  n5 [label=\"relu\\n[4, 2] f32\"];\n"
      "  n6 [label=\"sum\\n[] f32\", penwidth=2];\n"
      "  n1 -> n2;\n"
      "  n0 -> n2;\n"
      "  n2 -> n4;\n"
      "  n3 -> n4;\n"
      "  n4 -> n5;\n"
      "  n5 -> n6;\n"
      "}\n";
  EXPECT_EQ(to_dot(s.y, {.names = s.names}), want);
}

TEST(GraphDot, UnnamedLeavesAndNoConstants) {
  SmallGraph s;
  const std::string dot = to_dot(s.y, {.constants = false});
  EXPECT_EQ(count(dot, "label=\"leaf\\n"), 2u);
  EXPECT_FALSE(contains(dot, "no grad"));
  EXPECT_EQ(count(dot, " -> "), 5u);  // x's edge is gone with its vertex
}

TEST(GraphDot, GradientsAndFreedBytesAfterBackward) {
  SmallGraph s;
  BackwardTrace trace;
  s.y.backward();
  const std::string dot = to_dot(s.y, {.names = s.names, .grads = true, .saved_bytes = true, .trace = &trace});
  const GradInfo gw = grad_info(s.W.grad());
  EXPECT_TRUE(contains(dot, fmt::format("W\\n[3, 2] f32\\ngrad [3, 2] norm {:.4g}\"", gw.norm))) << dot;
  EXPECT_TRUE(contains(dot, "sum\\n[] f32\\ngrad [] norm 1\\nfreed ")) << dot;
  // relu's own output is saved for its backward and held by nothing else: freeing it returns memory.
  const size_t p = dot.find("relu\\n[4, 2] f32\\ngrad [4, 2] norm ");
  ASSERT_NE(p, std::string::npos) << dot;
  EXPECT_FALSE(contains(dot.substr(p, dot.find('"', p) - p), "freed 0 B")) << dot;
}

TEST(GraphDot, CollapseDrawsIdenticalBlocksOnce) {
  Generator gen(3);
  Stack stack(2, 4, gen);
  Tensor y = stack.forward(randn({3, 4}, 1, DType::f32));
  const TensorNames names = stack.parameter_names();
  const std::string full = to_dot(y, {.names = names});
  const std::string folded = to_dot(y, {.names = names, .collapse_repeats = true});
  EXPECT_TRUE(contains(full, "layers.1.fc.weight")) << full;
  EXPECT_FALSE(contains(folded, "layers.1.")) << folded;
  EXPECT_TRUE(contains(folded, "label=\"layers.0-1: 2 identical blocks, drawn once\""));
  // A block is fc.weight, fc.bias, linear, relu, add: five vertices drawn once instead of twice.
  EXPECT_EQ(count(full, " [label="), count(folded, " [label=") + 5);
  EXPECT_EQ(count(folded, "subgraph cluster_"), 1u);
  // The residual add of block 0 feeds block 1 twice (its linear and its add): one dashed edge each.
  EXPECT_EQ(count(folded, "[style=dashed, label=\"repeat\"]"), 2u);
  EXPECT_FALSE(contains(full, "repeat"));
  // The sum after the last block matches nothing in block 0, so it is drawn outside the cluster.
  EXPECT_TRUE(contains(folded, "\n  n13 [label=\"sum\\n[] f32\", penwidth=2];")) << folded;
}

TEST(GraphDot, CollapseKeepsBlocksThatDiffer) {
  Generator gen(3);
  Stack stack(2, 4, gen);
  Tensor h = randn({3, 4}, 1, DType::f32) * stack.embed;
  h = (*stack.layers)[0].forward(h);
  h = h + relu(relu((*stack.layers)[1].fc->forward(h)));  // one op more in block 1 than in block 0
  Tensor y = sum(h);
  const std::string folded = to_dot(y, {.names = stack.parameter_names(), .collapse_repeats = true});
  EXPECT_EQ(count(folded, "subgraph cluster_"), 2u);
  EXPECT_TRUE(contains(folded, "label=\"layers.0\""));
  EXPECT_TRUE(contains(folded, "label=\"layers.1\""));
  EXPECT_FALSE(contains(folded, "identical"));
}

TEST(GraphDot, Errors) {
  Tensor c = Tensor::ones({2});
  expect_error<AutogradError>([&] { to_dot(c); }, {"to_dot", "does not require grad"});
  SmallGraph s;
  expect_error<ValueError>([&] { to_dot(s.y, {.collapse_repeats = true}); }, {"to_dot", "parameter names"});
}
