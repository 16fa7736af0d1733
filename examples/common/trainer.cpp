#include "examples/common/trainer.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include <attograd/autograd/engine.h>
#include <attograd/autograd/io/safetensors.h>
#include "examples/common/cli.h"
#include "examples/common/train_choices.h"
#include <attograd/optim/clip.h>
#include <attograd/optim/schedule.h>

namespace attograd::app {

// ---- flags ----------------------------------------------------------------------------------

void add_model_flags(cxxopts::Options& o, const TransformerConfig& d) {
  o.add_options("model")
      ("d-model", "model width E", cxxopts::value<int64_t>()->default_value(std::to_string(d.d_model)))
      ("heads", "attention heads H (must divide d-model)", cxxopts::value<int64_t>()->default_value(std::to_string(d.heads)))
      ("kv-heads", "key/value heads G of the decoder's attention (grouped-query attention; must divide --heads; "
       "default: --heads, multi-head; 1: multi-query). The KV cache shrinks by H/G", cxxopts::value<int64_t>())
      ("d-ff", "feed-forward width", cxxopts::value<int64_t>()->default_value(std::to_string(d.d_ff)))
      ("enc-layers", "encoder layers", cxxopts::value<int64_t>()->default_value(std::to_string(d.enc_layers)))
      ("dec-layers", "decoder layers", cxxopts::value<int64_t>()->default_value(std::to_string(d.dec_layers)))
      ("dropout", "dropout probability", cxxopts::value<double>()->default_value(fmt::format("{}", d.dropout)))
      ("max-len", "longest sequence the model accepts (positions)", cxxopts::value<int64_t>()->default_value(std::to_string(d.max_len)))
      ("post-ln", "use post-LN layers instead of pre-LN")
      ("gelu", "GELU in the feed-forward instead of ReLU")
      ("tie-embeddings", "share the target embedding with the output layer");
}

void add_train_flags(cxxopts::Options& o, const TrainOptions& d) {
  o.add_options("training")
      ("steps", "training steps", cxxopts::value<int64_t>()->default_value(std::to_string(d.steps)))
      ("batch-size", "sequences per batch", cxxopts::value<int64_t>()->default_value(std::to_string(d.batch_size)))
      ("lr", "peak learning rate", cxxopts::value<double>()->default_value(fmt::format("{}", d.lr)))
      ("optimizer", choice_help("optimizer", optimizer_choices()), cxxopts::value<std::string>()->default_value(d.optimizer))
      ("schedule", choice_help("lr schedule", schedule_choices()), cxxopts::value<std::string>()->default_value(d.schedule))
      ("warmup", "warmup steps", cxxopts::value<int64_t>()->default_value(std::to_string(d.warmup)))
      ("min-lr", "floor of the cosine decay", cxxopts::value<double>()->default_value(fmt::format("{}", d.min_lr)))
      ("weight-decay", "weight decay (decoupled in adamw, L2 in adam and sgd)", cxxopts::value<double>()->default_value(fmt::format("{}", d.weight_decay)))
      ("clip", "max gradient norm (0: no clipping)", cxxopts::value<double>()->default_value(fmt::format("{}", d.clip)))
      ("label-smoothing", "label smoothing of the loss", cxxopts::value<double>()->default_value(fmt::format("{}", d.label_smoothing)))
      ("eval-every", "evaluate every N steps (0: only at the end)", cxxopts::value<int64_t>()->default_value(std::to_string(d.eval_every)))
      ("eval-size", "held-out examples", cxxopts::value<int64_t>()->default_value(std::to_string(d.eval_size)))
      ("log", "write JSON-lines metrics to this file", cxxopts::value<std::string>()->default_value(d.log_path))
      ("log-every", "a plain progress line and a JSON log record every N steps",
       cxxopts::value<int64_t>()->default_value(std::to_string(d.log_every)))
      ("checkpoint-dir", "write checkpoints here (atomically; if a write fails, e.g. the disk is full, training stops "
       "with exit code 2 and the previous checkpoint stays intact)", cxxopts::value<std::string>()->default_value(d.checkpoint_dir))
      ("checkpoint-every", "checkpoint every N steps (0: at every eval)", cxxopts::value<int64_t>()->default_value(std::to_string(d.checkpoint_every)))
      ("keep-last", "checkpoints to keep", cxxopts::value<int64_t>()->default_value(std::to_string(d.keep_last)))
      ("resume", "continue from the newest checkpoint in --checkpoint-dir (a new or empty directory starts a new run)")
      ("overwrite", "replace another run's checkpoints in --checkpoint-dir (removed at the start) instead of refusing")
      ("init-from", "start from this checkpoint's weights (directory or .model.safetensors; e.g. a model converted "
       "by heads_study --convert-gqa) with a fresh optimizer and step count; the model flags must match it",
       cxxopts::value<std::string>()->default_value(d.init_from))
      ("stop-after", "stop after this step with a checkpoint, as if interrupted; --resume continues to --steps (0: off)",
       cxxopts::value<int64_t>()->default_value("0"))
      ("seed", "random seed (data, init, dropout)", cxxopts::value<uint64_t>()->default_value(std::to_string(d.seed)))
      ("threads", "compute threads (default: the cores this process may use; results are the same for any count)",
       cxxopts::value<int>()->default_value(std::to_string(d.threads)))
      ("on-nonfinite", choice_help("on a NaN/Inf loss or gradient", nonfinite_choices()),
       cxxopts::value<std::string>()->default_value(choice_name(nonfinite_choices(), d.on_nonfinite)))
      ("max-consecutive-skips", "with --on-nonfinite skip: stop as stop does when more steps than this in a row are "
       "non-finite", cxxopts::value<int64_t>()->default_value(std::to_string(d.max_consecutive_skips)))
      ("detect-anomaly", "name the first op whose output or gradient becomes NaN/Inf")
      ("precision", choice_help("training precision", precision_choices()),
       cxxopts::value<std::string>()->default_value(choice_name(precision_choices(), d.precision)))
      ("graph-out", "write the first step's graph to FILE.dot (and FILE.svg when Graphviz's dot is on PATH); "
       "training goes on", cxxopts::value<std::string>()->default_value(""))
      ("graph-collapse", "with --graph-out: draw identical layers once, with a count")
      ("trace-backward", "log the first step's backward node by node: a table on stdout, or JSON lines with "
       "--trace-backward=FILE", cxxopts::value<std::string>()->implicit_value("-")->default_value(""))
      ("allreduce-order", choice_help("data-parallel (mpirun): how ranks add gradients", reduce_order_choices()),
       cxxopts::value<std::string>()->default_value(choice_name(reduce_order_choices(), d.allreduce_order)))
      ("samples", "sample decodes shown at the end", cxxopts::value<int64_t>()->default_value(std::to_string(d.samples)))
      ("quiet", "no progress line");
}

TransformerConfig model_config_from(const cxxopts::ParseResult& r, TransformerConfig c) {
  c.d_model = cli::flag_in_range<int64_t>(r, "d-model", 1, 1 << 14);
  c.heads = cli::flag_in_range<int64_t>(r, "heads", 1, 1 << 10);
  c.kv_heads.reset();
  if (r.count("kv-heads")) {
    c.kv_heads = cli::flag_in_range<int64_t>(r, "kv-heads", 1, 1 << 10);
    if (c.heads % *c.kv_heads != 0)
      fail<ValueError>("flags", "--kv-heads {} must divide --heads {}; hint: {} is multi-head, 1 multi-query attention",
                       *c.kv_heads, c.heads, c.heads);
  }
  c.d_ff = cli::flag_in_range<int64_t>(r, "d-ff", 1, 1 << 16);
  c.enc_layers = cli::flag_in_range<int64_t>(r, "enc-layers", 0, 64);
  c.dec_layers = cli::flag_in_range<int64_t>(r, "dec-layers", 1, 64);
  c.dropout = cli::flag_in_range<double>(r, "dropout", 0.0, 0.99);
  c.max_len = cli::flag_in_range<int64_t>(r, "max-len", 2, 1 << 16);
  c.pre_ln = !r.count("post-ln");
  c.activation = r.count("gelu") ? Activation::gelu : Activation::relu;
  c.tie_embeddings = r.count("tie-embeddings") > 0;
  c.validate();
  return c;
}

std::string heads_summary(const TransformerConfig& c) {
  if (c.decoder_kv_heads() == c.heads) return fmt::format("{} heads", c.heads);
  return fmt::format("{} heads, {} K/V heads in the decoder", c.heads, c.decoder_kv_heads());
}

TrainOptions train_options_from(const cxxopts::ParseResult& r, TrainOptions t) {
  t.steps = cli::flag_in_range<int64_t>(r, "steps", 1, int64_t{1} << 40);
  t.batch_size = cli::flag_in_range<int64_t>(r, "batch-size", 1, 1 << 16);
  t.lr = cli::flag_in_range<double>(r, "lr", 1e-12, 1e6);
  t.optimizer = find_choice(optimizer_choices(), r["optimizer"].as<std::string>(), "optimizer").name;
  const ScheduleChoice& schedule = find_choice(schedule_choices(), r["schedule"].as<std::string>(), "schedule");
  t.schedule = schedule.name;
  t.warmup = cli::flag_in_range<int64_t>(r, "warmup", 0, int64_t{1} << 40);
  t.min_lr = cli::flag_in_range<double>(r, "min-lr", 0.0, 10.0);
  schedule.check(t);
  t.weight_decay = cli::flag_in_range<double>(r, "weight-decay", 0.0, 10.0);
  t.clip = cli::flag_in_range<double>(r, "clip", 0.0, 1e9);
  t.label_smoothing = cli::flag_in_range<double>(r, "label-smoothing", 0.0, 1.0);
  t.eval_every = cli::flag_in_range<int64_t>(r, "eval-every", 0, int64_t{1} << 40);
  t.eval_size = cli::flag_in_range<int64_t>(r, "eval-size", 1, 10'000'000);
  t.log_path = r["log"].as<std::string>();
  t.log_every = cli::flag_in_range<int64_t>(r, "log-every", 1, int64_t{1} << 40);
  t.checkpoint_dir = r["checkpoint-dir"].as<std::string>();
  t.checkpoint_every = cli::flag_in_range<int64_t>(r, "checkpoint-every", 0, int64_t{1} << 40);
  t.keep_last = cli::flag_in_range<int64_t>(r, "keep-last", 1, 1000);
  t.resume = r.count("resume") > 0;
  t.stop_after = cli::flag_in_range<int64_t>(r, "stop-after", 0, int64_t{1} << 40);
  if (t.stop_after > 0 && t.checkpoint_dir.empty())
    fail<ValueError>("flags", "--stop-after needs --checkpoint-dir (the run continues from its checkpoint)");
  if (t.resume && t.checkpoint_dir.empty()) fail<ValueError>("flags", "--resume needs --checkpoint-dir");
  t.overwrite = r["overwrite"].as<bool>();
  if (t.overwrite && (t.resume || t.checkpoint_dir.empty()))
    fail<ValueError>("flags", "--overwrite {}", t.resume ? "and --resume exclude each other" : "needs --checkpoint-dir");
  t.init_from = r["init-from"].as<std::string>();
  if (t.resume && !t.init_from.empty())
    fail<ValueError>("flags", "--init-from and --resume exclude each other; hint: --resume alone continues a run "
                     "that started --init-from, from its own checkpoint");
  if (t.overwrite && !t.init_from.empty()) {  // --overwrite would remove the checkpoint the run starts from
    namespace fs = std::filesystem;
    const fs::path from = fs::weakly_canonical(t.init_from), dir = fs::weakly_canonical(t.checkpoint_dir);
    if (std::mismatch(dir.begin(), dir.end(), from.begin(), from.end()).first == dir.end())
      fail<ValueError>("flags", "--init-from {} lies in --checkpoint-dir {}, which --overwrite empties first; hint: "
                       "another --checkpoint-dir", t.init_from, t.checkpoint_dir);
  }
  t.seed = r["seed"].as<uint64_t>();
  t.threads = cli::flag_in_range<int>(r, "threads", 1, 256);
  t.on_nonfinite = find_choice(nonfinite_choices(), r["on-nonfinite"].as<std::string>(), "on-nonfinite").value;
  t.max_consecutive_skips = cli::flag_in_range<int64_t>(r, "max-consecutive-skips", 1, int64_t{1} << 40);
  t.detect_anomaly = r.count("detect-anomaly") > 0;
  t.precision = find_choice(precision_choices(), r["precision"].as<std::string>(), "precision").value;
  t.views = {r["graph-out"].as<std::string>(), r.count("graph-collapse") > 0, r["trace-backward"].as<std::string>()};
  if (t.views.graph_collapse && t.views.graph_out.empty()) fail<ValueError>("flags", "--graph-collapse needs --graph-out");
  t.allreduce_order =
      find_choice(reduce_order_choices(), r["allreduce-order"].as<std::string>(), "allreduce-order").value;
  t.samples = cli::flag_in_range<int64_t>(r, "samples", 0, 1000);
  t.quiet = r.count("quiet") > 0;
  return t;
}

// ---- training -----------------------------------------------------------------------------------

PrecisionPlan plan_precision(Precision asked, Bf16Gemm kernel, const std::string& fallback_reason) {
  if (asked == Precision::f32) return {Precision::f32, ""};
  if (kernel == Bf16Gemm::native)
    return {Precision::bf16, fmt::format("precision bf16: matrix products in bfloat16 on {}", bf16_gemm_name(kernel))};
  return {Precision::f32, fmt::format("precision bf16: {}, so bf16 products would run no faster than float32; "
                                      "training in float32", fallback_reason)};
}

std::pair<int64_t, int64_t> share_of(int64_t n, int rank, int size) {
  return {n * rank / size, n * (rank + 1) / size};
}

void claim_checkpoint_dir(TrainOptions& opt) {
  if (opt.checkpoint_dir.empty() || opt.run_dir) return;
  dist::Communicator& comm = dist::world();
  const DirMode mode = opt.resume ? DirMode::resume : opt.overwrite ? DirMode::overwrite : DirMode::fresh;
  if (comm.rank() == 0) opt.run_dir = RunDirectory::claim(opt.checkpoint_dir, mode);
  if (comm.size() > 1) {
    const nlohmann::json mine = comm.rank() == 0 ? nlohmann::json{opt.run_dir->run_id(), opt.run_dir->resumes(),
                                                                   opt.run_dir->note()}
                                                 : nlohmann::json();
    const nlohmann::json claim = nlohmann::json::parse(comm.allgather_bytes(mine.dump()).at(0));
    if (comm.rank() > 0)
      opt.run_dir = std::make_shared<RunDirectory>(opt.checkpoint_dir, claim[0].get<std::string>(),
                                                   claim[1].get<bool>(), claim[2].get<std::string>());
  }
  opt.resume = opt.run_dir->resumes();
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The JSON-lines log (--log). A write that fails (a full disk) is an IOError,
// as a checkpoint's is.
class JsonLog {
 public:
  // A resumed run first drops the records past its checkpoint's step (they
  // come again), and a record cut short by a crash.
  void open(const std::string& path, std::optional<int64_t> resumed_at) {
    if (path.empty()) return;
    path_ = path;
    std::error_code ec;
    if (resumed_at && std::filesystem::is_regular_file(path, ec)) write_file_atomic(path, records_up_to(*resumed_at));
    out_.open(path, resumed_at ? std::ios::app : std::ios::trunc);
    if (!out_) fail<IOError>("log", "cannot open {} for writing: {}", path, std::strerror(errno));
  }
  void write(const nlohmann::json& j) {
    if (!out_.is_open()) return;
    out_ << j.dump() << '\n';
    out_.flush();
    if (!out_) fail<IOError>("log", "cannot write {}: {}", path_, std::strerror(errno));
  }
  // The train_s of the last record a resumed log kept (0 for a new log): a
  // resumed run's train_s continues from it, so time to a target counts the
  // training that reached it, whatever the interruptions. Exact when a record
  // is at the checkpoint's step (every eval record is).
  double kept_train_s() const { return kept_train_s_; }

 private:
  std::string records_up_to(int64_t step) {
    std::istringstream in(read_file_bytes(path_));
    std::string kept;
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() <= step) {
        kept += line + '\n';
        if (j.contains("train_s") && j["train_s"].is_number()) kept_train_s_ = j["train_s"].get<double>();
      }
    }
    return kept;
  }

