// head_probe's lm-cost and lm-convert-gqa (examples/head_probe/lm_cost.h,
// gqa_convert.h): the grouped-query conversion of a GPT keeps the model where
// it must (G = H; heads of a group already equal), its file loads as lm loads
// an --init-from model, the measured KV cache holds the formula's bytes, and
// bad flags are one-line errors naming the flag.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include <attograd/autograd/engine.h>
#include <attograd/data/lm_tokenizer.h>
#include <attograd/nn/gpt.h>

#include "examples/common/checkpoint.h"
#include "examples/common/checkpoint_model.h"
#include "examples/head_probe/gqa_convert.h"
#include "examples/head_probe/lm_cost.h"
#include "test_util.h"

using namespace attograd;
using namespace attograd::app;
using namespace attograd::app::probe;
using namespace attograd::testing;

namespace {

const std::string kProbe = std::string(ATTOGRAD_BIN_DIR) + "/head_probe";
const std::string kLM = std::string(ATTOGRAD_BIN_DIR) + "/lm";

// H = 4 heads of D = 4 over E = 16, multi-head.
GPTConfig small() {
  GPTConfig c;
  c.vocab = 9;
  c.context = 10;
  c.d_model = 16;
  c.heads = 4;
  c.d_ff = 24;
  c.layers = 2;
  return c;
}

const Tensor kSeq = ids({1, 4, 2, 6, 0, 3, 5, 8, 2, 1, 0, 6, 7, 7, 3, 2, 8, 1, 4, 4, 0}, {3, 7});

std::unique_ptr<GPT> random_gpt(const GPTConfig& c) {
  Generator gen(5);
  auto m = std::make_unique<GPT>(c, gen);
  randomize_parameters(*m, 9, 0.3);  // larger than the init, so every head matters to the logits
  m->eval();
  return m;
}

// Logits [B, T, V] of a model of the converted config and state.
std::vector<double> logits_of(const GroupedQueryGPT& g) {
  Generator gen(1);
  GPT m(g.config, gen);
  m.load_state_dict(g.state);
  m.eval();
  NoGradGuard no_grad;
  return vals(m.forward(kSeq));
}

std::vector<double> logits_of(GPT& m) {
  NoGradGuard no_grad;
  return vals(m.forward(kSeq));
}

// argv for a subcommand function: argv[0] names it, as head_probe's main passes it.
struct Argv {
  explicit Argv(std::vector<std::string> a) : args(std::move(a)) {
    for (std::string& s : args) ptrs.push_back(s.data());
  }
  int argc() const { return static_cast<int>(ptrs.size()); }
  char** argv() { return ptrs.data(); }
  std::vector<std::string> args;
  std::vector<char*> ptrs;
};

// A message thrown as one line that names `flag`.
void expect_flag_error(const std::string& msg, const std::string& flag) {
  EXPECT_NE(msg.find(flag), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

}  // namespace

TEST(LmConvertGqa, GEqualToHIsTheIdentityBitForBit) {
  const auto m = random_gpt(small());
  const std::vector<double> want = logits_of(*m);
  for (KvPool pool : {KvPool::mean, KvPool::first}) {
    const GroupedQueryGPT g = to_grouped_query_gpt(m->config, m->state_dict(), 4, pool);
    EXPECT_EQ(g.config.kv_head_count(), 4);
    EXPECT_EQ(logits_of(g), want);
  }
}

TEST(LmConvertGqa, GroupsOfEqualHeadsKeepTheLogitsWhicheverThePooling) {
  const auto m = random_gpt(small());
  {  // K/V heads 1 and 3 become copies of heads 0 and 2 (D = 4 rows each): groups {0, 1}, {2, 3} of G = 2
    NoGradGuard no_grad;
    for (const auto& b : *m->blocks)
      for (Linear* proj : {b->attn->k_proj.get(), b->attn->v_proj.get()})
        for (int64_t head : {0, 2}) {
          proj->weight.narrow(0, 4 * (head + 1), 4).copy_(proj->weight.narrow(0, 4 * head, 4));
          proj->bias.narrow(0, 4 * (head + 1), 4).copy_(proj->bias.narrow(0, 4 * head, 4));
        }
  }
  const std::vector<double> want = logits_of(*m);
  const GroupedQueryGPT mean = to_grouped_query_gpt(m->config, m->state_dict(), 2, KvPool::mean);
  const GroupedQueryGPT first = to_grouped_query_gpt(m->config, m->state_dict(), 2, KvPool::first);
  EXPECT_EQ(mean.config.kv_head_count(), 2);
  EXPECT_EQ(mean.state.at("blocks.1.attn.k_proj.weight").shape(), (Shape{8, 16}));  // G·D rows
  EXPECT_EQ(vals(mean.state.at("blocks.0.attn.v_proj.bias")), vals(first.state.at("blocks.0.attn.v_proj.bias")));
  const std::vector<double> got_mean = logits_of(mean), got_first = logits_of(first);
  EXPECT_EQ(got_mean, got_first);
  expect_near_all(got_mean, want, 1e-5);  // float32: the grouped attention sums in another order than H heads
}

TEST(LmConvertGqa, PoolingsDifferWhereTheHeadsDo) {
  // Without equal heads, mean and first are different models: the control is not the conversion.
  const auto m = random_gpt(small());
  const GroupedQueryGPT mean = to_grouped_query_gpt(m->config, m->state_dict(), 1, KvPool::mean);
  const GroupedQueryGPT first = to_grouped_query_gpt(m->config, m->state_dict(), 1, KvPool::first);
  // first keeps head 0's rows exactly; mean averages the four heads' rows.
  const Tensor k = m->state_dict().at("blocks.0.attn.k_proj.weight");  // [16, 16]
  EXPECT_EQ(vals(first.state.at("blocks.0.attn.k_proj.weight")), vals(k.narrow(0, 0, 4)));
  const std::vector<double> all = vals(k), pooled = vals(mean.state.at("blocks.0.attn.k_proj.weight"));
  for (size_t i = 0; i < pooled.size(); ++i)
    EXPECT_NEAR(pooled[i], (all[i] + all[i + 64] + all[i + 128] + all[i + 192]) / 4, 1e-6);
  EXPECT_NE(logits_of(mean), logits_of(first));
}

TEST(LmConvertGqa, TheFileLoadsAsAnLmCheckpointWithGKvHeadsAndItsTokenizer) {
  TempDir dir("head_probe_gqa");
  const auto m = random_gpt(small());
  std::filesystem::create_directories(dir / "run");
  CheckpointMeta meta;
  meta.config = m->config.to_json();
  meta.task = {{"task", "lm"}, {"data", "fortunes"}, {"tokenizer", "char"}, {"vocab_size", 9}, {"heldout", 0.1},
               {"seed", 1}};
  meta.program = "lm";
  save_checkpoint(dir / "run", m->state_dict(), {}, meta, TrainProgress{.step = 3}, 1);
  CharLMTokenizer({"a", "b", "c", "d", "e", "f", "g", "h"}).save(dir / "run");
  const std::string out = dir / "gqa/g2.model.safetensors";
  convert_lm_to_grouped_query(dir / "run", 2, KvPool::mean, out);
  // What lm train --init-from and lm eval read: the checkpoint as lm, the tokenizer beside it.
  const Checkpoint c = load_checkpoint(out, false, CheckpointReader{"lm", "lm"});
  EXPECT_EQ(c.meta.config.at("kv_heads"), 2);
  EXPECT_EQ(c.meta.task, meta.task);  // --init-from requires the same task
  const std::unique_ptr<GPT> loaded = gpt_from_checkpoint(c);
  EXPECT_EQ(loaded->config.kv_head_count(), 2);
  EXPECT_EQ(logits_of(*loaded), logits_of(to_grouped_query_gpt(m->config, m->state_dict(), 2, KvPool::mean)));
  EXPECT_EQ(load_lm_tokenizer(dir / "gqa")->vocab_size(), 9);
  // A directory holding another tokenizer is refused rather than mismatched with the model.
  CharLMTokenizer({"x", "y"}).save(dir / "other");
  const std::string beside_other = dir / "other/g.model.safetensors";
  expect_error<IOError>([&] { convert_lm_to_grouped_query(dir / "run", 2, KvPool::mean, beside_other); },
                        {"another tokenizer"});
}

TEST(LmConvertGqa, LmUptrainsAndEvaluatesTheConvertedModel) {
  if (!std::filesystem::exists(kLM)) GTEST_SKIP() << kLM << " is not built";
  TempDir dir("head_probe_lm");
  std::string text;
  for (int i = 0; i < 400; ++i) text += i % 9 == 8 ? "the cat sat.\n" : "a dog ran far ";
  write_text(dir / "text.txt", text);
  const std::vector<std::string> model = {"--text", dir / "text.txt", "--context", "16", "--d-model", "16",
                                          "--heads", "4", "--d-ff", "32", "--layers", "1", "--batch-size", "4",
                                          "--warmup", "0", "--eval-size", "4", "--samples", "0"};
  auto train = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"train"};
    args.insert(args.end(), model.begin(), model.end());
    args.insert(args.end(), extra.begin(), extra.end());
    return run_program(kLM, args, dir.path);
  };
  const ProgramOutcome mha = train({"--steps", "2", "--eval-every", "2", "--quiet", "--checkpoint-dir", dir / "mha"});
  ASSERT_EQ(mha.code, 0) << mha.err;
  const std::string out = dir / "gqa/g1.model.safetensors";
  convert_lm_to_grouped_query(dir / "mha", 1, KvPool::first, out);
  const ProgramOutcome up = train({"--steps", "1", "--eval-every", "1", "--kv-heads", "1", "--init-from", out,
                                   "--checkpoint-dir", dir / "up"});
  EXPECT_EQ(up.code, 0) << up.err;
  EXPECT_TRUE(contains(up.out, "initialized from")) << up.out;
  const ProgramOutcome eval = run_program(kLM, {"eval", "--checkpoint", out, "--text", dir / "text.txt"}, dir.path);
  EXPECT_EQ(eval.code, 0) << eval.err;
  EXPECT_TRUE(contains(eval.out, "perplexity")) << eval.out;
}

