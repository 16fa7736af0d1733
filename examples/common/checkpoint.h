// Training checkpoints in the safetensors format, so PyTorch and other tools
// read the weights directly.
//
// A checkpoint at step N is two files in the checkpoint directory:
//   step-<N>.model.safetensors  the model's state_dict under its dotted names;
//                               __metadata__ holds "config" (model config JSON),
//                               "vocab_src"/"vocab_tgt" (JSON token lists),
//                               "task" (the task's settings as JSON) and "step"
//   step-<N>.train.safetensors  everything else a resume needs: optimizer state
//                               ("optim.*"), the dropout generator ("rng.dropout",
//                               4 words), the data position ("loader.epoch",
//                               "loader.position", or "rng.data" for a task
//                               drawing random windows), "schedule.last_step",
//                               "train.step", "train.best_eval_loss";
//                               __metadata__ "optimizer" names the optimizer
//                               (its row in train_choices.h)
// Each file is written atomically (temporary file, fsync, rename), the train
// file first: a checkpoint counts only when both of its files are present,
// so a crash at any moment leaves the previous checkpoint usable. The newest
// `keep_last` checkpoints are kept; best.model/best.train hold the one with the
// lowest held-out loss.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <attograd/autograd/io/safetensors.h>
#include <attograd/data/loader.h>

namespace attograd {

struct CheckpointMeta {
  nlohmann::json config;  // model config
  std::vector<std::string> vocab_src, vocab_tgt;
  nlohmann::json task;    // task settings (lengths, symbols, language, ...)
};

struct TrainProgress {
  int64_t step = 0;
  LoaderState loader;
  Generator::State rng{};  // the dropout generator
  // The data generator of a task that draws its batches at random (lm's
  // windows); unset for a loader's position.
  std::optional<Generator::State> data_rng;
  int64_t schedule_step = 0;
  double best_eval_loss = INFINITY;
  // The optimizer's name; unset in checkpoints written before programs could
  // choose one (their optimizer state is still checked key by key on load).
  std::optional<std::string> optimizer;
  // Rows per step over all processes (the loader's batch size, times the
  // number of processes when data-parallel); unset in older checkpoints.
  std::optional<int64_t> global_batch;
};

struct Checkpoint {
  std::string model_path, train_path;
  TensorMap model;           // state_dict
  TensorMap optimizer;       // optimizer state_dict (without the "optim." prefix)
  CheckpointMeta meta;
  TrainProgress progress;
};

// Writes step-<step>.{model,train}.safetensors, then prunes to keep_last.
// Returns the model file's path. IOError (the previous files intact) on failure.
std::string save_checkpoint(const std::string& dir, const TensorMap& model_state, const TensorMap& optimizer_state,
                            const CheckpointMeta& meta, const TrainProgress& progress, int64_t keep_last);
// Copies the given step's files to best.{model,train}.safetensors (atomically).
void mark_best(const std::string& dir, int64_t step);

// Loads a checkpoint given as a directory (its newest complete checkpoint), a
// model file (…model.safetensors; the train file beside it is optional unless
// need_train_state) or a step prefix. IOError naming the file when missing or corrupt.
Checkpoint load_checkpoint(const std::string& path, bool need_train_state);
// The two halves of load_checkpoint, for files already parsed (and for the
// fuzzer): a model file's metadata, and a train file's tensors (optimizer
// entries aside). IOError naming `file` when a key is missing or malformed.
CheckpointMeta parse_checkpoint_meta(const Metadata& metadata, const std::string& file);
TrainProgress parse_train_progress(const TensorMap& tensors, const std::string& file);
// Steps of the complete checkpoints in dir, oldest first.
std::vector<int64_t> list_checkpoints(const std::string& dir);
// Removes temporary files left by an interrupted write (*.tmp.*).
void remove_stale_temporaries(const std::string& dir);

}  // namespace attograd