  std::string path_;
  std::ofstream out_;
  double kept_train_s_ = 0;
};

// SIGTERM and SIGINT, while a run trains: the first asks the loop to stop
// after its step, a second ends the process (the default action). The
// previous handlers come back when the run ends; a signal the process was
// started ignoring (a background job of a script ignores SIGINT) stays
// ignored. The signal may land on any thread (the pool's, BLAS', MPI's), so
// the flag is a lock-free atomic, the only state a handler may touch.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_stop_signal(int signo) {
  if (g_stop_signal.exchange(signo) != 0) {
    std::signal(signo, SIG_DFL);
    std::raise(signo);
  }
}

class StopSignals {
 public:
  StopSignals() {
    g_stop_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;  // system calls elsewhere go on rather than fail with EINTR
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < 2; ++i) {
      sigaction(kSignals[i], nullptr, &previous_[i]);
      installed_[i] = previous_[i].sa_handler != SIG_IGN;
      if (installed_[i]) sigaction(kSignals[i], &sa, nullptr);
    }
  }
  ~StopSignals() {
    for (size_t i = 0; i < 2; ++i)
      if (installed_[i]) sigaction(kSignals[i], &previous_[i], nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  static int received() { return g_stop_signal.load(); }

 private:
  static constexpr int kSignals[2] = {SIGTERM, SIGINT};
  struct sigaction previous_[2];
  bool installed_[2] = {false, false};
};

// One run of train(): run() loops step() over the steps, evaluating and
// checkpointing on the flags' cadence; resume() restores a saved run first.
// In a world of N ranks, the task gives each rank its share of every global
// batch; rank 0 alone prints, logs and writes checkpoints.
class Trainer {
 public:
  Trainer(TrainTask& task, const TrainOptions& opt);
  RunSummary run();

 private:
  void resume();
  void init_from();
  CheckpointReader reader() const {
    return {opt_.program, meta_.task.is_object() ? meta_.task.value("task", "") : std::string()};
  }
  void evaluate_start();
  RunSummary nothing_to_train();
  int stop_requested();
  [[noreturn]] void stop(int64_t step, int signo);
  bool step(int64_t step);
  double forward_backward(int64_t step);
  void skip_or_stop(int64_t step, double loss, double grad_norm, bool on_every_rank);
  void report(int64_t step, double loss, double lr, double grad_norm, int64_t tokens);
  void evaluate_or_checkpoint(int64_t step);
  void evaluate(int64_t step);
  void checkpoint(int64_t step);
  RunSummary finish();
  bool leads() const { return comm_.rank() == 0; }
  int64_t global_batch() const { return task_.batch_size() * comm_.size(); }
  void say(const std::string& line) {
    if (!opt_.quiet && leads()) progress_.print(line);
  }

  TrainTask& task_;
  Module& model_;
  TrainOptions opt_;  // with the checkpoint directory claimed
  dist::Communicator& comm_;
  StopSignals signals_;
  cli::Progress progress_;
  const std::vector<Tensor> params_;
  dist::GradientReducer reducer_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::Schedule> schedule_;
  CheckpointMeta meta_;  // with the program and the run id
  TrainProgress state_;  // what the next checkpoint saves
  JsonLog log_;
  RunSummary summary_;
  int64_t first_ = 1, last_ = 1;  // the steps this run trains
  Clock::time_point t0_;
  // Seconds in training steps (skipped ones too), evaluations and checkpoints
  // excluded: the log's train_s, carried over a resume (JsonLog::kept_train_s).
  double train_s_ = 0;
  double tokens_done_ = 0, window_loss_ = 0;  // window: the steps since the last log record
  int64_t window_ = 0, skipped_ = 0, skipped_in_a_row_ = 0;
  int64_t step_tokens_ = 0;  // the tokens of the current step's global batch
  bool evaluated_ = false;
  bool views_pending_ = false;  // --graph-out / --trace-backward wait for the first step
  const PrecisionPlan precision_;  // --precision as this machine runs it (plan_precision)
  std::optional<int64_t> last_checkpoint_step_;
};

Trainer::Trainer(TrainTask& task, const TrainOptions& opt)
    : task_(task),
      model_(task.model()),
      opt_(opt),
      comm_(dist::world()),
      progress_(opt.quiet ? 0 : opt.log_every),
      params_(model_.parameters()),
      reducer_(comm_, params_, {.order = opt.allreduce_order}),
      optimizer_(find_choice(optimizer_choices(), opt.optimizer, "optimizer").make(params_, opt)),
      schedule_(find_choice(schedule_choices(), opt.schedule, "schedule").make(opt, task.model_width())),
      meta_(task.checkpoint_meta()),
      precision_(plan_precision(opt.precision, bf16_gemm_kernel(), bf16_gemm_fallback_reason())) {
  state_.optimizer = opt.optimizer;
  claim_checkpoint_dir(opt_);
  meta_.program = opt_.program;
  if (opt_.run_dir) {
    meta_.run_id = opt_.run_dir->run_id();
    if (!opt_.run_dir->note().empty()) say(opt_.run_dir->note());
    if (leads())
      opt_.run_dir->record({{"program", opt_.program}, {"config", meta_.config}, {"task", meta_.task},
                            {"steps", opt_.steps}, {"optimizer", opt_.optimizer}, {"seed", opt_.seed},
                            {"precision", choice_name(precision_choices(), precision_.precision)}});
  }
  if (!precision_.note.empty()) say(precision_.note);
  if (opt_.resume) resume();
  if (!opt.init_from.empty()) init_from();
  dist::broadcast_parameters(comm_, params_);
  // Each rank draws its own dropout masks: rank 0 continues the run's stream
  // (the one checkpoints save), rank r > 0 a stream derived from it and r.
  Generator& dropout = task_.dropout_generator();
  if (comm_.rank() > 0) {
    const Generator::State s = dropout.state();
    dropout.set_state(Generator(mix_seed(s[0] ^ s[2], static_cast<uint64_t>(comm_.rank()))).state());
  }
  if (comm_.size() > 1)
    say(fmt::format("data-parallel: {} processes ({}) x batch {} = global batch {}", comm_.size(), comm_.name(),
                    task_.batch_size(), global_batch()));
  if (leads()) log_.open(opt.log_path, opt_.resume ? std::optional<int64_t>(state_.step) : std::nullopt);
  train_s_ = log_.kept_train_s();
  first_ = state_.step + 1;
  views_pending_ = opt.views.any() && leads();  // one rank draws and traces (the files are shared)
  last_ = opt.stop_after > 0 ? std::min(opt.stop_after, opt.steps) : opt.steps;
}

// Restores model, optimizer, schedule, data position and dropout generator
// from the newest checkpoint, after checking it was made by the same flags.
void Trainer::resume() {
  Checkpoint c = load_checkpoint(opt_.checkpoint_dir, /*need_train_state=*/true, reader());
  // Compared as parsed configs, so a checkpoint written before a field existed
  // (kv_heads) matches the same model given by today's flags.
  if (task_.reparsed_config(c.meta.config) != meta_.config)
    fail<ValueError>("resume", "{} was trained with model config {}, but the flags give {}; hint: use the same "
                     "model flags, or a new --checkpoint-dir", c.model_path, c.meta.config.dump(), meta_.config.dump());
  if (c.meta.task != meta_.task)
    fail<ValueError>("resume", "{} was trained on task {}, but the flags give {}; hint: the same task flags, or a "
                     "new --checkpoint-dir", c.model_path, c.meta.task.dump(), meta_.task.dump());
  if (c.progress.optimizer && *c.progress.optimizer != opt_.optimizer)
    fail<ValueError>("resume", "{} was trained with --optimizer {}, but the flags give --optimizer {}; hint: pass "
                     "--optimizer {}, or a new --checkpoint-dir", c.train_path, *c.progress.optimizer, opt_.optimizer,
                     *c.progress.optimizer);
  model_.load_state_dict(c.model);
  optimizer_->load_state_dict(c.optimizer);
  state_ = c.progress;
  state_.optimizer = opt_.optimizer;
  const std::optional<int64_t> saved_batch = state_.global_batch;
  if (const auto note = task_.restore_data_position(state_)) say(*note);
  else if (saved_batch && *saved_batch != global_batch())
    say(fmt::format("the checkpoint's global batch was {}, now {} ({} process(es) x batch {}): the run continues "
                    "with the new batch", *saved_batch, global_batch(), comm_.size(), task_.batch_size()));
  task_.save_data_position(state_);
  schedule_->set_last_step(state_.schedule_step);
  task_.dropout_generator().set_state(state_.rng);
  say(fmt::format("resumed from {} at step {}", c.model_path, state_.step));
}

// "heads: 4 in the checkpoint, 2 from the flags; kv_heads: ..." for every field
// of two config objects that differs (empty when none does).
std::string config_differences(const nlohmann::json& saved, const nlohmann::json& flags) {
  std::string out;
  auto field = [](const nlohmann::json& j, const std::string& k) { return j.contains(k) ? j.at(k).dump() : "none"; };
  nlohmann::json keys = saved;
  keys.update(flags);
  for (const auto& [k, v] : keys.items())
    if (field(saved, k) != field(flags, k))
      out += fmt::format("{}{}: {} in the checkpoint, {} from the flags", out.empty() ? "" : "; ", k, field(saved, k),
                         field(flags, k));
  return out;
}

// Loads the weights of opt.init_from after checking it was made for the same
// model, task and vocabularies; the rest of the run starts fresh.
void Trainer::init_from() {
  const Checkpoint c = load_checkpoint(opt_.init_from, /*need_train_state=*/false, reader());
  const std::string diff = config_differences(task_.reparsed_config(c.meta.config), meta_.config);
  if (!diff.empty())
    fail<ValueError>("init-from", "{} does not fit the model the flags give ({}); hint: pass its model flags",
                     c.model_path, diff);
  if (c.meta.task != meta_.task)
    fail<ValueError>("init-from", "{} was trained on task {}, but the flags give {}", c.model_path, c.meta.task.dump(),
                     meta_.task.dump());
  if (c.meta.vocab_src != meta_.vocab_src || c.meta.vocab_tgt != meta_.vocab_tgt)
    fail<ValueError>("init-from", "{} has other vocabularies than this run's training data gives; hint: the same "
                     "--data and task flags it was trained with", c.model_path);
  model_.load_state_dict(c.model);
  say(fmt::format("initialized from {}; optimizer, schedule and step count start fresh", c.model_path));
}

// The starting model's held-out quality, as step 0 (with --init-from).
void Trainer::evaluate_start() {
  const TaskEval e = task_.evaluate(opt_.eval_size);
  say(fmt::format("eval step 0: {}", e.summary));
  nlohmann::json record = {{"step", 0}, {"train_s", 0.0}, {"elapsed_s", 0.0}};
  record.update(e.record);
  log_.write(record);
}

RunSummary Trainer::run() {
  if (state_.step >= opt_.steps) return nothing_to_train();
  if (!opt_.init_from.empty()) evaluate_start();
  model_.train();
  t0_ = Clock::now();
  for (int64_t s = first_; s <= last_; ++s) {
    if (step(s)) evaluate_or_checkpoint(s);
    if (const int signo = stop_requested()) stop(s, signo);
  }
  if (leads()) progress_.finish();
  return finish();
}

// A resumed run already at --steps: its held-out evaluation, and no training.
RunSummary Trainer::nothing_to_train() {
  if (leads())
    fmt::print("{} is already at step {} (--steps {}): nothing to train\n", opt_.checkpoint_dir, state_.step,
               opt_.steps);
  t0_ = Clock::now();
  const TaskEval e = task_.evaluate(opt_.eval_size);
  say(fmt::format("eval step {}: {}", state_.step, e.summary));
  summary_.steps = state_.step;
  summary_.seconds = seconds_since(t0_);
  summary_.final_loss = NAN;
  return summary_;
}

// The stop signal that reached this rank or (under mpirun) any rank, or 0:
// every rank then stops after the same step.
int Trainer::stop_requested() {
  const int mine = StopSignals::received();
  if (comm_.size() == 1) return mine;
  // How many ranks got each signal; every rank then reports the same one, SIGTERM first.
  std::vector<double> got{mine == SIGTERM ? 1.0 : 0.0, mine == SIGINT ? 1.0 : 0.0};
  comm_.allreduce_sum(std::span<double>(got));
  return got[0] > 0 ? SIGTERM : got[1] > 0 ? SIGINT : 0;
}

// Ends the run after `step` at a signal's request: a checkpoint of that step,
// then cli::Stopped with where the run stopped and how to continue it.
void Trainer::stop(int64_t step, int signo) {
  if (leads()) progress_.finish();
  if (!opt_.checkpoint_dir.empty() && last_checkpoint_step_ != step) checkpoint(step);
  const std::string where = last_checkpoint_step_ ? fmt::format("checkpoint step {} in {}; continue with --resume",
                                                                *last_checkpoint_step_, opt_.checkpoint_dir)
                                                  : std::string("no checkpoint was written (no --checkpoint-dir)");
  const char* name = signo == SIGINT ? "SIGINT" : signo == SIGTERM ? "SIGTERM" : "a signal";
  throw cli::Stopped(fmt::format("stopped by {} at step {}; {}", name, step, where), 128 + signo);
}

// One training step on the next global batch: forward and backward on this
// rank's share, the gradients summed across ranks, clipping, the schedule's
// lr and the update. False when the step was skipped.
bool Trainer::step(int64_t step) {
  const auto start = Clock::now();
  const double loss = forward_backward(step);
  if (std::isfinite(loss)) reducer_.allreduce(dist::ReduceOp::sum);
  const double grad_norm =
      std::isfinite(loss) ? optim::clip_grad_norm(params_, opt_.clip > 0 ? opt_.clip : INFINITY) : NAN;
  if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
    train_s_ += seconds_since(start);
    skip_or_stop(step, loss, grad_norm, /*on_every_rank=*/true);
    return false;
  }
  skipped_in_a_row_ = 0;
  const double lr = schedule_->step(*optimizer_);
  optimizer_->step();
  optimizer_->zero_grad();
  const double took = seconds_since(start);
  summary_.step_seconds += took;
  train_s_ += took;
  summary_.losses.push_back(loss);
  report(step, loss, lr, grad_norm, step_tokens_);
  return true;
}

