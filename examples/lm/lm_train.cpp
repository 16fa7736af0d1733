#include "examples/lm/lm_train.h"

#include <chrono>
#include <cmath>
#include <fstream>
#include <numbers>

#include <fmt/format.h>

#include <attograd/autograd/engine.h>
#include <attograd/autograd/ops/loss.h>
#include <attograd/data/tokenizer.h>
#include <attograd/optim/clip.h>
#include "examples/common/checkpoint.h"
#include "examples/common/cli.h"
#include "examples/common/train_choices.h"

namespace attograd {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int64_t code_points(std::string_view s) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) i += utf8_char_length(s, i, "code_points");
  return n;
}

Tensor next_token_loss(GPT& model, const LMBatch& b) {
  const Tensor logits = model.forward(b.input);  // [B, T, V]
  return cross_entropy(logits.reshape({-1, model.config.vocab}), b.target.reshape({-1}));
}

}  // namespace

LMEval evaluate_lm(GPT& model, const TokenWindows& data, const LMTokenizer& tokenizer, int64_t max_windows,
                   int64_t batch) {
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  const int64_t windows = max_windows > 0 ? std::min(max_windows, data.heldout_windows()) : data.heldout_windows();
  double nats = 0;
  int64_t chars = 0;
  LMEval e;
  for (int64_t first = 0; first < windows; first += batch) {
    const LMBatch b = data.heldout_batch(first, std::min(batch, windows - first));
    const int64_t n = b.target.numel();
    nats += next_token_loss(model, b).item() * static_cast<double>(n);
    e.tokens += n;
    const auto targets = b.target.to_vector<int64_t>();
    chars += code_points(tokenizer.decode(std::vector<int32_t>(targets.begin(), targets.end())));
  }
  model.train(was_training);
  e.loss = nats / static_cast<double>(e.tokens);
  e.perplexity = std::exp(e.loss);
  e.bits_per_char = nats / std::numbers::ln2 / static_cast<double>(std::max<int64_t>(chars, 1));
  return e;
}

std::string eval_summary(const LMEval& e) {
  return fmt::format("loss {:.4f}  perplexity {:.2f}  bits/char {:.3f} ({} held-out tokens)", e.loss, e.perplexity,
                     e.bits_per_char, e.tokens);
}

namespace {

class LMTrainer {
 public:
  LMTrainer(GPT& model, const std::shared_ptr<Generator>& gen, const TokenWindows& data, const LMTokenizer& tokenizer,
            const TrainOptions& opt, const nlohmann::json& task)
      : model_(model), gen_(gen), data_(data), tokenizer_(tokenizer), opt_(opt),
        progress_(opt.quiet ? 0 : opt.log_every), params_(model.parameters()),
        optimizer_(find_choice(optimizer_choices(), opt.optimizer, "optimizer").make(params_, opt)),
        schedule_(find_choice(schedule_choices(), opt.schedule, "schedule").make(opt, model.config.d_model)) {
    meta_.config = model.config.to_json();
    meta_.task = task;
    state_.optimizer = opt.optimizer;
    if (!opt.checkpoint_dir.empty()) remove_stale_temporaries(opt.checkpoint_dir);
    if (opt.resume) resume();
    if (!opt.log_path.empty()) {
      log_.open(opt.log_path, opt.resume ? std::ios::app : std::ios::trunc);
      if (!log_) fail<IOError>("log", "cannot open {} for writing", opt.log_path);
    }
  }

  LMTrainSummary run() {
    model_.train();
    const int64_t first = state_.step + 1, last = opt_.stop_after > 0 ? std::min(opt_.stop_after, opt_.steps) : opt_.steps;
    t0_ = Clock::now();
    bool evaluated = false;
    for (int64_t s = first; s <= last; ++s) {
      step(s, first);
      evaluated = (opt_.eval_every > 0 && s % opt_.eval_every == 0) || s == opt_.steps;
      if (evaluated) evaluate(s);
      else if (opt_.checkpoint_every > 0 && s % opt_.checkpoint_every == 0) checkpoint(s);
    }
    progress_.finish();
    if (last < opt_.steps && first <= last) {
      if (!evaluated) checkpoint(last);
      say(fmt::format("stopped after step {} of {} (--stop-after); continue with --resume", last, opt_.steps));
    } else if (first > last) {
      summary_.last_eval = evaluate_lm(model_, data_, tokenizer_, opt_.eval_size, opt_.batch_size);
    }
    summary_.steps = std::max(last, state_.step);
    summary_.seconds = seconds_since(t0_);
    return summary_;
  }

 private:
  void say(const std::string& line) {
    if (!opt_.quiet) progress_.print(line);
  }
  void write_log(const nlohmann::json& j) {
    if (log_.is_open()) log_ << j.dump() << '\n' << std::flush;
  }