TEST(LmCost, TheCacheHoldsTheFormulasBytesAtEveryPoint) {
  LmCostOptions o;
  o.heads = {1, 2, 4};
  o.kv_heads = {1, 2};
  o.kv_at_heads = 4;
  o.lengths = {3, 17};
  o.d_model = 16;
  o.d_ff = 8;
  o.layers = 2;
  o.vocab = 11;
  o.batch = 2;
  o.repeats = 1;
  const LmCostResult r = measure_lm_cost(o);
  // (1,1) (2,2) (4,4) (4,1) (4,2), each at two lengths; the reference at t = 3 once per pair.
  ASSERT_EQ(r.cached.size(), 10u);
  ASSERT_EQ(r.uncached.size(), 5u);
  for (const LmCostRow& x : r.cached) {
    const int64_t D = 16 / x.heads;
    const auto formula = static_cast<size_t>(2 * 2 * 2 * x.t * x.kv_heads * D * 4);  // 2·L·B·t·G·D·4
    EXPECT_EQ(x.kv_bytes_used, formula) << "H " << x.heads << " G " << x.kv_heads << " t " << x.t;
    EXPECT_EQ(x.kv_bytes_formula, formula);
    EXPECT_GE(x.kv_bytes_allocated, x.kv_bytes_used);
    EXPECT_GE(x.peak_bytes, x.kv_bytes_allocated);  // the cache is among what the decode allocated
    EXPECT_GT(x.per_token.wall_ms, 0);
  }
  EXPECT_EQ(r.cached[6].heads, 4);
  EXPECT_EQ(r.cached[6].kv_heads, 1);
  EXPECT_EQ(r.cached[6].kv_bytes_used * 4, r.cached[4].kv_bytes_used);  // G = 1 holds H/G = 4x less than G = 4
  for (const LmUncachedRow& x : r.uncached) EXPECT_EQ(x.t, 3);
  const nlohmann::json j = lm_cost_json(o, r);
  EXPECT_EQ(j.at("cached").size(), 10u);
  EXPECT_FALSE(j.at("cpu").get<std::string>().empty());
}

