// Training checkpoints (examples/common/checkpoint.h) and exact resume of the
// shared training loop (examples/common/trainer.h): a checkpoint round-trips
// model, optimizer state, RNG and data position bit for bit; pruning, best
// marking, incomplete pairs, stale temporaries, corrupt files; resuming N -> 2N
// reproduces an uninterrupted 2N run's losses exactly; the same seed gives the
// same losses; the log's train_s leaves out evaluations and survives a resume.
//
// Shape legend: B batch, S source length, T target length, V vocab.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/io/safetensors.h>
#include <attograd/autograd/ops/loss.h>
#include <attograd/data/copy_task.h>
#include "examples/common/checkpoint.h"
#include "examples/common/train_choices.h"
#include "examples/common/trainer.h"
#include <attograd/optim/adam.h>
#include "test_util.h"

using namespace attograd;
using namespace attograd::app;
using attograd::testing::error_message;
using attograd::testing::TempDir;
namespace fs = std::filesystem;

namespace {

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Same dtype, shape and bytes.
void expect_identical(const Tensor& a, const Tensor& b, const std::string& name) {
  ASSERT_TRUE(a.defined() && b.defined()) << name;
  ASSERT_EQ(a.dtype(), b.dtype()) << name;
  ASSERT_EQ(a.shape(), b.shape()) << name;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  EXPECT_EQ(std::memcmp(ca.raw_data(), cb.raw_data(), static_cast<size_t>(a.numel()) * dtype_size(a.dtype())), 0)
      << name << " differs";
}

void expect_identical_maps(const TensorMap& a, const TensorMap& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (auto& [k, t] : a) {
    auto it = b.find(k);
    ASSERT_NE(it, b.end()) << what << ": '" << k << "' missing";
    expect_identical(t, it->second, what + " '" + k + "'");
  }
}

TransformerConfig tiny_config(double dropout) {
  TransformerConfig c;
  c.src_vocab = c.tgt_vocab = kNumSpecials + 6;
  c.d_model = 16;
  c.heads = 2;
  c.d_ff = 32;
  c.enc_layers = 1;
  c.dec_layers = 1;
  c.dropout = dropout;
  c.max_len = 16;
  return c;
}

CopyTaskOptions tiny_task(int64_t size) {
  CopyTaskOptions t;
  t.num_symbols = 6;
  t.min_len = 2;
  t.max_len = 5;
  t.seed = 7;
  t.size = size;
  return t;
}

// One AdamW step on a batch; advances the dropout generator through the model.
void adamw_step(Seq2SeqTransformer& model, optim::AdamW& opt, const Batch& b) {
  Tensor logits = model.forward(b.src, b.tgt_in, b.src_key_padding_mask);  // [B, T, V]
  CrossEntropyOptions ce;
  ce.ignore_index = kPadId;
  cross_entropy(logits.reshape({-1, model.config.tgt_vocab}), b.tgt_out.reshape({-1}), ce).backward();
  opt.step();
  opt.zero_grad();
}

CheckpointMeta tiny_meta(const Seq2SeqTransformer& model) {
  CheckpointMeta m;
  m.config = model.config.to_json();
  m.vocab_src = m.vocab_tgt = copy_task_vocab(6).tokens();
  m.task = {{"task", "copy"}, {"symbols", 6}};
  return m;
}

TrainProgress progress_at(int64_t step) {
  TrainProgress p;
  p.step = step;
  p.loader = {step / 3, step % 3};
  p.rng = {1, 2, 3, static_cast<uint64_t>(step)};
  p.schedule_step = step;
  p.best_eval_loss = 1.0 / static_cast<double>(step + 1);
  return p;
}

// Saves a checkpoint of a small fixed state at `step`.
std::string save_dummy(const std::string& dir, int64_t step, int64_t keep_last) {
  TensorMap model{{"w", Tensor::full({2, 3}, static_cast<double>(step))}};
  TensorMap optim{{"state.0.step", Tensor::from_vector(std::vector<int64_t>{step}, {})}};
  CheckpointMeta m;
  m.config = {{"d_model", 4}};
  m.vocab_src = m.vocab_tgt = {"<pad>", "<bos>", "<eos>", "<unk>", "x"};
  m.task = {{"task", "dummy"}};
  return save_checkpoint(dir, model, optim, m, progress_at(step), keep_last);
}

bool has(const std::string& path) { return fs::exists(path); }

std::string step_file(const TempDir& d, int64_t step, const char* kind) {
  char name[64];
  std::snprintf(name, sizeof name, "step-%08lld.%s.safetensors", static_cast<long long>(step), kind);
  return d / name;
}

}  // namespace

// ---- round trip ------------------------------------------------------------------------------

