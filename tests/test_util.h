// Small helpers shared by the tests.
#pragma once
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <exception>
#include <fstream>
#include <initializer_list>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <attograd/autograd/engine.h>
#include <attograd/autograd/generator.h>
#include <attograd/autograd/gradcheck.h>
#include <attograd/autograd/io/safetensors.h>
#include <attograd/autograd/ops/elementwise.h>
#include <attograd/autograd/tensor.h>
#include <attograd/nn/module.h>

namespace attograd::testing {

// A fresh directory /tmp/attograd_<name>_XXXXXX, removed with everything in it
// when the object goes away.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& name = "test") {
    std::string tmpl = "/tmp/attograd_" + name + "_XXXXXX";
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

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

// ---- inputs ------------------------------------------------------------------------------
// Random tensors take a seed (or a Generator to draw from), so every test sees
// the same numbers on every run.

// A float64 tensor from literal values.
inline Tensor f64(std::initializer_list<double> v, const Shape& s) { return Tensor::from_list(v, s, DType::f64); }

// An i64 tensor of ids (token ids, class targets, indices).
inline Tensor ids(std::vector<int64_t> v, const Shape& s) { return Tensor::from_vector(v, s); }

// 0, 1, 2, ... laid out in shape `s`.
inline Tensor iota(const Shape& s, DType dt = DType::f64) {
  return Tensor::arange(0, static_cast<double>(shape_numel(s)), 1, dt).reshape(s);
}

// N(0, 1) values; not a leaf that requires grad (see randn_leaf).
inline Tensor randn(const Shape& s, uint64_t seed, DType dt = DType::f64) {
  Generator gen(seed);
  return Tensor::randn(s, gen, dt);
}

// A leaf requiring grad with N(0, 1) values, drawn from `gen` or from a fresh
// Generator(seed).
inline Tensor randn_leaf(const Shape& s, Generator& gen, DType dt = DType::f64) {
  return Tensor::randn(s, gen, dt).requires_grad_();
}
inline Tensor randn_leaf(const Shape& s, uint64_t seed, DType dt = DType::f64) {
  return randn(s, seed, dt).requires_grad_();
}

// A leaf requiring grad with values uniform in [lo, hi): a range such as
// [0.3, 2) keeps an op away from its kinks or poles.
inline Tensor uniform_leaf(const Shape& s, uint64_t seed, double lo = -2, double hi = 2, DType dt = DType::f64) {
  Generator gen(seed);
  return Tensor::uniform(s, lo, hi, gen, dt).requires_grad_();
}

// `mask` (one factor per head of each attention module, as heads::HeadMask in
// examples/heads_study/head_stats.h) with the heads `removed`, (module, head)
// pairs, set to 0: the mask of an ablation, or of a pruned model.
inline std::map<std::string, std::vector<double>> without_heads(
    std::map<std::string, std::vector<double>> mask, const std::vector<std::pair<std::string, int64_t>>& removed) {
  for (const auto& [name, h] : removed) mask.at(name)[static_cast<size_t>(h)] = 0.0;
  return mask;
}

// ---- checks ------------------------------------------------------------------------------

// Draws every parameter of `module` anew from N(0, scale²) with a Generator
// seeded `seed`, in named_parameters() order: weights larger than the init,
// so every path of a model matters to its outputs and gradients.
inline void randomize_parameters(Module& module, uint64_t seed, double scale) {
  NoGradGuard no_grad;
  Generator gen(seed);
  for (auto& [name, p] : module.named_parameters()) p.copy_(Tensor::randn(p.shape(), gen, p.dtype()) * scale);
}

inline bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

// |got[i] - want[i]| <= tol for every element (and the sizes agree); a failure
// names the element.
inline void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-12) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

// gradcheck passes with its default tolerances, and it did check every input
// that requires grad (a skipped input would pass without being looked at).
inline void expect_gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs) {
  const GradcheckReport r = gradcheck(fn, inputs);
  EXPECT_TRUE(r.ok) << r.summary();
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].requires_grad()) {
      EXPECT_TRUE(r.inputs.at(i).checked) << "input " << i;
    }
}

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

// A program run as a subprocess (the CLI tests): exit code (128 + signal when
// killed) and both streams. `scratch` is a directory for the captured files.
struct ProgramOutcome {
  int code = -1;
  std::string out, err;
};

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A checkpoint file's bytes without its run id, the one field in which two
// runs of the same flags differ (resume-exactness tests compare the rest).
inline std::string without_run_id(const std::string& path) {
  SafetensorsData d = load_safetensors(path);
  d.metadata.erase("run");
  return serialize_safetensors(d.tensors, d.metadata);
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline ProgramOutcome run_program(const std::string& program, const std::vector<std::string>& args,
                                  const std::string& scratch, const std::string& input = "") {
  const std::string out = scratch + "/stdout.txt", err = scratch + "/stderr.txt", in = scratch + "/stdin.txt";
  write_text(in, input);
  std::string cmd = shell_quote(program);
  for (const std::string& a : args) cmd.append(" ").append(shell_quote(a));
  cmd.append(" <").append(shell_quote(in)).append(" >").append(shell_quote(out)).append(" 2>").append(shell_quote(err));
  const int status = std::system(cmd.c_str());
  ProgramOutcome r;
  if (status != -1 && WIFEXITED(status)) r.code = WEXITSTATUS(status);
  else if (status != -1 && WIFSIGNALED(status)) r.code = 128 + WTERMSIG(status);
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

// The contract of every attograd program for bad input: exit code 2 and
// exactly one line on stderr, "<program>: error: ...", holding `phrase`.
inline void expect_one_line_error(const ProgramOutcome& r, const std::string& program, const std::string& phrase) {
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.err.ends_with("\n")) << r.err;
  EXPECT_TRUE(r.err.starts_with(program + ": error: ")) << r.err;
  EXPECT_NE(r.err.find(phrase), std::string::npos) << "'" << phrase << "' not in: " << r.err;
}

}  // namespace attograd::testing
