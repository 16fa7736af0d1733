// What every attograd program shares on the command line: one clear line and
// exit code 2 for any error, a live progress line, and small formatting helpers.
#pragma once
#include <cstdio>
#include <functional>
#include <string>

namespace attograd::cli {

// Selects OpenBLAS' fast kernel first (ensure_fast_blas_kernel, which may
// re-execute the program once), then runs body() with SIGXFSZ ignored (so a
// file size limit is an IOError); any exception becomes
// "<program>: error: <message>" on stderr
// and exit code 2. body's own return value is the exit code otherwise.
int guarded_main(const char* program, const std::function<int()>& body);

// A progress line: rewritten in place ("\r") on a terminal, printed as plain
// lines (at most every `plain_every` calls to update) when stdout is a file or pipe.
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

std::string format_duration(double seconds);  // "1:05" or "1:02:03"
std::string format_count(double n);           // "45.1k", "1.2M"

}  // namespace attograd::cli
