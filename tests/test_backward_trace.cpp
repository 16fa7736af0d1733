// BackwardTrace: one row per node the engine runs, in its order, with the
// gradients that went in and out; the table and JSON-lines forms; the guard.
#include <gtest/gtest.h>

#include <sstream>

#include <nlohmann/json.hpp>

#include <attograd/autograd/autograd.h>
#include <attograd/autograd/trace.h>

#include "test_util.h"

using namespace attograd;
using attograd::testing::contains;
using attograd::testing::lines_of;

namespace {
// loss = sum(relu(x W1 + b1) W2) with x [2, 3] (no grad), W1 [3, 4], b1 [4], W2 [4, 1].
struct Mlp {
  Tensor x = Tensor::from_list({1, -2, 0.5, 3, 1, -1}, {2, 3}, DType::f64);
  Tensor W1 = Tensor::from_list({0.5, -1, 1, 0.25, -0.5, 2, 0.1, -0.3, 1, 1, -1, 0.2}, {3, 4}, DType::f64).requires_grad_();
  Tensor b1 = Tensor::from_list({0.1, -0.2, 0.3, 0}, {4}, DType::f64).requires_grad_();
  Tensor W2 = Tensor::from_list({1, -2, 0.5, 1.5}, {4, 1}, DType::f64).requires_grad_();
  TensorNames names{{W1.id(), "W1"}, {b1.id(), "b1"}, {W2.id(), "W2"}};
  Tensor loss() const { return sum(matmul(relu(matmul(x, W1) + b1), W2)); }
};

double norm(const Tensor& t) {
  double s = 0;
  for (double v : t.to_vector<double>()) s += v * v;
  return std::sqrt(s);
}
}  // namespace

TEST(BackwardTrace, RowsOfASmallMlp) {
  Mlp m;
  Tensor loss = m.loss();
  BackwardTrace trace({.names = m.names});
  loss.backward();
  const auto& rows = trace.rows();
  std::vector<std::string> ops;
  for (const TraceRow& r : rows) ops.push_back(r.name.empty() ? r.op : r.op + " " + r.name);
  // The engine pops its ready list from the back: W2's leaf runs before relu.
  EXPECT_EQ(ops, (std::vector<std::string>{"sum", "matmul", "AccumulateGrad W2", "relu", "add",
                                           "AccumulateGrad b1", "matmul", "AccumulateGrad W1"}));
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i].step, static_cast<int64_t>(i));

  const TraceRow& s = rows[0];
  EXPECT_EQ(s.grad.shape, Shape{});
  EXPECT_DOUBLE_EQ(s.grad.norm, 1.0);
  ASSERT_EQ(s.input_grads.size(), 1u);
  EXPECT_EQ(s.input_grads[0].shape, (Shape{2, 1}));
  EXPECT_DOUBLE_EQ(s.input_grads[0].norm, std::sqrt(2.0));

  const TraceRow& mm2 = rows[1];  // matmul(h, W2): h [2, 4], W2 [4, 1]
  ASSERT_EQ(mm2.input_grads.size(), 2u);
  EXPECT_EQ(mm2.input_grads[0].shape, (Shape{2, 4}));
  EXPECT_EQ(mm2.input_grads[1].shape, (Shape{4, 1}));
  EXPECT_NEAR(mm2.input_grads[1].norm, norm(m.W2.grad()), 1e-12);
  EXPECT_NEAR(rows[2].grad.norm, norm(m.W2.grad()), 1e-12);

  const TraceRow& mm1 = rows[6];  // matmul(x, W1): x needs no gradient
  ASSERT_EQ(mm1.input_grads.size(), 2u);
  EXPECT_FALSE(mm1.input_grads[0].defined);
  EXPECT_EQ(mm1.input_grads[1].shape, (Shape{3, 4}));
  EXPECT_NEAR(mm1.input_grads[1].norm, norm(m.W1.grad()), 1e-12);
  EXPECT_NEAR(rows[5].grad.norm, norm(m.b1.grad()), 1e-12);
  EXPECT_EQ(rows[7].grad.shape, (Shape{3, 4}));
  // relu saved its output [2, 4] f64, which nothing else holds once the matmul after it has run.
  EXPECT_GE(rows[3].freed_bytes, 2u * 4u * 8u);
  for (const TraceRow& r : rows) EXPECT_GT(r.micros, 0.0) << r.op << " was never timed";
}