// The global batch's mean loss, summed over the ranks' parts; when it is
// finite, this rank's gradients are in the parameters. The sum comes BEFORE
// backward: the reducer starts its bucket collectives during backward (its
// overlap), so no other collective may come between them, and a loss that is
// not finite on one rank must stop backward on every rank. A rank with no
// rows runs no backward; allreduce() starts its buckets in the same order.
double Trainer::forward_backward(int64_t step) {
  std::optional<AnomalyGuard> anomaly;
  if (opt_.detect_anomaly) anomaly.emplace();
  ShardLoss shard;
  {  // the forward under autocast; each op's backward keeps the precision its forward ran in
    const AutocastGuard autocast(precision_.precision);
    shard = task_.next_loss(opt_.label_smoothing);
  }
  step_tokens_ = shard.global_tokens;
  const double mine = shard.loss ? shard.loss->item() : 0.0;
  // This rank's own loss is not finite: in stop mode it alone reports and
  // ends the job (the others wait in the allreduce below until MPI_Abort).
  if (!std::isfinite(mine) && comm_.size() > 1 && opt_.on_nonfinite == OnNonfinite::stop)
    skip_or_stop(step, mine, NAN, /*on_every_rank=*/false);
  double value = mine;
  comm_.allreduce_sum(std::span<double>(&value, 1));
  if (!shard.loss || !std::isfinite(value)) return value;
  const Tensor& loss = *shard.loss;
  std::optional<BackwardTrace> trace;
  if (views_pending_) trace.emplace(TraceOptions{model_.parameter_names()});
  loss.backward();
  if (trace) {
    views_pending_ = false;
    for (const std::string& line : write_backprop_views(opt_.views, loss, *trace, model_.parameter_names()))
      progress_.print(line);
  }
  return value;
}

