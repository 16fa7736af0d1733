// Module system: registration, dotted names, train/eval, state_dict, to(dtype), repr.
#include <gtest/gtest.h>

#include <attograd/autograd/autograd.h>
#include <attograd/nn/layers.h>
#include <attograd/nn/linear.h>
#include <attograd/nn/transformer.h>
#include <attograd/optim/sgd.h>
#include "test_util.h"

using namespace attograd;
using attograd::testing::error_message;

namespace {
class Block : public Module {
 public:
  explicit Block(Generator& gen) : Module("Block") {
    scale = register_parameter("scale", Tensor::ones({4}));
    register_buffer("counter", Tensor::zeros({1}));
    fc = register_module("fc", std::make_shared<Linear>(4, 3, gen));
    drop = register_module("drop", std::make_shared<Dropout>(0.5, std::make_shared<Generator>(1)));
  }
  Tensor scale;
  std::shared_ptr<Linear> fc;
  std::shared_ptr<Dropout> drop;
};
}  // namespace

TEST(Module, DottedNamesInRegistrationOrder) {
  Generator gen(0);
  Block b(gen);
  std::vector<std::string> names;
  for (auto& [n, t] : b.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"scale", "fc.weight", "fc.bias"}));
  EXPECT_EQ(b.num_parameters(), 4 + 12 + 3);
  auto sd = b.state_dict();
  EXPECT_EQ(sd.size(), 4u);  // 3 parameters + 1 persistent buffer
  EXPECT_TRUE(sd.count("counter"));
}

TEST(Module, TransformerParameterNames) {
  Generator gen(0);
  TransformerConfig c;
  c.src_vocab = 10; c.tgt_vocab = 12; c.d_model = 8; c.heads = 2; c.d_ff = 16; c.dropout = 0.0;
  Seq2SeqTransformer m(c, gen, nullptr);
  std::set<std::string> names;
  for (auto& [n, t] : m.named_parameters()) names.insert(n);
  EXPECT_TRUE(names.count("encoder.layers.0.self_attn.q_proj.weight"));
  EXPECT_TRUE(names.count("decoder.layers.1.cross_attn.out_proj.bias"));
  EXPECT_TRUE(names.count("decoder.norm.weight"));
  EXPECT_TRUE(names.count("generator.weight"));
  // Order is stable: two identical models list the same names in the same order.
  Generator gen2(5);
  Seq2SeqTransformer m2(c, gen2, nullptr);
  auto a = m.named_parameters(), b = m2.named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].first, b[i].first);
}

TEST(Module, TrainEvalReachesEverySubmodule) {
  Generator gen(0);
  Block b(gen);
  b.eval();
  EXPECT_FALSE(b.fc->is_training());
  EXPECT_FALSE(b.drop->is_training());
  Tensor x = Tensor::ones({2, 4});
  EXPECT_EQ(b.drop->forward(x).to_vector<float>(), x.to_vector<float>());  // dropout is identity in eval
  b.train();
  EXPECT_TRUE(b.drop->is_training());
}

TEST(Module, ZeroGradClearsEveryParameter) {
  Generator gen(0);
  Block b(gen);
  sum(b.fc->forward(Tensor::ones({1, 4})) ).backward();
  EXPECT_TRUE(b.fc->weight.grad().defined());
  b.zero_grad();
  EXPECT_FALSE(b.fc->weight.grad().defined());
}

TEST(Module, StateDictRoundTripAndErrors) {
  Generator g1(1), g2(2);
  Block a(g1), b(g2);
  EXPECT_NE(a.fc->weight.to_vector<float>(), b.fc->weight.to_vector<float>());
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(a.fc->weight.to_vector<float>(), b.fc->weight.to_vector<float>());

  auto sd = a.state_dict();
  sd.erase("fc.bias");
  std::string msg = error_message<ValueError>([&] { b.load_state_dict(sd); });
  EXPECT_NE(msg.find("missing keys [fc.bias]"), std::string::npos) << msg;
  EXPECT_NO_THROW(b.load_state_dict(sd, /*strict=*/false));

  sd = a.state_dict();
  sd["extra.weight"] = Tensor::zeros({1});
  msg = error_message<ValueError>([&] { b.load_state_dict(sd); });
  EXPECT_NE(msg.find("unexpected keys [extra.weight]"), std::string::npos) << msg;

  sd = a.state_dict();
  sd["fc.weight"] = Tensor::zeros({4, 3});
  msg = error_message<ShapeError>([&] { b.load_state_dict(sd); });
  EXPECT_NE(msg.find("fc.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3, 4]"), std::string::npos) << msg;

  sd = a.state_dict();
  sd["fc.weight"] = Tensor::zeros({3, 4}, DType::f64);
  msg = error_message<DTypeError>([&] { b.load_state_dict(sd); });
  EXPECT_NE(msg.find("fc.weight"), std::string::npos) << msg;
}

