#include "examples/head_probe/probe_cli.h"

#include <fmt/format.h>

#include <attograd/autograd/io/safetensors.h>
#include "examples/common/cli.h"
#include "examples/common/preflight.h"

namespace attograd::app::probe {

void add_probe_flags(cxxopts::Options& o, const std::string& batch_unit, const std::string& threads_help,
                     int threads_default) {
  o.add_options()
      ("batch-size", batch_unit + " per batch; importance is the mean over batches of |dL/dxi|",
       cxxopts::value<int64_t>()->default_value("32"))
      ("random-orders", "random pruning orders beside the ranked ones", cxxopts::value<int64_t>()->default_value("5"))
      ("seed", "seed of the random orders", cxxopts::value<uint64_t>()->default_value("1"))
      ("out", "the JSON file to write", cxxopts::value<std::string>()->default_value(""))
      ("threads", threads_help, cxxopts::value<int>()->default_value(std::to_string(threads_default)))
      ("h,help", "show this help");
}

std::optional<ProbeFlags> read_probe_flags(const cxxopts::Options& options, const cxxopts::ParseResult& r,
                                           std::string_view program) {
  if (r.count("help")) {
    fmt::print("{}\n", options.help());
    return std::nullopt;
  }
  if (!r.unmatched().empty())
    fail<ValueError>("flags", "unexpected argument '{}'; hint: {} --help", r.unmatched().front(), program);
  ProbeFlags f;
  f.batch_size = cli::flag_in_range<int64_t>(r, "batch-size", 1, 1 << 16);
  f.random_orders = cli::flag_in_range<int64_t>(r, "random-orders", 0, 1000);
  f.seed = r["seed"].as<uint64_t>();
  f.out = r["out"].as<std::string>();
  if (f.out.empty()) fail<ValueError>("flags", "--out is required; hint: --out probe.json");
  check_file_writable(f.out, "out");
  f.threads = r["threads"].as<int>();
  return f;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void write_probe_json(nlohmann::json& j, const ProbeFlags& f, std::chrono::steady_clock::time_point start) {
  j["batch_size"] = f.batch_size;
  j["random_seed"] = f.seed;
  j["threads"] = f.threads;
  j["seconds"]["wall"] = seconds_since(start);
  write_file_atomic(f.out, j.dump(1) + "\n");
}

}  // namespace attograd::app::probe
