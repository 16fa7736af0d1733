#include "examples/common/checkpoint.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iterator>
#include <random>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

namespace attograd::app {

namespace fs = std::filesystem;

std::string step_prefix(const std::string& dir, int64_t step) { return fmt::format("{}/step-{:08d}", dir, step); }

namespace {

constexpr const char* kFormat = "attograd-checkpoint-v1";

// zlib's CRC-32 of every tensor's bytes, row-major, in name order, as 8 hex digits.
std::string tensors_crc32(const TensorMap& tensors) {
  uLong crc = crc32_z(0L, Z_NULL, 0);
  for (const auto& [name, t] : tensors) {
    Tensor c = t;
    if (!c.is_contiguous()) {
      c = Tensor::empty(t.shape(), t.dtype());
      c.copy_(t);
    }
    const size_t n = static_cast<size_t>(c.numel()) * dtype_size(c.dtype());
    if (n > 0) crc = crc32_z(crc, static_cast<const Bytef*>(c.raw_data()), n);
  }
  return fmt::format("{:08x}", crc);
}

void check_crc32(const SafetensorsData& d, const std::string& file) {
  auto it = d.metadata.find("crc32");
  if (it == d.metadata.end()) return;  // written before checksums
  const std::string got = tensors_crc32(d.tensors);
  if (got != it->second)
    fail<IOError>("checkpoint", "{}: tensor data does not match its checksum (crc32 {} in the metadata, {} "
                  "computed); the file is corrupt", file, it->second, got);
}

// A whole decimal int64 ("-5" too), or nullopt.
std::optional<int64_t> parse_int(std::string_view text) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return v;
}

// The step in a checkpoint file's name (".../step-00000020"), or nullopt (best.*).
std::optional<int64_t> step_in_name(const std::string& prefix) {
  const std::string name = fs::path(prefix).filename().string();
  if (!name.starts_with("step-")) return std::nullopt;
  return parse_int(std::string_view(name).substr(5));
}

// A file's "step" metadata; IOError when it is there but not a whole number.
std::optional<int64_t> metadata_step(const Metadata& md, const std::string& file) {
  auto it = md.find("step");
  if (it == md.end()) return std::nullopt;
  const auto step = parse_int(it->second);
  if (!step) fail<IOError>("checkpoint", "{}: metadata 'step' is '{}', not a whole number", file, it->second);
  return step;
}

// A small bookkeeping file (run.json, the lock's pid); "" when it cannot be
// read, or is not a small regular file.
std::string read_file_or_empty(const std::string& path) {
  try {
    return read_file_bytes(path, uint64_t{1} << 20);
  } catch (const IOError&) {
    return "";
  }
}

std::string metadata_or(const Metadata& md, const std::string& key, const std::string& otherwise = "") {
  auto it = md.find(key);
  return it == md.end() ? otherwise : it->second;
}

// The __metadata__ of a safetensors file, from its header alone (for pruning
// and for naming a run, without reading tensors); empty when unreadable.
Metadata header_metadata(const std::string& path) {
  try {
    return load_safetensors_metadata(path);
  } catch (const IOError&) {
    return {};
  }
}

// The program that usually writes a task's checkpoints.
std::string program_of_task(const std::string& task) { return task == "copy" ? "copy_task" : task; }

std::string task_kind(const nlohmann::json& task) {
  return task.is_object() && task.contains("task") && task["task"].is_string() ? task["task"].get<std::string>() : "";
}

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

// What a checkpoint file says about itself besides its contents.
struct FileStamp {
  std::optional<int64_t> step;  // "step" metadata
  std::string run_id;
};

FileStamp load_model_file(Checkpoint& c) {
  SafetensorsData d = load_safetensors(c.model_path);
  check_crc32(d, c.model_path);
  c.meta = parse_checkpoint_meta(d.metadata, c.model_path);
  c.model = std::move(d.tensors);
  return {metadata_step(d.metadata, c.model_path), c.meta.run_id};
}

FileStamp load_train_file(Checkpoint& c) {
  SafetensorsData d = load_safetensors(c.train_path);
  check_crc32(d, c.train_path);
  c.progress = parse_train_progress(d.tensors, c.train_path);
  if (auto it = d.metadata.find("optimizer"); it != d.metadata.end()) c.progress.optimizer = it->second;
  for (auto& [k, t] : d.tensors)
    if (k.rfind("optim.", 0) == 0) c.optimizer[k.substr(6)] = t;
  return {metadata_step(d.metadata, c.train_path), metadata_or(d.metadata, "run")};
}

// "F was written by translate (task 'translate'), not by lm" when the checkpoint holds another task.
void check_reader(const Checkpoint& c, const CheckpointReader& reader) {
  const std::string task = task_kind(c.meta.task);
  if (task.empty() || reader.task.empty() || task == reader.task) return;
  const std::string writer = c.meta.program.empty() ? program_of_task(task) : c.meta.program;
  const std::string program = reader.program.empty() ? program_of_task(reader.task) : reader.program;
  if (writer == program)
    fail<IOError>("checkpoint", "{} is not a {} checkpoint: its task is '{}', where {} writes task '{}'; hint: the "
                  "file's metadata was edited", c.model_path, program, task, program, reader.task);
  fail<IOError>("checkpoint", "{} was written by {} (task '{}'), not by {}; hint: {} reads checkpoints of task '{}'",
                c.model_path, writer, task, program, program, reader.task);
}

// A model file and a train file are one checkpoint: the step in the name, in
// both files' "step" and in train.step agree and is >= 0, and the runs match.
void check_pair(const Checkpoint& c, const std::string& prefix, const FileStamp& model,
                const std::optional<FileStamp>& train) {
  auto check_sign = [](const std::string& file, std::optional<int64_t> step, const char* what) {
    if (step && *step < 0)
      fail<IOError>("checkpoint", "{}: {} is {}, a negative step; hint: the file was edited", file, what, *step);
  };
  check_sign(c.model_path, model.step, "metadata 'step'");
  if (train) {
    check_sign(c.train_path, c.progress.step, "train.step");
    check_sign(c.train_path, train->step, "metadata 'step'");
    for (const std::optional<int64_t> other : {model.step, train->step})
      if (other && *other != c.progress.step)
        fail<IOError>("checkpoint", "{} (train.step {}) and {} (step {}) are not one checkpoint; hint: a file was "
                      "renamed, edited or copied from another checkpoint", c.train_path, c.progress.step, c.model_path,
                      *other);
    if (!model.run_id.empty() && !train->run_id.empty() && model.run_id != train->run_id)
      fail<IOError>("checkpoint", "{} (run {}) and {} (run {}) come from two different runs; hint: a file was copied "
                    "from another run's directory", c.train_path, train->run_id, c.model_path, model.run_id);
  }
  const std::optional<int64_t> named = step_in_name(prefix);
  const std::optional<int64_t> step = train ? std::optional<int64_t>(c.progress.step) : model.step;
  if (named && step && *step != *named)
    fail<IOError>("checkpoint", "{} holds step {}, but its name says step {}; hint: the file was renamed or edited",
                  train ? c.train_path : c.model_path, *step, *named);
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
  meta.program = metadata_or(md, "program");
  meta.run_id = metadata_or(md, "run");
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
  if (tensors.count("loader.global_max_tokens"))
    p.global_max_tokens = get_i64(tensors, "loader.global_max_tokens", file);
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
  if (p.global_max_tokens) train["loader.global_max_tokens"] = i64(*p.global_max_tokens);
  train["train.step"] = i64(p.step);
  train["train.best_eval_loss"] = Tensor::scalar(p.best_eval_loss, DType::f64);
  Metadata train_md{{"format", kFormat}, {"step", std::to_string(p.step)}, {"crc32", tensors_crc32(train)}};
  if (p.optimizer) train_md["optimizer"] = *p.optimizer;
  if (!meta.run_id.empty()) train_md["run"] = meta.run_id;
  save_safetensors(prefix + ".train.safetensors", train, train_md);

  nlohmann::json src = meta.vocab_src, tgt = meta.vocab_tgt;
  Metadata model_md{{"format", kFormat},
                    {"step", std::to_string(p.step)},
                    {"config", meta.config.dump()},
                    {"task", meta.task.dump()},
                    {"vocab_src", src.dump()},
                    {"vocab_tgt", tgt.dump()}};
  if (!meta.program.empty()) model_md["program"] = meta.program;
  if (!meta.run_id.empty()) model_md["run"] = meta.run_id;
  save_model_file(prefix + ".model.safetensors", model_state, std::move(model_md));

  // Only this run's checkpoints count, and only they are removed (one without
  // a run id predates run ids: the directory check let this run resume it).
  if (keep_last > 0) {
    std::vector<int64_t> mine;
    for (int64_t s : list_checkpoints(dir)) {
      const Metadata md = header_metadata(step_prefix(dir, s) + ".model.safetensors");
      if (md.count("format") && (!md.count("run") || md.at("run") == meta.run_id)) mine.push_back(s);
    }
    for (size_t i = 0; i + static_cast<size_t>(keep_last) < mine.size(); ++i) {
      fs::remove(step_prefix(dir, mine[i]) + ".model.safetensors", ec);
      fs::remove(step_prefix(dir, mine[i]) + ".train.safetensors", ec);
    }
  }
  return prefix + ".model.safetensors";
}

void save_model_file(const std::string& path, const TensorMap& tensors, Metadata metadata) {
  metadata["crc32"] = tensors_crc32(tensors);
  save_safetensors(path, tensors, metadata);
}

void mark_best(const std::string& dir, int64_t step) {
  for (const char* kind : {"train", "model"}) {
    const std::string src = fmt::format("{}.{}.safetensors", step_prefix(dir, step), kind);
    write_file_atomic(fmt::format("{}/best.{}.safetensors", dir, kind), read_file_bytes(src));
  }
}

Checkpoint load_checkpoint(const std::string& path, bool need_train_state, const std::optional<CheckpointReader>& reader) {
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
  const FileStamp model = load_model_file(c);
  if (reader) check_reader(c, *reader);
  std::optional<FileStamp> train;
  if (fs::exists(c.train_path, ec)) train = load_train_file(c);
  else if (need_train_state) fail<IOError>("checkpoint", "{} is missing; it is needed to resume training", c.train_path);
  check_pair(c, prefix, model, train);
  return c;
}

// ---- checkpoint directories ------------------------------------------------------------------

namespace {

constexpr const char* kLockFile = "run.lock";
constexpr const char* kRunFile = "run.json";

// The files of a run in dir: checkpoints (step-*, best.*, average.*, complete
// or not), the tokenizer lm saves, translate's subword models, run.json. Sorted by name.
std::vector<std::string> run_files(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool checkpoint = (name.starts_with("step-") || name.starts_with("best.") || name.starts_with("average.")) &&
                            name.ends_with(".safetensors");
    const bool tokenizer = name == "tokenizer.json" || name == "tokenizer.model" ||
                           (name.starts_with("sentencepiece.") && name.ends_with(".model"));  // lm's, translate's
    if (checkpoint || tokenizer || name == kRunFile) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool has_checkpoint_file(const std::vector<std::string>& names) {
  return std::any_of(names.begin(), names.end(), [](const std::string& n) { return n.ends_with(".safetensors"); });
}

// "lm, up to step 600" for the run whose files are in dir.
std::string describe_run(const std::string& dir, const std::vector<std::string>& names) {
  std::string program;
  const nlohmann::json run =
      nlohmann::json::parse(read_file_or_empty(dir + "/" + kRunFile), nullptr, /*allow_exceptions=*/false);
  if (run.is_object() && run.contains("program") && run["program"].is_string()) program = run["program"];
  std::optional<int64_t> newest;
  for (const std::string& n : names)
    if (const auto step = step_in_name(dir + "/" + n.substr(0, n.find('.')))) newest = std::max(newest.value_or(*step), *step);
  if (program.empty() && newest) {
    const Metadata md = header_metadata(step_prefix(dir, *newest) + ".model.safetensors");
    program = md.count("program") ? md.at("program") : program_of_task(task_kind(
        nlohmann::json::parse(metadata_or(md, "task"), nullptr, /*allow_exceptions=*/false)));
  }
  std::string out = program.empty() ? std::string("another program") : program;
  out += newest ? fmt::format(", up to step {}", *newest) : std::string(", no checkpoint yet");
  return out;
}

std::string new_run_id() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}

// An exclusive flock on dir/run.lock, holding this process's pid; IOError
// naming the holder's pid when another process has it.
int lock_directory(const std::string& dir) {
  const std::string path = dir + "/" + kLockFile;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail<IOError>("checkpoint", "cannot open {}: {}", path, std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string pid = read_file_or_empty(path);
    ::close(fd);
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    if (err == EWOULDBLOCK)
      fail<IOError>("checkpoint", "{} is in use by another training run{}; hint: wait for it to end, or pass another "
                    "--checkpoint-dir", dir, pid.empty() ? std::string() : fmt::format(" (pid {})", pid));
    fail<IOError>("checkpoint", "cannot lock {}: {}", path, std::strerror(err));
  }
  const std::string pid = fmt::format("{}\n", ::getpid());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int err = errno;
    ::close(fd);
    fail<IOError>("checkpoint", "cannot write {}: {}", path, std::strerror(err));
  }
  return fd;
}

}  // namespace

