// The command-line frame the probing subcommands (head_probe lm, head_probe
// translate) share: their common flags, and the JSON file's common fields.
// Each subcommand declares its own flags, then add_probe_flags; reads its
// ParseResult with read_probe_flags before its own flags; and ends with
// write_probe_json.
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

namespace attograd::app::probe {

// The shared flags' values, checked.
struct ProbeFlags {
  int64_t batch_size = 0;     // --batch-size
  int64_t random_orders = 0;  // --random-orders
  uint64_t seed = 0;          // --seed
  std::string out;            // --out, known to be writable
  int threads = 0;            // --threads, as parse_flags applied it
};

// Adds --batch-size ("<batch_unit> per batch; ..."), --random-orders, --seed,
// --out, --threads (with its help text and default) and -h/--help to `o`.
void add_probe_flags(cxxopts::Options& o, const std::string& batch_unit, const std::string& threads_help,
                     int threads_default);

// The shared flags of r, parsed by cli::parse_flags with options holding
// add_probe_flags' flags; nullopt after printing options' help for --help.
// A ValueError "flags: ..." names a bad one, or an argument that is not a
// flag, with the hint "<program> --help".
std::optional<ProbeFlags> read_probe_flags(const cxxopts::Options& options, const cxxopts::ParseResult& r,
                                           std::string_view program);

// Seconds from t0 to now.
double seconds_since(std::chrono::steady_clock::time_point t0);

// Sets j's batch_size, random_seed, threads and seconds.wall (since start) from
// f, then writes j to f.out (atomically, one space of indent).
void write_probe_json(nlohmann::json& j, const ProbeFlags& f, std::chrono::steady_clock::time_point start);

}  // namespace attograd::app::probe
