// copy_task's training flags as a user meets them: --optimizer trains with
// every row of the optimizer table and an unknown name lists the valid ones;
// every hint in a schedule error is a value that works when passed back; and
// --on-nonfinite skip gives up after --max-consecutive-skips steps in a row;
// --precision bf16 says what it runs on this machine and falls back to f32
// where bf16 would not be native.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <sstream>

#include "examples/common/checkpoint.h"
#include "examples/common/trainer.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace attograd::app {
namespace {

const std::string kProgram = std::string(ATTOGRAD_BIN_DIR) + "/copy_task";
const std::vector<std::string> kTiny = {"train", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--enc-layers",
                                        "1", "--dec-layers", "1", "--max-len", "10", "--symbols", "5",
                                        "--min-length", "2", "--max-length", "6", "--samples", "0", "--threads",
                                        "1", "--quiet", "--batch-size", "4", "--eval-size", "4"};

class TrainerFlags : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(fs::exists(kProgram)) << "build the copy_task target first"; }
  testing::ProgramOutcome run(const std::vector<std::string>& extra, std::vector<std::string> base = kTiny) {
    base.insert(base.end(), extra.begin(), extra.end());
    return testing::run_program(kProgram, base, dir_);
  }
  // The value after `flag` in the hint of r's error ("hint: ... --warmup 0"), or "" when there is none.
  static std::string hinted(const testing::ProgramOutcome& r, const std::string& flag) {
    std::smatch m;
    const std::string hint = r.err.substr(std::min(r.err.find("hint:"), r.err.size()));
    if (!std::regex_search(hint, m, std::regex(flag + " ([0-9A-Za-z_.+-]*[0-9A-Za-z_])"))) return "";
    return m[1];
  }
  testing::TempDir tmp_{"trainer_flags"};
  std::string dir_ = tmp_.path;
};

TEST_F(TrainerFlags, EachOptimizerTrainsAndIsSavedInTheCheckpoint) {
  for (const std::string name : {"sgd", "adam", "adamw"}) {
    SCOPED_TRACE(name);
    const std::string ck = dir_ + "/ck-" + name;
    const auto r = run({"--optimizer", name, "--steps", "3", "--warmup", "1", "--checkpoint-dir", ck});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(load_checkpoint(ck, true).progress.optimizer, name);
  }
  const auto help = run({"--help"});
  EXPECT_NE(help.out.find("optimizer: sgd ("), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("adamw ("), std::string::npos) << help.out;
}

TEST_F(TrainerFlags, AnUnknownOptimizerListsTheValidNames) {
  testing::expect_one_line_error(run({"--optimizer", "rmsprop"}), "copy_task",
                                 "--optimizer must be sgd, adam or adamw, got 'rmsprop'");
}

TEST_F(TrainerFlags, ResumingWithAnotherOptimizerSaysWhichOneToPass) {
  const std::string ck = dir_ + "/ck";
  ASSERT_EQ(run({"--steps", "2", "--warmup", "1", "--checkpoint-dir", ck}).code, 0);
  const auto r = run({"--steps", "4", "--warmup", "1", "--checkpoint-dir", ck, "--resume", "--optimizer", "sgd"});
  testing::expect_one_line_error(r, "copy_task", "was trained with --optimizer adamw, but the flags give --optimizer sgd");
  EXPECT_EQ(hinted(r, "--optimizer"), "adamw") << r.err;
  EXPECT_EQ(run({"--steps", "4", "--warmup", "1", "--checkpoint-dir", ck, "--resume", "--optimizer", "adamw"}).code, 0);
}

TEST_F(TrainerFlags, TheCosineWarmupHintIsAWarmupThatWorks) {
  for (const std::string steps : {"1", "2", "30"}) {
    SCOPED_TRACE(steps);
    const auto bad = run({"--steps", steps, "--warmup", "100"});
    testing::expect_one_line_error(bad, "copy_task", "--warmup (100) must be smaller than --steps (" + steps + ")");
    const std::string warmup = hinted(bad, "--warmup");
    ASSERT_FALSE(warmup.empty()) << bad.err;
    EXPECT_EQ(bad.err.find("or less"), std::string::npos) << bad.err;  // a negative --warmup is no answer
    const auto good = run({"--steps", steps, "--warmup", warmup});
    EXPECT_EQ(good.code, 0) << good.err;
  }
}