RunDirectory::RunDirectory(std::string dir, std::string run_id, bool resumes, std::string note)
    : dir_(std::move(dir)), run_id_(std::move(run_id)), resumes_(resumes), note_(std::move(note)) {}

RunDirectory::~RunDirectory() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

std::shared_ptr<RunDirectory> RunDirectory::claim(const std::string& dir, DirMode mode) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail<IOError>("checkpoint", "cannot create directory {}: {}", dir, ec.message());
  auto run = std::make_shared<RunDirectory>(dir, new_run_id(), false, "");
  run->lock_fd_ = lock_directory(dir);
  remove_stale_temporaries(dir);
  const std::vector<std::string> names = run_files(dir);
  if (names.empty()) {
    if (mode == DirMode::resume) run->note_ = fmt::format("nothing to resume in {}: starting a new run", dir);
    return run;
  }
  const std::string other = describe_run(dir, names);
  auto remove_all = [&] {
    for (const std::string& n : names)
      if (!fs::remove(dir + "/" + n, ec) && ec)
        fail<IOError>("checkpoint", "cannot remove {}/{}: {}", dir, n, ec.message());
  };
  switch (mode) {
    case DirMode::fresh:
      if (!has_checkpoint_file(names))  // nothing to continue: --resume would start over as well
        fail<IOError>("checkpoint", "{} holds files of another run ({}) that wrote no checkpoint; pass --overwrite "
                      "(or --resume) to remove them and start a new run, or another --checkpoint-dir", dir, other);
      fail<IOError>("checkpoint", "{} holds checkpoints of another run ({}); pass --resume to continue it, "
                    "--overwrite to replace it, or another --checkpoint-dir", dir, other);
    case DirMode::overwrite:
      remove_all();
      run->note_ = fmt::format("--overwrite: removed {} file(s) of the previous run ({}) from {}", names.size(), other, dir);
      return run;
    case DirMode::resume:
      break;
  }
  const std::vector<int64_t> steps = list_checkpoints(dir);
  if (steps.empty()) {
    if (has_checkpoint_file(names))
      fail<IOError>("checkpoint", "{} holds checkpoint files ({}) but no complete checkpoint (a model file and a "
                    "train file of one step) to resume; hint: --overwrite to start again, or another --checkpoint-dir",
                    dir, fmt::join(names, ", "));
    remove_all();  // a run that stopped before its first checkpoint: nothing of it is worth keeping
    run->note_ = fmt::format("nothing to resume in {} (its run wrote no checkpoint): starting a new run", dir);
    return run;
  }
  const std::string id = metadata_or(header_metadata(step_prefix(dir, steps.back()) + ".model.safetensors"), "run");
  if (!id.empty()) run->run_id_ = id;
  run->resumes_ = true;
  return run;
}

void RunDirectory::record(const nlohmann::json& info) const {
  const std::string path = dir_ + "/" + kRunFile;
  std::error_code ec;
  if (fs::exists(path, ec)) return;
  nlohmann::json run = {{"run_id", run_id_},
                        {"started", fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(std::time(nullptr)))},
                        {"pid", ::getpid()}};
  run.update(info);
  write_file_atomic(path, run.dump(1) + "\n");
}

}  // namespace attograd::app