TEST(LmCost, ACheckpointIsTimedInItsOwnShapePastItsContext) {
  TempDir dir("head_probe_cost");
  GPTConfig c = small();
  c.kv_heads = 2;
  const auto m = random_gpt(c);
  CheckpointMeta meta;
  meta.config = c.to_json();
  meta.task = {{"task", "lm"}};
  meta.program = "lm";
  save_checkpoint(dir.path, m->state_dict(), {}, meta, TrainProgress{.step = 1}, 1);
  LmCostOptions o;
  o.checkpoint = dir.path;
  o.lengths = {4, 23};  // past the context of 10: the position table is extended for timing
  o.batch = 3;
  o.repeats = 1;
  const LmCostResult r = measure_lm_cost(o);
  ASSERT_EQ(r.cached.size(), 2u);
  for (const LmCostRow& x : r.cached) {
    EXPECT_EQ(x.heads, 4);
    EXPECT_EQ(x.kv_heads, 2);
    EXPECT_EQ(x.kv_bytes_used, static_cast<size_t>(2 * 2 * 3 * x.t * 2 * 4 * 4));  // 2·L·B·t·G·D·4
  }
  ASSERT_EQ(r.uncached.size(), 1u);
  EXPECT_EQ(r.uncached[0].t, 4);
}

