// The example programs' shared code (namespace attograd::app, never installed), not the library.
// What every attograd program shares on the command line: one clear line and
// exit code 2 for any error, a live progress line, and small formatting helpers.
#pragma once
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <cxxopts.hpp>

#include <attograd/autograd/error.h>

namespace attograd::app::cli {

// A program stopped at the user's request (a training run's SIGTERM or SIGINT,
// trainer.h) after saying so: guarded_main prints "<program>: <what()>" on
// stderr and exits with code() (128 + the signal's number, as a shell reports
// a process the signal killed).
class Stopped : public std::runtime_error {
 public:
  Stopped(const std::string& what, int code) : std::runtime_error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// Checks ATTOGRAD_GEMM, ATTOGRAD_MEMORY and ATTOGRAD_VECMATH
// (read_settings_from_environment: a bad value fails before any work; an
// empty one is unset), then runs body()
// with SIGXFSZ ignored (so a file size limit is an IOError); any exception
// becomes "<program>: error: <message>" on stderr and exit code 2 (running out
// of memory too, with a hint naming the size flags). body's own return value
// is the exit code otherwise.
int guarded_main(const char* program, const std::function<int()>& body);

// A progress line: rewritten in place ("\r") on a terminal, printed as plain
// lines (at most every `plain_every` calls to update) when stdout is a file or
// pipe, when TERM is "dumb", and in a job of several processes (mpirun gives
// its ranks a pty even when the job's output goes to a file).
class Progress {
 public:
  explicit Progress(int64_t plain_every = 50);
  void update(int64_t step, const std::string& text);
  void finish();        // ends an in-place line
  void print(const std::string& line);  // a normal line that does not clobber progress
  bool is_tty() const { return tty_; }

 private:
  bool tty_;
  bool open_ = false;
  int64_t plain_every_;
};

// Parses argv with `options`, as Options::parse does, but strictly, with
// errors that name the flag (ValueError "flags: ..."):
// - a boolean flag (one declared without a value type) takes no value, or
//   exactly true, false, 1 or 0 ("--quiet=maybe" is refused), and its last
//   occurrence wins ("--quiet --quiet=false" is false). The parser hands
//   cxxopts only the flags that end true, bare, so r.count("quiet") and
//   r["quiet"].as<bool>() both tell the truth: reading a boolean either way is right.
// - a number is read whole, in decimal: "--lr 1e-3abc", "--dropout 0x10",
//   "--lr '0.003 # peak'", "--lr 5e-4,0.1", " 5", nan, inf and 1e400 are
//   refused, each element of a comma-separated list alike;
//   "--lr expects a finite number, got '1e-3abc' (default 0.003)",
//   "--steps expects an integer, got 'abc' (default 1500)", instead of
//   cxxopts' "Argument 'abc' failed to parse" (or a silent 0.001).
// Ranges are the caller's: flag_in_range below.
// A --threads flag of one integer (every program's, in every mode) is applied
// here: its value, in [1, 256], sizes the thread pool (set_num_threads, with
// warn_if_oversubscribed), so no program applies it by hand.
cxxopts::ParseResult parse_flags(cxxopts::Options& options, int argc, const char* const* argv);

// "program [MODE] [--flags] [inputs...]": MODE is the first argument when it
// does not start with '-', else `modes[0]`. A mode outside `modes` is a
// ValueError "flags: unknown mode 'x'; expected <expected>". The other
// arguments are parsed with make_options(mode) (parse_flags); with --help its
// help is printed and the result is nullopt (exit 0). The arguments that are
// not flags are the inputs, each kept whole: options must not declare
// positionals, whose vector values cxxopts would split at commas
// ("three thousand, four hundred" is one input). The caller checks them.
struct ModeAndFlags {
  std::string mode;
  cxxopts::ParseResult flags;
  std::vector<std::string> inputs;
};
std::optional<ModeAndFlags> parse_mode_and_flags(int argc, char** argv, const std::vector<std::string>& modes,
                                                 std::string_view expected,
                                                 const std::function<cxxopts::Options(const std::string&)>& make_options);

// The value of --flag, checked against [lo, hi] (NaN fails):
// ValueError "flags: --name must be in [lo, hi], got v".
template <class T>
T flag_in_range(const cxxopts::ParseResult& r, const char* flag, T lo, T hi) {
  const T v = r[flag].as<T>();
  if (!(v >= lo && v <= hi)) fail<ValueError>("flags", "--{} must be in [{}, {}], got {}", flag, lo, hi, v);
  return v;
}

// "2 thread(s), BLAS kernel Haswell": the thread pool as --threads sized it
// (parse_flags) and the kernel family OpenBLAS runs, for the programs' banners.
std::string compute_summary();

// The cores this process may run on (sched_getaffinity; under mpirun, the
// ones its rank is bound to): the programs' default --threads.
int usable_cores();

// One line on stderr (once a process, rank 0 only) when `threads` exceeds
// usable_cores(): "warning: --threads 256 exceeds the 2 usable cores; the run
// will be slower, not faster".
void warn_if_oversubscribed(int threads);

std::string format_duration(double seconds);  // "1:05" or "1:02:03"
std::string format_count(double n);           // "45.1k", "1.2M"

}  // namespace attograd::app::cli
