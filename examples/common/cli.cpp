#include "examples/common/cli.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include <attograd/dist/communicator.h>

#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/settings.h>
#include "examples/common/memory_estimate.h"
#include "examples/common/preflight.h"

namespace attograd::app::cli {

namespace {

const cxxopts::HelpOptionDetails* find_flag(const cxxopts::Options& options, const std::string& name) {
  for (const std::string& g : options.groups())
    for (const cxxopts::HelpOptionDetails& d : options.group_help(g).options)
      if (d.s == name || std::find(d.l.begin(), d.l.end(), name) != d.l.end()) return &d;
  return nullptr;
}

// The name cxxopts knows a flag by (its long name, else its letter), and as written ("--lr", "-n").
std::string key_of(const cxxopts::HelpOptionDetails& d) { return d.l.empty() ? d.s : d.l.front(); }
std::string shown(const std::string& key) { return (key.size() == 1 ? "-" : "--") + key; }

bool value_parses(cxxopts::Options& options, const cxxopts::HelpOptionDetails& d, const std::string& value) {
  const std::string key = key_of(d);
  std::vector<std::string> args = {"probe"};
  if (d.has_implicit) args.push_back(shown(key) + "=" + value);
  else args.insert(args.end(), {shown(key), value});
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    options.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const cxxopts::exceptions::incorrect_argument_type&) {
    return false;
  }
  return true;
}

// What a non-boolean flag's value must be, found by offering it sample values.
enum class ValueKind { real, integer, natural, text, other };

ValueKind value_kind(cxxopts::Options& options, const cxxopts::HelpOptionDetails& d) {
  if (value_parses(options, d, "x")) return ValueKind::text;
  if (value_parses(options, d, "0.5")) return ValueKind::real;
  if (value_parses(options, d, "-7")) return ValueKind::integer;
  if (value_parses(options, d, "7")) return ValueKind::natural;
  return ValueKind::other;
}

std::string expected_type(ValueKind kind, bool list) {
  const std::string prefix = list ? "a comma-separated list of " : "";
  switch (kind) {
    case ValueKind::real: return prefix + (list ? "finite numbers" : "a finite number");
    case ValueKind::integer: return prefix + (list ? "integers" : "an integer");
    case ValueKind::natural: return prefix + (list ? "non-negative integers" : "a non-negative integer");
    default: return "another value";
  }
}

// Decimal and whole: "1e-3abc", "0x10", " 5", "nan", "inf" and "1e400" are not numbers here.
bool well_formed(ValueKind kind, std::string_view v) {
  if (kind == ValueKind::real) {
    double x = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x, std::chars_format::general);
    return ec == std::errc() && end == v.data() + v.size() && std::isfinite(x);
  }
  if (kind == ValueKind::integer && v.starts_with('-')) v.remove_prefix(1);
  return !v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool well_formed_value(ValueKind kind, bool list, std::string_view v) {
  if (kind != ValueKind::real && kind != ValueKind::integer && kind != ValueKind::natural) return true;
  if (!list) return well_formed(kind, v);
  for (size_t from = 0;;) {
    const size_t comma = v.find(',', from);
    if (!well_formed(kind, v.substr(from, comma == std::string_view::npos ? comma : comma - from))) return false;
    if (comma == std::string_view::npos) return true;
    from = comma + 1;
  }
}

// A value given to a flag that takes one.
struct Given {
  const cxxopts::HelpOptionDetails* flag;
  std::string value;
};

[[noreturn]] void bad_value(const cxxopts::HelpOptionDetails& d, ValueKind kind, const std::string& value) {
  fail<ValueError>("flags", "{} expects {}, got '{}'{}", shown(key_of(d)), expected_type(kind, d.is_container), value,
                   d.has_default && !d.default_value.empty() ? fmt::format(" (default {})", d.default_value) : "");
}

// The command line as cxxopts is given it: every boolean flag once, at the
// front and bare, when its last occurrence says true (no value, true or 1),
// and not at all when it says false (false or 0); anything else is refused.
// The other arguments keep their order; the values of the other flags are
// collected, found as cxxopts finds them (cxxopts' own argument splitter).
class CommandLine {
 public:
  CommandLine(const cxxopts::Options& options, int argc, const char* const* argv) {
    int i = 1;
    for (; i < argc && std::strcmp(argv[i], "--") != 0; ++i) {
      bool matched = false;
      const cxxopts::values::parser_tool::ArguDesc a = cxxopts::values::parser_tool::ParseArgument(argv[i], matched);
      if (!matched) {
        rest_.emplace_back(argv[i]);
      } else if (a.grouping) {
        letters(options, a.arg_name, argc, argv, i);
      } else if (const cxxopts::HelpOptionDetails* d = find_flag(options, a.arg_name); !d) {
        rest_.emplace_back(argv[i]);
      } else if (d->is_boolean) {
        set_boolean(*d, a.set_value ? std::optional<std::string>(a.value) : std::nullopt);
      } else {
        rest_.emplace_back(argv[i]);
        if (a.set_value) given_.push_back({d, a.value});
        else if (!d->has_implicit) take_next(d, argc, argv, i);
      }
    }
    rest_.insert(rest_.end(), argv + i, argv + argc);
  }

  std::vector<std::string> args(const char* program) const {
    std::vector<std::string> out = {program};
    for (const auto& [key, on] : booleans_)
      if (on) out.push_back(shown(key));
    out.insert(out.end(), rest_.begin(), rest_.end());
    return out;
  }
  const std::vector<Given>& given() const { return given_; }

