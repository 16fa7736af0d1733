#include "examples/common/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

namespace attograd {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "attograd-checkpoint-v1";

std::string step_prefix(const std::string& dir, int64_t step) { return fmt::format("{}/step-{:08d}", dir, step); }

Tensor i64(int64_t v) { return Tensor::from_vector(std::vector<int64_t>{v}, {}); }

int64_t get_i64(const TensorMap& m, const std::string& key, const std::string& file) {
  auto it = m.find(key);
  if (it == m.end() || it->second.dtype() != DType::i64 || it->second.numel() != 1)
    fail<IOError>("checkpoint", "{}: missing or malformed '{}'", file, key);
  return it->second.to_vector<int64_t>()[0];  // exact: item() goes through a double, which a large i64 overflows
}

nlohmann::json parse_json(const Metadata& md, const std::string& key, const std::string& file) {
  auto it = md.find(key);
  if (it == md.end()) fail<IOError>("checkpoint", "{}: metadata has no '{}'", file, key);
  try {
    return nlohmann::json::parse(it->second);
  } catch (const nlohmann::json::exception& e) {
    fail<IOError>("checkpoint", "{}: metadata '{}' is not valid JSON ({})", file, key, e.what());
  }
}

std::vector<std::string> parse_vocab(const Metadata& md, const std::string& key, const std::string& file) {
  nlohmann::json j = parse_json(md, key, file);
  if (!j.is_array()) fail<IOError>("checkpoint", "{}: metadata '{}' must be a JSON list of tokens", file, key);
  std::vector<std::string> out;
  for (auto& t : j) {
    if (!t.is_string()) fail<IOError>("checkpoint", "{}: metadata '{}' holds a non-string token", file, key);
    out.push_back(t.get<std::string>());
  }
  return out;
}

void load_model_file(Checkpoint& c) {
  SafetensorsData d = load_safetensors(c.model_path);
  c.meta = parse_checkpoint_meta(d.metadata, c.model_path);
  c.model = std::move(d.tensors);
}

void load_train_file(Checkpoint& c) {
  SafetensorsData d = load_safetensors(c.train_path);
  c.progress = parse_train_progress(d.tensors, c.train_path);
  if (auto it = d.metadata.find("optimizer"); it != d.metadata.end()) c.progress.optimizer = it->second;
  for (auto& [k, t] : d.tensors)
    if (k.rfind("optim.", 0) == 0) c.optimizer[k.substr(6)] = t;
}

}  // namespace

CheckpointMeta parse_checkpoint_meta(const Metadata& md, const std::string& file) {
  auto fmt_it = md.find("format");
  if (fmt_it == md.end() || fmt_it->second != kFormat)
    fail<IOError>("checkpoint", "{} is not an attograd checkpoint (metadata 'format' should be '{}')", file, kFormat);
  CheckpointMeta meta;
  meta.config = parse_json(md, "config", file);
  meta.task = parse_json(md, "task", file);
  meta.vocab_src = parse_vocab(md, "vocab_src", file);
  meta.vocab_tgt = parse_vocab(md, "vocab_tgt", file);
  // A vocab that does not fit the model would only fail later, as an
  // embedding index error far from its cause.
  struct VocabKey {
    const std::vector<std::string>* tokens;
    const char *meta_key, *config_key;
  };
  const VocabKey keys[] = {{&meta.vocab_src, "vocab_src", "src_vocab"}, {&meta.vocab_tgt, "vocab_tgt", "tgt_vocab"}};
  for (const VocabKey& v : keys) {
    if (v.tokens->empty() || !meta.config.is_object() || !meta.config.contains(v.config_key) ||
        !meta.config[v.config_key].is_number_integer())
      continue;
    const int64_t want = meta.config[v.config_key].get<int64_t>();
    if (static_cast<int64_t>(v.tokens->size()) != want)
      fail<IOError>("checkpoint", "{}: metadata '{}' holds {} tokens, but the model config says {} {}; hint: the file "
                    "was edited, or mixed from two checkpoints", file, v.meta_key, v.tokens->size(), v.config_key, want);
  }
  return meta;
}

namespace {

Generator::State get_generator_state(const TensorMap& tensors, const std::string& key, const std::string& file) {
  auto rng = tensors.find(key);
  if (rng == tensors.end() || rng->second.dtype() != DType::i64 || rng->second.numel() != 4)
    fail<IOError>("checkpoint", "{}: missing or malformed '{}'", file, key);
  auto words = rng->second.to_vector<int64_t>();
  Generator::State state{};
  for (size_t i = 0; i < 4; ++i) state[i] = static_cast<uint64_t>(words[i]);
  return state;
}

Tensor generator_state_tensor(const Generator::State& state) {
  std::vector<int64_t> words;
  for (uint64_t w : state) words.push_back(static_cast<int64_t>(w));
  return Tensor::from_vector(words, {4});
}

}  // namespace

