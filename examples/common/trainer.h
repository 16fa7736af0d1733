// The example programs' shared code (namespace attograd::app, never installed), not the library.
// The training loop every program shares (copy_task, translate, heads_study,
// lm), over a TrainTask that gives the model, its batches, its loss and its
// evaluation: an optimizer and an lr schedule chosen by name (the tables in
// train_choices.h), clipping, a live progress line, periodic held-out
// evaluation, JSON-lines logs, atomic safetensors checkpoints and exact resume.
// The seq2seq programs' task (train_seq2seq) evaluates with greedy decoding
// through the KV cache.
//
// Started under mpirun it trains data-parallel (docs/distributed.md): each
// rank takes a disjoint shard of every global batch (--batch-size rows per
// rank), the gradients are summed across ranks in buckets (attograd/dist/reducer.h),
// evaluation is split across ranks and merged, and only rank 0 prints, logs
// and writes checkpoints.
//
// Shape legend: B batch, S source length, T target length, V target vocab.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include <attograd/autograd/backend/gemm.h>
#include <attograd/autograd/settings.h>
#include <attograd/dist/reducer.h>

#include <attograd/data/loader.h>
#include <attograd/data/vocab.h>
#include "examples/common/backprop_views.h"
#include "examples/common/checkpoint.h"
#include "examples/common/cli.h"
#include <attograd/nn/generate.h>
#include <attograd/nn/module.h>
#include <attograd/nn/transformer.h>