// A non-finite loss or gradient: the step is dropped and, as --on-nonfinite
// says, skipped (up to --max-consecutive-skips in a row) or the run stops.
// When every rank saw it (on_every_rank), rank 0 reports and the others wait
// for its MPI_Abort, so the job ends with one line.
void Trainer::skip_or_stop(int64_t step, double loss, double grad_norm, bool on_every_rank) {
  const std::string what = fmt::format("non-finite {} at step {} (loss {}, grad norm {})",
                                       std::isfinite(loss) ? "gradient norm" : "loss", step, loss, grad_norm);
  optimizer_->zero_grad();
  const bool skip = opt_.on_nonfinite == OnNonfinite::skip;
  if (skip && ++skipped_in_a_row_ <= opt_.max_consecutive_skips) {
    ++skipped_;
    say("warning: " + what + "; step skipped");
    log_.write({{"step", step}, {"skipped", true}, {"reason", what}});
    summary_.losses.push_back(loss);
    return;
  }
  if (on_every_rank && !leads()) comm_.barrier();  // rank 0 never joins: it aborts the job
  if (leads()) progress_.finish();
  const auto steps = list_checkpoints(opt_.checkpoint_dir);
  const std::string kept = steps.empty() ? std::string(" (no checkpoint was written)")
                                         : fmt::format(", the last good checkpoint is step {} in {}", steps.back(),
                                                       opt_.checkpoint_dir);
  if (skip)
    fail<Error>("train", "{}; training stopped after {} non-finite steps in a row (--max-consecutive-skips {}){}. "
                "hint: lower --lr and keep --clip on", what, skipped_in_a_row_, opt_.max_consecutive_skips, kept);
  fail<Error>("train", "{}; training stopped{}. hint: lower --lr, keep --clip on, or use --on-nonfinite skip", what,
              kept);
}