  void resume() {
    Checkpoint c = load_checkpoint(opt_.checkpoint_dir, /*need_train_state=*/true);
    if (c.meta.config != meta_.config)
      fail<ValueError>("resume", "{} was trained with model config {}, but the flags give {}; hint: use the same "
                       "model flags, or a new --checkpoint-dir", c.model_path, c.meta.config.dump(), meta_.config.dump());
    if (c.meta.task != meta_.task)
      fail<ValueError>("resume", "{} was trained on {}, but the flags give {}; hint: the same --data, --tokenizer and "
                       "--vocab-size, or a new --checkpoint-dir", c.model_path, c.meta.task.dump(), meta_.task.dump());
    if (c.progress.optimizer && *c.progress.optimizer != opt_.optimizer)
      fail<ValueError>("resume", "{} was trained with --optimizer {}, but the flags give --optimizer {}", c.train_path,
                       *c.progress.optimizer, opt_.optimizer);
    model_.load_state_dict(c.model);
    optimizer_->load_state_dict(c.optimizer);
    state_ = c.progress;
    state_.optimizer = opt_.optimizer;
    schedule_->set_last_step(state_.schedule_step);
    gen_->set_state(state_.rng);
    say(fmt::format("resumed from {} at step {}", c.model_path, state_.step));
  }

  void step(int64_t s, int64_t first) {
    const auto start = Clock::now();
    const LMBatch b = data_.sample(opt_.batch_size, *gen_);
    std::optional<AnomalyGuard> anomaly;
    if (opt_.detect_anomaly) anomaly.emplace();
    Tensor loss_t = next_token_loss(model_, b);
    const double loss = loss_t.item();
    if (!std::isfinite(loss))
      fail<Error>("train", "non-finite loss {} at step {}; hint: lower --lr and keep --clip on", loss, s);
    loss_t.backward();
    const double grad_norm = optim::clip_grad_norm(params_, opt_.clip > 0 ? opt_.clip : INFINITY);
    if (!std::isfinite(grad_norm))
      fail<Error>("train", "non-finite gradient norm at step {}; hint: lower --lr and keep --clip on", s);
    const double lr = schedule_->step(*optimizer_);
    optimizer_->step();
    optimizer_->zero_grad();
    summary_.step_seconds += seconds_since(start);
    summary_.losses.push_back(loss);
    tokens_ += static_cast<double>(b.input.numel());
    window_loss_ += loss;
    ++window_;
    const double elapsed = seconds_since(t0_);
    const double tok_s = tokens_ / std::max(elapsed, 1e-9);
    const double mean = window_loss_ / static_cast<double>(window_);
    if (!opt_.quiet)
      progress_.update(s, fmt::format("step {}/{}  loss {:.4f}  lr {:.2e}  {} tok/s  ETA {}", s, opt_.steps, mean, lr,
                                      cli::format_count(tok_s),
                                      cli::format_duration(elapsed / static_cast<double>(s - first + 1) *
                                                           static_cast<double>(opt_.steps - s))));
    if (s % opt_.log_every == 0 || s == opt_.steps) {
      write_log({{"step", s}, {"loss", mean}, {"lr", lr}, {"grad_norm", grad_norm}, {"tokens_per_s", tok_s},
                 {"elapsed_s", elapsed}});
      window_loss_ = 0;
      window_ = 0;
    }
  }

  void evaluate(int64_t s) {
    const LMEval e = evaluate_lm(model_, data_, tokenizer_, opt_.eval_size, opt_.batch_size);
    say(fmt::format("eval step {}: {}", s, eval_summary(e)));
    write_log({{"step", s}, {"eval_loss", e.loss}, {"perplexity", e.perplexity}, {"bits_per_char", e.bits_per_char}});
    const bool best = e.loss < state_.best_eval_loss;
    if (best) state_.best_eval_loss = e.loss;
    checkpoint(s);
    if (best && !opt_.checkpoint_dir.empty()) mark_best(opt_.checkpoint_dir, s);
    summary_.last_eval = e;
  }

  void checkpoint(int64_t s) {
    if (opt_.checkpoint_dir.empty()) return;
    state_.step = s;
    state_.rng = gen_->state();
    state_.schedule_step = schedule_->last_step();
    save_checkpoint(opt_.checkpoint_dir, model_.state_dict(), optimizer_->state_dict(), meta_, state_, opt_.keep_last);
  }

  GPT& model_;
  std::shared_ptr<Generator> gen_;
  const TokenWindows& data_;
  const LMTokenizer& tokenizer_;
  const TrainOptions& opt_;
  cli::Progress progress_;
  const std::vector<Tensor> params_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::Schedule> schedule_;
  CheckpointMeta meta_;
  TrainProgress state_;
  std::ofstream log_;
  LMTrainSummary summary_;
  Clock::time_point t0_;
  double tokens_ = 0, window_loss_ = 0;
  int64_t window_ = 0;
};

}  // namespace

LMTrainSummary train_lm(GPT& model, const std::shared_ptr<Generator>& gen, const TokenWindows& data,
                        const LMTokenizer& tokenizer, const TrainOptions& opt, const nlohmann::json& task) {
  return LMTrainer(model, gen, data, tokenizer, opt, task).run();
}

}  // namespace attograd
