#include "examples/lm/lm_task.h"

#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include <attograd/autograd/engine.h>
#include <attograd/autograd/ops/loss.h>
#include <attograd/data/tokenizer.h>

namespace attograd::app {

namespace {

int64_t code_points(std::string_view s) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) i += utf8_char_length(s, i, "code_points");
  return n;
}

// Summed (reduction sum) or mean next-token cross-entropy of windows input [B, T] -> target [B, T].
Tensor next_token_loss(GPT& model, const Tensor& input, const Tensor& target, const CrossEntropyOptions& ce) {
  const Tensor logits = model.forward(input);  // [B, T, V]
  return cross_entropy(logits.reshape({-1, model.config.vocab}), target.reshape({-1}), ce);
}

}  // namespace

LMEval evaluate_lm(GPT& model, const TokenWindows& data, const LMTokenizer& tokenizer, int64_t max_windows,
                   int64_t batch, dist::Communicator& comm) {
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  const int64_t windows = max_windows > 0 ? std::min(max_windows, data.heldout_windows()) : data.heldout_windows();
  const auto [mine, end] = share_of(windows, comm.rank(), comm.size());
  CrossEntropyOptions ce;
  ce.reduction = Reduction::sum;
  std::vector<double> sums(3, 0.0);  // nats, tokens, characters
  for (int64_t first = mine; first < end; first += batch) {
    const LMBatch b = data.heldout_batch(first, std::min(batch, end - first));
    sums[0] += next_token_loss(model, b.input, b.target, ce).item();
    sums[1] += static_cast<double>(b.target.numel());
    const auto targets = b.target.to_vector<int64_t>();
    sums[2] += static_cast<double>(code_points(tokenizer.decode(std::vector<int32_t>(targets.begin(), targets.end()))));
  }
  if (comm.size() > 1) comm.allreduce_sum(std::span<double>(sums));
  model.train(was_training);
  LMEval e;
  e.tokens = static_cast<int64_t>(sums[1]);
  e.loss = sums[0] / std::max(sums[1], 1.0);
  e.perplexity = std::exp(e.loss);
  e.bits_per_char = sums[0] / std::numbers::ln2 / std::max(sums[2], 1.0);
  return e;
}

std::string eval_summary(const LMEval& e) {
  return fmt::format("loss {:.4f}  perplexity {:.2f}  bits/char {:.3f} ({} held-out tokens)", e.loss, e.perplexity,
                     e.bits_per_char, e.tokens);
}

LMTask::LMTask(GPT& model, const TokenWindows& data, const LMTokenizer& tokenizer, int64_t batch_size,
               std::shared_ptr<Generator> data_gen, std::shared_ptr<Generator> dropout_gen, nlohmann::json task)
    : model_(model),
      data_(data),
      tokenizer_(tokenizer),
      batch_size_(batch_size),
      data_gen_(std::move(data_gen)),
      dropout_gen_(std::move(dropout_gen)),
      task_(std::move(task)),
      comm_(dist::world()) {}

CheckpointMeta LMTask::checkpoint_meta() const {
  CheckpointMeta meta;
  meta.config = model_.config.to_json();
  meta.task = task_;
  return meta;
}

nlohmann::json LMTask::reparsed_config(const nlohmann::json& saved) const {
  return GPTConfig::from_json(saved).to_json();
}

// Every rank draws the same global batch of N * B windows and trains on its
// rows; on one rank the loss is the batch's mean, on N the rows' sum over
// the global batch's tokens.
ShardLoss LMTask::next_loss(double label_smoothing) {
  const LMBatch global = data_.sample(batch_size_ * comm_.size(), *data_gen_);
  ShardLoss out;
  out.global_tokens = global.input.numel();
  const auto [first, last] = share_of(global.input.size(0), comm_.rank(), comm_.size());
  CrossEntropyOptions ce;
  ce.label_smoothing = label_smoothing;
  if (comm_.size() == 1) {
    out.loss = next_token_loss(model_, global.input, global.target, ce);
    return out;
  }
  ce.reduction = Reduction::sum;
  const Tensor input = global.input.narrow(0, first, last - first);    // [B/N, T]
  const Tensor target = global.target.narrow(0, first, last - first);  // [B/N, T]
  out.loss = next_token_loss(model_, input, target, ce) * (1.0 / static_cast<double>(out.global_tokens));
  return out;
}

TaskEval LMTask::evaluate(int64_t max_examples) {
  last_eval_ = evaluate_lm(model_, data_, tokenizer_, max_examples, batch_size_, comm_);
  return {last_eval_.loss, eval_summary(last_eval_),
          {{"eval_loss", last_eval_.loss}, {"perplexity", last_eval_.perplexity},
           {"bits_per_char", last_eval_.bits_per_char}}};
}

void LMTask::save_data_position(TrainProgress& p) const {
  p.data_rng = data_gen_->state();
  p.global_batch = batch_size_ * comm_.size();
}

// Windows are drawn at random, so a checkpoint made with another global batch
// simply continues the same stream of windows.
std::optional<std::string> LMTask::restore_data_position(const TrainProgress& p) {
  if (!p.data_rng)
    fail<IOError>("resume", "the checkpoint has no 'rng.data' (the window generator); hint: it was not written by "
                  "lm train, or by an older version: start a new --checkpoint-dir");
  data_gen_->set_state(*p.data_rng);
  return std::nullopt;
}

}  // namespace attograd::app