TrainProgress parse_train_progress(const TensorMap& tensors, const std::string& file) {
  TrainProgress p;
  p.step = get_i64(tensors, "train.step", file);
  p.loader.epoch = get_i64(tensors, "loader.epoch", file);
  p.loader.position = get_i64(tensors, "loader.position", file);
  p.schedule_step = get_i64(tensors, "schedule.last_step", file);
  if (tensors.count("loader.global_batch")) p.global_batch = get_i64(tensors, "loader.global_batch", file);
  p.rng = get_generator_state(tensors, "rng.dropout", file);
  if (tensors.count("rng.data")) p.data_rng = get_generator_state(tensors, "rng.data", file);
  auto best = tensors.find("train.best_eval_loss");
  if (best != tensors.end()) {
    if (!is_floating(best->second.dtype()) || best->second.numel() != 1)
      fail<IOError>("checkpoint", "{}: malformed 'train.best_eval_loss' (expected one float, got {} {})", file,
                    dtype_name(best->second.dtype()), shape_str(best->second.shape()));
    p.best_eval_loss = best->second.item();
  }
  return p;
}

void remove_stale_temporaries(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  for (auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) fs::remove(e.path(), ec);
}

std::vector<int64_t> list_checkpoints(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return steps;
  constexpr std::string_view head = "step-", tail = ".model.safetensors";
  for (auto& e : fs::directory_iterator(dir, ec)) {
    // step-<digits>.model.safetensors
    const std::string name = e.path().filename().string();
    if (name.size() <= head.size() + tail.size() || !name.starts_with(head) || !name.ends_with(tail)) continue;
    const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
    if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
      continue;
    const int64_t step = std::stoll(digits);
    if (fs::exists(step_prefix(dir, step) + ".train.safetensors")) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::string save_checkpoint(const std::string& dir, const TensorMap& model_state, const TensorMap& optimizer_state,
                            const CheckpointMeta& meta, const TrainProgress& p, int64_t keep_last) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail<IOError>("checkpoint", "cannot create directory {}: {}", dir, ec.message());
  const std::string prefix = step_prefix(dir, p.step);

  TensorMap train;
  for (auto& [k, t] : optimizer_state) train["optim." + k] = t;
  train["rng.dropout"] = generator_state_tensor(p.rng);
  if (p.data_rng) train["rng.data"] = generator_state_tensor(*p.data_rng);
  train["loader.epoch"] = i64(p.loader.epoch);
  train["loader.position"] = i64(p.loader.position);
  train["schedule.last_step"] = i64(p.schedule_step);
  if (p.global_batch) train["loader.global_batch"] = i64(*p.global_batch);
  train["train.step"] = i64(p.step);
  train["train.best_eval_loss"] = Tensor::scalar(p.best_eval_loss, DType::f64);
  Metadata train_md{{"format", kFormat}, {"step", std::to_string(p.step)}};
  if (p.optimizer) train_md["optimizer"] = *p.optimizer;
  save_safetensors(prefix + ".train.safetensors", train, train_md);

  nlohmann::json src = meta.vocab_src, tgt = meta.vocab_tgt;
  const Metadata model_md{{"format", kFormat},
                          {"step", std::to_string(p.step)},
                          {"config", meta.config.dump()},
                          {"task", meta.task.dump()},
                          {"vocab_src", src.dump()},
                          {"vocab_tgt", tgt.dump()}};
  save_safetensors(prefix + ".model.safetensors", model_state, model_md);

  if (keep_last > 0) {
    auto steps = list_checkpoints(dir);
    for (size_t i = 0; i + static_cast<size_t>(keep_last) < steps.size(); ++i) {
      fs::remove(step_prefix(dir, steps[i]) + ".model.safetensors", ec);
      fs::remove(step_prefix(dir, steps[i]) + ".train.safetensors", ec);
    }
  }
  return prefix + ".model.safetensors";
}

void mark_best(const std::string& dir, int64_t step) {
  for (const char* kind : {"train", "model"}) {
    const std::string src = fmt::format("{}.{}.safetensors", step_prefix(dir, step), kind);
    write_file_atomic(fmt::format("{}/best.{}.safetensors", dir, kind), read_file_bytes(src));
  }
}

Checkpoint load_checkpoint(const std::string& path, bool need_train_state) {
  Checkpoint c;
  std::error_code ec;
  std::string prefix;
  if (fs::is_directory(path, ec)) {
    auto steps = list_checkpoints(path);
    if (steps.empty())
      fail<IOError>("checkpoint", "no complete checkpoint in {}; hint: train with --checkpoint-dir {} first", path, path);
    prefix = step_prefix(path, steps.back());
  } else {
    if (!fs::exists(path, ec) && !fs::exists(path + ".model.safetensors", ec))
      fail<IOError>("checkpoint", "{} does not exist; hint: pass a checkpoint directory or a .model.safetensors file",
                    path);
    prefix = path;
    bool suffixed = false;
    for (const char* suffix : {".model.safetensors", ".train.safetensors"})
      if (prefix.size() > std::strlen(suffix) && prefix.ends_with(suffix)) {
        prefix.resize(prefix.size() - std::strlen(suffix));
        suffixed = true;
      }
    if (!suffixed && fs::is_regular_file(path, ec))
      fail<IOError>("checkpoint", "{} is not a checkpoint; hint: pass a checkpoint directory, a "
                    "step-N.model.safetensors file or a step-N prefix", path);
  }
  c.model_path = prefix + ".model.safetensors";
  c.train_path = prefix + ".train.safetensors";
  if (!fs::exists(c.model_path, ec)) fail<IOError>("checkpoint", "{} does not exist", c.model_path);
  load_model_file(c);
  if (fs::exists(c.train_path, ec)) load_train_file(c);
  else if (need_train_state) fail<IOError>("checkpoint", "{} is missing; it is needed to resume training", c.train_path);
  return c;
}

}  // namespace attograd
