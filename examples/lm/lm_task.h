// A GPT on a text as a task of the shared training loop
// (examples/common/trainer.h): global batches of random windows of the
// training head, each rank taking its disjoint share of the rows, next-token
// cross-entropy, and held-out loss, perplexity and bits per character,
// split across ranks.
//
// Shape legend: B batch, T context, V vocab.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include <attograd/data/lm_tokenizer.h>
#include <attograd/data/token_windows.h>
#include <attograd/dist/communicator.h>
#include <attograd/nn/gpt.h>
#include "examples/common/trainer.h"

namespace attograd::app {

struct LMEval {
  double loss = 0;           // mean cross-entropy per token (nats)
  double perplexity = 0;     // exp(loss)
  double bits_per_char = 0;  // Σ loss / ln 2 over the characters the targets decode to
  int64_t tokens = 0;
};

// The first max_windows held-out windows (all when 0), in batches of
// `batch`; in a world of N ranks (comm) each evaluates its share and every
// rank returns the merged result.
LMEval evaluate_lm(GPT& model, const TokenWindows& data, const LMTokenizer& tokenizer, int64_t max_windows,
                   int64_t batch, dist::Communicator& comm);
std::string eval_summary(const LMEval& e);  // "loss 1.2345  perplexity 3.44  bits/char 1.781"

class LMTask : public TrainTask {
 public:
  // data_gen draws the windows (the same stream on every rank; saved in
  // checkpoints as the data position), dropout_gen the dropout masks; task
  // is the checkpoint's "task" metadata.
  LMTask(GPT& model, const TokenWindows& data, const LMTokenizer& tokenizer, int64_t batch_size,
         std::shared_ptr<Generator> data_gen, std::shared_ptr<Generator> dropout_gen, nlohmann::json task);

  Module& model() override { return model_; }
  int64_t model_width() const override { return model_.config.d_model; }
  int64_t batch_size() const override { return batch_size_; }
  CheckpointMeta checkpoint_meta() const override;
  nlohmann::json reparsed_config(const nlohmann::json& saved) const override;
  Generator& dropout_generator() override { return *dropout_gen_; }
  ShardLoss next_loss(double label_smoothing) override;
  TaskEval evaluate(int64_t max_examples) override;
  void save_data_position(TrainProgress& p) const override;
  std::optional<std::string> restore_data_position(const TrainProgress& p) override;
  const LMEval& last_eval() const { return last_eval_; }

 private:
  GPT& model_;
  const TokenWindows& data_;
  const LMTokenizer& tokenizer_;
  int64_t batch_size_;
  std::shared_ptr<Generator> data_gen_, dropout_gen_;
  nlohmann::json task_;
  dist::Communicator& comm_;
  LMEval last_eval_;
};

}  // namespace attograd::app