TEST(Checkpoint, RoundTripsModelOptimizerRngAndDataPosition) {
  TempDir dir;
  Generator init(3);
  auto dropout_gen = std::make_shared<Generator>(99);
  Seq2SeqTransformer model(tiny_config(0.2), init, dropout_gen);
  optim::AdamW opt(model.parameters(), {.lr = 1e-2});
  CopyTaskDataset data(tiny_task(20));
  DataLoader loader(data, {.batch_size = 8, .shuffle = true, .seed = 5});
  for (int i = 0; i < 4; ++i) adamw_step(model, opt, loader.next());  // crosses an epoch (3 batches each)
  ASSERT_EQ(loader.state(), (LoaderState{1, 1}));

  TrainProgress p;
  p.step = 4;
  p.loader = loader.state();
  p.rng = dropout_gen->state();
  p.schedule_step = 4;
  p.best_eval_loss = 1.25;
  const CheckpointMeta meta = tiny_meta(model);
  const std::string path = save_checkpoint(dir.path, model.state_dict(), opt.state_dict(), meta, p, 3);
  EXPECT_EQ(path, step_file(dir, 4, "model"));
  EXPECT_TRUE(has(step_file(dir, 4, "train")));

  Checkpoint c = load_checkpoint(dir.path, true);
  EXPECT_EQ(c.model_path, step_file(dir, 4, "model"));
  EXPECT_EQ(c.train_path, step_file(dir, 4, "train"));
  expect_identical_maps(model.state_dict(), c.model, "model");
  expect_identical_maps(opt.state_dict(), c.optimizer, "optimizer");
  EXPECT_EQ(c.progress.step, 4);
  EXPECT_EQ(c.progress.loader, loader.state());
  EXPECT_EQ(c.progress.rng, dropout_gen->state());
  EXPECT_EQ(c.progress.schedule_step, 4);
  EXPECT_EQ(c.progress.best_eval_loss, 1.25);
  EXPECT_EQ(c.meta.config, meta.config);
  EXPECT_EQ(c.meta.vocab_src, meta.vocab_src);
  EXPECT_EQ(c.meta.vocab_tgt, meta.vocab_tgt);
  EXPECT_EQ(c.meta.task, meta.task);

  // Restored into fresh objects (other seeds), the next step is the same step.
  Generator init2(1234);
  auto gen2 = std::make_shared<Generator>(4321);
  Seq2SeqTransformer model2(tiny_config(0.2), init2, gen2);
  optim::AdamW opt2(model2.parameters(), {.lr = 1e-2});
  DataLoader loader2(data, {.batch_size = 8, .shuffle = true, .seed = 5});
  model2.load_state_dict(c.model);
  opt2.load_state_dict(c.optimizer);
  gen2->set_state(c.progress.rng);
  loader2.set_state(c.progress.loader);
  adamw_step(model, opt, loader.next());
  adamw_step(model2, opt2, loader2.next());
  expect_identical_maps(model.state_dict(), model2.state_dict(), "model after one more step");
  expect_identical_maps(opt.state_dict(), opt2.state_dict(), "optimizer after one more step");
  EXPECT_EQ(dropout_gen->state(), gen2->state());
}

TEST(Checkpoint, FilesAreSafetensorsWithDottedNamesAndJsonMetadata) {
  TempDir dir;
  Generator init(3);
  Seq2SeqTransformer model(tiny_config(0.0), init, nullptr);
  optim::AdamW opt(model.parameters());
  const CheckpointMeta meta = tiny_meta(model);
  save_checkpoint(dir.path, model.state_dict(), opt.state_dict(), meta, progress_at(12), 3);

  SafetensorsData m = load_safetensors(step_file(dir, 12, "model"));
  for (auto& [name, t] : model.named_parameters()) {
    ASSERT_TRUE(m.tensors.count(name)) << name;
    expect_identical(t, m.tensors.at(name), name);
  }
  EXPECT_TRUE(m.tensors.count("encoder.layers.0.self_attn.q_proj.weight"));
  EXPECT_EQ(nlohmann::json::parse(m.metadata.at("config")), model.config.to_json());
  EXPECT_EQ(nlohmann::json::parse(m.metadata.at("vocab_src")).get<std::vector<std::string>>(), meta.vocab_src);
  EXPECT_EQ(nlohmann::json::parse(m.metadata.at("vocab_tgt")).get<std::vector<std::string>>(), meta.vocab_tgt);
  EXPECT_EQ(nlohmann::json::parse(m.metadata.at("task")), meta.task);

  // Training state is in the other file only.
  SafetensorsData t = load_safetensors(step_file(dir, 12, "train"));
  for (const char* key : {"rng.dropout", "loader.epoch", "loader.position", "schedule.last_step", "train.step"})
    EXPECT_TRUE(t.tensors.count(key)) << key;
  for (auto& [k, v] : m.tensors) EXPECT_NE(k.rfind("optim.", 0), 0u) << k;
}

// ---- the checkpoint directory ------------------------------------------------------------------

TEST(Checkpoint, KeepLastPrunesTheOldest) {
  TempDir dir;
  for (int64_t s = 1; s <= 5; ++s) save_dummy(dir.path, s, 2);
  EXPECT_EQ(list_checkpoints(dir.path), (std::vector<int64_t>{4, 5}));
  for (int64_t s = 1; s <= 3; ++s) {
    EXPECT_FALSE(has(step_file(dir, s, "model"))) << s;
    EXPECT_FALSE(has(step_file(dir, s, "train"))) << s;
  }
  Checkpoint c = load_checkpoint(dir.path, true);
  EXPECT_EQ(c.progress.step, 5);
  EXPECT_EQ(c.model.at("w").to_vector<double>(), std::vector<double>(6, 5.0));
  // Steps sort numerically, not by name length.
  save_dummy(dir.path, 100, 2);
  EXPECT_EQ(list_checkpoints(dir.path), (std::vector<int64_t>{5, 100}));
}

TEST(Checkpoint, BestIsACopyThatSurvivesPruning) {
  TempDir dir;
  save_dummy(dir.path, 1, 1);
  mark_best(dir.path, 1);
  save_dummy(dir.path, 2, 1);
  EXPECT_FALSE(has(step_file(dir, 1, "model")));
  EXPECT_EQ(list_checkpoints(dir.path), (std::vector<int64_t>{2}));  // best.* is not a step

  Checkpoint best = load_checkpoint(dir / "best.model.safetensors", true);
  EXPECT_EQ(best.train_path, dir / "best.train.safetensors");
  EXPECT_EQ(best.progress.step, 1);
  EXPECT_EQ(best.progress.rng, progress_at(1).rng);
  EXPECT_EQ(best.model.at("w").to_vector<double>(), std::vector<double>(6, 1.0));
  EXPECT_EQ(load_checkpoint(dir.path, true).progress.step, 2);  // the directory means the newest

  mark_best(dir.path, 2);
  EXPECT_EQ(load_checkpoint(dir / "best.model.safetensors", true).progress.step, 2);
  const std::string msg = error_message<IOError>([&] { mark_best(dir.path, 7); });
  EXPECT_NE(msg.find("step-00000007"), std::string::npos) << msg;
}

