#include "examples/common/trainer.h"

#include <chrono>
#include <cmath>
#include <fstream>

#include <fmt/format.h>

#include "autograd/blas.h"
#include "autograd/node.h"
#include "autograd/threads.h"
#include "autograd/ops/loss.h"
#include "autograd/ops/reduction.h"
#include "examples/common/cli.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "optim/schedule.h"

namespace attograd {

// ---- flags ----------------------------------------------------------------------------------

void add_model_flags(cxxopts::Options& o, const TransformerConfig& d) {
  o.add_options("model")
      ("d-model", "model width E", cxxopts::value<int64_t>()->default_value(std::to_string(d.d_model)))
      ("heads", "attention heads H (must divide d-model)", cxxopts::value<int64_t>()->default_value(std::to_string(d.heads)))
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
      ("schedule", "lr schedule: constant, warmup, cosine (warmup then cosine decay), noam, step",
       cxxopts::value<std::string>()->default_value(d.schedule))
      ("warmup", "warmup steps", cxxopts::value<int64_t>()->default_value(std::to_string(d.warmup)))
      ("min-lr", "floor of the cosine decay", cxxopts::value<double>()->default_value(fmt::format("{}", d.min_lr)))
      ("weight-decay", "AdamW weight decay", cxxopts::value<double>()->default_value(fmt::format("{}", d.weight_decay)))
      ("clip", "max gradient norm (0: no clipping)", cxxopts::value<double>()->default_value(fmt::format("{}", d.clip)))
      ("label-smoothing", "label smoothing of the loss", cxxopts::value<double>()->default_value(fmt::format("{}", d.label_smoothing)))
      ("eval-every", "evaluate every N steps (0: only at the end)", cxxopts::value<int64_t>()->default_value(std::to_string(d.eval_every)))
      ("eval-size", "held-out examples", cxxopts::value<int64_t>()->default_value(std::to_string(d.eval_size)))
      ("log", "write JSON-lines metrics to this file", cxxopts::value<std::string>()->default_value(d.log_path))
      ("checkpoint-dir", "write checkpoints here (atomically; if a write fails, e.g. the disk is full, training stops "
       "with exit code 2 and the previous checkpoint stays intact)", cxxopts::value<std::string>()->default_value(d.checkpoint_dir))
      ("checkpoint-every", "checkpoint every N steps (0: at every eval)", cxxopts::value<int64_t>()->default_value(std::to_string(d.checkpoint_every)))
      ("keep-last", "checkpoints to keep", cxxopts::value<int64_t>()->default_value(std::to_string(d.keep_last)))
      ("resume", "continue from the newest checkpoint in --checkpoint-dir")
      ("stop-after", "stop after this step with a checkpoint, as if interrupted; --resume continues to --steps (0: off)",
       cxxopts::value<int64_t>()->default_value("0"))
      ("seed", "random seed (data, init, dropout)", cxxopts::value<uint64_t>()->default_value(std::to_string(d.seed)))
      ("threads", "compute threads", cxxopts::value<int>()->default_value(std::to_string(d.threads)))
      ("on-nonfinite", "on a NaN/Inf loss or gradient: stop (keep the last good checkpoint) or skip the step",
       cxxopts::value<std::string>()->default_value("stop"))
      ("detect-anomaly", "name the first op whose output or gradient becomes NaN/Inf")
      ("samples", "sample decodes shown at the end", cxxopts::value<int64_t>()->default_value(std::to_string(d.samples)))
      ("quiet", "no progress line");
}

TransformerConfig model_config_from(const cxxopts::ParseResult& r, TransformerConfig c) {
  c.d_model = cli::flag_in_range<int64_t>(r, "d-model", 1, 1 << 14);
  c.heads = cli::flag_in_range<int64_t>(r, "heads", 1, 1 << 10);
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

TrainOptions train_options_from(const cxxopts::ParseResult& r, TrainOptions t) {
  t.steps = cli::flag_in_range<int64_t>(r, "steps", 1, int64_t{1} << 40);
  t.batch_size = cli::flag_in_range<int64_t>(r, "batch-size", 1, 1 << 16);
  t.lr = cli::flag_in_range<double>(r, "lr", 1e-12, 1e6);
  t.schedule = r["schedule"].as<std::string>();
  if (t.schedule != "constant" && t.schedule != "warmup" && t.schedule != "cosine" && t.schedule != "noam" &&
      t.schedule != "step")
    fail<ValueError>("flags", "--schedule must be constant, warmup, cosine, noam or step, got '{}'", t.schedule);
  t.warmup = cli::flag_in_range<int64_t>(r, "warmup", 0, int64_t{1} << 40);
  t.min_lr = cli::flag_in_range<double>(r, "min-lr", 0.0, 10.0);
  if (t.schedule == "cosine" && t.warmup >= t.steps)
    fail<ValueError>("flags", "--warmup ({}) must be smaller than --steps ({}) with the cosine schedule; hint: pass "
                     "--warmup {} or less", t.warmup, t.steps, t.steps / 10);
  if (t.schedule == "cosine" && t.min_lr > t.lr)
    fail<ValueError>("flags", "--min-lr ({}) must not exceed --lr ({}) with the cosine schedule", t.min_lr, t.lr);
  t.weight_decay = cli::flag_in_range<double>(r, "weight-decay", 0.0, 10.0);
  t.clip = cli::flag_in_range<double>(r, "clip", 0.0, 1e9);
  t.label_smoothing = cli::flag_in_range<double>(r, "label-smoothing", 0.0, 1.0);
  t.eval_every = cli::flag_in_range<int64_t>(r, "eval-every", 0, int64_t{1} << 40);
  t.eval_size = cli::flag_in_range<int64_t>(r, "eval-size", 1, 10'000'000);
  t.log_path = r["log"].as<std::string>();
  t.checkpoint_dir = r["checkpoint-dir"].as<std::string>();
  t.checkpoint_every = cli::flag_in_range<int64_t>(r, "checkpoint-every", 0, int64_t{1} << 40);
  t.keep_last = cli::flag_in_range<int64_t>(r, "keep-last", 1, 1000);
  t.resume = r.count("resume") > 0;
  t.stop_after = r["stop-after"].as<int64_t>();
  if (t.stop_after < 0) fail<ValueError>("flags", "--stop-after must be >= 0, got {}", t.stop_after);
  if (t.stop_after > 0 && t.checkpoint_dir.empty())
    fail<ValueError>("flags", "--stop-after needs --checkpoint-dir (the run continues from its checkpoint)");
  if (t.resume && t.checkpoint_dir.empty()) fail<ValueError>("flags", "--resume needs --checkpoint-dir");
  t.seed = r["seed"].as<uint64_t>();
  t.threads = cli::flag_in_range<int>(r, "threads", 1, 256);
  const std::string nf = r["on-nonfinite"].as<std::string>();
  if (nf != "stop" && nf != "skip") fail<ValueError>("flags", "--on-nonfinite must be stop or skip, got '{}'", nf);
  t.on_nonfinite = nf == "skip" ? OnNonfinite::skip : OnNonfinite::stop;
  t.detect_anomaly = r.count("detect-anomaly") > 0;
  t.samples = cli::flag_in_range<int64_t>(r, "samples", 0, 1000);
  t.quiet = r.count("quiet") > 0;
  return t;
}

std::string configure_threads(int threads) {
  set_num_threads(threads);
  return blas_corename();
}

// ---- evaluation -------------------------------------------------------------------------------

EvalResult evaluate(Seq2SeqTransformer& model, const Dataset& data, const EvalOptions& opt, int64_t pad_id) {
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  EvalResult r;
  LoaderOptions lo;
  lo.batch_size = opt.batch_size;
  lo.shuffle = false;
  lo.pad_id = pad_id;
  DataLoader loader(data, lo);
  double loss_sum = 0;
  int64_t tokens = 0, correct_tokens = 0, exact = 0;
  for (const Batch& b : loader.epoch_batches()) {
    if (r.examples >= opt.max_examples) break;
    const int64_t V = model.config.tgt_vocab;
    Tensor logits = model.forward(b.src, b.tgt_in, b.src_key_padding_mask);  // [B, T, V]
    CrossEntropyOptions ce;
    ce.ignore_index = pad_id;
    ce.reduction = Reduction::sum;
    loss_sum += cross_entropy(logits.reshape({-1, V}), b.tgt_out.reshape({-1}), ce).item();
    const auto pred = argmax(logits, -1).to_vector<int64_t>();
    const auto gold = b.tgt_out.to_vector<int64_t>();
    for (size_t i = 0; i < gold.size(); ++i)
      if (gold[i] != pad_id) {
        ++tokens;
        correct_tokens += pred[i] == gold[i];
      }
    std::vector<Example> examples;
    int64_t longest = 0;
    for (int64_t i : b.indices) {
      examples.push_back(data.get(i));
      longest = std::max<int64_t>(longest, static_cast<int64_t>(examples.back().tgt.size()));
    }
    std::vector<Hypothesis> hyps;
    if (opt.decode) {
      DecodeOptions d;
      d.max_len = opt.max_decode_len > 0 ? opt.max_decode_len : std::min(longest + 8, model.config.max_len - 1);
      if (opt.beam > 1) hyps = beam_search(model, b.src, b.src_key_padding_mask, d, {opt.beam, opt.length_penalty});
      else hyps = greedy_decode(model, b.src, b.src_key_padding_mask, d);
    }
    for (size_t i = 0; i < examples.size() && r.examples < opt.max_examples; ++i, ++r.examples) {
      r.sources.push_back(examples[i].src);
      r.references.push_back(examples[i].tgt);
      if (opt.decode) {
        r.outputs.push_back(hyps[i].tokens);
        exact += hyps[i].tokens == examples[i].tgt;
      }
    }
  }
  r.loss = tokens ? loss_sum / static_cast<double>(tokens) : 0.0;
  r.token_accuracy = tokens ? static_cast<double>(correct_tokens) / static_cast<double>(tokens) : 0.0;
  r.exact_match = r.examples ? static_cast<double>(exact) / static_cast<double>(r.examples) : 0.0;
  model.train(was_training);
  return r;
}

// ---- training -----------------------------------------------------------------------------------

namespace {

std::unique_ptr<optim::Schedule> make_schedule(const TrainOptions& o, int64_t d_model) {
  if (o.schedule == "constant") return std::make_unique<optim::Constant>(o.lr);
  if (o.schedule == "warmup") return std::make_unique<optim::LinearWarmup>(o.lr, std::max<int64_t>(o.warmup, 1));
  if (o.schedule == "noam") return std::make_unique<optim::Noam>(d_model, std::max<int64_t>(o.warmup, 1), o.lr);
  if (o.schedule == "step") return std::make_unique<optim::StepDecay>(o.lr, std::max<int64_t>(o.steps / 3, 1), 0.1);
  return std::make_unique<optim::WarmupCosine>(o.lr, o.warmup, o.steps, o.min_lr);
}

class JsonLog {
 public:
  explicit JsonLog(const std::string& path, bool append) {
    if (path.empty()) return;
    out_.open(path, append ? std::ios::app : std::ios::trunc);
    if (!out_) fail<IOError>("log", "cannot open {} for writing", path);
  }
  void write(const nlohmann::json& j) {
    if (!out_.is_open()) return;
    out_ << j.dump() << '\n';
    out_.flush();
  }

 private:
  std::ofstream out_;
};

std::string eval_line(int64_t step, const EvalResult& e) {
  std::string s = fmt::format("eval step {}: loss {:.4f}  token acc {:.2f}%  exact match {:.2f}% ({} held-out)", step,
                              e.loss, 100 * e.token_accuracy, 100 * e.exact_match, e.examples);
  for (auto& [k, v] : e.extra) s += fmt::format("  {} {:.2f}", k, v);
  return s;
}

nlohmann::json eval_record(int64_t step, const EvalResult& e) {
  nlohmann::json j = {{"step", step}, {"eval_loss", e.loss}, {"token_accuracy", e.token_accuracy},
                      {"exact_match", e.exact_match}};
  for (auto& [k, v] : e.extra) j[k] = v;
  return j;
}

}  // namespace

TrainSummary train_seq2seq(Seq2SeqTransformer& model, std::shared_ptr<Generator> dropout_gen, DataLoader& train,
                           const Dataset& heldout, const TrainOptions& opt, const TaskHooks& hooks) {
  using clock = std::chrono::steady_clock;
  cli::Progress progress(opt.quiet ? 0 : opt.log_every);
  auto say = [&](const std::string& line) { if (!opt.quiet) progress.print(line); };
  const int64_t pad = train.options().pad_id;
  const int64_t V = model.config.tgt_vocab;

  optim::AdamWOptions ao;
  ao.lr = opt.lr;
  ao.beta2 = 0.98;
  ao.eps = 1e-9;
  ao.weight_decay = opt.weight_decay;
  const std::vector<Tensor> params = model.parameters();
  optim::AdamW optimizer(params, ao);
  auto schedule = make_schedule(opt, model.config.d_model);

  CheckpointMeta meta;
  meta.config = model.config.to_json();
  meta.task = hooks.task;
  if (hooks.src_vocab) meta.vocab_src = hooks.src_vocab->tokens();
  if (hooks.tgt_vocab) meta.vocab_tgt = hooks.tgt_vocab->tokens();

  TrainProgress state;
  if (!opt.checkpoint_dir.empty()) remove_stale_temporaries(opt.checkpoint_dir);
  if (opt.resume) {
    Checkpoint c = load_checkpoint(opt.checkpoint_dir, /*need_train_state=*/true);
    if (c.meta.config != meta.config)
      fail<ValueError>("resume", "{} was trained with model config {}, but the flags give {}; hint: use the same "
                       "model flags, or a new --checkpoint-dir", c.model_path, c.meta.config.dump(), meta.config.dump());
    if (c.meta.task != meta.task)
      fail<ValueError>("resume", "{} was trained on task {}, but the flags give {}", c.model_path, c.meta.task.dump(),
                       meta.task.dump());
    model.load_state_dict(c.model);
    optimizer.load_state_dict(c.optimizer);
    state = c.progress;
    schedule->set_last_step(state.schedule_step);
    train.set_state(state.loader);
    dropout_gen->set_state(state.rng);
    say(fmt::format("resumed from {} at step {}", c.model_path, state.step));
  }
  JsonLog log(opt.log_path, opt.resume);

  auto checkpoint = [&](int64_t step) {
    if (opt.checkpoint_dir.empty()) return;
    state.step = step;
    state.loader = train.state();
    state.rng = dropout_gen->state();
    state.schedule_step = schedule->last_step();
    save_checkpoint(opt.checkpoint_dir, model.state_dict(), optimizer.state_dict(), meta, state, opt.keep_last);
  };

  EvalOptions eo;
  eo.max_examples = opt.eval_size;
  auto run_eval = [&](int64_t step) {
    EvalResult e = evaluate(model, heldout, eo, pad);
    if (hooks.add_metrics) hooks.add_metrics(e);
    say(eval_line(step, e));
    log.write(eval_record(step, e));
    const bool best = e.loss < state.best_eval_loss;
    if (best) state.best_eval_loss = e.loss;
    checkpoint(step);
    if (best && !opt.checkpoint_dir.empty()) mark_best(opt.checkpoint_dir, step);
    return e;
  };

  TrainSummary summary;
  model.train();
  const auto t0 = clock::now();
  double tokens_done = 0, window_loss = 0;
  int64_t window = 0, last_eval_step = -1, skipped = 0;
  const int64_t first = state.step + 1;
  const int64_t last = opt.stop_after > 0 ? std::min(opt.stop_after, opt.steps) : opt.steps;
  int64_t last_checkpoint_step = -1;
  for (int64_t step = first; step <= last; ++step) {
    const auto step_start = clock::now();
    Batch b = train.next();
    double loss_value, grad_norm;
    {
      std::optional<AnomalyGuard> anomaly;
      if (opt.detect_anomaly) anomaly.emplace();
      Tensor logits = model.forward(b.src, b.tgt_in, b.src_key_padding_mask);  // [B, T, V]
      CrossEntropyOptions ce;
      ce.ignore_index = pad;
      ce.label_smoothing = opt.label_smoothing;
      Tensor loss = cross_entropy(logits.reshape({-1, V}), b.tgt_out.reshape({-1}), ce);
      loss_value = loss.item();
      if (std::isfinite(loss_value)) loss.backward();
    }
    grad_norm = std::isfinite(loss_value)
                    ? optim::clip_grad_norm(params, opt.clip > 0 ? opt.clip : INFINITY)
                    : NAN;
    if (!std::isfinite(loss_value) || !std::isfinite(grad_norm)) {
      const std::string what = fmt::format("non-finite {} at step {} (loss {}, grad norm {})",
                                           std::isfinite(loss_value) ? "gradient norm" : "loss", step, loss_value, grad_norm);
      optimizer.zero_grad();
      if (opt.on_nonfinite == OnNonfinite::skip) {
        ++skipped;
        say("warning: " + what + "; step skipped");
        log.write({{"step", step}, {"skipped", true}, {"reason", what}});
        summary.losses.push_back(loss_value);
        continue;
      }
      progress.finish();
      const auto steps = list_checkpoints(opt.checkpoint_dir);
      fail<Error>("train", "{}; training stopped{}. hint: lower --lr, keep --clip on, or use --on-nonfinite skip", what,
                  steps.empty() ? std::string(" (no checkpoint was written)")
                                : fmt::format(", the last good checkpoint is step {} in {}", steps.back(), opt.checkpoint_dir));
    }
    const double lr = schedule->step(optimizer);
    optimizer.step();
    optimizer.zero_grad();
    summary.step_seconds += std::chrono::duration<double>(clock::now() - step_start).count();

    summary.losses.push_back(loss_value);
    tokens_done += static_cast<double>(b.num_tokens);
    window_loss += loss_value;
    ++window;
    const double elapsed = std::chrono::duration<double>(clock::now() - t0).count();
    const double per_step = elapsed / static_cast<double>(step - first + 1);
    const std::string line = fmt::format("step {}/{}  loss {:.4f}  lr {:.2e}  {} tok/s  ETA {}", step, opt.steps,
                                         window_loss / static_cast<double>(window), lr,
                                         cli::format_count(tokens_done / std::max(elapsed, 1e-9)),
                                         cli::format_duration(per_step * static_cast<double>(opt.steps - step)));
    if (!opt.quiet) progress.update(step, line);
    if (step % opt.log_every == 0 || step == opt.steps) {
      log.write({{"step", step}, {"loss", window_loss / static_cast<double>(window)}, {"lr", lr},
                 {"grad_norm", grad_norm}, {"tokens_per_s", tokens_done / std::max(elapsed, 1e-9)}, {"elapsed_s", elapsed}});
      window_loss = 0;
      window = 0;
    }
    if ((opt.eval_every > 0 && step % opt.eval_every == 0) || step == opt.steps) {
      summary.last_eval = run_eval(step);
      last_eval_step = last_checkpoint_step = step;
    } else if (opt.checkpoint_every > 0 && step % opt.checkpoint_every == 0) {
      checkpoint(step);
      last_checkpoint_step = step;
    }
  }
  progress.finish();
  summary.steps = std::max(last, state.step);
  summary.stopped_early = last < opt.steps;
  summary.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  summary.final_loss = summary.losses.empty() ? NAN : summary.losses.back();
  if (summary.stopped_early) {
    if (last_checkpoint_step != last && first <= last) checkpoint(last);
    say(fmt::format("stopped after step {} of {} (--stop-after); continue with --resume", summary.steps, opt.steps));
  } else if (last_eval_step < 0 && first <= opt.steps) {
    summary.last_eval = run_eval(opt.steps);
  }
  if (skipped) say(fmt::format("{} step(s) skipped for non-finite values", skipped));
  return summary;
}

}  // namespace attograd
