#include "examples/common/backprop_views.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <attograd/autograd/error.h>

namespace attograd::app {

namespace {
void write_file(const std::string& path, const std::string& text) {
  errno = 0;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  if (!out) fail<IOError>("backprop views", "cannot write {}: {}", path, errno ? std::strerror(errno) : "write failed");
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string svg_path(const std::string& dot_path) {
  const bool dot_ext = dot_path.size() > 4 && dot_path.ends_with(".dot");
  return (dot_ext ? dot_path.substr(0, dot_path.size() - 4) : dot_path) + ".svg";
}
}  // namespace

std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::vector<std::string> write_backprop_views(const BackpropViews& views, const Tensor& loss,
                                              const BackwardTrace& trace, const TensorNames& names) {
  std::vector<std::string> lines;
  if (!views.graph_out.empty()) {
    write_file(views.graph_out, to_dot(loss, {.names = names, .grads = true, .saved_bytes = true, .trace = &trace,
                                              .collapse_repeats = views.graph_collapse}));
    lines.push_back(fmt::format("graph of this step: {}", views.graph_out));
    if (const std::string dot = find_on_path("dot"); !dot.empty()) {
      const std::string svg = svg_path(views.graph_out);
      const std::string cmd = fmt::format("{} -Tsvg {} -o {}", shell_quote(dot), shell_quote(views.graph_out), shell_quote(svg));
      if (std::system(cmd.c_str()) != 0) fail<IOError>("backprop views", "`{}` failed", cmd);
      lines.push_back(fmt::format("graph drawn by Graphviz: {}", svg));
    }
  }
  if (views.trace_backward == "-") {
    std::istringstream table(trace.table());
    for (std::string line; std::getline(table, line);) lines.push_back(line);
  } else if (!views.trace_backward.empty()) {
    std::ostringstream jsonl;
    trace.write_jsonl(jsonl);
    write_file(views.trace_backward, jsonl.str());
    lines.push_back(fmt::format("backward trace of this step: {}", views.trace_backward));
  }
  return lines;
}

}  // namespace attograd::app
