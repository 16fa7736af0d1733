#include "examples/lm/lm_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "examples/common/checkpoint.h"
#include "examples/common/checkpoint_model.h"
#include "examples/common/preflight.h"

namespace attograd::app {

std::string read_lm_text(const std::string& path) {
  if (!path.empty()) return read_file_bytes(path, text_input_limit());
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(kFortunesDir, ec)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && !e.is_symlink() && ext != ".dat" && ext != ".u8") files.push_back(e.path().string());
  }
  if (files.empty())
    fail<IOError>("data", "no fortune files in {}; hint: install the default corpus (sudo scripts/setup, or apt-get "
                  "install fortunes-min fortunes), or pass --text FILE", kFortunesDir);
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& f : files) text += read_file_bytes(f, text_input_limit());
  return text;
}

LoadedLM load_lm_checkpoint(const std::string& path) {
  if (path.empty()) fail<ValueError>("flags", "--checkpoint is required; hint: the --checkpoint-dir used in training");
  const Checkpoint c = load_checkpoint(path, false, CheckpointReader{"lm", "lm"});
  LoadedLM l;
  l.task = c.meta.task;
  l.tokenizer = load_lm_tokenizer(std::filesystem::path(c.model_path).parent_path().string());
  l.model = gpt_from_checkpoint(c);
  if (std::filesystem::exists(c.train_path)) l.step = c.progress.step;
  if (l.model->config.vocab != l.tokenizer->vocab_size())
    fail<IOError>("checkpoint", "{}: the model has {} tokens, its tokenizer {}", c.model_path, l.model->config.vocab,
                  l.tokenizer->vocab_size());
  return l;
}

LMHeldOut lm_heldout(const LoadedLM& l, const std::string& text) {
  std::string path = text;
  double heldout = 0.1;
  try {
    if (path.empty() && l.task.at("data").get<std::string>() != "fortunes") path = l.task.at("data").get<std::string>();
    heldout = l.task.at("heldout").get<double>();
  } catch (const nlohmann::json::exception& e) {
    fail<IOError>("checkpoint", "bad task metadata: {}", e.what());
  }
  if (text.empty() && !path.empty() && !std::filesystem::exists(path))
    fail<IOError>("eval", "the checkpoint's training text {} is missing; hint: pass --text FILE, the text to evaluate on",
                  path);
  return {path.empty() ? std::string("fortunes") : path, heldout,
          TokenWindows(l.tokenizer->encode(read_lm_text(path)), l.model->config.context, heldout)};
}

}  // namespace attograd::app