TEST(BackwardTrace, TableAndJsonLines) {
  Mlp m;
  Tensor loss = m.loss();
  BackwardTrace trace({.names = m.names});
  loss.backward();
  const auto table = lines_of(trace.table());
  ASSERT_EQ(table.size(), trace.rows().size() + 1);
  EXPECT_TRUE(table[0].starts_with("step  op")) << table[0];
  EXPECT_TRUE(contains(table[1], "sum")) << table[1];
  EXPECT_TRUE(contains(table[1], "[] 1 ")) << table[1];
  EXPECT_TRUE(contains(table[7], "matmul")) << table[7];
  EXPECT_TRUE(contains(table[7], "-, [3, 4]")) << table[7];

  std::ostringstream out;
  trace.write_jsonl(out);
  const auto lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), trace.rows().size());
  const auto j = nlohmann::json::parse(lines[2]);
  EXPECT_EQ(j["step"], 2);
  EXPECT_EQ(j["op"], "AccumulateGrad");
  EXPECT_EQ(j["name"], "W2");
  EXPECT_EQ(j["grad"]["shape"], nlohmann::json::array({4, 1}));
  EXPECT_NEAR(j["grad"]["norm"].get<double>(), norm(m.W2.grad()), 1e-12);
  const auto first_matmul = nlohmann::json::parse(lines[6]);
  EXPECT_TRUE(first_matmul["input_grads"][0].is_null());
  const auto relu = nlohmann::json::parse(lines[3]);  // freed its saved output (RowsOfASmallMlp)
  EXPECT_EQ(relu["op"], "relu");
  EXPECT_EQ(relu["freed_bytes"].get<size_t>(), trace.rows()[3].freed_bytes);
  EXPECT_GT(relu["freed_bytes"].get<size_t>(), 0u);
}

TEST(BackwardTrace, GuardScopesTheObserver) {
  Mlp m;
  EXPECT_EQ(backward_observer(), nullptr);
  {
    BackwardTrace outer;
    {
      BackwardTrace inner;
      EXPECT_EQ(backward_observer(), &inner);
      m.loss().backward();
      EXPECT_EQ(inner.rows().size(), 8u);
    }
    EXPECT_EQ(backward_observer(), &outer);
    EXPECT_TRUE(outer.rows().empty());
  }
  EXPECT_EQ(backward_observer(), nullptr);
  // Without a trace the gradients are the same as with one.
  m.W1.zero_grad();
  m.loss().backward();
  const Tensor plain = m.W1.grad();
  m.W1.zero_grad();
  {
    BackwardTrace trace;
    m.loss().backward();
  }
  EXPECT_EQ(plain.to_vector<double>(), m.W1.grad().to_vector<double>());
}

// With create_graph, cross_entropy's backward differentiates its composite
// twin through a grad() of its own: a walk inside the walk, seen by the same
// trace. Each row still gets the gradients its own node sent: the
// cross_entropy row sends dlogits [2, 3] to its one input, whatever ran in between
// (before the fix, after() wrote into the last row opened: the twin's).
TEST(BackwardTrace, NestedWalksCompleteTheirOwnRows) {
  Tensor logits = Tensor::from_list({0.5, -1, 2, 0.1, 0.3, -0.7}, {2, 3}, DType::f64).requires_grad_();
  Tensor targets = Tensor::from_list({2, 0}, {2}, DType::i64);
  Tensor loss = cross_entropy(logits, targets);
  BackwardTrace trace;
  loss.backward({}, /*retain_graph=*/false, /*create_graph=*/true);
  const TraceRow* ce = nullptr;
  for (const TraceRow& r : trace.rows())
    if (r.op == "cross_entropy" && !ce) ce = &r;
  ASSERT_NE(ce, nullptr);
  EXPECT_GT(trace.rows().size(), 2u) << "the twin's own nodes are traced too";
  ASSERT_EQ(ce->input_grads.size(), 1u);
  ASSERT_TRUE(ce->input_grads[0].defined);
  EXPECT_EQ(ce->input_grads[0].shape, (Shape{2, 3}));
  EXPECT_NEAR(ce->input_grads[0].norm, norm(logits.grad()), 1e-12);
  EXPECT_GT(ce->micros, 0.0);
}
