// What lm's modes and the programs that read its checkpoints (head_probe)
// share besides training: the text (a file or the fortunes), a checkpoint
// with its tokenizer, and the held-out windows `lm eval` measures.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include <attograd/data/lm_tokenizer.h>
#include <attograd/data/token_windows.h>
#include <attograd/nn/gpt.h>

namespace attograd::app {

// The default corpus: Debian's fortunes and fortunes-min (BSD licence).
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

// The file at path (a regular file or a pipe, at most text_input_limit()
// bytes), or when path is empty the fortune files of kFortunesDir (not their
// .dat indexes or .u8 links) in name order; IOError with a hint when there are none.
std::string read_lm_text(const std::string& path);

// A checkpoint lm train wrote, ready to evaluate.
struct LoadedLM {
  std::unique_ptr<GPT> model;              // in eval mode
  std::unique_ptr<LMTokenizer> tokenizer;  // the checkpoint directory's
  nlohmann::json task;                     // the "task" metadata (data, heldout, tokenizer, seed)
  std::optional<int64_t> step;             // the training step, when the train file is beside the model file
};

// A directory (its newest checkpoint), a model file or a step prefix, as
// load_checkpoint reads them. ValueError when path is empty; IOError for a
// checkpoint of another program or a tokenizer of another vocabulary size.
LoadedLM load_lm_checkpoint(const std::string& path);

// The text a checkpoint is evaluated on, tokenized and cut as in training.
struct LMHeldOut {
  std::string shown;    // the text's path, or "fortunes"
  double heldout = 0;   // the held-out fraction, from the checkpoint's task
  TokenWindows windows;  // its held-out windows are the ones lm eval and the trainer's evaluation read
};

// text: a --text flag ("": the checkpoint's own training text, the fortunes
// when it trained on them). IOError for bad task metadata, or a training text
// that is no longer there (hint: --text).
LMHeldOut lm_heldout(const LoadedLM& l, const std::string& text);

}  // namespace attograd::app