TEST(LmCost, BadFlagsAreOneLineErrorsNamingTheFlag) {
  auto options_error = [](std::vector<std::string> flags) {
    flags.insert(flags.begin(), "head_probe lm-cost");
    flags.insert(flags.end(), {"--out", "/tmp/unused.json"});
    Argv a(flags);
    return error_message<ValueError>([&] { lm_cost_options(a.argc(), a.argv()); });
  };
  expect_flag_error(options_error({"--kv-heads", "3"}), "--kv-heads");
  expect_flag_error(options_error({"--heads", "3"}), "--heads");
  expect_flag_error(options_error({"--heads", "1,2", "--kv-heads", "1"}), "--kv-at-heads");
  expect_flag_error(options_error({"--lengths", "0"}), "--lengths");
  expect_flag_error(options_error({"--checkpoint", "x", "--heads", "2"}), "--heads");
  expect_flag_error(error_message<ValueError>([] { parse_kv_pool("max"); }), "--pool");
  const auto m = random_gpt(small());
  const TensorMap state = m->state_dict();
  expect_flag_error(error_message<ValueError>([&] { to_grouped_query_gpt(m->config, state, 3, KvPool::mean); }),
                    "--kv-heads");
}

TEST(LmCost, TheProgramPrintsOneLineForABadFlag) {
  if (!std::filesystem::exists(kProbe)) GTEST_SKIP() << kProbe << " is not built";
  TempDir dir("head_probe_flags");
  expect_one_line_error(run_program(kProbe, {"lm-cost", "--kv-heads", "3", "--out", dir / "c.json"}, dir.path),
                        "head_probe", "--kv-heads 3");
  expect_one_line_error(run_program(kProbe, {"lm-convert-gqa", "--checkpoint", dir.path, "--kv-heads", "1", "--pool",
                                             "max", "--to", dir / "g.model.safetensors"}, dir.path),
                        "head_probe", "--pool");
}
