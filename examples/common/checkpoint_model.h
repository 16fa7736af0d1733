// The example programs' shared code (namespace attograd::app, never installed), not the library.
// The model a checkpoint holds, built as every program builds it (lm sample
// and eval, copy_task eval and decode, translate, heads_study --inspect) and
// as the model fuzz target does (fuzz/model_target.h): the config from the
// metadata, validated (ValueError naming the bad field); the file's weights
// checked against it before anything is allocated (IOError when their element
// count is not the config's model's, when the model would not fit in the
// memory left, or when a weight is NaN or Inf); a model of that config, then
// the file's weights (IOError or ShapeError when one is missing, unexpected
// or of another shape). The model comes back in eval mode.
#pragma once
#include <memory>

#include <attograd/nn/gpt.h>
#include <attograd/nn/transformer.h>
#include "examples/common/checkpoint.h"

namespace attograd::app {

std::unique_ptr<GPT> gpt_from_checkpoint(const Checkpoint& c);
std::unique_ptr<Seq2SeqTransformer> seq2seq_from_checkpoint(const Checkpoint& c);

// The uniform average of the model weights of this run's newest `last`
// complete checkpoints in dir (as fairseq's average_checkpoints.py; Marian
// keeps an exponential average instead), written to dir/average.model.safetensors
// with the newest one's metadata, so every program loads it as a checkpoint.
// Returns its path. ValueError for last < 2 or fewer checkpoints than that;
// IOError when their tensors differ in names or shapes (the average keeps the newest one's dtypes).
std::string average_checkpoints(const std::string& dir, int64_t last);

}  // namespace attograd::app
