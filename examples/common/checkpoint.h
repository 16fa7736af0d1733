// The example programs' shared code (namespace attograd::app, never installed), not the library.
// Training checkpoints in the safetensors format, so PyTorch and other tools
// read the weights directly.
//
// A checkpoint at step N is two files in the checkpoint directory:
//   step-<N>.model.safetensors  the model's state_dict under its dotted names;
//                               __metadata__ holds "config" (model config JSON),
//                               "vocab_src"/"vocab_tgt" (JSON token lists),
//                               "task" (the task's settings as JSON), "step" and
//                               "program" (the program that wrote it)
//   step-<N>.train.safetensors  everything else a resume needs: optimizer state
//                               ("optim.*"), the dropout generator ("rng.dropout",
//                               4 words), the data position ("loader.epoch",
//                               "loader.position", or "rng.data" for a task
//                               drawing random windows), "schedule.last_step",
//                               "train.step", "train.best_eval_loss";
//                               __metadata__ "optimizer" names the optimizer
//                               (its row in train_choices.h) and "step" the step
// Both files' __metadata__ also hold "run", the id of the run that wrote them,
// and "crc32", zlib's CRC-32 of their tensors' bytes (each tensor row-major,
// in name order). A load checks both files against each other (the same step
// in the name, in "step" and in train.step; the same run) and against their
// checksums; files written before these fields existed still load.
// Each file is written atomically (temporary file, fsync, rename), the train
// file first: a checkpoint counts only when both of its files are present,
// so a crash at any moment leaves the previous checkpoint usable. The newest
// `keep_last` checkpoints of the run are kept (another run's are never
// touched); best.model/best.train hold the one with the lowest held-out loss.
//
// A checkpoint directory belongs to one run at a time (RunDirectory): run.json
// records it, run.lock is flock'ed while it trains.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <attograd/autograd/io/safetensors.h>
#include <attograd/data/loader.h>

namespace attograd::app {

struct CheckpointMeta {
  nlohmann::json config;  // model config
  std::vector<std::string> vocab_src, vocab_tgt;
  nlohmann::json task;    // task settings (lengths, symbols, language, ...)
  std::string program;    // the program that wrote it ("copy_task", "lm", ...); "" in older checkpoints
  std::string run_id;     // the run that wrote it; "" in older checkpoints
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
  // The token budget per step over all processes when batches were cut by
  // tokens (LoaderOptions::max_tokens times the processes); unset otherwise.
  std::optional<int64_t> global_max_tokens;
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

// Writes a model file outside a training run (heads_study's converted
// checkpoint): `metadata` as given, with "crc32" computed for `tensors`.
void save_model_file(const std::string& path, const TensorMap& tensors, Metadata metadata);

// The program reading a checkpoint and the task it needs ("copy", "translate",
// "lm"); "" for the task's usual program.
struct CheckpointReader {
  std::string program, task;
};

// Loads a checkpoint given as a directory (its newest complete checkpoint), a
// model file (…model.safetensors; the train file beside it is optional unless
// need_train_state) or a step prefix. IOError naming the file when missing or
// corrupt (a checksum that does not match), when its two files are not one
// checkpoint (steps or runs differ, a negative step), and, with a reader, when
// it holds another task: "F was written by translate (task 'translate'), not by lm".
Checkpoint load_checkpoint(const std::string& path, bool need_train_state,
                           const std::optional<CheckpointReader>& reader = std::nullopt);
// The two halves of load_checkpoint, for files already parsed (and for the
// fuzzer): a model file's metadata, and a train file's tensors (optimizer
// entries aside). IOError naming `file` when a key is missing or malformed.
CheckpointMeta parse_checkpoint_meta(const Metadata& metadata, const std::string& file);
TrainProgress parse_train_progress(const TensorMap& tensors, const std::string& file);
// "DIR/step-00000600": the files of that step's checkpoint are it + ".model.safetensors" and ".train.safetensors".
std::string step_prefix(const std::string& dir, int64_t step);

// Steps of the complete checkpoints in dir, oldest first.
std::vector<int64_t> list_checkpoints(const std::string& dir);
// Removes temporary files left by an interrupted write (*.tmp.*).
void remove_stale_temporaries(const std::string& dir);

// ---- checkpoint directories ------------------------------------------------------------------

// How a run starts in its checkpoint directory: --resume, --overwrite, or neither.
enum class DirMode { fresh, resume, overwrite };

// A checkpoint directory held by one training run. claim() takes an exclusive
// flock on DIR/run.lock for the object's lifetime (another process holding it
// is an IOError naming its pid) and checks the run files the directory holds
// (step-*, best.*, tokenizer.json/.model, run.json) against `mode`:
//  - fresh: there must be none; else IOError "DIR holds checkpoints of another
//    run (lm, up to step 600); pass --resume to continue it, --overwrite to
//    replace it, or another --checkpoint-dir";
//  - overwrite: they are removed first;
//  - resume: the run of the newest complete checkpoint continues (its run id);
//    with no checkpoint file at all (a new or empty directory, or a run stopped
//    before its first checkpoint) a new run starts, and note() says so; a
//    checkpoint file without a complete checkpoint is an IOError.
// A fresh run gets a new random run id (16 hex digits).
class RunDirectory {
 public:
  static std::shared_ptr<RunDirectory> claim(const std::string& dir, DirMode mode);
  // Another process's view of a claim made elsewhere (rank 0's, under mpirun): no lock.
  RunDirectory(std::string dir, std::string run_id, bool resumes, std::string note);
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  const std::string& dir() const { return dir_; }
  const std::string& run_id() const { return run_id_; }
  bool resumes() const { return resumes_; }       // there is a checkpoint to continue from
  const std::string& note() const { return note_; }  // what claim() did that the user should know; may be ""
  // Writes DIR/run.json ({"run_id", "started", "pid"} and `info`: program,
  // model config, task, ...) unless the directory already has one.
  void record(const nlohmann::json& info) const;

 private:
  std::string dir_, run_id_;
  bool resumes_ = false;
  std::string note_;
  int lock_fd_ = -1;
};

}  // namespace attograd::app
