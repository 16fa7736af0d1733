// nn modules against PyTorch: each fixture (tools/make_torch_fixtures.py, the
// "nn" group) holds inputs, weights under our parameter names, an output
// gradient g, PyTorch's output and every gradient, all in float64. We run the
// same module, backpropagate sum(out * g) and compare to 1e-6 relative.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <attograd/autograd/io/safetensors.h>
#include <attograd/autograd/autograd.h>
#include <attograd/autograd/ops/loss.h>
#include <attograd/nn/gpt.h>
#include <attograd/nn/transformer.h>

using namespace attograd;

namespace {

SafetensorsData fixture(const std::string& name) {
  return load_safetensors(std::string(ATTOGRAD_SOURCE_DIR) + "/tests/fixtures/nn/" + name);
}

// Max relative error |a - b| / max(|b|, 1), reported with the name.
double compare(const std::string& what, const Tensor& ours, const Tensor& torch_ref) {
  EXPECT_EQ(ours.shape(), torch_ref.shape()) << what;
  if (ours.shape() != torch_ref.shape()) return INFINITY;
  auto a = ours.to_vector<double>(), b = torch_ref.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(std::abs(b[i]), 1.0));
  EXPECT_LE(worst, 1e-6) << what;
  return worst;
}

// Copies fixture tensors named like our parameters (prefix stripped) into m.
void load_weights(Module& m, const TensorMap& f, const std::string& prefix = "") {
  TensorMap sd;
  for (auto& [name, t] : m.state_dict()) {
    auto it = f.find(prefix + name);
    ASSERT_NE(it, f.end()) << "fixture lacks " << prefix + name;
    sd[name] = it->second;
  }
  m.load_state_dict(sd);
}

// Compares every parameter gradient with the fixture's grad.<name>; returns the worst.
double compare_param_grads(Module& m, const TensorMap& f) {
  double worst = 0;
  for (auto& [name, p] : m.named_parameters()) {
    auto it = f.find("grad." + name);
    if (it == f.end()) {
      ADD_FAILURE() << "fixture lacks grad." << name;
      continue;
    }
    EXPECT_TRUE(p.grad().defined()) << name;
    if (p.grad().defined()) worst = std::max(worst, compare("grad." + name, p.grad(), it->second));
  }
  return worst;
}

}  // namespace

TEST(TorchFixtures, LayerNorm) {
  auto f = fixture("layer_norm.safetensors");
  LayerNorm ln(Shape{5}, 1e-5, true, DType::f64);
  load_weights(ln, f.tensors);
  Tensor x = f.tensors.at("x").requires_grad_();
  Tensor out = ln.forward(x);
  double worst = compare("out", out, f.tensors.at("out"));
  sum(out * f.tensors.at("g")).backward();
  worst = std::max(worst, compare("grad.x", x.grad(), f.tensors.at("grad.x")));
  worst = std::max(worst, compare_param_grads(ln, f.tensors));
  RecordProperty("max_rel_err", fmt::format("{:.3g}", worst));
  fmt::print("LayerNorm vs PyTorch: max rel err {:.3g}\n", worst);
}

class MHAFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(MHAFixture, MatchesPyTorch) {
  const std::string name = GetParam();
  auto f = fixture(name + ".safetensors");
  auto md = [&](const char* k) { return nlohmann::json::parse(f.metadata.at(k)); };
  const int64_t E = md("embed_dim").get<int64_t>(), H = md("num_heads").get<int64_t>();
  const bool self_attn = md("self_attention").get<bool>();
  // K/V heads G (grouped-query attention); the torch twin repeats each K/V head for its group.
  const int64_t G = f.metadata.count("num_kv_heads") ? md("num_kv_heads").get<int64_t>() : H;
  Generator gen(0);
  MultiHeadAttention mha({.embed_dim = E, .num_heads = H, .num_kv_heads = G, .dtype = DType::f64}, gen);
  EXPECT_EQ(mha.k_proj->weight.shape(), (Shape{G * (E / H), E}));
  load_weights(mha, f.tensors);
  Tensor q = f.tensors.at("query").requires_grad_();
  Tensor k = self_attn ? q : f.tensors.at("key").requires_grad_();
  Tensor v = self_attn ? q : f.tensors.at("value").requires_grad_();
  MHAOptions o;
  o.is_causal = md("is_causal").get<bool>();
  o.need_weights = true;
  if (f.tensors.count("key_padding_mask")) o.key_padding_mask = f.tensors.at("key_padding_mask");
  MHAOutput r = mha.forward(q, k, v, o);
  double worst = compare("out", r.out, f.tensors.at("out"));
  worst = std::max(worst, compare("weights", r.weights, f.tensors.at("weights")));
  sum(r.out * f.tensors.at("g")).backward();
  worst = std::max(worst, compare("grad.query", q.grad(), f.tensors.at("grad.query")));
  if (!self_attn) {
    worst = std::max(worst, compare("grad.key", k.grad(), f.tensors.at("grad.key")));
    worst = std::max(worst, compare("grad.value", v.grad(), f.tensors.at("grad.value")));
  }
  worst = std::max(worst, compare_param_grads(mha, f.tensors));
  fmt::print("{} vs PyTorch: max rel err {:.3g}\n", name, worst);
}

INSTANTIATE_TEST_SUITE_P(Cases, MHAFixture,
                         ::testing::Values("mha_nomask", "mha_causal", "mha_key_padding", "mha_cross", "gqa_causal",
                                           "mqa_cross"));

TEST(TorchFixtures, Seq2SeqForwardAndCrossEntropyBackward) {
  auto f = fixture("seq2seq.safetensors");
  TransformerConfig c = TransformerConfig::from_json(nlohmann::json::parse(f.metadata.at("config")));
  Generator gen(0);
  Seq2SeqTransformer m(c, gen, nullptr);
  m.to(DType::f64);
  load_weights(m, f.tensors);
  const Tensor src = f.tensors.at("src"), tgt_in = f.tensors.at("tgt_in"), tgt_out = f.tensors.at("tgt_out");
  const Tensor kpm = eq(src, Tensor::scalar(static_cast<double>(c.pad_id), DType::i64));
  Tensor logits = m.forward(src, tgt_in, kpm);
  double worst = compare("logits", logits, f.tensors.at("logits"));
  CrossEntropyOptions ce;
  ce.ignore_index = c.pad_id;
  Tensor loss = cross_entropy(logits.reshape({-1, c.tgt_vocab}), tgt_out.reshape({-1}), ce);
  worst = std::max(worst, compare("loss", loss, f.tensors.at("loss")));
  loss.backward();
  worst = std::max(worst, compare_param_grads(m, f.tensors));
  fmt::print("Seq2SeqTransformer (2+2 layers) vs PyTorch: max rel err {:.3g} over logits, loss and {} parameter "
             "gradients\n", worst, m.named_parameters().size());
}

class GPTFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(GPTFixture, ForwardAndCrossEntropyBackwardMatchPyTorch) {
  const std::string name = GetParam();
  auto f = fixture(name + ".safetensors");
  const GPTConfig c = GPTConfig::from_json(nlohmann::json::parse(f.metadata.at("config")));
  Generator gen(0);
  GPT m(c, gen);
  m.to(DType::f64);
  load_weights(m, f.tensors);
  Tensor logits = m.forward(f.tensors.at("ids"));
  double worst = compare("logits", logits, f.tensors.at("logits"));
  Tensor loss = cross_entropy(logits.reshape({-1, c.vocab}), f.tensors.at("targets").reshape({-1}));
  worst = std::max(worst, compare("loss", loss, f.tensors.at("loss")));
  loss.backward();
  worst = std::max(worst, compare_param_grads(m, f.tensors));
  fmt::print("{} vs PyTorch: max rel err {:.3g} over logits, loss and {} parameter gradients\n", name, worst,
             m.named_parameters().size());
}

INSTANTIATE_TEST_SUITE_P(Cases, GPTFixture, ::testing::Values("gpt_learned_tied", "gpt_sinusoidal_untied"));
