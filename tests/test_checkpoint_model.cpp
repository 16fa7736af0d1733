// Building a model from a checkpoint (examples/common/checkpoint_model.h):
// a config that lies about its sizes, NaN weights and configs past the
// limits are refused before any weight is allocated (probe B1, B5, W5).
#include <gtest/gtest.h>

#include <cmath>

#include "examples/common/checkpoint_model.h"
#include "test_util.h"

using namespace attograd;
using namespace attograd::app;
using attograd::testing::expect_error;

namespace {

Checkpoint gpt_checkpoint(const GPTConfig& cfg) {
  Generator gen(3);
  const GPT model(cfg, gen);
  Checkpoint c;
  c.model_path = "ckpt/step-00000020.model.safetensors";
  c.meta.config = cfg.to_json();
  c.model = model.state_dict();
  return c;
}

Checkpoint seq2seq_checkpoint(const TransformerConfig& cfg) {
  Generator gen(3);
  const Seq2SeqTransformer model(cfg, gen, nullptr);
  Checkpoint c;
  c.model_path = "ckpt/step-00000020.model.safetensors";
  c.meta.config = cfg.to_json();
  c.model = model.state_dict();
  return c;
}

GPTConfig tiny_gpt() {
  GPTConfig c;
  c.vocab = 12;
  c.context = 8;
  c.d_model = 8;
  c.heads = 2;
  c.d_ff = 16;
  c.layers = 2;
  return c;
}

TransformerConfig tiny_seq2seq() {
  TransformerConfig c;
  c.src_vocab = c.tgt_vocab = 10;
  c.d_model = 8;
  c.heads = 2;
  c.d_ff = 16;
  c.enc_layers = c.dec_layers = 1;
  c.max_len = 12;
  c.dropout = 0;
  return c;
}

TEST(CheckpointModel, BuildsTheModelItsConfigAndWeightsDescribe) {
  const Checkpoint g = gpt_checkpoint(tiny_gpt());
  const auto gpt = gpt_from_checkpoint(g);
  EXPECT_EQ(gpt->config.d_ff, 16);
  const std::string name = "blocks.1.mlp.linear2.weight";
  EXPECT_EQ(gpt->state_dict().at(name).to_vector<float>(), g.model.at(name).to_vector<float>());
  EXPECT_FALSE(gpt->is_training());
  const Checkpoint s = seq2seq_checkpoint(tiny_seq2seq());
  EXPECT_EQ(seq2seq_from_checkpoint(s)->config.d_model, 8);
}

// The probe's B1 with a size that fits the limits: the config says d_ff 32,
// the file holds d_ff 16's weights. Refused before a 32-wide model is built.
TEST(CheckpointModel, AConfigThatDisagreesWithTheWeightsIsRefused) {
  Checkpoint g = gpt_checkpoint(tiny_gpt());
  g.meta.config["d_ff"] = 32;
  expect_error<IOError>([&] { gpt_from_checkpoint(g); },
                        {"ckpt/step-00000020.model.safetensors", "describes", "weights, but the file holds"});
  g.meta.config["d_ff"] = int64_t{1} << 62;
  expect_error<ValueError>([&] { gpt_from_checkpoint(g); }, {"d_ff must be in"});
  Checkpoint s = seq2seq_checkpoint(tiny_seq2seq());
  s.meta.config["dec_layers"] = 100'000'000;  // probe B5: built block by block until memory ran out
  expect_error<ValueError>([&] { seq2seq_from_checkpoint(s); }, {"dec_layers must be in"});
  s.meta.config["dec_layers"] = 3;
  expect_error<IOError>([&] { seq2seq_from_checkpoint(s); }, {"weights, but the file holds"});
}

// A file with the right number of elements under other names (probe B9's
// 40k extra empty tensors, or a renamed one) names the tensor and the file,
// not a C++ hint.
TEST(CheckpointModel, TensorsUnderOtherNamesAreRefusedByName) {
  Checkpoint g = gpt_checkpoint(tiny_gpt());
  g.model["zz0"] = Tensor::zeros({0});
  expect_error<IOError>([&] { gpt_from_checkpoint(g); },
                        {"ckpt/step-00000020.model.safetensors", "tensor 'zz0' is not part of the model"});
  g.model.erase("zz0");
  g.model["ln_f.renamed"] = g.model.at("ln_f.bias");
  g.model.erase("ln_f.bias");
  expect_error<IOError>([&] { gpt_from_checkpoint(g); }, {"tensor 'ln_f.renamed' is not part of the model"});
  Checkpoint s = seq2seq_checkpoint(tiny_seq2seq());
  s.model["generator.bias"] = Tensor::zeros({2, 5});  // 10 elements, as [10] has
  expect_error<IOError>([&] { seq2seq_from_checkpoint(s); },
                        {"ckpt/step-00000020.model.safetensors", "'generator.bias'", "shape [2, 5]"});
}

// Probe W5: NaN weights loaded silently and decoded junk with exit code 0.
TEST(CheckpointModel, NonFiniteWeightsAreRefusedByName) {
  Checkpoint g = gpt_checkpoint(tiny_gpt());
  Tensor w = g.model.at("ln_f.weight").clone();
  w.data<float>()[3] = NAN;
  g.model["ln_f.weight"] = w;
  expect_error<IOError>([&] { gpt_from_checkpoint(g); }, {"tensor 'ln_f.weight' holds NaN or Inf"});
  Checkpoint s = seq2seq_checkpoint(tiny_seq2seq());
  Tensor b = s.model.at("generator.bias").clone();
  b.data<float>()[0] = INFINITY;
  s.model["generator.bias"] = b;
  expect_error<IOError>([&] { seq2seq_from_checkpoint(s); }, {"'generator.bias' holds NaN or Inf"});
}

}  // namespace
