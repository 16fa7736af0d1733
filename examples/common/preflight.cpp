#include "examples/common/preflight.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include <attograd/autograd/error.h>
#include "examples/common/train_choices.h"

namespace fs = std::filesystem;

namespace attograd::app {

void check_dir_writable(const std::string& dir, std::string_view what) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir))
      fail<IOError>(what, "cannot create directory {}: {}", dir,
                    ec ? ec.message() : std::string("a file of that name is in the way"));
  }
  // The name matches remove_stale_temporaries' "*.tmp.*", should the program be killed right here.
  const std::string probe = fmt::format("{}/.write-check.tmp.{}", dir, getpid());
  {
    std::ofstream f(probe, std::ios::binary | std::ios::trunc);
    if (f) f << "attograd\n";
    if (!f || !f.flush()) {
      const std::string reason = std::strerror(errno);
      fs::remove(probe, ec);
      fail<IOError>(what, "cannot write in {}: {}", dir, reason);
    }
  }
  fs::remove(probe, ec);
}

void check_file_writable(const std::string& path, std::string_view what) {
  std::error_code ec;
  const bool existed = fs::exists(path, ec);
  std::ofstream f(path, std::ios::app);
  if (!f) fail<IOError>(what, "cannot open {} for writing: {}", path, std::strerror(errno));
  f.close();
  if (!existed) fs::remove(path, ec);
}

void check_outputs_writable(const TrainOptions& t) {
  if (!t.checkpoint_dir.empty()) check_dir_writable(t.checkpoint_dir, "checkpoint");
  if (!t.log_path.empty()) check_file_writable(t.log_path, "log");
  if (!t.views.graph_out.empty()) check_file_writable(t.views.graph_out, "graph-out");
  if (!t.views.trace_backward.empty() && t.views.trace_backward != "-")
    check_file_writable(t.views.trace_backward, "trace-backward");
}

std::string describe(const std::optional<AvailableMemory>& available) {
  if (!available) return "unknown available";
  if (available->bound == "MemAvailable") return fmt::format("{} available", format_bytes(available->bytes));
  return fmt::format("{} available, {}", format_bytes(available->bytes), available->bound);
}

void add_memory_flags(cxxopts::Options& o) {
  o.add_options("training")("force", "train even when the memory estimate (start-up header) exceeds the available memory");
}

namespace {

std::string check_memory(const cxxopts::ParseResult& r, const MemoryEstimate& e) {
  const std::optional<AvailableMemory> available = available_memory();
  check_memory_fits(e, available ? std::optional<double>(available->bytes) : std::nullopt, r.count("force") > 0,
                    available ? available->bound : "");
  return fmt::format("memory ~{} ({})", format_bytes(e.total()), describe(available));
}

int optimizer_buffers(const TrainOptions& t) {
  return find_choice(optimizer_choices(), t.optimizer, "optimizer").state_buffers;
}

}  // namespace

std::string check_training_memory(const cxxopts::ParseResult& r, const TransformerConfig& c, const TrainOptions& t,
                                  int64_t src_len, int64_t tgt_len) {
  return check_memory(r, estimate_training_memory(c, t.batch_size, src_len, tgt_len, optimizer_buffers(t)));
}

std::string check_training_memory(const cxxopts::ParseResult& r, const GPTConfig& c, const TrainOptions& t) {
  return check_memory(r, estimate_training_memory(c, t.batch_size, optimizer_buffers(t)));
}

}  // namespace attograd::app