 private:
  void set_boolean(const cxxopts::HelpOptionDetails& d, const std::optional<std::string>& value) {
    if (value && *value != "true" && *value != "false" && *value != "1" && *value != "0")
      fail<ValueError>("flags", "{} expects true, false, 1 or 0 (or no value), got '{}'", shown(key_of(d)), *value);
    const bool on = !value || *value == "true" || *value == "1";
    const auto at = std::find_if(booleans_.begin(), booleans_.end(), [&](const auto& b) { return b.first == key_of(d); });
    if (at == booleans_.end()) booleans_.emplace_back(key_of(d), on);
    else at->second = on;
  }

  // A flag's value in the next argument, whatever it looks like, as cxxopts takes it.
  void take_next(const cxxopts::HelpOptionDetails* d, int argc, const char* const* argv, int& i) {
    if (i + 1 >= argc) return;  // cxxopts reports the missing value
    rest_.emplace_back(argv[++i]);
    given_.push_back({d, argv[i]});
  }

  // "-abc": letters of boolean flags, then at most one that takes a value,
  // the rest of the group or else the next argument.
  void letters(const cxxopts::Options& options, const std::string& group, int argc, const char* const* argv, int& i) {
    for (size_t k = 0; k < group.size(); ++k) {
      const cxxopts::HelpOptionDetails* d = find_flag(options, group.substr(k, 1));
      if (!d) {
        rest_.push_back("-" + group.substr(k));  // cxxopts reports the unknown letter
        return;
      }
      if (d->is_boolean) {
        set_boolean(*d, std::nullopt);
        continue;
      }
      rest_.push_back("-" + group.substr(k, 1));
      if (d->has_implicit) continue;
      if (k + 1 < group.size()) {
        rest_.push_back(group.substr(k + 1));
        given_.push_back({d, rest_.back()});
      } else {
        take_next(d, argc, argv, i);
      }
      return;
    }
  }

  std::vector<std::pair<std::string, bool>> booleans_;  // in the order first given
  std::vector<std::string> rest_;
  std::vector<Given> given_;
};

// Every program and every mode parses its flags here, so --threads is applied
// here, once, before any work; a program that sweeps thread counts (bench's
// list, a text flag) applies them itself.
void apply_threads_flag(cxxopts::Options& options, const cxxopts::ParseResult& r) {
  const cxxopts::HelpOptionDetails* d = find_flag(options, "threads");
  if (!d || d->is_boolean || d->is_container || !(d->has_default || r.count("threads"))) return;
  if (const ValueKind kind = value_kind(options, *d); kind != ValueKind::integer && kind != ValueKind::natural) return;
  const int threads = flag_in_range<int>(r, "threads", 1, 256);
  warn_if_oversubscribed(threads);
  set_num_threads(threads);
}

}  // namespace

cxxopts::ParseResult parse_flags(cxxopts::Options& options, int argc, const char* const* argv) {
  const CommandLine line(options, argc, argv);
  for (const Given& g : line.given()) {
    const ValueKind kind = value_kind(options, *g.flag);
    if (!well_formed_value(kind, g.flag->is_container, g.value)) bad_value(*g.flag, kind, g.value);
  }
  const std::vector<std::string> args = line.args(argc > 0 ? argv[0] : "program");
  std::vector<const char*> ptrs;
  for (const std::string& a : args) ptrs.push_back(a.c_str());
  cxxopts::ParseResult r;
  try {
    r = options.parse(static_cast<int>(ptrs.size()), ptrs.data());
  } catch (const cxxopts::exceptions::incorrect_argument_type&) {
    // Well formed but out of the type's range (2^63 for an int64_t, -1 for a uint64_t).
    for (const Given& g : line.given())
      if (!value_parses(options, *g.flag, g.value)) bad_value(*g.flag, value_kind(options, *g.flag), g.value);
    throw;
  }
  apply_threads_flag(options, r);
  return r;
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

// The line for a std::bad_alloc, with the memory left as the preflight counts it.
std::string out_of_memory() {
  std::string available;
  try {
    if (const std::optional<AvailableMemory> a = available_memory()) available = "; " + describe(*a);
  } catch (...) {  // reading the limits needs a little memory too; the line goes out without them
  }
  return fmt::format("out of memory (std::bad_alloc{}); hint: smaller --d-model/--d-ff/--layers/--batch-size, "
                     "or check the memory limit (ulimit -v, cgroup)", available);
}

}  // namespace

int guarded_main(const char* program, const std::function<int()>& body) {
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
    // ATTOGRAD_GEMM, ATTOGRAD_MEMORY, ATTOGRAD_VECMATH: a bad value is one
    // line now, not after the data is read.
    read_settings_from_environment();
    return body();
  } catch (const std::bad_alloc&) {
    report_and_abort(world, fmt::format("{}: error: {}{}\n", program, rank, out_of_memory()));
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

namespace {

bool live_terminal() {
  const char* term = std::getenv("TERM");
  return isatty(fileno(stdout)) == 1 && !(term && std::string_view(term) == "dumb") && dist::world().size() == 1;
}

}  // namespace

Progress::Progress(int64_t plain_every) : tty_(live_terminal()), plain_every_(plain_every) {}

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

std::string compute_summary() { return fmt::format("{} thread(s), BLAS kernel {}", num_threads(), blas_corename()); }

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::clamp(CPU_COUNT(&set), 1, 256);
}

void warn_if_oversubscribed(int threads) {
  static std::atomic<bool> warned{false};
  const int cores = usable_cores();
  if (threads <= cores || dist::world().rank() != 0 || warned.exchange(true)) return;
  fmt::print(stderr, "warning: --threads {} exceeds the {} usable core{}; the run will be slower, not faster\n", threads,
             cores, cores == 1 ? "" : "s");
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

}  // namespace attograd::app::cli
