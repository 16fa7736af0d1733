// examples/common/memory_estimate.h: the parameter count from a config against the
// model's real one, the estimate's parts under each memory policy, the estimate
// against a training step's real peak, and the check against available memory.
#include <gtest/gtest.h>

#include <attograd/autograd/backend/allocator.h>
#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/generator.h>
#include <attograd/autograd/memory.h>
#include <attograd/autograd/ops/loss.h>
#include <attograd/autograd/io/safetensors.h>
#include <attograd/nn/gpt.h>
#include "examples/common/memory_estimate.h"
#include "examples/common/train_choices.h"
#include <attograd/nn/transformer.h>
#include "test_util.h"

namespace attograd::app {
namespace {

TransformerConfig config(int64_t d_model, int64_t heads, int64_t d_ff, int64_t enc, int64_t dec) {
  TransformerConfig c;
  c.src_vocab = 37;
  c.tgt_vocab = 29;
  c.d_model = d_model;
  c.heads = heads;
  c.d_ff = d_ff;
  c.enc_layers = enc;
  c.dec_layers = dec;
  c.dropout = 0.0;
  c.max_len = 40;
  return c;
}

TEST(MemoryEstimate, ParameterCountMatchesTheModel) {
  std::vector<TransformerConfig> configs = {config(64, 4, 256, 2, 2), config(32, 2, 64, 1, 1), config(48, 3, 80, 0, 3),
                                            config(16, 1, 16, 3, 1)};
  TransformerConfig post = config(32, 4, 96, 2, 2);
  post.pre_ln = false;
  TransformerConfig tied = config(32, 4, 96, 1, 2);
  tied.tie_embeddings = true;
  TransformerConfig gelu = config(24, 2, 40, 2, 1);
  gelu.activation = Activation::gelu;
  gelu.dropout = 0.1;
  TransformerConfig grouped = config(32, 4, 96, 2, 2);
  grouped.kv_heads = 2;  // decoder k_proj, v_proj: 32 -> 16
  configs.insert(configs.end(), {post, tied, gelu, grouped});
  for (const TransformerConfig& c : configs) {
    Generator gen(1);
    const Seq2SeqTransformer model(c, gen, nullptr);
    EXPECT_EQ(c.parameter_count(), model.num_parameters()) << c.to_json().dump();
  }
}

// The allocator's in-use peak while `train` runs two AdamW training steps, on
// one thread, with a fresh allocator: weights, gradients, optimizer state and
// activations together, as the estimate counts them. train(optimizer_for)
// builds its model, calls optimizer_for(parameters) for AdamW, and steps.
template <class Train>
double measured_peak_of(Train&& train) {
  const int threads = num_threads();
  set_num_threads(1);
  const std::shared_ptr<Allocator> before = current_allocator();
  set_allocator(make_caching_allocator());
  {
    const OptimizerChoice& adamw = find_choice(optimizer_choices(), "adamw", "optimizer");
    train([&](const std::vector<Tensor>& params) { return adamw.make(params, TrainOptions{}); });
  }
  const double peak = static_cast<double>(default_allocator().peak_bytes());
  set_allocator(before);
  set_num_threads(threads);
  return peak;
}

// Two steps of c on batches of `batch` rows of src_len and tgt_len tokens.
double measured_peak(const TransformerConfig& c, int64_t batch, int64_t src_len, int64_t tgt_len) {
  return measured_peak_of([&](auto optimizer_for) {
    Generator gen(1);
    Seq2SeqTransformer model(c, gen, nullptr);
    const auto opt = optimizer_for(model.parameters());
    auto ids = [&](int64_t len, int64_t vocab, int64_t salt) {
      std::vector<int64_t> v;
      for (int64_t i = 0; i < batch * len; ++i) v.push_back(kNumSpecials + (i * 7 + salt) % (vocab - kNumSpecials));
      return Tensor::from_vector(v, {batch, len});
    };
    for (int64_t step = 0; step < 2; ++step) {
      const Tensor logits = model.forward(ids(src_len, c.src_vocab, step), ids(tgt_len, c.tgt_vocab, step + 1));
      cross_entropy(logits.reshape({-1, c.tgt_vocab}), ids(tgt_len, c.tgt_vocab, step + 2).reshape({-1})).backward();
      opt->step();
      opt->zero_grad();
    }
  });
}

// Two steps of the language model c on batches of `batch` full windows.
double measured_peak(const GPTConfig& c, int64_t batch) {
  return measured_peak_of([&](auto optimizer_for) {
    Generator gen(1);
    GPT model(c, gen);
    const auto opt = optimizer_for(model.parameters());
    auto ids = [&](int64_t salt) {
      std::vector<int64_t> v;
      for (int64_t i = 0; i < batch * c.context; ++i) v.push_back((i * 7 + salt) % c.vocab);
      return Tensor::from_vector(v, {batch, c.context});
    };
    for (int64_t step = 0; step < 2; ++step) {
      const Tensor logits = model.forward(ids(step));
      cross_entropy(logits.reshape({-1, c.vocab}), ids(step + 1).reshape({-1})).backward();
      opt->step();
      opt->zero_grad();
    }
  });
}

// The estimate against what two training steps hold at their peak, under
// each memory policy (attograd/autograd/memory.h): never short of it, and at most 1.5x
// (memory_estimate.h quotes the ratios measured over more models). An
// estimate that ignored the policy falls short under "fast" (the lean count
// is 0.94x of fast's peak for this seq2seq model, 0.91x for this GPT) or,
// counting as "fast" does, overshoots "lean" by 1.52x (seq2seq).
TEST(MemoryEstimate, BoundsTheAllocatorPeakUnderEitherPolicy) {
  TransformerConfig c = config(64, 4, 256, 2, 2);
  c.max_len = 80;
  GPTConfig g;
  g.vocab = 100;
  g.context = 64;
  g.d_model = 64;
  g.heads = 4;
  g.d_ff = 256;
  g.layers = 2;
  for (const char* policy : {"lean", "fast"}) {
    SCOPED_TRACE(policy);
    const MemoryOptionsGuard guard(parse_memory_options(policy));
    const double seq2seq = measured_peak(c, 32, 24, 24), seq2seq_estimate = estimate_training_memory(c, 32, 24, 24).total();
    EXPECT_GE(seq2seq_estimate, seq2seq);
    EXPECT_LE(seq2seq_estimate, 1.5 * seq2seq);
    const double gpt = measured_peak(g, 8), gpt_estimate = estimate_training_memory(g, 8).total();
    EXPECT_GE(gpt_estimate, gpt);
    EXPECT_LE(gpt_estimate, 1.5 * gpt);
  }
}

TEST(MemoryEstimate, PartsFollowTheFormula) {
  const TransformerConfig c = config(64, 4, 256, 2, 2);
  const MemoryOptionsGuard lean(parse_memory_options("lean"));
  const MemoryEstimate m = estimate_training_memory(c, 64, 13, 13);
  const double p = 4.0 * static_cast<double>(m.parameters);
  // B 64, S = T = 13, E 64, F 256, H 4, V 29, 2 + 2 layers: a layer norm keeps
  // E per row, an attention 2 per row and head ("lean"), then 2E and S or T ("fast").
  const auto activations = [](double ln, double a) {
    const double enc = 64 * 13 * (2 * ln + 4 * 64 + 256 + 4 * a), dec = 64 * 13 * (3 * ln + 6 * 64 + 256 + 8 * a + 2 * 64);
    return 4 * (64 * 26 * (64 + ln) + 2 * enc + 2 * dec + 64 * 13 * 2 * 29 + std::max(enc, dec));
  };
  EXPECT_DOUBLE_EQ(m.activations, activations(64, 2));
  {
    const MemoryOptionsGuard fast(parse_memory_options("fast"));
    EXPECT_DOUBLE_EQ(estimate_training_memory(c, 64, 13, 13).activations, activations(128, 13));
  }
  EXPECT_EQ(m.gradients, p);
  EXPECT_EQ(m.optimizer, 2 * p);
  EXPECT_EQ(m.weights, p + 4.0 * 40 * 64);  // + the sinusoidal table
  EXPECT_GT(m.activations, 0);
  EXPECT_DOUBLE_EQ(m.total(), m.weights + m.gradients + m.optimizer + m.activations);
  // Activations grow with the batch and the sequence; weights do not.
  const MemoryEstimate big = estimate_training_memory(c, 128, 26, 26);
  EXPECT_GT(big.activations, 2 * m.activations);
  EXPECT_EQ(big.weights, m.weights);
  EXPECT_NE(m.summary().find("optimizer"), std::string::npos) << m.summary();
  // The optimizer's part follows its buffers: SGD with momentum keeps one.
  EXPECT_EQ(estimate_training_memory(c, 64, 13, 13, 1).optimizer, p);
}

TEST(MemoryEstimate, EveryOptimizerInTheTableCountsItsState) {
  const TransformerConfig c = config(16, 2, 32, 1, 1);
  Generator gen(0);
  Seq2SeqTransformer model(c, gen, nullptr);
  for (Tensor& p : model.parameters()) p.set_grad(Tensor::zeros(p.shape()));
  for (const OptimizerChoice& choice : optimizer_choices()) {
    auto opt = choice.make(model.parameters(), TrainOptions{});
    opt->step();  // state is allocated on the first update
    int64_t buffered = 0;  // elements of the parameter-sized state buffers
    for (const auto& [name, t] : opt->state_dict())
      if (name.starts_with("state.") && t.dim() > 0) buffered += t.numel();
    EXPECT_EQ(buffered, choice.state_buffers * model.num_parameters()) << choice.name;
  }
}

TEST(MemoryEstimate, TooBigStopsUnlessForced) {
  TransformerConfig c = config(16384, 16, 65536, 64, 64);
  const MemoryEstimate m = estimate_training_memory(c, 64, 13, 13);
  EXPECT_GT(m.total(), 1e12);  // terabytes
  testing::expect_error<ValueError>([&] { check_memory_fits(m, 8e9, false); },
                                    {"memory: this run needs about", "but 8.0 GB is available (MemAvailable)", "--force"});
  check_memory_fits(m, 8e9, true);                 // --force
  check_memory_fits(m, std::nullopt, false);       // unknown: no check
  check_memory_fits(estimate_training_memory(config(64, 4, 256, 2, 2), 64, 13, 13), 8e9, false);
  ASSERT_TRUE(memory_available().has_value());     // Linux: /proc/meminfo
  EXPECT_GT(*memory_available(), 0);
}

// lm's GPT: the parts follow memory_estimate.h's formula, the parameters are the model's.
TEST(MemoryEstimate, GPTPartsFollowTheFormula) {
  GPTConfig c;
  c.vocab = 50;
  c.context = 32;
  c.d_model = 16;
  c.heads = 2;
  c.d_ff = 48;
  c.layers = 3;
  Generator gen(0);
  EXPECT_EQ(estimate_training_memory(c, 1).parameters, GPT(c, gen).num_parameters());
  const MemoryOptionsGuard lean(parse_memory_options("lean"));
  const MemoryEstimate m = estimate_training_memory(c, 8);
  const double p = 4.0 * static_cast<double>(m.parameters);
  EXPECT_EQ(m.weights, p);  // learned positions are parameters
  EXPECT_EQ(m.gradients, p);
  EXPECT_EQ(m.optimizer, 2 * p);
  const double per_token = 4 * 16 + 3 * 50 + 3 * (11 * 16 + 48 + 2 * 2);
  EXPECT_DOUBLE_EQ(m.activations, 4.0 * 8 * 32 * per_token);
  {  // "fast": each layer norm keeps x as well, each attention its 32 probabilities per row
    const MemoryOptionsGuard fast(parse_memory_options("fast"));
    const double fast_token = 4 * 16 + 16 + 3 * 50 + 3 * (13 * 16 + 48 + 2 * 32);
    EXPECT_DOUBLE_EQ(estimate_training_memory(c, 8).activations, 4.0 * 8 * 32 * fast_token);
  }
  EXPECT_DOUBLE_EQ(estimate_training_memory(c, 16).activations, 2 * m.activations);
  c.dropout = 0.1;
  EXPECT_DOUBLE_EQ(estimate_training_memory(c, 8).activations, 1.25 * m.activations);
  c.positions = PositionalEncoding::Kind::sinusoidal;
  const MemoryEstimate s = estimate_training_memory(c, 8, 1);
  EXPECT_EQ(s.weights, 4.0 * static_cast<double>(s.parameters) + 4.0 * 32 * 16);  // + the table
  EXPECT_EQ(s.optimizer, 4.0 * static_cast<double>(s.parameters));
  // The probe's lm train --d-model 4096 --d-ff 16384 --layers 8: tens of GB.
  c = GPTConfig{};
  c.d_model = 4096;
  c.d_ff = 16384;
  c.layers = 8;
  c.heads = 8;
  EXPECT_GT(estimate_training_memory(c, 32).total(), 20e9);
}

// read_file_bytes' bound for text inputs: an eighth of what is available, within [64 MiB, kReadFileLimit].
TEST(MemoryEstimate, TextInputLimitFollowsAvailableMemory) {
  EXPECT_EQ(text_input_limit(std::nullopt), kReadFileLimit);
  EXPECT_EQ(text_input_limit(8e9), uint64_t{1'000'000'000});
  EXPECT_EQ(text_input_limit(1e8), uint64_t{64} << 20);
  EXPECT_EQ(text_input_limit(1e15), kReadFileLimit);
  EXPECT_GE(text_input_limit(), uint64_t{64} << 20);
  EXPECT_LE(text_input_limit(), kReadFileLimit);
}

TEST(MemoryEstimate, FormatsBytes) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(14.2e6), "14.2 MB");
  EXPECT_EQ(format_bytes(137.5e9), "137.5 GB");
  EXPECT_EQ(format_bytes(7.7e12), "7.7 TB");
}

}  // namespace
}  // namespace attograd::app