TEST_F(TrainerFlags, TheCosineMinLrHintIsAMinLrThatWorks) {
  const auto bad = run({"--steps", "2", "--warmup", "1", "--lr", "1e-6", "--min-lr", "1e-5"});
  testing::expect_one_line_error(bad, "copy_task", "--min-lr (1e-05) must not exceed --lr (1e-06)");
  const std::string min_lr = hinted(bad, "--min-lr");
  ASSERT_FALSE(min_lr.empty()) << bad.err;
  const auto good = run({"--steps", "2", "--warmup", "1", "--lr", "1e-6", "--min-lr", min_lr});
  EXPECT_EQ(good.code, 0) << good.err;
}

// A learning rate that drives every step past the first few to NaN/Inf.
const std::vector<std::string> kExploding = {"--steps", "60", "--warmup", "1", "--lr", "1e6", "--eval-every", "0",
                                             "--on-nonfinite", "skip"};

TEST_F(TrainerFlags, SkipGivesUpAfterMaxConsecutiveSkipsAndKeepsTheLastGoodCheckpoint) {
  const std::string ck = dir_ + "/ck";
  std::vector<std::string> args = kExploding;
  args.insert(args.end(), {"--max-consecutive-skips", "3", "--checkpoint-dir", ck, "--checkpoint-every", "1"});
  const auto r = run(args);
  testing::expect_one_line_error(r, "copy_task", "training stopped after 4 non-finite steps in a row "
                                                 "(--max-consecutive-skips 3), the last good checkpoint is step ");
  EXPECT_FALSE(list_checkpoints(ck).empty());
}

TEST_F(TrainerFlags, SkipGivesUpByDefault) {
  // A run whose every step is non-finite no longer trains on to --steps.
  testing::expect_one_line_error(run(kExploding), "copy_task", "after 21 non-finite steps in a row "
                                                               "(--max-consecutive-skips 20)");
}

// --precision bf16 trains only where the bf16 products run native; the plan
// is a pure function of the kernel and the library's reason, so every
// fallback is checked on every machine, whatever its CPU has.
TEST(PrecisionPlan, Bf16TrainsOnlyWhereItsProductsRunNative) {
  const PrecisionPlan f32 = plan_precision(Precision::f32, Bf16Gemm::native, "");
  EXPECT_EQ(f32.precision, Precision::f32);
  EXPECT_EQ(f32.note, "");
  const PrecisionPlan native = plan_precision(Precision::bf16, Bf16Gemm::native, "");
  EXPECT_EQ(native.precision, Precision::bf16);
  EXPECT_NE(native.note.find("AVX512-BF16"), std::string::npos) << native.note;
  for (const char* why : {"this CPU has no AVX512-BF16 instructions", "this build has no libxsmm"}) {
    const PrecisionPlan widened = plan_precision(Precision::bf16, Bf16Gemm::widened, why);
    EXPECT_EQ(widened.precision, Precision::f32);
    EXPECT_NE(widened.note.find(why), std::string::npos) << widened.note;
    EXPECT_NE(widened.note.find("training in float32"), std::string::npos) << widened.note;
    EXPECT_EQ(widened.note.find('\n'), std::string::npos);  // one line
  }
  const PrecisionPlan naive = plan_precision(Precision::bf16, Bf16Gemm::naive, "the GEMM backend is naive");
  EXPECT_EQ(naive.precision, Precision::f32);
  EXPECT_NE(naive.note.find("naive"), std::string::npos) << naive.note;
}

// The library's reason names what is missing on this machine, and nothing where bf16 runs native.
TEST(PrecisionPlan, TheFallbackReasonNamesWhatIsMissingHere) {
  const std::string why = bf16_gemm_fallback_reason();
  if (bf16_gemm_kernel() == Bf16Gemm::native) {
    EXPECT_EQ(why, "");
  } else {
    EXPECT_TRUE(why.find("AVX512-BF16") != std::string::npos || why.find("libxsmm") != std::string::npos ||
                why.find("naive") != std::string::npos)
        << why;
  }
  const GemmBackendGuard naive(GemmBackend::naive);
  EXPECT_EQ(bf16_gemm_fallback_reason(), "the GEMM backend is naive (ATTOGRAD_GEMM)");
}