TEST(Module, ToFloat64KeepsMemberHandles) {
  Generator gen(0);
  Block b(gen);
  const auto before = b.fc->weight.to_vector<double>();
  b.to(DType::f64);
  EXPECT_EQ(b.fc->weight.dtype(), DType::f64);  // the member sees the change
  EXPECT_EQ(b.named_parameters()[1].second.dtype(), DType::f64);
  EXPECT_EQ(b.fc->weight.to_vector<double>(), before);
  EXPECT_TRUE(b.fc->weight.requires_grad());
  Tensor y = b.fc->forward(Tensor::ones({2, 4}, DType::f64));
  EXPECT_EQ(y.dtype(), DType::f64);
}

TEST(Module, ToKeepsOptimizerHandlesAndDropsGrads) {
  Generator gen(0);
  Block b(gen);
  const std::vector<Tensor> params = b.parameters();  // an optimizer's list, taken before to()
  optim::SGD opt(params, {.lr = 0.5});
  Tensor alive = sum(b.fc->forward(Tensor::ones({2, 4})));  // a graph recorded in f32, still held
  alive.backward(Tensor(), true);
  b.to(DType::f64);
  alive.backward();  // the f32 graph no longer reaches the converted parameters
  const auto named = b.named_parameters();
  ASSERT_EQ(named.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(params[i].is_same(named[i].second)) << named[i].first;
    EXPECT_EQ(params[i].dtype(), DType::f64) << named[i].first;
    EXPECT_TRUE(params[i].requires_grad()) << named[i].first;
    EXPECT_FALSE(params[i].grad().defined()) << named[i].first;  // f32 grads do not fit
  }
  const auto w0 = b.fc->weight.to_vector<double>();
  sum(b.fc->forward(Tensor::ones({2, 4}, DType::f64))).backward();
  EXPECT_EQ(b.fc->weight.grad().dtype(), DType::f64);
  opt.step();  // the optimizer's handles see the f64 data and grads
  const auto w1 = b.fc->weight.to_vector<double>();
  for (size_t i = 0; i < w0.size(); ++i) EXPECT_DOUBLE_EQ(w1[i], w0[i] - 0.5 * 2) << i;  // d(sum)/dW = 2
  b.to(DType::f32);
  EXPECT_EQ(b.fc->weight.dtype(), DType::f32);
  EXPECT_EQ(b.dtype(), DType::f32);
}

TEST(Module, ReprShowsTreeWithShapes) {
  Generator gen(0);
  Block b(gen);
  const std::string r = fmt::format("{}", static_cast<const Module&>(b));
  EXPECT_NE(r.find("Block("), std::string::npos) << r;
  EXPECT_NE(r.find("(fc): Linear(in_features=4, out_features=3, bias=true"), std::string::npos) << r;
  EXPECT_NE(r.find("(weight): Parameter[3, 4] f32"), std::string::npos) << r;
  EXPECT_NE(r.find("(drop): Dropout(p=0.5)"), std::string::npos) << r;
}

TEST(Module, DuplicateNamesRejected) {
  struct Bad : Module {
    Bad() : Module("Bad") {
      register_parameter("w", Tensor::ones({1}));
      register_parameter("w", Tensor::ones({1}));
    }
  };
  EXPECT_NE(error_message<ValueError>([] { Bad b; }).find("'w' is already registered"), std::string::npos);
}

TEST(Module, TiedEmbeddingsShareOneMatrix) {
  Generator gen(0);
  TransformerConfig c;
  c.src_vocab = 10; c.tgt_vocab = 12; c.d_model = 8; c.heads = 2; c.d_ff = 16; c.dropout = 0.0;
  c.tie_embeddings = true;
  Seq2SeqTransformer m(c, gen, nullptr);
  EXPECT_TRUE(m.generator->weight.is_same(m.tgt_embed->weight));
  Seq2SeqTransformer untied([&] { auto d = c; d.tie_embeddings = false; return d; }(), gen, nullptr);
  EXPECT_EQ(untied.num_parameters() - m.num_parameters(), 12 * 8);  // listed once when tied
}

TEST(Init, PyTorchDefaultsHaveTheRightRange) {
  Generator gen(3);
  Linear lin(100, 50, gen);
  const double bound = 1.0 / std::sqrt(100.0);
  double lo = 1, hi = -1;
  for (float v : lin.weight.to_vector<float>()) { lo = std::min<double>(lo, v); hi = std::max<double>(hi, v); }
  EXPECT_GE(lo, -bound);
  EXPECT_LE(hi, bound);
  EXPECT_LT(lo, -0.9 * bound);  // spans the range
  EXPECT_GT(hi, 0.9 * bound);
  LayerNorm ln(Shape{7});
  EXPECT_EQ(ln.weight.to_vector<float>(), std::vector<float>(7, 1.0f));
  EXPECT_EQ(ln.bias.to_vector<float>(), std::vector<float>(7, 0.0f));
  MultiHeadAttention mha({.embed_dim = 16, .num_heads = 4}, gen);
  for (float v : mha.q_proj->bias.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  for (float v : mha.out_proj->bias.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  const double xb = std::sqrt(6.0 / (16 + 48));
  for (float v : mha.k_proj->weight.to_vector<float>()) EXPECT_LE(std::abs(v), xb);
}
