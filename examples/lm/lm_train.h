// Training and evaluating a GPT on a text (the lm program's loop): random
// windows of the training head, the shared flags, optimizer and schedule
// tables (examples/common/train_choices.h), clipping, a progress line with
// loss, lr, tok/s and ETA, JSON-lines logs, held-out loss / perplexity / bits
// per character every --eval-every steps, atomic checkpoints
// (examples/common/checkpoint.h) and exact resume.
//
// Shape legend: B batch, T context, V vocab.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <attograd/data/lm_tokenizer.h>
#include <attograd/data/token_windows.h>
#include <attograd/nn/gpt.h>
#include "examples/common/trainer.h"

namespace attograd {

struct LMEval {
  double loss = 0;           // mean cross-entropy per token (nats)
  double perplexity = 0;     // exp(loss)
  double bits_per_char = 0;  // Σ loss / ln 2 over the characters the targets decode to
  int64_t tokens = 0;
};

// The first max_windows held-out windows (all when 0), in batches of `batch`.
LMEval evaluate_lm(GPT& model, const TokenWindows& data, const LMTokenizer& tokenizer, int64_t max_windows,
                   int64_t batch);
std::string eval_summary(const LMEval& e);  // "loss 1.2345  perplexity 3.44  bits/char 1.781"

struct LMTrainSummary {
  int64_t steps = 0;
  double seconds = 0, step_seconds = 0;
  LMEval last_eval;
  std::vector<double> losses;  // every step's training loss (resume tests)
};

// Trains model on data. gen draws the windows and the dropout masks, and is
// saved in checkpoints (progress.rng). task is the checkpoint's "task"
// metadata; a resume refuses a checkpoint made with another config or task.
LMTrainSummary train_lm(GPT& model, const std::shared_ptr<Generator>& gen, const TokenWindows& data,
                        const LMTokenizer& tokenizer, const TrainOptions& opt, const nlohmann::json& task);

}  // namespace attograd
