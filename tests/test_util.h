// Small helpers shared by the tests.
#pragma once
#include <exception>
#include <initializer_list>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "autograd/gradcheck.h"
#include "autograd/tensor.h"

namespace attograd::testing {

// Runs `fn` and returns the message of the E it throws ("" if it throws nothing
// or something else), so a test can check both the type and the text.
template <class E, class F>
std::string error_message(F&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (...) {
    return "<other exception>";
  }
  return "";
}

// Expects `fn` to throw an E whose message contains every one of `parts`.
template <class E, class F>
void expect_error(F&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return;
  }
  ADD_FAILURE() << "no exception thrown";
}

// A tensor's elements in row-major order, as doubles.
inline std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

inline void expect_close(const Tensor& a, const Tensor& b, double rtol = 1e-6, double atol = 1e-8) {
  ASSERT_EQ(a.shape(), b.shape());
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    const double excess = std::abs(va[i] - vb[i]) - (atol + rtol * std::abs(vb[i]));
    if (excess > worst) { worst = excess; at = i; }
  }
  EXPECT_LE(worst, 0.0) << "element " << at << ": " << va[at] << " vs " << vb[at];
}

}  // namespace attograd::testing
