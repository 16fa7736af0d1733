#include "examples/common/cli.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <exception>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include "autograd/backend/blas_kernel.h"

namespace attograd::cli {

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
  cxxopts::ParseResult flags = options.parse(static_cast<int>(args.size()), args.data());
  if (flags.count("help")) {
    fmt::print("{}\n", options.help());
    return std::nullopt;
  }
  return ModeAndFlags{mode, std::move(flags)};
}

int guarded_main(const char* program, const std::function<int()>& body) {
  ensure_fast_blas_kernel();  // may re-execute the program once, with OPENBLAS_CORETYPE set
  // Past a file size limit (ulimit -f) a write then fails with EFBIG, which
  // the checkpoint writer reports like a full disk, instead of SIGXFSZ
  // killing the program mid-run.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    return body();
  } catch (const cxxopts::exceptions::exception& e) {
    fmt::print(stderr, "{}: error: {} (see --help)\n", program, e.what());
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: error: {}\n", program, e.what());
  } catch (...) {
    fmt::print(stderr, "{}: error: unknown failure\n", program);
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
