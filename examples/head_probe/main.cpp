// head_probe: per-head analyses of trained checkpoints, one subcommand per
// kind of analysis (docs/heads-study.md, issue 31).
//
//   head_probe lm --checkpoint DIR --out FILE.json [--text FILE] [--eval-size N] [--random-orders K] [--threads T]
//       importance, ablation, attention statistics and pruning curves of every head of an lm checkpoint
//   head_probe lm-cost --heads 1,2,4,8,16 [--kv-heads 1,2] --lengths 64,256,1024 --out FILE.json [--checkpoint DIR]
//       decode ms/token with and without the KV cache, and the cache's bytes, against H and G
//   head_probe lm-convert-gqa --checkpoint DIR --kv-heads G [--pool mean|first] --to OUT.model.safetensors
//       an lm checkpoint converted to grouped-query attention, for lm train --init-from OUT --kv-heads G
//   head_probe translate --checkpoint DIR --out FILE.json [--split valid|test] [--sentences N] [--threads T]
//       the same per attention type (encoder self, decoder self, decoder cross) of a translate checkpoint
//   head_probe SUBCOMMAND --help   the subcommand's flags
//
// Each subcommand is a function of its own file (int f(int argc, char** argv),
// argv[0] naming "head_probe SUBCOMMAND"), listed in kSubcommands below; a
// new analysis adds one row and one file.
#include <span>
#include <string>

#include <fmt/format.h>

#include "examples/common/cli.h"
#include "examples/head_probe/gqa_convert.h"
#include "examples/head_probe/lm_cost.h"
#include "examples/head_probe/lm_probe.h"
#include "examples/head_probe/translate_probe.h"

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
    {"lm-cost", "decode ms/token and KV-cache bytes of a GPT against its heads H and K/V heads G",
     probe::lm_cost_main},
    {"lm-convert-gqa", "an lm checkpoint converted to grouped-query attention (K/V heads mean-pooled or first)",
     probe::lm_convert_gqa_main},
    {"translate", "importance, ablation, statistics and pruning curves per attention type of a translate checkpoint",
     probe::translate_main},
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
