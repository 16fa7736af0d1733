#include "examples/common/cli.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <exception>
#include <thread>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include <attograd/dist/communicator.h>

#include <attograd/autograd/backend/blas_kernel.h>

namespace attograd::cli {

namespace {

const cxxopts::HelpOptionDetails* find_flag(const cxxopts::Options& options, const std::string& name) {
  for (const std::string& g : options.groups())
    for (const cxxopts::HelpOptionDetails& d : options.group_help(g).options)
      if (d.s == name || std::find(d.l.begin(), d.l.end(), name) != d.l.end()) return &d;
  return nullptr;
}

bool value_parses(cxxopts::Options& options, const std::string& flag, const std::string& value) {
  const std::string arg = flag.size() == 1 ? "-" + flag + value : "--" + flag + "=" + value;
  const char* argv[] = {"probe", arg.c_str()};
  try {
    options.parse(2, argv);
  } catch (const cxxopts::exceptions::incorrect_argument_type&) {
    return false;
  }
  return true;
}

// What a flag's value must look like, found by offering it sample values.
std::string expected_type(cxxopts::Options& options, const cxxopts::HelpOptionDetails& d, const std::string& flag) {
  if (d.is_boolean) return "true or false (or no value)";
  const std::string list = d.is_container ? "a comma-separated list of " : "";
  if (value_parses(options, flag, "0.5")) return list + (d.is_container ? "finite numbers" : "a finite number");
  if (value_parses(options, flag, "-7")) return list + (d.is_container ? "integers" : "an integer");
  if (value_parses(options, flag, "7")) return list + (d.is_container ? "non-negative integers" : "a non-negative integer");
  return "another value";
}

// Called when cxxopts found a value that does not parse: finds the flag
// holding it and throws the ValueError parse_flags promises. Returns when no
// flag can be blamed (cxxopts' own message then stands).
void explain_bad_value(cxxopts::Options& options, int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") return;
    if (a.size() < 2 || a[0] != '-') continue;
    const bool is_long = a[1] == '-';
    const size_t eq = a.find('=');
    const std::string flag = is_long ? a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2) : a.substr(1, 1);
    const cxxopts::HelpOptionDetails* d = find_flag(options, flag);
    if (!d) continue;
    std::string value;
    if (is_long && eq != std::string::npos) value = a.substr(eq + 1);
    else if (!is_long && a.size() > 2) value = a.substr(2);
    else if (!d->has_implicit && i + 1 < argc) value = argv[++i];
    else continue;
    if (value_parses(options, flag, value)) continue;
    const std::string name = (flag.size() == 1 ? "-" : "--") + flag;
    fail<ValueError>("flags", "{} expects {}, got '{}'{}", name, expected_type(options, *d, flag), value,
                     d->has_default && !d->is_boolean && !d->default_value.empty()
                         ? fmt::format(" (default {})", d->default_value)
                         : "");
  }
}

}  // namespace

cxxopts::ParseResult parse_flags(cxxopts::Options& options, int argc, const char* const* argv) {
  try {
    return options.parse(argc, argv);
  } catch (const cxxopts::exceptions::incorrect_argument_type&) {
    explain_bad_value(options, argc, argv);
    throw;
  }
}

std::optional<ModeAndFlags> parse_mode_and_flags(int argc, char** argv, const std::vector<std::string>& modes,
                                                 std::string_view expected,
                                                 const std::function<cxxopts::Options(const std::string&)>& make_options) {
  const bool named = argc > 1 && argv[1][0] != '-';
  const std::string mode = named ? argv[1] : modes.front();
  if (std::find(modes.begin(), modes.end(), mode) == modes.end())
    fail<ValueError>("flags", "unknown mode '{}'; expected {}", mode, expected);
  cxxopts::Options options = make_options(mode);
  std::vector<char*> args{argv[0]};
  for (int i = named ? 2 : 1; i < argc; ++i) args.push_back(argv[i]);
  cxxopts::ParseResult flags = parse_flags(options, static_cast<int>(args.size()), args.data());
  if (flags.count("help")) {
    fmt::print("{}\n", options.help());
    return std::nullopt;
  }
  std::vector<std::string> inputs = flags.unmatched();
  return ModeAndFlags{mode, std::move(flags), std::move(inputs)};
}

namespace {

// Prints `line`; in a job of several processes then ends them all (exit code
// 2), rank 0 at once and the others after a pause (see guarded_main).
void report_and_abort(dist::Communicator* world, const std::string& line) {
  const bool parallel = world && world->size() > 1;
  if (parallel && world->rank() != 0) std::this_thread::sleep_for(std::chrono::seconds(2));
  fmt::print(stderr, "{}", line);
  if (parallel) world->abort(2);
}

}  // namespace

int guarded_main(const char* program, const std::function<int()>& body) {
  ensure_fast_blas_kernel();  // may re-execute the program once, with OPENBLAS_CORETYPE set
  // Past a file size limit (ulimit -f) a write then fails with EFBIG, which
  // the checkpoint writer reports like a full disk, instead of SIGXFSZ
  // killing the program mid-run.
  std::signal(SIGXFSZ, SIG_IGN);
  // Under mpirun: the MPI world, stdout from rank 0 only, and an error on any
  // rank ends the whole job (MPI_Abort) after its one line naming the rank.
  // When every rank fails alike (a bad flag, a missing file) rank 0 speaks for
  // the job: the others wait a moment before printing, and rank 0's MPI_Abort
  // ends them first.
  dist::Communicator* world = nullptr;
  std::string rank;
  try {
    world = &dist::world();
    if (world->size() > 1) {
      rank = fmt::format("rank {} of {}: ", world->rank(), world->size());
      if (world->rank() != 0 && !std::freopen("/dev/null", "w", stdout))
        fail<IOError>("mpi", "cannot silence stdout on rank {}", world->rank());
    }
    return body();
  } catch (const Stopped& e) {  // every rank stops alike: rank 0 speaks for the job
    if (!world || world->rank() == 0) fmt::print(stderr, "{}: {}\n", program, e.what());
    return e.code();
  } catch (const cxxopts::exceptions::exception& e) {
    report_and_abort(world, fmt::format("{}: error: {}{} (see --help)\n", program, rank, e.what()));
  } catch (const std::exception& e) {
    report_and_abort(world, fmt::format("{}: error: {}{}\n", program, rank, e.what()));
  } catch (...) {
    report_and_abort(world, fmt::format("{}: error: {}unknown failure\n", program, rank));
  }
  return 2;
}

Progress::Progress(int64_t plain_every) : tty_(isatty(fileno(stdout)) == 1), plain_every_(plain_every) {}

void Progress::update(int64_t step, const std::string& text) {
  if (tty_) {
    fmt::print("\r\033[K{}", text);
    std::fflush(stdout);
    open_ = true;
  } else if (plain_every_ > 0 && step % plain_every_ == 0) {
    fmt::print("{}\n", text);
    std::fflush(stdout);
  }
}

void Progress::finish() {
  if (open_) fmt::print("\n");
  open_ = false;
  std::fflush(stdout);
}

void Progress::print(const std::string& line) {
  if (open_) fmt::print("\r\033[K");
  open_ = false;
  fmt::print("{}\n", line);
  std::fflush(stdout);
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::clamp(CPU_COUNT(&set), 1, 256);
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(std::llround(s));
  if (t >= 3600) return fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60);
  return fmt::format("{}:{:02}", t / 60, t % 60);
}

std::string format_count(double n) {
  if (n >= 1e6) return fmt::format("{:.1f}M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.1f}k", n / 1e3);
  return fmt::format("{:.0f}", n);
}

}  // namespace attograd::cli
