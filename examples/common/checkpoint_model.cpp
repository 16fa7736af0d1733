#include "examples/common/checkpoint_model.h"

#include <attograd/autograd/engine.h>
#include <attograd/autograd/io/safetensors.h>
#include <attograd/autograd/autograd.h>
#include "examples/common/memory_estimate.h"

namespace attograd::app {

namespace {

// What a checkpoint's weights must be before a model is built from its
// config: exactly as many elements as that model's state_dict (so a config
// that lies about its sizes is refused before it allocates anything), room
// in memory for the model it builds (`model_elements`: its parameters and
// the position table it computes) beside them, and finite values (NaN
// weights would decode junk with exit code 0).
void check_weights(const Checkpoint& c, int64_t config_state_numel, int64_t model_elements) {
  int64_t held = 0;
  for (const auto& [name, t] : c.model) held = checked_add(held, t.numel(), "checkpoint", "the weights' element count");
  if (held != config_state_numel)
    fail<IOError>("checkpoint", "{}: its model config describes {} weights, but the file holds {}; hint: the config "
                  "was edited, or the file mixed from two checkpoints", c.model_path, config_state_numel, held);
  const double bytes = 4.0 * static_cast<double>(model_elements);  // float32, as the model is built
  if (const auto available = available_memory(); available && bytes > available->bytes)
    fail<IOError>("checkpoint", "{}: its model needs {} of memory, but {} is available ({}); hint: a machine with more "
                  "memory", c.model_path, format_bytes(bytes), format_bytes(available->bytes), available->bound);
  for (const auto& [name, t] : c.model)
    if (!all_finite(t))
      fail<IOError>("checkpoint", "{}: tensor '{}' holds NaN or Inf values; hint: the run that wrote it diverged, or "
                    "the file is corrupt", c.model_path, name);
}

// The file's weights into `model`: the same names (a crafted file may add or
// drop tensors), then load_state_dict's shape and dtype checks, each error
// naming the file.
void load_weights(Module& model, const Checkpoint& c) {
  const TensorMap mine = model.state_dict();
  const auto hint = "hint: the file was edited, or mixed from two checkpoints";
  for (const auto& [name, t] : c.model)
    if (!mine.count(name))
      fail<IOError>("checkpoint", "{}: tensor '{}' is not part of the model its config describes; {}", c.model_path,
                    name, hint);
  for (const auto& [name, t] : mine)
    if (!c.model.count(name))
      fail<IOError>("checkpoint", "{}: holds no tensor '{}', which the model its config describes needs; {}",
                    c.model_path, name, hint);
  try {
    model.load_state_dict(c.model);
  } catch (const Error& e) {
    fail<IOError>("checkpoint", "{}: {}", c.model_path, e.what());
  }
}

}  // namespace

std::unique_ptr<GPT> gpt_from_checkpoint(const Checkpoint& c) {
  const GPTConfig config = GPTConfig::from_json(c.meta.config);
  const bool table = config.positions == PositionalEncoding::Kind::sinusoidal;
  check_weights(c, config.state_numel(), config.parameter_count() + (table ? config.context * config.d_model : 0));
  Generator gen(0);
  auto model = std::make_unique<GPT>(config, gen);
  load_weights(*model, c);
  model->eval();
  return model;
}

std::unique_ptr<Seq2SeqTransformer> seq2seq_from_checkpoint(const Checkpoint& c) {
  const TransformerConfig config = TransformerConfig::from_json(c.meta.config);
  check_weights(c, config.state_numel(), config.parameter_count() + config.max_len * config.d_model);  // sinusoids
  Generator gen(0);
  auto model = std::make_unique<Seq2SeqTransformer>(config, gen, nullptr);
  load_weights(*model, c);
  model->eval();
  return model;
}

std::string average_checkpoints(const std::string& dir, int64_t last) {
  if (last < 2) fail<ValueError>("average_checkpoints", "averaging needs 2 or more checkpoints, got {}", last);
  const std::vector<int64_t> steps = list_checkpoints(dir);
  if (static_cast<int64_t>(steps.size()) < last)
    fail<ValueError>("average_checkpoints", "{} holds {} complete checkpoint{}, fewer than the {} to average; hint: "
                     "checkpoint more often (--checkpoint-every) or average fewer", dir, steps.size(),
                     steps.size() == 1 ? "" : "s", last);
  const std::string newest = step_prefix(dir, steps.back()) + ".model.safetensors";
  const Checkpoint last_one = load_checkpoint(newest, false);
  TensorMap sum;
  for (size_t k = steps.size() - static_cast<size_t>(last); k < steps.size(); ++k) {
    const std::string path = step_prefix(dir, steps[k]) + ".model.safetensors";
    const Checkpoint c = load_checkpoint(path, false);
    if (c.meta.run_id != last_one.meta.run_id)
      fail<IOError>("average_checkpoints", "{} belongs to another run than {}", path, newest);
    if (sum.empty()) {
      for (const auto& [name, t] : c.model) sum[name] = t.to(DType::f64);
      continue;
    }
    if (c.model.size() != sum.size())
      fail<IOError>("average_checkpoints", "{} holds {} tensors, {} holds {}", path, c.model.size(), newest, sum.size());
    for (const auto& [name, t] : c.model) {
      const auto it = sum.find(name);
      if (it == sum.end() || it->second.shape() != t.shape())
        fail<IOError>("average_checkpoints", "{}: tensor {} is not in the other checkpoints with that shape", path, name);
      it->second = it->second + t.to(DType::f64);
    }
  }
  for (auto& [name, t] : sum) t = (t * (1.0 / static_cast<double>(last))).to(last_one.model.at(name).dtype());
  Metadata md = load_safetensors_metadata(newest);
  md.erase("crc32");
  const std::string out = dir + "/average.model.safetensors";
  save_model_file(out, sum, std::move(md));
  return out;
}

}  // namespace attograd::app