namespace attograd::app {

enum class OnNonfinite { stop, skip };

// The library's defaults; each program starts from its own measured ones
// (default_training() in its main.cpp), so these matter for new programs.
struct TrainOptions {
  int64_t steps = 2000;
  int64_t batch_size = 64;
  double lr = 1e-3;               // peak lr; torch.optim.Adam's default (Kingma & Ba 2015)
  std::string optimizer = "adamw";  // a name in optimizer_choices() (train_choices.h)
  // Linear warmup then cosine decay (Goyal et al. 2017 warmup, Loshchilov &
  // Hutter 2017 cosine): the schedule nanoGPT and llm.c train with.
  std::string schedule = "cosine";  // a name in schedule_choices() (train_choices.h)
  int64_t warmup = 100;           // 5% of the default steps
  double min_lr = 1e-5;           // cosine floor: a hundredth of the default lr
  double weight_decay = 0.01;     // PyTorch's AdamW default (decoupled in adamw, L2 in adam and sgd)
  double clip = 1.0;              // max grad norm (0: off); 1.0 as GPT-2, nanoGPT and llm.c clip
  double label_smoothing = 0.0;
  int64_t eval_every = 500;       // 0: only at the end
  int64_t eval_size = 1000;       // held-out examples
  int64_t log_every = 50;         // plain progress lines and JSON log records
  std::string log_path;           // JSON lines; "" for none
  std::string checkpoint_dir;     // "" for none
  int64_t checkpoint_every = 0;   // 0: at every eval
  int64_t keep_last = 3;
  bool resume = false;            // continue from checkpoint_dir's newest checkpoint
  bool overwrite = false;         // remove another run's files from checkpoint_dir first, instead of refusing
  std::string program;            // the program, recorded in checkpoints and run.json ("copy_task", "lm", ...)
  // The run's hold on checkpoint_dir (claim_checkpoint_dir); train() claims it when unset.
  std::shared_ptr<RunDirectory> run_dir;
  // Start from this checkpoint's weights (a directory or *.model.safetensors;
  // "" for none): a fresh optimizer, schedule and step count, and the model
  // evaluated once before the first step (logged as step 0). Its model config,
  // task and vocabularies must be the run's.
  std::string init_from;
  int64_t stop_after = 0;         // stop (with a checkpoint) after this step; the schedule still spans `steps`
  uint64_t seed = 1;
  // sched_getaffinity's cores; results are the same for any count. For the
  // banner and run records: cli::parse_flags has already sized the pool.
  int threads = cli::usable_cores();
  OnNonfinite on_nonfinite = OnNonfinite::stop;
  int64_t max_consecutive_skips = 20;  // skip: more non-finite steps in a row than this stop the run as stop does
  bool detect_anomaly = false;
  // --precision: bf16 runs the training forward's matrix products in bfloat16
  // with float32 sums (autocast.h) where the CPU has AVX512-BF16 (see
  // plan_precision); evaluation runs in float32.
  Precision precision = Precision::f32;
  BackpropViews views;            // --graph-out, --trace-backward: of the run's first step, then training goes on
  int64_t samples = 5;            // sample decodes shown at the end
  bool quiet = false;             // no progress line (tests)
  // How data-parallel ranks add their gradients (attograd/dist/reducer.h): MPI's own
  // order, or rank order with bit-identical sums on every rank.
  dist::ReduceOrder allreduce_order = dist::ReduceOrder::native;
};

// The precision a run trains in: the one asked for, except bf16 where this
// machine's bf16 products would not run native (`kernel`, and
// `fallback_reason` saying why: no AVX512-BF16, no libxsmm in the build, or
// the naive GEMM backend): they would give bf16's numbers at f32's speed or
// worse, so the run trains in f32 instead. `note` is the one line the run
// prints for a bf16 request: the kernel it runs, or why it stays f32.
struct PrecisionPlan {
  Precision precision = Precision::f32;
  std::string note;
};
PrecisionPlan plan_precision(Precision asked, Bf16Gemm kernel, const std::string& fallback_reason);

// Flags shared by every training program, each with a default and one line of help.
void add_model_flags(cxxopts::Options& o, const TransformerConfig& defaults);
void add_train_flags(cxxopts::Options& o, const TrainOptions& defaults);
TransformerConfig model_config_from(const cxxopts::ParseResult& r, TransformerConfig base);
// "4 heads", or "4 heads, 2 K/V heads in the decoder" with grouped-query attention (for the programs' banners).
std::string heads_summary(const TransformerConfig& c);
TrainOptions train_options_from(const cxxopts::ParseResult& r, TrainOptions base);
// Claims opt.checkpoint_dir for the run (RunDirectory::claim on rank 0, which
// every rank then follows): sets opt.run_dir, and opt.resume to whether there
// is a checkpoint to continue (--resume on a new directory starts a new run).
// A program that reads or writes the directory before train() (lm's
// tokenizer) calls it first; train() calls it otherwise. No-op without a
// checkpoint_dir or when already claimed.
void claim_checkpoint_dir(TrainOptions& opt);

// Held-out results. Outputs and references are token id sequences without BOS/EOS.
struct EvalResult {
  double loss = 0;            // mean cross-entropy per target token (teacher forcing)
  double token_accuracy = 0;  // argmax == target over non-pad target tokens
  double exact_match = 0;     // greedy output == target, whole sequence
  int64_t examples = 0;
  int64_t tokens = 0;         // non-pad target tokens the loss and token accuracy are over
  std::vector<std::vector<int64_t>> sources, outputs, references;
  std::vector<std::pair<std::string, double>> extra;  // e.g. {"bleu", 41.2}
};

struct EvalOptions {
  int64_t batch_size = 128;
  int64_t max_examples = 1000;
  bool decode = true;  // greedy-decode for exact match
  int64_t max_decode_len = 0;  // 0: longest reference + 8
  int64_t beam = 1;
  double length_penalty = 0.6;
  bool use_decode_step = true;  // false: decode through the graph, so attention observers (head masks) apply
};
EvalResult evaluate(Seq2SeqTransformer& model, const Dataset& data, const EvalOptions& opt, int64_t pad_id = kPadId);

// ---- the loop and its view of a task --------------------------------------------------------

// This rank's part of one global batch's loss.
struct ShardLoss {
  // The summed loss of this rank's rows over the global batch's tokens (the
  // batch's mean loss on one rank), before backward; none when this rank has
  // no rows (a short last batch of an epoch).
  std::optional<Tensor> loss;
  int64_t global_tokens = 0;  // the tokens the whole global batch's loss is over
};

// A held-out evaluation as the loop shows, logs and ranks it.
struct TaskEval {
  double loss = 0;        // mean held-out loss; the lowest marks the best checkpoint
  std::string summary;    // shown after "eval step N: "
  nlohmann::json record;  // the JSON log record's fields besides "step"
};

// What the training loop needs of a program. Every rank makes the same calls
// in the same order; a task is built for the world it trains in and draws
// global batches of batch_size() rows per rank.
class TrainTask {
 public:
  virtual ~TrainTask() = default;
  virtual Module& model() = 0;
  // E, the width the noam schedule scales by.
  virtual int64_t model_width() const = 0;
  // Rows per rank in a step (--batch-size).
  virtual int64_t batch_size() const = 0;
  // The model config, task settings and vocabularies a checkpoint records.
  virtual CheckpointMeta checkpoint_meta() const = 0;
  // A checkpoint's model config as this program would write it (parsed and
  // written again), so one written before a config field existed still matches.
  virtual nlohmann::json reparsed_config(const nlohmann::json& saved) const = 0;
  // The generator of the dropout masks (one stream per rank; saved by rank 0).
  virtual Generator& dropout_generator() = 0;
  // Draws the next global batch and builds this rank's share of its loss.
  virtual ShardLoss next_loss(double label_smoothing) = 0;
  // Evaluates the first max_examples held-out examples, each rank its share,
  // and returns the merged result on every rank.
  virtual TaskEval evaluate(int64_t max_examples) = 0;
  // The data position a checkpoint saves (into p) and a resume restores;
  // restore may return a line saying how it adapted a checkpoint made with
  // another global batch.
  virtual void save_data_position(TrainProgress& p) const = 0;
  virtual std::optional<std::string> restore_data_position(const TrainProgress& p) = 0;
};

struct RunSummary {
  int64_t steps = 0;           // the last step trained (the checkpoint's, when trained is 0)
  int64_t trained = 0;         // steps this run trained: 0 when it resumed a checkpoint already at --steps
  bool stopped_early = false;  // --stop-after ended the run before --steps (no final eval)
  double seconds = 0;          // wall time of the run, evaluations and checkpoints included
  double step_seconds = 0;     // time in training steps only (forward, backward, optimizer)
  double final_loss = 0;
  std::vector<double> losses;  // every step's training loss (for determinism/resume tests)
};

// Trains task's model. In a world of N > 1 processes (dist::world()) each
// rank trains on its share of every global batch and the gradients are summed
// across ranks (rank 0's weights are broadcast first). An exception there must
// end the job (guarded_main's MPI_Abort): the other ranks wait for it.
// With opt.resume, restores model, optimizer, schedule, data position and the
// dropout generator from opt.checkpoint_dir first (the checkpoint's optimizer
// must be opt.optimizer, its config and task the task's); a checkpoint already
// at opt.steps is evaluated, not trained ("DIR is already at step N (--steps
// M): nothing to train"). With opt.init_from, loads only the model's weights
// (ValueError naming the fields that differ).
// SIGTERM and SIGINT stop the run after the current step (every rank at the
// same one): a checkpoint of that step is written, then cli::Stopped "stopped
// by SIGTERM at step N; checkpoint step N in DIR; continue with --resume" with
// code 128 + the signal's number; a second signal ends the process at once.
RunSummary train(TrainTask& task, const TrainOptions& opt);

// Rank `rank` of `size` takes items [n * rank / size, n * (rank + 1) / size):
// contiguous, in rank order, sizes differing by at most one.
std::pair<int64_t, int64_t> share_of(int64_t n, int rank, int size);

// ---- the seq2seq programs' task ----------------------------------------------------------------

// The seq2seq programs' task-specific parts.
struct TaskHooks {
  nlohmann::json task;                      // saved in checkpoints
  const Vocab* src_vocab = nullptr;
  const Vocab* tgt_vocab = nullptr;
  // Extra metrics for an eval (BLEU for translation); may be empty.
  std::function<void(EvalResult&)> add_metrics;
  // How a token sequence is shown in sample decodes.
  std::function<std::string(const std::vector<int64_t>&, bool target)> show;
};

// train_seq2seq's summary: the loop's, and the last held-out evaluation.
struct TrainSummary : RunSummary {
  EvalResult last_eval;  // with the decoded sequences, for the programs' sample decodes
};

// train() over a Seq2SeqTransformer: batches from `train` (an endless loader;
// with N ranks, global batches of N * its batch size drawn from its dataset),
// label-smoothed cross-entropy, evaluation on `heldout` (teacher-forced loss
// and token accuracy, greedy exact match, hooks' extra metrics).
TrainSummary train_seq2seq(Seq2SeqTransformer& model, std::shared_ptr<Generator> dropout_gen, DataLoader& train,
                           const Dataset& heldout, const TrainOptions& opt, const TaskHooks& hooks);

// The task train_seq2seq trains, for a program that wraps it (heads_study
// records a learning curve at its evaluations). The arguments must outlive it.
std::unique_ptr<TrainTask> seq2seq_task(Seq2SeqTransformer& model, std::shared_ptr<Generator> dropout_gen,
                                        DataLoader& train, const Dataset& heldout, const TaskHooks& hooks);

}  // namespace attograd::app
