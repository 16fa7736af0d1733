// attograd errors: every failure in library code is an exception, never exit().
// A message names the op, what it expected, what it got, and a hint.
#pragma once
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace attograd {

// Base of every error the library throws. Programs in examples/ catch it,
// print what() on one line, and exit with code 2.
class Error : public std::runtime_error {
 public:
  // msg is the whole message ("<op>: ..."); use fail<E>() to build one.
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

class ShapeError : public Error { using Error::Error; };   // shapes do not fit
class DTypeError : public Error { using Error::Error; };   // dtypes do not fit
class IndexError : public Error { using Error::Error; };   // bad dim or index
class ValueError : public Error { using Error::Error; };   // bad argument value
class AutogradError : public Error { using Error::Error; };  // graph misuse
class IOError : public Error { using Error::Error; };      // files and formats

// Throw E with a message "<op>: <formatted text>".
template <class E = Error, class... Args>
[[noreturn]] void fail(std::string_view op, fmt::format_string<Args...> f, Args&&... args) {
  throw E(fmt::format("{}: {}", op, fmt::format(f, std::forward<Args>(args)...)));
}

}  // namespace attograd
