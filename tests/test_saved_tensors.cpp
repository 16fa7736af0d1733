// Saved tensors: what each op's record() registers as kept for its backward,
// how to_dot and BackwardTrace show it, and that the closure reads exactly
// that list (released with it, kept by retain_graph).
#include <gtest/gtest.h>

#include <attograd/autograd/function.h>
#include <attograd/autograd/graph_dot.h>
#include <attograd/autograd/memory.h>
#include <attograd/autograd/autograd.h>

#include "test_util.h"

using namespace attograd;
using attograd::testing::contains;
using attograd::testing::expect_error;
using attograd::testing::randn;
using attograd::testing::randn_leaf;

namespace {
// name -> (bytes, shares) of a node's saved list, undefined entries left out.
struct Entry {
  size_t bytes;
  std::string shares;
  bool operator==(const Entry&) const = default;
};
std::map<std::string, Entry> saved_of(const Tensor& t) {
  std::map<std::string, Entry> m;
  for (const SavedTensor& s : t.grad_fn()->saved)
    if (s.value.defined()) m[s.name] = {saved_bytes(s), s.shares.value_or("")};
  return m;
}
size_t own_bytes(const Tensor& t) {
  size_t n = 0;
  for (const SavedTensor& s : t.grad_fn()->saved)
    if (!s.shares) n += saved_bytes(s);
  return n;
}
}  // namespace

// y = sum(relu(x W + b)), x [4, 3] f32 needs no gradient: matmul keeps x
// (for dW; W itself is not needed, as x wants no gradient), relu its output.
TEST(SavedTensors, DotOfASmallGraphListsExactlyWhatBackwardKeeps) {
  Tensor x = Tensor::from_list({1, -2, 3, 0.5, 1, -1, 2, 2, -3, 0, 1, 1}, {4, 3});
  Tensor W = Tensor::from_list({0.5, -1, 1, 0.25, -0.5, 2}, {3, 2}).requires_grad_();
  Tensor b = Tensor::from_list({0.1, -0.2}, {2}).requires_grad_();
  Tensor y = sum(relu(matmul(x, W) + b));
  const std::string dot = to_dot(y, {.names = {{W.id(), "W"}, {b.id(), "b"}}, .saved_tensors = true});
  EXPECT_TRUE(contains(dot, "n2 [label=\"matmul\\n[4, 2] f32\\nsaved a [4, 3] f32 48 B (input 0)\\n"
                            "saved total 48 B, own 0 B\"];")) << dot;
  EXPECT_TRUE(contains(dot, "n4 [label=\"add\\n[4, 2] f32\"];")) << dot;
  EXPECT_TRUE(contains(dot, "n5 [label=\"relu\\n[4, 2] f32\\nsaved out [4, 2] f32 32 B (out)\\n"
                            "saved total 32 B, own 0 B\"];")) << dot;
  EXPECT_TRUE(contains(dot, "n6 [label=\"sum\\n[] f32\", penwidth=2];")) << dot;
  size_t lists = 0;
  for (size_t p = dot.find("saved total"); p != std::string::npos; p = dot.find("saved total", p + 1)) ++lists;
  EXPECT_EQ(lists, 2u) << dot;  // matmul and relu; add and sum keep nothing

  // After a backward without retain_graph the closures are gone, and so are their saved tensors.
  y.backward();
  const std::string after = to_dot(y, {.saved_tensors = true});
  EXPECT_FALSE(contains(after, "saved")) << after;
}

// Saving the input (memory.h's LayerNormSaves::input; test_memory.cpp has the output-saving list).
TEST(SavedTensors, LayerNormKeepsMeanAndRstdOfItsOwn) {
  MemoryOptionsGuard saving_input(parse_memory_options("layer_norm=input"));
  const int64_t R = 6, E = 5;
  Tensor x = randn_leaf({R, E}, 1, DType::f32), w = randn_leaf({E}, 2, DType::f32), b = randn_leaf({E}, 3, DType::f32);
  Tensor y = layer_norm(x, {E}, w, b);
  const std::map<std::string, Entry> want{{"x", {R * E * 4, "input 0"}},
                                          {"weight", {E * 4, "input 1"}},
                                          {"bias", {E * 4, "input 2"}},
                                          {"mean", {R * 4, ""}},
                                          {"rstd", {R * 4, ""}}};
  EXPECT_EQ(saved_of(y), want);
  EXPECT_EQ(own_bytes(y), size_t(2 * R * 4));  // the documented buffers: mean [R] and rstd [R]
}

