// head_probe: per-head analyses of trained checkpoints, one subcommand per
// kind of analysis (docs/heads-study.md, issue 31).
//
//   head_probe lm --checkpoint DIR --out FILE.json [--text FILE] [--eval-size N] [--random-orders K] [--threads T]
//       importance, ablation, attention statistics and pruning curves of every head of an lm checkpoint
//   head_probe SUBCOMMAND --help   the subcommand's flags
//
// Each subcommand is a function of its own file (int f(int argc, char** argv),
// argv[0] naming "head_probe SUBCOMMAND"), listed in kSubcommands below; a
// new analysis adds one row and one file.
#include <span>
#include <string>

#include <fmt/format.h>

#include "examples/common/cli.h"
#include "examples/head_probe/lm_probe.h"

using namespace attograd;
using namespace attograd::app;

namespace {

struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

const Subcommand kSubcommands[] = {
    {"lm", "importance, ablation, attention statistics and pruning curves of every head of an lm checkpoint",
     probe::lm_main},
};

std::string usage() {
  std::string s = "usage: head_probe SUBCOMMAND [--flags]   (head_probe SUBCOMMAND --help for its flags)\n";
  for (const Subcommand& c : kSubcommands) s += fmt::format("  {:<16}{}\n", c.name, c.summary);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::guarded_main("head_probe", [&] {
    const std::string first = argc > 1 ? argv[1] : "";
    if (first == "-h" || first == "--help") {
      fmt::print("{}", usage());
      return 0;
    }
    std::string names;
    for (const Subcommand& c : std::span(kSubcommands)) {
      if (first == c.name) {
        std::string program = std::string("head_probe ") + c.name;
        argv[1] = program.data();  // the subcommand parses argv[1..] as its own argv
        return c.run(argc - 1, argv + 1);
      }
      names += names.empty() ? c.name : std::string(", ") + c.name;
    }
    fail<ValueError>("flags", "{}; expected a subcommand: {}; hint: head_probe --help",
                     first.empty() ? std::string("no subcommand") : "unknown subcommand '" + first + "'", names);
  });
}