// The progress line, and a JSON log record every --log-every steps.
void Trainer::report(int64_t step, double loss, double lr, double grad_norm, int64_t tokens) {
  tokens_done_ += static_cast<double>(tokens);
  window_loss_ += loss;
  ++window_;
  const double elapsed = seconds_since(t0_);
  const double per_step = elapsed / static_cast<double>(step - first_ + 1);
  const double tokens_per_s = tokens_done_ / std::max(elapsed, 1e-9);
  const double mean_loss = window_loss_ / static_cast<double>(window_);
  const std::string batch = comm_.size() > 1 ? fmt::format("  batch {} ({} ranks)", global_batch(), comm_.size())
                                             : std::string();
  if (!opt_.quiet && leads())
    progress_.update(step, fmt::format("step {}/{}  loss {:.4f}  lr {:.2e}{}  {} tok/s  ETA {}", step, opt_.steps,
                                       mean_loss, lr, batch, cli::format_count(tokens_per_s),
                                       cli::format_duration(per_step * static_cast<double>(opt_.steps - step))));
  if (step % opt_.log_every == 0 || step == opt_.steps) {
    nlohmann::json record = {{"step", step}, {"loss", mean_loss}, {"lr", lr}, {"grad_norm", grad_norm},
                             {"tokens_per_s", tokens_per_s}, {"elapsed_s", elapsed}, {"train_s", train_s_}};
    if (comm_.size() > 1) {
      record["global_batch"] = global_batch();
      record["allreduce_s"] = reducer_.seconds();
      record["allreduce_wait_s"] = reducer_.wait_seconds();  // the part not hidden behind backward
      record["step_s"] = summary_.step_seconds;
    }
    log_.write(record);
    window_loss_ = 0;
    window_ = 0;
  }
}