// Saving P (memory.h's AttentionSaves::probabilities; test_memory.cpp has the row-statistics list).
TEST(SavedTensors, AttentionKeepsPAndTheKeepMaskOfItsOwn) {
  MemoryOptionsGuard saving_p(parse_memory_options("attention=probabilities"));
  const int64_t B = 2, H = 3, T = 4, S = 5, D = 8;
  Tensor q = randn_leaf({B, H, T, D}, 1, DType::f32), k = randn_leaf({B, H, S, D}, 2, DType::f32),
         v = randn_leaf({B, H, S, D}, 3, DType::f32);
  Tensor out = scaled_dot_product_attention(q, k, v).out;
  const size_t P = B * H * T * S * 4, qb = B * H * T * D * 4, kb = B * H * S * D * 4;
  const std::map<std::string, Entry> want{{"P", {P, ""}},           {"q", {qb, "input 0"}},    {"k", {kb, "input 1"}},
                                          {"v", {kb, "input 2"}},   {"q_in", {qb, "input 0"}}, {"k_in", {kb, "input 1"}},
                                          {"v_in", {kb, "input 2"}}};
  EXPECT_EQ(saved_of(out), want);
  EXPECT_EQ(own_bytes(out), P);  // the documented buffer: P [B, H, T, S]

  Generator gen(7);
  Tensor dropped = scaled_dot_product_attention(q, k, v, {.dropout_p = 0.25, .generator = &gen}).out;
  EXPECT_EQ(saved_of(dropped).at("keep"), (Entry{P / 4, ""}));  // b8 [B, H, T, S]
  EXPECT_EQ(own_bytes(dropped), P + P / 4);

  // Only q needs a gradient: dQ reads K, so K is kept and neither Q nor V (dP reads V, so V too).
  Tensor q_only = scaled_dot_product_attention(q, k.detach(), v.detach()).out;
  const auto only = saved_of(q_only);
  EXPECT_FALSE(only.contains("q"));
  EXPECT_TRUE(only.contains("k"));
  EXPECT_TRUE(only.contains("v"));
}

TEST(SavedTensors, CrossEntropyKeepsLseAndTargets) {
  const int64_t N = 4, V = 7;
  Tensor logits = randn_leaf({N, V}, 1, DType::f32);
  Tensor loss = cross_entropy(logits, Tensor::from_vector(std::vector<int64_t>{0, 3, 6, 2}, {N}));
  const auto s = saved_of(loss);
  EXPECT_EQ(s.at("logits"), (Entry{N * V * 4, "input 0"}));
  EXPECT_EQ(s.at("lse"), (Entry{N * 4, ""}));
  EXPECT_EQ(s.at("targets").bytes, size_t(N * 8));
}

TEST(SavedTensors, MulKeepsOnlyWhatTheOtherGradientReads) {
  Tensor a = randn_leaf({3}, 1), c = randn({3}, 2);
  Tensor y = a * c;  // da = grad · c: c is kept, a is not
  const auto s = saved_of(y);
  EXPECT_FALSE(s.contains("a"));
  EXPECT_EQ(s.at("b"), (Entry{24, "input 1"}));
}

// The closure gets its tensors from the node: a node whose list is emptied
// has nothing to compute with, which shows that nothing else is kept.
TEST(SavedTensors, BackwardReadsTheListAndReleasesItWithTheClosure) {
  Tensor x = randn_leaf({3}, 1);
  Tensor y = exp(x);
  Tensor loss = sum(y);
  loss.backward({}, /*retain_graph=*/true);
  ASSERT_EQ(y.grad_fn()->saved.size(), 1u);  // retain_graph keeps them
  const std::vector<double> first = x.grad().to_vector<double>();
  x.zero_grad();
  const std::vector<SavedTensor> kept = y.grad_fn()->saved;
  y.grad_fn()->saved.clear();
  expect_error<AutogradError>([&] { loss.backward({}, true); }, {"exp", "saved tensor 0", "registered 0"});
  y.grad_fn()->saved = kept;
  x.zero_grad();
  loss.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), first);
  EXPECT_TRUE(y.grad_fn()->saved.empty());  // released with the closure
}

TEST(SavedTensors, CustomOpListsWhatItsForwardSaved) {
  Tensor x = randn_leaf({2, 2}, 1);
  Tensor y = custom_op(
      "cube", {x},
      [](FunctionCtx& ctx, const std::vector<Tensor>& in) {
        ctx.save_for_backward({in[0]});
        return in[0] * in[0] * in[0];
      },
      [](FunctionCtx& ctx, const Tensor& grad) { return std::vector<Tensor>{grad * ctx.saved(0) * ctx.saved(0) * 3.0}; });
  EXPECT_EQ(saved_of(y), (std::map<std::string, Entry>{{"saved(0)", {32, "input 0"}}}));
  sum(y).backward();
  EXPECT_NEAR(x.grad().to_vector<double>()[0], 3 * std::pow(x.to_vector<double>()[0], 2), 1e-12);
}

TEST(SavedTensors, TraceRowsCarryTheSavedBytes) {
  Tensor x = randn_leaf({4, 3}, 1, DType::f32);
  Tensor loss = sum(relu(x) * 2.0);
  BackwardTrace trace;
  loss.backward();
  size_t relu_row = trace.rows().size();
  for (size_t i = 0; i < trace.rows().size(); ++i)
    if (trace.rows()[i].op == "relu") relu_row = i;
  ASSERT_LT(relu_row, trace.rows().size());
  EXPECT_EQ(trace.rows()[relu_row].saved_bytes, 48u);  // its output [4, 3] f32
  EXPECT_TRUE(contains(trace.table(), "saved")) << trace.table();
}