TEST(Checkpoint, IncompletePairsAreIgnored) {
  TempDir dir;
  for (int64_t s = 1; s <= 3; ++s) save_dummy(dir.path, s, 10);
  fs::remove(step_file(dir, 3, "train"));  // a crash between the two writes
  EXPECT_EQ(list_checkpoints(dir.path), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(load_checkpoint(dir.path, true).progress.step, 2);
  fs::remove(step_file(dir, 2, "model"));
  EXPECT_EQ(list_checkpoints(dir.path), (std::vector<int64_t>{1}));
  EXPECT_EQ(load_checkpoint(dir.path, true).progress.step, 1);

  // A model file on its own is enough for eval/decode, not for resuming.
  Checkpoint weights = load_checkpoint(step_file(dir, 3, "model"), false);
  EXPECT_EQ(weights.model.at("w").to_vector<double>(), std::vector<double>(6, 3.0));
  EXPECT_TRUE(weights.optimizer.empty());
  const std::string msg = error_message<IOError>([&] { load_checkpoint(step_file(dir, 3, "model"), true); });
  EXPECT_NE(msg.find(step_file(dir, 3, "train")), std::string::npos) << msg;
  EXPECT_NE(msg.find("resume"), std::string::npos) << msg;
}

TEST(Checkpoint, StaleTemporariesAreRemoved) {
  TempDir dir;
  save_dummy(dir.path, 1, 3);
  write_bytes(dir / "step-00000002.model.safetensors.tmp.4242", "half a file");
  write_bytes(dir / "best.train.safetensors.tmp.17", "x");
  EXPECT_EQ(list_checkpoints(dir.path), (std::vector<int64_t>{1}));
  remove_stale_temporaries(dir.path);
  EXPECT_FALSE(has(dir / "step-00000002.model.safetensors.tmp.4242"));
  EXPECT_FALSE(has(dir / "best.train.safetensors.tmp.17"));
  EXPECT_TRUE(has(step_file(dir, 1, "model")));
  EXPECT_TRUE(has(step_file(dir, 1, "train")));
  EXPECT_EQ(load_checkpoint(dir.path, true).progress.step, 1);
  remove_stale_temporaries(dir / "does-not-exist");  // nothing to do, no error
}

TEST(Checkpoint, MissingOrCorruptFilesAreIOErrorsNamingTheFile) {
  TempDir dir;
  auto load_msg = [](const std::string& path, bool train) {
    return error_message<IOError>([&] { load_checkpoint(path, train); });
  };
  auto expect_has = [](const std::string& msg, const std::string& part) {
    EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
  };

  expect_has(load_msg(dir.path, false), "no complete checkpoint in " + dir.path);
  expect_has(load_msg(dir / "nowhere", false), dir / "nowhere");
  expect_has(load_msg(dir / "nowhere.model.safetensors", false), dir / "nowhere.model.safetensors");

  save_dummy(dir.path, 1, 3);
  const std::string model = step_file(dir, 1, "model"), train = step_file(dir, 1, "train");
  const std::string good_model = read_file_bytes(model), good_train = read_file_bytes(train);

  write_bytes(model, good_model.substr(0, good_model.size() / 2));  // truncated
  expect_has(load_msg(dir.path, false), model);
  write_bytes(model, std::string(200, '\x7f'));  // garbage
  expect_has(load_msg(dir.path, false), model);
  write_bytes(model, "");
  expect_has(load_msg(model, false), model);
  write_bytes(model, good_model);

  write_bytes(train, good_train.substr(0, good_train.size() - 5));
  expect_has(load_msg(dir.path, true), train);
  write_bytes(train, good_train);
  EXPECT_EQ(load_checkpoint(dir.path, true).progress.step, 1);

  // Valid safetensors, but not a checkpoint: no format tag, or a train file without its keys.
  save_safetensors(model, {{"w", Tensor::zeros({1})}});
  expect_has(load_msg(dir.path, false), model);
  expect_has(load_msg(dir.path, false), "not an attograd checkpoint");
  write_bytes(model, good_model);
  save_safetensors(train, {{"train.step", Tensor::from_vector(std::vector<int64_t>{1}, {})}},
                   {{"format", "attograd-checkpoint-v1"}});
  const std::string msg = load_msg(dir.path, true);
  expect_has(msg, train);
  expect_has(msg, "loader.epoch");
  // Metadata whose JSON is broken.
  save_safetensors(model, {{"w", Tensor::zeros({1})}},
                   {{"format", "attograd-checkpoint-v1"}, {"config", "{not json"}, {"task", "{}"},
                    {"vocab_src", "[]"}, {"vocab_tgt", "[]"}});
  expect_has(load_msg(dir.path, false), "config");
}

// ---- one run, one checkpoint: steps, run ids, checksums ----------------------------------------

namespace {

// A step-N checkpoint of run `run` in dir (the dummy state of save_dummy).
void save_run(const std::string& dir, int64_t step, const std::string& run, int64_t keep_last = 10) {
  TensorMap model{{"w", Tensor::full({2, 3}, static_cast<double>(step))}};
  TensorMap optim{{"state.0.step", Tensor::from_vector(std::vector<int64_t>{step}, {})}};
  CheckpointMeta m;
  m.config = {{"d_model", 4}};
  m.vocab_src = m.vocab_tgt = {"<pad>", "<bos>", "<eos>", "<unk>", "x"};
  m.task = {{"task", "copy"}};
  m.program = "copy_task";
  m.run_id = run;
  save_checkpoint(dir, model, optim, m, progress_at(step), keep_last);
}

// Rewrites a safetensors file with `edit` applied to its tensors and metadata.
void edit_file(const std::string& path, const std::function<void(SafetensorsData&)>& edit) {
  SafetensorsData d = load_safetensors(path);
  edit(d);
  save_safetensors(path, d.tensors, d.metadata);
}

std::string load_error(const std::string& path, bool train = true) {
  return error_message<IOError>([&] { load_checkpoint(path, train); });
}

void expect_parts(const std::string& msg, std::initializer_list<std::string> parts) {
  for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

}  // namespace

TEST(Checkpoint, BothFilesRecordTheRunProgramAndAChecksum) {
  TempDir dir;
  save_run(dir.path, 3, "0123456789abcdef");
  for (const char* kind : {"model", "train"}) {
    const Metadata md = load_safetensors(step_file(dir, 3, kind)).metadata;
    EXPECT_EQ(md.at("run"), "0123456789abcdef") << kind;
    EXPECT_EQ(md.at("crc32").size(), 8u) << kind;
  }
  const Checkpoint c = load_checkpoint(dir.path, true);
  EXPECT_EQ(c.meta.run_id, "0123456789abcdef");
  EXPECT_EQ(c.meta.program, "copy_task");
}

TEST(Checkpoint, FlippedTensorBytesFailTheChecksum) {
  // Probe W17: four flipped bytes in tensor data loaded without a word.
  TempDir dir;
  save_run(dir.path, 3, "r1");
  for (const char* kind : {"model", "train"}) {
    const std::string path = step_file(dir, 3, kind), good = read_file_bytes(path);
    std::string bad = good;
    for (size_t i = bad.size() - 12; i < bad.size() - 8; ++i) bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    write_bytes(path, bad);
    expect_parts(load_error(dir.path), {path, "data does not match its checksum", "the file is corrupt"});
    write_bytes(path, good);
  }
  // A file written before checksums loads.
  for (const char* kind : {"model", "train"})
    edit_file(step_file(dir, 3, kind), [](SafetensorsData& d) { d.metadata.erase("crc32"); });
  EXPECT_EQ(load_checkpoint(dir.path, true).progress.step, 3);
}

TEST(Checkpoint, ARenamedOrEditedTrainFileIsRefusedNamingBothFiles) {
  // Probe B11: a step-15 train file renamed to step 20 resumed at step 15 with
  // step-20 weights; train.step -5 or 2^62 resumed too.
  TempDir dir;
  save_run(dir.path, 15, "r1");
  save_run(dir.path, 20, "r1");
  const std::string model20 = step_file(dir, 20, "model"), train20 = step_file(dir, 20, "train");
  const std::string good = read_file_bytes(train20);
  fs::copy_file(step_file(dir, 15, "train"), train20, fs::copy_options::overwrite_existing);
  expect_parts(load_error(dir.path), {train20 + " (train.step 15)", model20 + " (step 20)", "are not one checkpoint"});

  for (const int64_t step : {int64_t{-5}, int64_t{1} << 62}) {
    write_bytes(train20, good);
    edit_file(train20, [&](SafetensorsData& d) {  // as an editor would: no checksum left to betray it
      d.tensors["train.step"] = Tensor::from_vector(std::vector<int64_t>{step}, {});
      d.metadata.erase("crc32");
    });
    expect_parts(load_error(dir.path), {train20});
  }
  write_bytes(train20, good);
  // Both files renamed: the names no longer say the steps they hold.
  const std::string model30 = dir / "step-00000030.model.safetensors", train30 = dir / "step-00000030.train.safetensors";
  fs::rename(model20, model30);
  fs::rename(train20, train30);
  expect_parts(load_error(dir.path), {train30, "holds step 20, but its name says step 30"});
  fs::remove(train30);
  expect_parts(load_error(model30, false), {model30, "holds step 20, but its name says step 30"});
  fs::rename(model30, model20);
  write_bytes(train30, good);
  fs::rename(train30, train20);
  EXPECT_EQ(load_checkpoint(dir.path, true).progress.step, 20);
}

TEST(Checkpoint, ATrainFileOfAnotherRunIsRefused) {
  TempDir a, b;
  save_run(a.path, 5, "aaaa");
  save_run(b.path, 5, "bbbb");
  fs::copy_file(step_file(b, 5, "train"), step_file(a, 5, "train"), fs::copy_options::overwrite_existing);
  expect_parts(load_error(a.path), {step_file(a, 5, "train") + " (run bbbb)", step_file(a, 5, "model") + " (run aaaa)",
                                    "two different runs"});
  // Checkpoints written before run ids load.
  for (const char* kind : {"model", "train"})
    edit_file(step_file(a, 5, kind), [](SafetensorsData& d) { d.metadata.erase("run"); });
  EXPECT_EQ(load_checkpoint(a.path, true).progress.step, 5);
}

TEST(Checkpoint, PruningTouchesOnlyTheRunsOwnCheckpoints) {
  // Probe B3: --keep-last counted the other run's newer checkpoints and
  // deleted the new run's own right after writing them.
  TempDir dir;
  for (int64_t s : {4, 5, 6}) save_run(dir.path, s, "old");
  for (int64_t s : {1, 2, 3}) save_run(dir.path, s, "new", /*keep_last=*/1);
  EXPECT_EQ(list_checkpoints(dir.path), (std::vector<int64_t>{3, 4, 5, 6}));
  save_dummy(dir.path, 7, 2);  // a checkpoint without a run id prunes those without one only
  EXPECT_EQ(list_checkpoints(dir.path), (std::vector<int64_t>{3, 4, 5, 6, 7}));
}

TEST(Checkpoint, AReaderOfAnotherTaskNamesTheProgramThatWroteTheFile) {
  // Probe W4: "GPTConfig: bad config JSON: [json.exception.out_of_range.403] key 'vocab' not found".
  TempDir dir;
  save_run(dir.path, 2, "r");
  const std::string msg =
      error_message<IOError>([&] { load_checkpoint(dir.path, false, CheckpointReader{"lm", "lm"}); });
  expect_parts(msg, {step_file(dir, 2, "model") + " was written by copy_task (task 'copy'), not by lm"});
  EXPECT_EQ(load_checkpoint(dir.path, false, CheckpointReader{"copy_task", "copy"}).progress.step, 2);
}

// ---- checkpoint directories ------------------------------------------------------------------

TEST(RunDirectory, AFreshRunRefusesAnotherRunsFiles) {
  TempDir dir;
  {
    const auto first = RunDirectory::claim(dir.path, DirMode::fresh);
    EXPECT_FALSE(first->resumes());
    EXPECT_EQ(first->run_id().size(), 16u);
    first->record({{"program", "lm"}});
    save_run(dir.path, 600, first->run_id());
  }
  const std::string msg = error_message<IOError>([&] { RunDirectory::claim(dir.path, DirMode::fresh); });
  expect_parts(msg, {dir.path + " holds checkpoints of another run (lm, up to step 600); pass --resume to continue it, "
                                "--overwrite to replace it, or another --checkpoint-dir"});
  // Files of a run that wrote no checkpoint yet (lm's tokenizer) count too.
  TempDir tok;
  write_bytes(tok / "tokenizer.json", "{}");
  expect_parts(error_message<IOError>([&] { RunDirectory::claim(tok.path, DirMode::fresh); }),
               {tok.path + " holds files of another run"});
}

TEST(RunDirectory, ResumeContinuesTheNewestCheckpointsRun) {
  TempDir dir;
  save_run(dir.path, 4, "feedfacecafebeef");
  const auto run = RunDirectory::claim(dir.path, DirMode::resume);
  EXPECT_TRUE(run->resumes());
  EXPECT_EQ(run->run_id(), "feedfacecafebeef");
  EXPECT_EQ(run->note(), "");
}

TEST(RunDirectory, OverwriteRemovesTheOldRunsFilesOnly) {
  TempDir dir;
  save_run(dir.path, 4, "old");
  mark_best(dir.path, 4);
  write_bytes(dir / "tokenizer.json", "{}");
  write_bytes(dir / "notes.txt", "mine");
  const auto run = RunDirectory::claim(dir.path, DirMode::overwrite);
  EXPECT_FALSE(run->resumes());
  EXPECT_NE(run->run_id(), "old");
  expect_parts(run->note(), {"removed 5 file(s) of the previous run"});
  EXPECT_TRUE(list_checkpoints(dir.path).empty());
  EXPECT_FALSE(has(dir / "best.model.safetensors"));
  EXPECT_FALSE(has(dir / "tokenizer.json"));
  EXPECT_EQ(read_file_bytes(dir / "notes.txt"), "mine");
}

TEST(RunDirectory, ResumeInANewDirectoryStartsANewRun) {
  TempDir dir;
  const auto run = RunDirectory::claim(dir / "new", DirMode::resume);
  EXPECT_FALSE(run->resumes());
  EXPECT_EQ(run->note(), "nothing to resume in " + (dir / "new") + ": starting a new run");
}

TEST(RunDirectory, ASecondRunWhileTheFirstHoldsTheLockIsRefusedNamingItsPid) {
  TempDir dir;
  auto first = RunDirectory::claim(dir.path, DirMode::fresh);
  const std::string msg = error_message<IOError>([&] { RunDirectory::claim(dir.path, DirMode::resume); });
  expect_parts(msg, {dir.path + " is in use by another training run (pid " + std::to_string(getpid()) + ")"});
  first.reset();  // the lock goes with the run
  EXPECT_FALSE(RunDirectory::claim(dir.path, DirMode::resume)->resumes());
}

// ---- exact resume and determinism of train_seq2seq ---------------------------------------------

namespace {

constexpr int64_t kHalf = 6;  // N: resume at step N of 2N (mid-epoch: 40 examples / 8 = 5 batches per epoch)

TrainOptions resume_options(const std::string& dir, int64_t steps, uint64_t seed) {
  TrainOptions o;
  o.steps = steps;
  o.batch_size = 8;
  o.lr = 3e-3;
  o.schedule = "warmup";  // independent of the total steps, so an N-step run is the start of a 2N-step run
  o.warmup = 3;
  o.eval_every = 0;
  o.eval_size = 16;
  o.checkpoint_dir = dir;
  o.keep_last = 10;
  o.seed = seed;
  o.threads = 1;
  o.samples = 0;
  o.quiet = true;
  return o;
}

// The pieces of a tiny copy-task training run with dropout 0.2, a shuffled
// finite training set (so the data position spans epochs) and everything
// seeded from opt.seed; `model_seed` seeds the model init and dropout generator.
struct TinyRun {
  TinyRun(const TrainOptions& opt, uint64_t model_seed, int64_t d_model)
      : init(model_seed), dropout_gen(std::make_shared<Generator>(mix_seed(model_seed, 0xd50u))),
        model(config(d_model), init, dropout_gen),
        loader(train_set, {.batch_size = opt.batch_size, .shuffle = true, .seed = opt.seed}) {
    set_num_threads(opt.threads);
    hooks.task = {{"task", "copy"}, {"symbols", 6}};
    hooks.src_vocab = hooks.tgt_vocab = &vocab;
  }
  static TransformerConfig config(int64_t d_model) {
    TransformerConfig c = tiny_config(0.2);
    c.d_model = d_model;
    return c;
  }
  static CopyTaskOptions heldout_task() {
    CopyTaskOptions held = tiny_task(16);
    held.seed = 77;
    return held;
  }
  const Vocab vocab = copy_task_vocab(6);
  CopyTaskDataset train_set{tiny_task(40)};
  CopyTaskDataset heldout{heldout_task()};
  Generator init;
  std::shared_ptr<Generator> dropout_gen;
  Seq2SeqTransformer model;
  DataLoader loader;
  TaskHooks hooks;
};

// A TinyRun trained. `scramble` seeds the model init and dropout generator
// differently; a resumed run must not depend on them.
TrainSummary tiny_run(const TrainOptions& opt, bool scramble = false, int64_t d_model = 16) {
  TinyRun r(opt, scramble ? opt.seed + 1000 : opt.seed, d_model);
  return train_seq2seq(r.model, r.dropout_gen, r.loader, r.heldout, opt, r.hooks);
}

std::vector<double> part(const std::vector<double>& v, size_t begin, size_t end) {
  return std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(begin), v.begin() + static_cast<std::ptrdiff_t>(end));
}

void expect_same_losses(const std::vector<double>& a, const std::vector<double>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << what << ", loss " << i;  // bit for bit
}

}  // namespace

TEST(Resume, StoppingAtNAndResumingTo2NEqualsAnUninterruptedRun) {
  TempDir whole, split;
  const TrainSummary full = tiny_run(resume_options(whole.path, 2 * kHalf, 5));
  ASSERT_EQ(full.losses.size(), static_cast<size_t>(2 * kHalf));

  const TrainSummary first = tiny_run(resume_options(split.path, kHalf, 5));
  EXPECT_EQ(list_checkpoints(split.path), (std::vector<int64_t>{kHalf}));
  expect_same_losses(first.losses, part(full.losses, 0, kHalf), "first half");

  write_bytes(split / "step-00000009.model.safetensors.tmp.99", "stale");
  TrainOptions resumed = resume_options(split.path, 2 * kHalf, 5);
  resumed.resume = true;
  const TrainSummary second = tiny_run(resumed, /*scramble=*/true);
  expect_same_losses(second.losses, part(full.losses, kHalf, 2 * kHalf), "resumed half");
  EXPECT_EQ(second.last_eval.loss, full.last_eval.loss);
  EXPECT_EQ(list_checkpoints(split.path), (std::vector<int64_t>{kHalf, 2 * kHalf}));
  EXPECT_FALSE(has(split / "step-00000009.model.safetensors.tmp.99"));

  // The final checkpoints of both runs hold the same model and optimizer state.
  Checkpoint a = load_checkpoint(whole.path, true), b = load_checkpoint(split.path, true);
  expect_identical_maps(a.model, b.model, "final model");
  expect_identical_maps(a.optimizer, b.optimizer, "final optimizer");
  EXPECT_EQ(a.progress.rng, b.progress.rng);
  EXPECT_EQ(a.progress.loader, b.progress.loader);
}

TEST(Resume, FromAMidRunCheckpointWithATotalStepSchedule) {
  // An interrupted run (killed after its step-4 checkpoint) resumes onto the
  // same cosine schedule and reproduces the rest exactly.
  TempDir whole, killed;
  TrainOptions o = resume_options(whole.path, 2 * kHalf, 8);
  o.schedule = "cosine";
  o.warmup = 2;
  o.checkpoint_every = 4;
  const TrainSummary full = tiny_run(o);
  EXPECT_EQ(list_checkpoints(whole.path), (std::vector<int64_t>{4, 8, 12}));
  for (const char* kind : {"model", "train"}) fs::copy_file(step_file(whole, 4, kind), step_file(killed, 4, kind));

  o.checkpoint_dir = killed.path;
  o.resume = true;
  const TrainSummary rest = tiny_run(o, /*scramble=*/true);
  expect_same_losses(rest.losses, part(full.losses, 4, 2 * kHalf), "after step 4");
}

TEST(Resume, RefusesAMismatchingConfig) {
  TempDir dir;
  tiny_run(resume_options(dir.path, 2, 5));
  TrainOptions o = resume_options(dir.path, 4, 5);
  o.resume = true;
  const std::string msg = error_message<ValueError>([&] { tiny_run(o, false, /*d_model=*/8); });
  EXPECT_NE(msg.find("model config"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"d_model\":16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"d_model\":8"), std::string::npos) << msg;
}

TEST(Resume, ANewOrEmptyDirectoryStartsANewRunButAnIncompleteOneRefuses) {
  // Probe W13: a job script may always pass --resume.
  TempDir fresh, empty, broken;
  const TrainSummary first = tiny_run(resume_options(fresh.path, 3, 5));
  TrainOptions o = resume_options(empty.path, 3, 5);
  o.resume = true;
  const TrainSummary resumed = tiny_run(o);
  EXPECT_EQ(resumed.trained, 3);
  expect_same_losses(resumed.losses, first.losses, "a --resume into an empty directory");
  o.checkpoint_dir = empty.path + "/new/deeper";
  EXPECT_EQ(tiny_run(o).trained, 3);

  for (const char* kind : {"model"}) fs::copy_file(step_file(fresh, 3, kind), step_file(broken, 3, kind));
  o.checkpoint_dir = broken.path;
  const std::string msg = error_message<IOError>([&] { tiny_run(o); });
  EXPECT_NE(msg.find("no complete checkpoint"), std::string::npos) << msg;
  EXPECT_NE(msg.find("step-00000003.model.safetensors"), std::string::npos) << msg;
}

TEST(Resume, AFinishedRunIsEvaluatedNotTrained) {
  // Probe B8: "held-out loss 0.0000" / "final loss nan" were invented.
  TempDir dir;
  const TrainSummary full = tiny_run(resume_options(dir.path, kHalf, 5));
  ASSERT_GT(full.last_eval.loss, 0);
  for (const int64_t steps : {kHalf, kHalf - 2}) {
    TrainOptions o = resume_options(dir.path, steps, 5);
    o.resume = true;
    const TrainSummary again = tiny_run(o, /*scramble=*/true);
    EXPECT_EQ(again.trained, 0);
    EXPECT_EQ(again.steps, kHalf);  // the checkpoint's step, not --steps
    EXPECT_TRUE(again.losses.empty());
    EXPECT_EQ(again.last_eval.loss, full.last_eval.loss);  // the loaded model, really evaluated
    EXPECT_EQ(again.last_eval.examples, full.last_eval.examples);
  }
  EXPECT_EQ(list_checkpoints(dir.path), (std::vector<int64_t>{kHalf}));  // nothing rewritten
}

TEST(Resume, TheLogDropsTheRecordsPastTheCheckpoint) {
  // Probe W2: killed after step 10 with a checkpoint at step 8, the resumed
  // run logged steps 9 and 10 a second time.
  TempDir whole, killed;
  TrainOptions o = resume_options(whole.path, 12, 5);
  o.checkpoint_every = 4;
  o.log_every = 1;
  o.log_path = whole / "log.jsonl";
  tiny_run(o);
  const auto steps_logged = [](const std::string& path) {
    std::vector<int64_t> steps;
    for (const std::string& line : attograd::testing::lines_of(read_file_bytes(path)))
      if (!nlohmann::json::parse(line).contains("eval_loss")) steps.push_back(nlohmann::json::parse(line).at("step"));
    return steps;
  };
  std::vector<int64_t> once(12);
  for (int64_t i = 0; i < 12; ++i) once[static_cast<size_t>(i)] = i + 1;
  ASSERT_EQ(steps_logged(o.log_path), once);

  for (const char* kind : {"model", "train"}) fs::copy_file(step_file(whole, 8, kind), step_file(killed, 8, kind));
  std::string log;
  for (const std::string& line : attograd::testing::lines_of(read_file_bytes(o.log_path)))
    if (nlohmann::json::parse(line).at("step").get<int64_t>() <= 10) log += line + "\n";
  write_bytes(killed / "log.jsonl", log + R"({"step": 11, "lo)");  // the kill cut the last record
  o.checkpoint_dir = killed.path;
  o.log_path = killed / "log.jsonl";
  o.resume = true;
  tiny_run(o);
  EXPECT_EQ(steps_logged(o.log_path), once);
  const auto before = attograd::testing::lines_of(read_file_bytes(whole / "log.jsonl"));
  const auto after = attograd::testing::lines_of(read_file_bytes(o.log_path));
  EXPECT_EQ(std::vector<std::string>(after.begin(), after.begin() + 8), std::vector<std::string>(before.begin(), before.begin() + 8));
}

TEST(Resume, AFailedLogWriteStopsTheRun) {
  // Probe B7: on a full disk the log stopped silently, exit 0.
  TempDir dir;
  TrainOptions o = resume_options(dir.path, 3, 5);
  o.log_every = 1;
  o.log_path = "/dev/full";
  const std::string msg = error_message<IOError>([&] { tiny_run(o); });
  EXPECT_NE(msg.find("log: cannot write /dev/full: No space left on device"), std::string::npos) << msg;
}

namespace {

// The copy task's TrainTask with every evaluation made slower by `delay` seconds.
class SlowEvalTask : public TrainTask {
 public:
  SlowEvalTask(std::unique_ptr<TrainTask> inner, double delay) : inner_(std::move(inner)), delay_(delay) {}
  Module& model() override { return inner_->model(); }
  int64_t model_width() const override { return inner_->model_width(); }
  int64_t batch_size() const override { return inner_->batch_size(); }
  CheckpointMeta checkpoint_meta() const override { return inner_->checkpoint_meta(); }
  nlohmann::json reparsed_config(const nlohmann::json& saved) const override { return inner_->reparsed_config(saved); }
  Generator& dropout_generator() override { return inner_->dropout_generator(); }
  ShardLoss next_loss(double label_smoothing) override { return inner_->next_loss(label_smoothing); }
  TaskEval evaluate(int64_t max_examples) override {
    std::this_thread::sleep_for(std::chrono::duration<double>(delay_));
    return inner_->evaluate(max_examples);
  }
  void save_data_position(TrainProgress& p) const override { inner_->save_data_position(p); }
  std::optional<std::string> restore_data_position(const TrainProgress& p) override {
    return inner_->restore_data_position(p);
  }

 private:
  std::unique_ptr<TrainTask> inner_;
  double delay_;
};

// tiny_run's training through train() with evaluations slowed by `delay` seconds.
void slow_eval_run(const TrainOptions& opt, double delay) {
  TinyRun r(opt, opt.seed, 16);
  SlowEvalTask task(seq2seq_task(r.model, r.dropout_gen, r.loader, r.heldout, r.hooks), delay);
  train(task, opt);
}

std::vector<nlohmann::json> log_records(const std::string& path) {
  std::vector<nlohmann::json> out;
  for (const std::string& line : attograd::testing::lines_of(read_file_bytes(path))) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

TEST(Log, TrainSecondsCountOnlyTrainingStepsAndContinueOverAResume) {
  // Time to a target held-out loss is read from train_s: a slow evaluation
  // (and its checkpoint) must not count, and an interrupted run must not restart the clock.
  constexpr double kDelay = 0.05;
  TempDir dir;
  TrainOptions o = resume_options(dir.path, 8, 5);
  o.eval_every = 2;
  o.log_every = 1;
  o.log_path = dir / "log.jsonl";
  slow_eval_run(o, kDelay);
  const auto records = log_records(o.log_path);
  double previous = 0;
  int evals = 0;
  for (const nlohmann::json& r : records) {
    SCOPED_TRACE(r.dump());
    ASSERT_TRUE(r.contains("train_s") && r.contains("elapsed_s"));
    const double train_s = r.at("train_s"), elapsed_s = r.at("elapsed_s");
    EXPECT_GE(train_s, previous);
    EXPECT_LE(train_s, elapsed_s);
    if (r.contains("eval_loss")) {
      ++evals;
      continue;
    }
    // Every earlier evaluation slept kDelay inside elapsed_s and outside train_s.
    EXPECT_GE(elapsed_s - train_s, evals * kDelay);
    previous = train_s;
  }
  EXPECT_EQ(evals, 4);
  EXPECT_GT(previous, 0);

  // Stopped after step 4 and resumed: train_s goes on from step 4's, elapsed_s restarts.
  TempDir split;
  o.checkpoint_dir = split.path;
  o.log_path = split / "log.jsonl";
  o.stop_after = 4;
  slow_eval_run(o, 0);
  o.stop_after = 0;
  o.resume = true;
  slow_eval_run(o, 0);
  const auto resumed = log_records(o.log_path);
  ASSERT_EQ(resumed.size(), records.size());
  double at_4 = -1;
  previous = 0;
  for (const nlohmann::json& r : resumed) {
    SCOPED_TRACE(r.dump());
    EXPECT_GE(r.at("train_s").get<double>(), previous);
    previous = r.at("train_s");
    if (r.at("step") == 4) at_4 = previous;
    if (r.at("step") == 5) {
      EXPECT_LT(r.at("elapsed_s").get<double>(), r.at("train_s").get<double>());
    }
  }
  EXPECT_GT(at_4, 0);
}

TEST(Resume, EveryOptimizerInTheTableResumesExactly) {
  // Each --optimizer row saves its state and its name, and a resumed run
  // continues it bit for bit; the optimizers really differ.
  std::vector<std::vector<double>> trajectories;
  for (const OptimizerChoice& choice : optimizer_choices()) {
    SCOPED_TRACE(std::string(choice.name));
    TempDir whole, split;
    TrainOptions o = resume_options(whole.path, 2 * kHalf, 5);
    o.optimizer = choice.name;
    const TrainSummary full = tiny_run(o);
    o.checkpoint_dir = split.path;
    o.steps = kHalf;
    tiny_run(o);
    EXPECT_EQ(load_checkpoint(split.path, true).progress.optimizer, std::string(choice.name));
    o.steps = 2 * kHalf;
    o.resume = true;
    const TrainSummary rest = tiny_run(o, /*scramble=*/true);
    expect_same_losses(rest.losses, part(full.losses, kHalf, 2 * kHalf), "resumed half");
    trajectories.push_back(full.losses);
  }
  ASSERT_EQ(trajectories.size(), 3u);
  EXPECT_NE(trajectories[0], trajectories[1]);
  EXPECT_NE(trajectories[1], trajectories[2]);
}

TEST(Resume, RefusesAnotherOptimizerNamingTheSavedOne) {
  // Adam and AdamW state dicts have the same keys: only the saved name tells them apart.
  for (const char* other : {"adam", "sgd"}) {
    TempDir dir;
    tiny_run(resume_options(dir.path, 2, 5));  // adamw, the default
    TrainOptions o = resume_options(dir.path, 4, 5);
    o.optimizer = other;
    o.resume = true;
    const std::string msg = error_message<ValueError>([&] { tiny_run(o); });
    EXPECT_NE(msg.find(fmt::format("was trained with --optimizer adamw, but the flags give --optimizer {}; hint: pass "
                                   "--optimizer adamw", other)), std::string::npos) << msg;
  }
}

TEST(Resume, AnUnknownOptimizerOrScheduleNamesTheTable) {
  TrainOptions o = resume_options("", 2, 5);
  o.optimizer = "rmsprop";
  EXPECT_NE(error_message<ValueError>([&] { tiny_run(o); }).find("--optimizer must be sgd, adam or adamw, got 'rmsprop'"),
            std::string::npos);
  o.optimizer = "adamw";
  o.schedule = "linear";
  EXPECT_NE(error_message<ValueError>([&] { tiny_run(o); })
                .find("--schedule must be constant, warmup, cosine, noam, inverse-sqrt or step, got 'linear'"),
            std::string::npos);
}

TEST(Determinism, SameSeedSameLossesOtherSeedOtherLosses) {
  const TrainSummary a = tiny_run(resume_options("", kHalf, 21));
  const TrainSummary b = tiny_run(resume_options("", kHalf, 21));
  const TrainSummary c = tiny_run(resume_options("", kHalf, 22));
  ASSERT_EQ(a.losses.size(), static_cast<size_t>(kHalf));
  for (double l : a.losses) EXPECT_TRUE(std::isfinite(l) && l > 0) << l;
  expect_same_losses(a.losses, b.losses, "same seed");
  EXPECT_EQ(a.last_eval.loss, b.last_eval.loss);
  EXPECT_EQ(a.last_eval.outputs, b.last_eval.outputs);
  size_t differ = 0;
  for (size_t i = 0; i < a.losses.size(); ++i) differ += a.losses[i] != c.losses[i];
  EXPECT_EQ(differ, a.losses.size()) << "another seed should change every step's loss";
}