void Trainer::evaluate_or_checkpoint(int64_t step) {
  if ((opt_.eval_every > 0 && step % opt_.eval_every == 0) || step == opt_.steps) evaluate(step);
  else if (opt_.checkpoint_every > 0 && step % opt_.checkpoint_every == 0) checkpoint(step);
}

// A held-out evaluation (split across ranks by the task), shown and logged,
// then a checkpoint (marked best when its loss is the lowest so far).
void Trainer::evaluate(int64_t step) {
  // The clocks at the step's end, before the evaluation: what reaching this model cost.
  nlohmann::json record = {{"step", step}, {"elapsed_s", seconds_since(t0_)}, {"train_s", train_s_}};
  const TaskEval e = task_.evaluate(opt_.eval_size);
  say(fmt::format("eval step {}: {}", step, e.summary));
  record.update(e.record);
  log_.write(record);
  const bool best = e.loss < state_.best_eval_loss;
  if (best) state_.best_eval_loss = e.loss;
  checkpoint(step);
  if (best && !opt_.checkpoint_dir.empty() && leads()) mark_best(opt_.checkpoint_dir, step);
  evaluated_ = true;
}

void Trainer::checkpoint(int64_t step) {
  if (opt_.checkpoint_dir.empty()) return;
  state_.step = step;
  task_.save_data_position(state_);
  state_.rng = task_.dropout_generator().state();
  state_.schedule_step = schedule_->last_step();
  if (leads())
    save_checkpoint(opt_.checkpoint_dir, model_.state_dict(), optimizer_->state_dict(), meta_, state_, opt_.keep_last);
  last_checkpoint_step_ = step;
}