// The program says, in the plan's one line, what --precision bf16 does on
// this machine (the detection is the library's: bf16_gemm_kernel()), trains,
// and records the precision it trained in.
TEST_F(TrainerFlags, PrecisionBf16SaysWhatItRunsAndRecordsIt) {
  std::vector<std::string> loud = kTiny;
  loud.erase(std::find(loud.begin(), loud.end(), "--quiet"));
  const std::string ck = dir_ + "/ck-bf16";
  const auto r = run({"--precision", "bf16", "--steps", "3", "--warmup", "1", "--checkpoint-dir", ck}, loud);
  ASSERT_EQ(r.code, 0) << r.err;
  const PrecisionPlan plan = plan_precision(Precision::bf16, bf16_gemm_kernel(), bf16_gemm_fallback_reason());
  EXPECT_NE(r.out.find(plan.note + "\n"), std::string::npos) << r.out;
  const auto run_json = nlohmann::json::parse(testing::read_text(ck + "/run.json"));
  EXPECT_EQ(run_json.at("precision"), plan.precision == Precision::bf16 ? "bf16" : "f32");
  testing::expect_one_line_error(run({"--precision", "fp16"}), "copy_task",
                                 "--precision must be f32 or bf16, got 'fp16'");

  // It trains in what it said: the same seed's first-step loss moves by bf16's rounding exactly when the plan is bf16.
  auto first_loss = [&](const std::string& precision) {
    const std::string log = dir_ + "/" + precision + ".jsonl";
    const auto r2 = run({"--precision", precision, "--steps", "1", "--warmup", "0", "--log", log, "--log-every", "1"});
    EXPECT_EQ(r2.code, 0) << r2.err;
    std::istringstream lines(testing::read_text(log));
    for (std::string line; std::getline(lines, line);)
      if (const auto j = nlohmann::json::parse(line); j.contains("loss")) return j.at("loss").get<double>();
    ADD_FAILURE() << "no loss in " << log;
    return 0.0;
  };
  const double f32 = first_loss("f32"), bf16 = first_loss("bf16");
  if (plan.precision == Precision::bf16) {
    EXPECT_NE(f32, bf16);
    EXPECT_NEAR(f32, bf16, 1e-2 * f32);
  } else {
    EXPECT_EQ(f32, bf16);
  }
}

}  // namespace
}  // namespace attograd::app

namespace attograd::app {
namespace {

// --on-nonfinite and --allreduce-order read their tables (train_choices.h),
// as --optimizer does: an unknown name lists the known ones, the help every row.
TEST_F(TrainerFlags, SettingFlagsReadTheirTables) {
  testing::expect_one_line_error(run({"--on-nonfinite", "ignore"}), "copy_task",
                                 "--on-nonfinite must be stop or skip, got 'ignore'");
  testing::expect_one_line_error(run({"--allreduce-order", "sorted"}), "copy_task",
                                 "--allreduce-order must be native or fixed, got 'sorted'");
  const testing::ProgramOutcome help = testing::run_program(kProgram, {"train", "--help"}, dir_);
  ASSERT_EQ(help.code, 0) << help.err;
  const std::string flat = std::regex_replace(help.out, std::regex("\\s+"), " ");  // the help wraps its lines
  for (const char* row : {"stop (", "skip (", "native (", "fixed ("}) EXPECT_NE(flat.find(row), std::string::npos) << row;
  EXPECT_EQ(run({"--on-nonfinite", "skip", "--allreduce-order", "fixed", "--steps", "1", "--warmup", "0"}).code, 0);
}

TEST_F(TrainerFlags, KVHeadsTrainsAGroupedDecoderAndIsSavedInTheCheckpoint) {
  const std::string ck = dir_ + "/ck-gqa";
  const auto r = run({"--kv-heads", "1", "--steps", "2", "--warmup", "1", "--checkpoint-dir", ck});
  ASSERT_EQ(r.code, 0) << r.err;
  const Checkpoint c = load_checkpoint(ck, true);
  EXPECT_EQ(c.meta.config.at("kv_heads"), 1);
  EXPECT_EQ(c.model.at("decoder.layers.0.self_attn.k_proj.weight").shape(), (Shape{8, 16}));  // G·D = 1·8
  EXPECT_EQ(c.model.at("encoder.layers.0.self_attn.k_proj.weight").shape(), (Shape{16, 16}));
  EXPECT_EQ(run({"--kv-heads", "1", "--steps", "3", "--warmup", "1", "--checkpoint-dir", ck, "--resume"}).code, 0);
  testing::expect_one_line_error(run({"--kv-heads", "3"}), "copy_task", "--kv-heads 3 must divide --heads 2");
}

}  // namespace
}  // namespace attograd::app
