#include "examples/common/memory_estimate.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include <attograd/autograd/error.h>
#include <attograd/autograd/io/safetensors.h>
#include <attograd/autograd/memory.h>

namespace attograd::app {

namespace {

constexpr double kFloatBytes = 4;

// What one layer norm keeps per row of width E, under memory_options().
double layer_norm_kept(double E) {
  return memory_options().layer_norm == LayerNormSaves::output ? E : 2 * E;
}

// What one attention keeps per query row and head over `keys` keys.
double attention_row_kept(double keys) {
  return memory_options().attention == AttentionSaves::row_stats ? 2 : keys;
}

}  // namespace

MemoryEstimate estimate_training_memory(const TransformerConfig& c, int64_t batch, int64_t src_len, int64_t tgt_len,
                                        int optimizer_buffers) {
  const double B = static_cast<double>(batch), S = static_cast<double>(src_len), T = static_cast<double>(tgt_len);
  const double E = static_cast<double>(c.d_model), F = static_cast<double>(c.d_ff), H = static_cast<double>(c.heads);
  const double V = static_cast<double>(c.tgt_vocab), ln = layer_norm_kept(E);
  const double enc_layer = B * S * (2 * ln + 4 * E + F + H * attention_row_kept(S));
  const double dec_layer =
      B * T * (3 * ln + 6 * E + F + H * (attention_row_kept(T) + attention_row_kept(S))) + B * S * 2 * E;
  double elements = B * (S + T) * (E + ln) + static_cast<double>(c.enc_layers) * enc_layer +
                    static_cast<double>(c.dec_layers) * dec_layer + B * T * 2 * V + std::max(enc_layer, dec_layer);
  if (c.dropout > 0) elements *= 1.25;
  MemoryEstimate m;
  m.parameters = c.parameter_count();
  const double p = static_cast<double>(m.parameters) * kFloatBytes;
  m.weights = p + static_cast<double>(c.max_len) * E * kFloatBytes;
  m.gradients = p;
  m.optimizer = optimizer_buffers * p;
  m.activations = elements * kFloatBytes;
  return m;
}

MemoryEstimate estimate_training_memory(const GPTConfig& c, int64_t batch, int optimizer_buffers) {
  const double tokens = static_cast<double>(batch) * static_cast<double>(c.context);
  const double E = static_cast<double>(c.d_model), F = static_cast<double>(c.d_ff), H = static_cast<double>(c.heads);
  const double V = static_cast<double>(c.vocab), T = static_cast<double>(c.context), ln = layer_norm_kept(E);
  const double block = 2 * ln + 9 * E + F + H * attention_row_kept(T);
  double elements = tokens * (3 * E + ln + 3 * V + static_cast<double>(c.layers) * block);
  if (c.dropout > 0) elements *= 1.25;
  MemoryEstimate m;
  m.parameters = c.parameter_count();
  const double p = static_cast<double>(m.parameters) * kFloatBytes;
  const bool sinusoidal = c.positions != PositionalEncoding::Kind::learned;
  m.weights = p + (sinusoidal ? static_cast<double>(c.context) * E * kFloatBytes : 0);
  m.gradients = p;
  m.optimizer = optimizer_buffers * p;
  m.activations = elements * kFloatBytes;
  return m;
}

std::string format_bytes(double b) {
  if (b >= 1e12) return fmt::format("{:.1f} TB", b / 1e12);
  if (b >= 1e9) return fmt::format("{:.1f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.1f} MB", b / 1e6);
  if (b >= 1e3) return fmt::format("{:.1f} kB", b / 1e3);
  return fmt::format("{:.0f} B", b);
}

std::string MemoryEstimate::summary() const {
  return fmt::format("{} (weights {}, gradients {}, optimizer {}, activations {})", format_bytes(total()),
                     format_bytes(weights), format_bytes(gradients), format_bytes(optimizer), format_bytes(activations));
}

namespace {

std::optional<double> meminfo_available() {
  std::ifstream f("/proc/meminfo");
  for (std::string line; std::getline(f, line);) {
    if (!line.starts_with("MemAvailable:")) continue;
    std::istringstream in(line.substr(13));
    double kb = 0;
    if (in >> kb) return kb * 1024;
  }
  return std::nullopt;
}

// A file's number; nullopt when missing, unreadable or "max" (cgroup v2's no limit).
std::optional<double> read_number(const std::string& path) {
  std::ifstream f(path);
  double v = 0;
  if (f >> v) return v;
  return std::nullopt;
}

// The process's cgroup path in a hierarchy of /proc/self/cgroup: "0::/a/b"
// (v2, controllers "") or "4:memory:/a/b" (v1, controllers "memory").
std::optional<std::string> cgroup_path(std::string_view controllers) {
  std::ifstream f("/proc/self/cgroup");
  for (std::string line; std::getline(f, line);) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string list = line.substr(a + 1, b - a - 1);
    const bool match = controllers.empty() ? list.empty()
                                           : ("," + list + ",").find(fmt::format(",{},", controllers)) != std::string::npos;
    if (match) return line.substr(b + 1);
  }
  return std::nullopt;
}

// The least room (limit less usage) of the process's cgroup and its ancestors.
std::optional<double> cgroup_room(const std::string& root, std::string_view controllers, const char* limit,
                                  const char* usage) {
  const std::optional<std::string> path = cgroup_path(controllers);
  if (!path) return std::nullopt;
  std::optional<double> room;
  for (std::string dir = *path == "/" ? "" : *path;;) {
    if (const std::optional<double> l = read_number(fmt::format("{}{}/{}", root, dir, limit))) {
      const double used = read_number(fmt::format("{}{}/{}", root, dir, usage)).value_or(0);
      room = std::min(room.value_or(*l), std::max(0.0, *l - used));
    }
    const size_t slash = dir.rfind('/');
    if (slash == std::string::npos) break;
    dir.resize(slash);
  }
  return room;
}

// RLIMIT_AS less the address space in use (/proc/self/statm's size).
std::optional<double> address_space_room() {
  rlimit lim{};
  if (getrlimit(RLIMIT_AS, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return std::nullopt;
  std::ifstream statm("/proc/self/statm");
  double pages = 0;
  statm >> pages;
  return std::max(0.0, static_cast<double>(lim.rlim_cur) - pages * static_cast<double>(sysconf(_SC_PAGESIZE)));
}

}  // namespace

std::optional<AvailableMemory> available_memory() {
  std::optional<AvailableMemory> least;
  auto consider = [&](std::optional<double> bytes, const char* bound) {
    if (bytes && (!least || *bytes < least->bytes)) least = AvailableMemory{*bytes, bound};
  };
  consider(meminfo_available(), "MemAvailable");
  consider(cgroup_room("/sys/fs/cgroup", "", "memory.max", "memory.current"), "cgroup memory limit");
  consider(cgroup_room("/sys/fs/cgroup/memory", "memory", "memory.limit_in_bytes", "memory.usage_in_bytes"),
           "cgroup memory limit");
  consider(address_space_room(), "ulimit -v");
  return least;
}

std::optional<double> memory_available() {
  const std::optional<AvailableMemory> a = available_memory();
  return a ? std::optional<double>(a->bytes) : std::nullopt;
}

uint64_t text_input_limit(std::optional<double> available) {
  constexpr uint64_t kFloor = uint64_t{64} << 20;
  if (!available || *available / 8 >= static_cast<double>(kReadFileLimit)) return kReadFileLimit;
  return std::max(kFloor, static_cast<uint64_t>(*available / 8));
}

uint64_t text_input_limit() { return text_input_limit(memory_available()); }

void check_memory_fits(const MemoryEstimate& e, std::optional<double> available, bool force, std::string_view bound) {
  if (force || !available || e.total() <= *available) return;
  fail<ValueError>("memory", "this run needs about {}, but {} is available ({}); hint: lower --d-model, "
                   "--d-ff, the layers or --batch-size, or pass --force to try anyway", e.summary(),
                   format_bytes(*available), bound);
}

}  // namespace attograd::app