// The summary; a run cut short by --stop-after ends with a checkpoint, a full one with an evaluation.
RunSummary Trainer::finish() {
  summary_.steps = std::max(last_, state_.step);
  summary_.trained = std::max<int64_t>(0, last_ - first_ + 1);
  summary_.stopped_early = last_ < opt_.steps;
  summary_.seconds = seconds_since(t0_);
  summary_.final_loss = summary_.losses.empty() ? NAN : summary_.losses.back();
  if (summary_.stopped_early) {
    if (last_checkpoint_step_ != last_ && first_ <= last_) checkpoint(last_);
    say(fmt::format("stopped after step {} of {} (--stop-after); continue with --resume", summary_.steps, opt_.steps));
  } else if (!evaluated_ && first_ <= opt_.steps) {
    evaluate(opt_.steps);
  }
  if (skipped_) say(fmt::format("{} step(s) skipped for non-finite values", skipped_));
  if (comm_.size() > 1)
    say(fmt::format("allreduce: {:.2f} s of {:.2f} s in training steps ({} buckets per step)", reducer_.seconds(),
                    summary_.step_seconds, reducer_.num_buckets()));
  return summary_;
}

}  // namespace

RunSummary train(TrainTask& task, const TrainOptions& opt) { return Trainer(task, opt).run(); }

}  // namespace attograd::app
