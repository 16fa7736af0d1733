// examples/common/cli.h: a flag value that does not parse names the flag and
// the type it expects, in every program; a boolean flag means what its value
// says (the last one given wins); a number is read whole; the arguments that
// are not flags (a sentence to translate, a sequence to decode) are kept
// whole, commas and all. Then the checks every program makes at start-up:
// --threads beyond the cores, ATTOGRAD_GEMM / ATTOGRAD_VECMATH, running out of
// memory, progress lines in redirected output.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <vector>

#include <attograd/autograd/backend/threads.h>
#include "examples/common/cli.h"
#include "test_util.h"

namespace attograd::app {
namespace {

cxxopts::Options options() {
  cxxopts::Options o("prog", "test");
  o.add_options()
      ("steps", "steps", cxxopts::value<int64_t>()->default_value("1500"))
      ("lr", "learning rate", cxxopts::value<double>()->default_value("0.003"))
      ("seed", "seed", cxxopts::value<uint64_t>()->default_value("1"))
      ("threads", "threads", cxxopts::value<int>())
      ("heads", "head counts", cxxopts::value<std::vector<int64_t>>())
      ("name", "a name", cxxopts::value<std::string>()->default_value(""))
      ("q,quiet", "no output")
      ("force", "a second boolean")
      ("n", "short", cxxopts::value<int64_t>());
  return o;
}

std::string error_for(std::vector<std::string> args) {
  args.insert(args.begin(), "prog");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  cxxopts::Options o = options();
  return testing::error_message<ValueError>(
      [&] { cli::parse_flags(o, static_cast<int>(argv.size()), argv.data()); });
}

TEST(CliFlags, AValueThatDoesNotParseNamesItsFlagAndType) {
  EXPECT_EQ(error_for({"--steps", "abc"}), "flags: --steps expects an integer, got 'abc' (default 1500)");
  EXPECT_EQ(error_for({"--lr", "nan"}), "flags: --lr expects a finite number, got 'nan' (default 0.003)");
  EXPECT_EQ(error_for({"--lr=1e400"}), "flags: --lr expects a finite number, got '1e400' (default 0.003)");
  EXPECT_EQ(error_for({"--seed", "-1"}), "flags: --seed expects a non-negative integer, got '-1' (default 1)");
  EXPECT_EQ(error_for({"--threads", "2.5"}), "flags: --threads expects an integer, got '2.5'");
  EXPECT_EQ(error_for({"--heads", "1,x"}), "flags: --heads expects a comma-separated list of integers, got '1,x'");
  EXPECT_EQ(error_for({"--quiet=maybe"}), "flags: --quiet expects true, false, 1 or 0 (or no value), got 'maybe'");
  EXPECT_EQ(error_for({"-n", "x"}), "flags: -n expects an integer, got 'x'");
  // The bad flag is found among good ones, whatever its position.
  EXPECT_EQ(error_for({"--quiet", "--name", "x,y", "--steps", "9", "--lr", "fast"}),
            "flags: --lr expects a finite number, got 'fast' (default 0.003)");
}

cxxopts::ParseResult parse(std::vector<std::string> args) {
  args.insert(args.begin(), "prog");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  static cxxopts::Options o = options();
  return cli::parse_flags(o, static_cast<int>(argv.size()), argv.data());
}

// B4: --quiet=false once meant true, because programs read booleans with r.count().
TEST(CliFlags, ABooleanMeansItsValueAndTheLastOneWins) {
  const std::vector<std::pair<std::vector<std::string>, bool>> cases = {
      {{}, false},
      {{"--quiet"}, true},
      {{"--quiet=true"}, true},
      {{"--quiet=1"}, true},
      {{"--quiet=false"}, false},
      {{"--quiet=0"}, false},
      {{"--quiet", "--quiet=false"}, false},
      {{"--quiet=false", "--quiet"}, true},
      {{"--quiet=0", "--quiet=1", "--quiet=false"}, false},
      {{"-q"}, true},
      {{"-q", "--quiet=false"}, false},
      {{"--quiet=false", "-q"}, true},
      {{"-qn", "5"}, true},
      {{"-qn5"}, true},
  };
  for (const auto& [args, want] : cases) {
    SCOPED_TRACE(::testing::PrintToString(args));
    const cxxopts::ParseResult r = parse(args);
    EXPECT_EQ(r.count("quiet"), want ? 1u : 0u);  // both ways of reading a boolean agree
    EXPECT_EQ(r["quiet"].as<bool>(), want);
    EXPECT_EQ(r.count("force"), 0u);
  }
  EXPECT_EQ(parse({"-qn5"})["n"].as<int64_t>(), 5);
  EXPECT_EQ(parse({"-qn", "5"})["n"].as<int64_t>(), 5);
  // A flag that takes a value takes the next argument whatever it looks like, as cxxopts does.
  EXPECT_EQ(parse({"--name", "--quiet"})["name"].as<std::string>(), "--quiet");
  EXPECT_EQ(parse({"--name", "--quiet"}).count("quiet"), 0u);
  // After "--" nothing is a flag.
  EXPECT_EQ(parse({"--", "--quiet=maybe"}).count("quiet"), 0u);
  for (const std::string bad : {"maybe", "yes", "no", "True", "FALSE", "t", "f", "on", "2", "", " 1"})
    EXPECT_EQ(error_for({"--force", "--quiet=" + bad}),
              "flags: --quiet expects true, false, 1 or 0 (or no value), got '" + bad + "'");
}

// B6: cxxopts reads a double with a stream, so "1e-3abc" was 0.001 and "0x10" was 0.
TEST(CliFlags, ANumberIsReadWhole) {
  const std::string lr = " (default 0.003)", steps = " (default 1500)";
  for (const std::string bad : {"1e-3abc", "0x10", "0x1p-3", "0.003 # peak", "5e-4,0.1", "nan", "-nan", "inf", "-inf",
                                "infinity", "1e400", " 5", "5 ", "+0.5", "", "1,5", "0.5.1"}) {
    EXPECT_EQ(error_for({"--lr", bad}), "flags: --lr expects a finite number, got '" + bad + "'" + lr);
    EXPECT_EQ(error_for({"--lr=" + bad}), "flags: --lr expects a finite number, got '" + bad + "'" + lr);
  }
  for (const std::string bad : {"1.5", "1e3", "0x10", "010x", " 5", "5 ", "+5", "", "9223372036854775808",
                                "-9223372036854775809", "99999999999999999999999", "1e308", "nan", "5abc"})
    EXPECT_EQ(error_for({"--steps", bad}), "flags: --steps expects an integer, got '" + bad + "'" + steps);
  for (const std::string bad : {"-1", "18446744073709551616", "0x1", " 1"})
    EXPECT_EQ(error_for({"--seed", bad}), "flags: --seed expects a non-negative integer, got '" + bad + "' (default 1)");
  EXPECT_EQ(error_for({"--threads", "2147483648"}), "flags: --threads expects an integer, got '2147483648'");
  EXPECT_EQ(error_for({"-n5x"}), "flags: -n expects an integer, got '5x'");
  for (const std::string bad : {"1,2x", "1, 2", "1,,2", "1,2,", ",1", "0x1", "1.5"})
    EXPECT_EQ(error_for({"--heads", bad}), "flags: --heads expects a comma-separated list of integers, got '" + bad + "'");
  // Well-formed numbers, and text flags, are as before.
  EXPECT_EQ(parse({"--lr", "-1e-3"})["lr"].as<double>(), -1e-3);
  EXPECT_EQ(parse({"--lr", ".5"})["lr"].as<double>(), 0.5);
  EXPECT_EQ(parse({"--lr", "1E+2"})["lr"].as<double>(), 100);
  EXPECT_EQ(parse({"--lr", "1e308"})["lr"].as<double>(), 1e308);  // finite: the range is the program's check
  EXPECT_EQ(parse({"--steps", "-007"})["steps"].as<int64_t>(), -7);
  EXPECT_EQ(parse({"--seed", "18446744073709551615"})["seed"].as<uint64_t>(), UINT64_MAX);
  EXPECT_EQ(parse({"--name", "1e-3abc"})["name"].as<std::string>(), "1e-3abc");
}

TEST(CliFlags, GoodValuesParseAsBefore) {
  cxxopts::Options o = options();
  const char* argv[] = {"prog", "--steps", "12", "--lr=0.5", "--heads", "1,2", "--name", "a,b", "x, y"};
  const cxxopts::ParseResult r = cli::parse_flags(o, 9, argv);
  EXPECT_EQ(r["steps"].as<int64_t>(), 12);
  EXPECT_EQ(r["lr"].as<double>(), 0.5);
  EXPECT_EQ(r["heads"].as<std::vector<int64_t>>(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(r["name"].as<std::string>(), "a,b");
  EXPECT_EQ(r.unmatched(), std::vector<std::string>{"x, y"});
}

TEST(CliFlags, InputsAreKeptWholeWithTheirCommas) {
  std::vector<std::string> args = {"prog", "translate", "--steps", "3", "three thousand, four hundred", "a,b,c", "x"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  const auto parsed = cli::parse_mode_and_flags(static_cast<int>(argv.size()), argv.data(), {"train", "translate"},
                                                "train or translate", [](const std::string&) { return options(); });
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->mode, "translate");
  EXPECT_EQ(parsed->inputs, (std::vector<std::string>{"three thousand, four hundred", "a,b,c", "x"}));
  EXPECT_EQ(parsed->flags["steps"].as<int64_t>(), 3);
}

// Every program, through its own flags: exit code 2 and one line naming the flag and type.
TEST(CliFlags, EveryProgramNamesTheFlagAndItsType) {
  testing::TempDir tmp("cli_flags");
  struct Case {
    std::string program;
    std::vector<std::string> args;
    std::string phrase;
  };
  const std::vector<Case> cases = {
      {"copy_task", {"train", "--steps", "abc"}, "--steps expects an integer, got 'abc' (default 1500)"},
      {"copy_task", {"train", "--lr", "nan"}, "--lr expects a finite number, got 'nan' (default 0.003)"},
      {"copy_task", {"eval", "--beam", "two"}, "--beam expects an integer, got 'two' (default 1)"},
      {"copy_task", {"train", "--seed", "-1"}, "--seed expects a non-negative integer, got '-1'"},
      {"translate", {"train", "--steps", "abc"}, "--steps expects an integer, got 'abc' (default 1200)"},
      {"translate", {"translate", "--length-penalty", "high", "one"}, "--length-penalty expects a finite number, got 'high'"},
      {"heads_study", {"--steps", "abc"}, "--steps expects an integer, got 'abc'"},
      {"heads_study", {"--heads", "1,x"}, "--heads expects a comma-separated list of integers, got '1,x'"},
      {"custom_layer", {"--lr", "nan"}, "--lr expects a finite number, got 'nan'"},
      {"bench", {"--steps", "abc"}, "--steps expects an integer, got 'abc' (default 50)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.program + " " + c.args[0] + " " + c.args[1]);
    testing::expect_one_line_error(
        testing::run_program(std::string(ATTOGRAD_BIN_DIR) + "/" + c.program, c.args, tmp.path), c.program, c.phrase);
  }
}

// --help in every mode of every program prints the usage and exits 0 (translate train once had no --help).
TEST(CliFlags, EveryModeOfEveryProgramHasHelp) {
  testing::TempDir tmp("cli_help");
  const std::vector<std::vector<std::string>> cases = {
      {"copy_task"}, {"copy_task", "train"}, {"copy_task", "eval"}, {"copy_task", "decode"},
      {"translate"}, {"translate", "train"}, {"translate", "eval"}, {"translate", "translate"},
      {"heads_study"}, {"custom_layer"}, {"custom_layer", "check"}, {"custom_layer", "train"}, {"bench"},
  };
  for (std::vector<std::string> args : cases) {
    const std::string program = args[0];
    args.erase(args.begin());
    args.push_back("--help");
    SCOPED_TRACE(program + " " + args[0]);
    const testing::ProgramOutcome r = testing::run_program(std::string(ATTOGRAD_BIN_DIR) + "/" + program, args, tmp.path);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("Usage:\n  " + program), std::string::npos) << r.out;
    EXPECT_EQ(r.err, "");
  }
}

std::string bin(const std::string& program) { return std::string(ATTOGRAD_BIN_DIR) + "/" + program; }

testing::ProgramOutcome run(const std::string& program, std::vector<std::string> mode, const std::vector<std::string>& args,
                            const std::string& scratch) {
  mode.insert(mode.end(), args.begin(), args.end());
  return testing::run_program(bin(program), mode, scratch);
}

// The flags a program's --help lists: those that take no value, and those
// that take one, with whether the help shows a number as the default.
struct HelpFlags {
  std::vector<std::string> booleans;
  std::vector<std::pair<std::string, bool>> valued;
};

HelpFlags help_flags(const std::string& program, const std::vector<std::string>& mode, const std::string& scratch) {
  const testing::ProgramOutcome h = run(program, mode, {"--help"}, scratch);
  EXPECT_EQ(h.code, 0) << h.err;
  // One entry per flag: its first line and the wrapped ones after it, joined.
  std::vector<std::string> entries;
  const std::regex starts(R"(^(  -\w, |      )--[\w-]+)");  // not a wrapped description that names a flag
  for (const std::string& line : testing::lines_of(h.out)) {
    if (std::regex_search(line, starts)) entries.push_back(line);
    else if (!entries.empty() && line.starts_with("      ")) entries.back() += " " + line;
  }
  HelpFlags f;
  // "--quick  a small grid", "--steps arg  training steps", "--dot FILE  write ...".
  const std::regex flag(R"(^(?:  -\w, |      )--([\w-]+)((?: \S+)?)(?:\s{2,}|$))");
  const std::regex number_default(R"(\(default:\s+-?[0-9][0-9.e+-]*\))");
  for (const std::string& e : entries) {
    std::smatch m;
    if (!std::regex_search(e, m, flag)) continue;
    if (m[2].length() == 0) f.booleans.push_back(m[1]);
    else f.valued.emplace_back(m[1], std::regex_search(e, number_default));
  }
  return f;
}

// One option set of each program (the modes of copy_task and lm share
// theirs), and a number flag every run of the sweep ends with, given a bad
// value: a run that gets past the flag under test stops there, never trains.
struct Program {
  std::string name;
  std::vector<std::string> mode;
  std::string sentinel;
};
const std::vector<Program> kPrograms = {
    {"copy_task", {"train"}, "--beam"}, {"translate", {"train"}, "--steps"}, {"translate", {"eval"}, "--beam"},
    {"translate", {"translate"}, "--beam"}, {"lm", {"train"}, "--steps"}, {"heads_study", {}, "--seeds"},
    {"custom_layer", {}, "--steps"}, {"bench", {}, "--steps"}, {"higher_order", {}, "--steps"},
};

// The probe's sweep, flag by flag: every boolean of every program takes
// true/false/1/0 and refuses anything else, naming itself; every flag whose
// default is a number refuses trailing junk, naming itself.
TEST(CliFlags, EveryFlagOfEveryProgramIsParsedStrictly) {
  testing::TempDir tmp("cli_sweep");
  int booleans = 0, numbers = 0;
  for (const Program& p : kPrograms) {
    const HelpFlags f = help_flags(p.name, p.mode, tmp.path);
    EXPECT_GE(f.valued.size(), 2u) << p.name;
    const std::vector<std::string> stop = {p.sentinel, "abc"};
    const std::string stopped = p.sentinel + " expects ";
    for (const std::string& b : f.booleans) {
      SCOPED_TRACE(p.name + " --" + b);
      ++booleans;
      testing::expect_one_line_error(run(p.name, p.mode, {"--" + b + "=maybe", p.sentinel, "abc"}, tmp.path), p.name,
                                     "--" + b + " expects true, false, 1 or 0 (or no value), got 'maybe'");
      const std::string flag = "--" + b;
      testing::expect_one_line_error(
          run(p.name, p.mode, {flag + "=false", flag + "=0", flag + "=true", flag + "=1", flag, p.sentinel, "abc"},
              tmp.path), p.name, stopped);
    }
    for (const auto& [name, number] : f.valued) {
      SCOPED_TRACE(p.name + " --" + name);
      const testing::ProgramOutcome r = run(p.name, p.mode, {"--" + name, "1e-3abc", p.sentinel, "abc"}, tmp.path);
      if (number) {
        ++numbers;
        testing::expect_one_line_error(r, p.name, "--" + name + " expects ");
        EXPECT_NE(r.err.find("got '1e-3abc'"), std::string::npos) << r.err;
      } else {
        EXPECT_EQ(r.code, 2) << r.err;  // a text flag takes it; the sentinel stops the run
      }
    }
  }
  EXPECT_GE(booleans, 40);
  EXPECT_GE(numbers, 80);
}

// The probe's values on a number flag of each kind in every program:
// exit code 2 and one line naming the flag (or its range, for a finite
// number out of it), never a run with a misread value.
TEST(CliFlags, TheProbesValuesAreRefusedInEveryProgram) {
  testing::TempDir tmp("cli_values");
  const std::vector<std::string> junk = {"1e-3abc", "0x10", "0.003 # peak", "5e-4,0.1", "nan", "inf", "-inf", " 5", ""};
  struct Case {
    std::string program;
    std::vector<std::string> mode;
    std::string flag;
    bool real;
  };
  const std::vector<Case> cases = {
      {"copy_task", {"train"}, "--dropout", true},   {"copy_task", {"train"}, "--batch-size", false},
      {"copy_task", {"eval"}, "--beam", false},      {"translate", {"train"}, "--label-smoothing", true},
      {"translate", {"translate"}, "--length-penalty", true}, {"translate", {"eval"}, "--max-len", false},
      {"lm", {"train"}, "--heldout", true},          {"lm", {"train"}, "--context", false},
      {"lm", {"sample"}, "--top-p", true},           {"lm", {"sample"}, "--temperature", true},
      {"lm", {"eval"}, "--eval-size", false},        {"heads_study", {}, "--steps", false},
      {"custom_layer", {}, "--lr", true},            {"custom_layer", {}, "--hidden", false},
      {"bench", {}, "--d-model", false},             {"higher_order", {}, "--lambda", true},
      {"higher_order", {}, "--steps", false},
  };
  for (const Case& c : cases) {
    std::vector<std::string> values = junk;
    if (c.real) values.insert(values.end(), {"1e400", "0x1p3", "1e-3 "});
    else values.insert(values.end(), {"1.5", "1e308", "9223372036854775808", "-9223372036854775809", "0x10", "1e3"});
    for (const std::string& v : values) {
      SCOPED_TRACE(c.program + " " + c.flag + " '" + v + "'");
      testing::expect_one_line_error(run(c.program, c.mode, {c.flag, v}, tmp.path), c.program,
                                     c.flag + (c.real ? " expects a finite number" : " expects an integer") + ", got '" +
                                         v + "'");
    }
    if (c.real) {  // finite, but out of the flag's range
      SCOPED_TRACE(c.program + " " + c.flag + " 1e308");
      testing::expect_one_line_error(run(c.program, c.mode, {c.flag, "1e308"}, tmp.path), c.program,
                                     c.flag + " must be in [");
    }
  }
  // Lists: every element whole.
  testing::expect_one_line_error(run("heads_study", {}, {"--heads", "2,4x"}, tmp.path), "heads_study",
                                 "--heads expects a comma-separated list of integers, got '2,4x'");
  testing::expect_one_line_error(run("heads_study", {}, {"--heads", "2, 4"}, tmp.path), "heads_study",
                                 "--heads expects a comma-separated list of integers, got '2, 4'");
  for (const std::string v : {"1x,2", "1, 2", "0x1", "1,,2"})
    testing::expect_one_line_error(run("bench", {}, {"--threads", v}, tmp.path), "bench",
                                   "--threads expects comma-separated integers, got '" + v + "'");
}

// B12: lm eval took any --eval-size; the range is checked before the checkpoint is read.
TEST(CliFlags, EveryIntegerFlagIsRangeChecked) {
  testing::TempDir tmp("cli_ranges");
  for (const std::string v : {"-5", "0", "9223372036854775807", "10000001"})
    testing::expect_one_line_error(run("lm", {"eval"}, {"--checkpoint", tmp.path, "--eval-size", v}, tmp.path), "lm",
                                   "--eval-size must be in [1, 10000000], got " + v);
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"lm", {"train", "--vocab-size", "-1"}},
      {"translate", {"eval", "--checkpoint", tmp.path, "--max-len", "-5"}},
      {"copy_task", {"train", "--max-length", "9223372036854775807"}},
      {"copy_task", {"train", "--min-length", "0"}},
      {"copy_task", {"train", "--train-size", "4611686018427387904"}},
      {"custom_layer", {"--hidden", "100000000"}},
      {"custom_layer", {"--batch", "0"}},
      {"bench", {"--d-model", "100000000"}},
      {"bench", {"--decode", "--no-cache-up-to", "-1"}},
      {"bench", {"--decode", "--repeats", "9223372036854775807"}},
  };
  for (const auto& [program, args] : cases) {
    SCOPED_TRACE(program + " " + args[args.size() - 2] + " " + args.back());
    testing::expect_one_line_error(testing::run_program(bin(program), args, tmp.path), program,
                                   args[args.size() - 2] + " must be in [");
  }
}

// ---- the values taking effect ------------------------------------------------------------

const std::vector<std::string> kTinyCopy = {"train", "--threads", "1", "--steps", "1", "--warmup", "0",
                                            "--d-model", "8", "--heads", "1", "--d-ff", "8", "--enc-layers", "1",
                                            "--dec-layers", "1", "--samples", "0", "--eval-size", "2",
                                            "--batch-size", "2", "--eval-every", "0"};

std::vector<std::string> tiny_lm(const std::string& text) {
  return {"train", "--text", text, "--threads", "1", "--steps", "1", "--warmup", "0", "--context", "8",
          "--d-model", "8", "--heads", "1", "--d-ff", "8", "--layers", "1", "--samples", "0", "--eval-size", "2",
          "--batch-size", "2", "--eval-every", "0"};
}

std::string small_text(const testing::TempDir& tmp) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i % 7) + "\n";
  testing::write_text(tmp / "text.txt", text);
  return tmp / "text.txt";
}

// "model 1614 parameters" in a start-up header; -1 when absent.
int64_t parameters(const testing::ProgramOutcome& r) {
  std::smatch m;
  static const std::regex count(R"(model (\d+) parameters)");
  return std::regex_search(r.out, m, count) ? std::stoll(m[1]) : -1;
}

testing::ProgramOutcome tiny(const std::string& program, std::vector<std::string> base,
                             const std::vector<std::string>& extra, const std::string& scratch) {
  base.insert(base.end(), extra.begin(), extra.end());
  testing::ProgramOutcome r = testing::run_program(bin(program), base, scratch);
  EXPECT_EQ(r.code, 0) << r.err;
  return r;
}

// B4 in the programs: --tie-embeddings=false gives the untied count, --untied=false the tied one.
TEST(CliFlags, ABooleansValueTakesEffectInThePrograms) {
  testing::TempDir tmp("cli_booleans");
  const int64_t untied = parameters(tiny("copy_task", kTinyCopy, {}, tmp.path));
  const int64_t tied = parameters(tiny("copy_task", kTinyCopy, {"--tie-embeddings"}, tmp.path));
  ASSERT_GT(untied, tied);
  ASSERT_GT(tied, 0);
  for (const std::string v : {"=false", "=0"})
    EXPECT_EQ(parameters(tiny("copy_task", kTinyCopy, {"--tie-embeddings" + v}, tmp.path)), untied) << v;
  for (const std::string v : {"=true", "=1"})
    EXPECT_EQ(parameters(tiny("copy_task", kTinyCopy, {"--tie-embeddings" + v}, tmp.path)), tied) << v;
  EXPECT_EQ(parameters(tiny("copy_task", kTinyCopy, {"--tie-embeddings", "--tie-embeddings=false"}, tmp.path)), untied);

  const std::vector<std::string> lm = tiny_lm(small_text(tmp));
  const int64_t lm_tied = parameters(tiny("lm", lm, {}, tmp.path));
  const int64_t lm_untied = parameters(tiny("lm", lm, {"--untied"}, tmp.path));
  ASSERT_GT(lm_untied, lm_tied);
  EXPECT_EQ(parameters(tiny("lm", lm, {"--untied=false"}, tmp.path)), lm_tied);
  EXPECT_EQ(parameters(tiny("lm", lm, {"--untied=1"}, tmp.path)), lm_untied);

  // --quiet=false shows the progress lines (plain, stdout being a file).
  EXPECT_TRUE(tiny("copy_task", kTinyCopy, {"--log-every", "1", "--quiet=false"}, tmp.path).out.find("step 1/1") !=
              std::string::npos);
  EXPECT_EQ(tiny("copy_task", kTinyCopy, {"--log-every", "1", "--quiet=1"}, tmp.path).out.find("step 1/1"),
            std::string::npos);

  // --resume=false does not resume; --resume=true does.
  const std::string dir = tmp / "ck";
  tiny("lm", lm, {"--checkpoint-dir", dir}, tmp.path);
  std::vector<std::string> again = lm;
  again.insert(again.end(), {"--checkpoint-dir", dir, "--steps", "2"});
  const testing::ProgramOutcome off = testing::run_program(bin("lm"), [&] {
    std::vector<std::string> a = again;
    a.push_back("--resume=false");
    return a;
  }(), tmp.path);
  EXPECT_EQ(off.out.find("resumed from"), std::string::npos) << off.out;
  again.insert(again.end(), {"--steps", "3", "--resume=true"});
  const testing::ProgramOutcome on = testing::run_program(bin("lm"), again, tmp.path);
  EXPECT_EQ(on.code, 0) << on.err;
  EXPECT_NE(on.out.find("resumed from"), std::string::npos) << on.out;
}

// W10: more threads than cores is one warning line, never silent.
TEST(CliFlags, MoreThreadsThanCoresIsWarnedOnce) {
  testing::TempDir tmp("cli_threads");
  const int cores = cli::usable_cores();
  if (cores >= 256) GTEST_SKIP() << "256 usable cores: no --threads count exceeds them";
  const std::string n = std::to_string(cores + 1);
  const testing::ProgramOutcome over = tiny("copy_task", kTinyCopy, {"--threads", n}, tmp.path);
  EXPECT_EQ(over.err, fmt::format("warning: --threads {} exceeds the {} usable core{}; the run will be slower, not "
                                  "faster\n", n, cores, cores == 1 ? "" : "s"));
  EXPECT_EQ(tiny("copy_task", kTinyCopy, {"--threads", std::to_string(cores)}, tmp.path).err, "");
}

// --threads is applied where the flags are parsed (cli::parse_flags), so no
// program or mode applies it by hand, and none can forget it.
TEST(CliFlags, ThreadsSizesThePoolWhereTheFlagsAreParsed) {
  const int before = num_threads();
  parse({"--threads", "3"});
  EXPECT_EQ(num_threads(), 3);
  parse({"--threads", "1"});
  EXPECT_EQ(num_threads(), 1);
  parse({"--steps", "4"});  // no --threads given and none by default: the pool is left as it is
  EXPECT_EQ(num_threads(), 1);
  EXPECT_EQ(error_for({"--threads", "0"}), "flags: --threads must be in [1, 256], got 0");
  set_num_threads(before);
}

// Every mode of every program honours --threads: past the cores, each one
// warns before any of its own work (here, before it finds the flag or input
// it refuses).
TEST(CliFlags, EveryModeAppliesThreads) {
  testing::TempDir tmp("cli_threads_modes");
  const int cores = cli::usable_cores();
  if (cores >= 256) GTEST_SKIP() << "256 usable cores: no --threads count exceeds them";
  const std::string n = std::to_string(cores + 1), missing = tmp / "missing";
  const std::string warning = fmt::format("warning: --threads {} exceeds the {} usable core{}; the run will be slower, "
                                          "not faster\n", n, cores, cores == 1 ? "" : "s");
  const std::vector<std::vector<std::string>> cases = {
      {"copy_task", "train", "--steps", "0"},        {"copy_task", "eval", "--checkpoint", missing},
      {"copy_task", "decode", "--checkpoint", missing}, {"translate", "train", "--steps", "0"},
      {"translate", "eval", "--checkpoint", missing}, {"translate", "translate", "--checkpoint", missing},
      {"lm", "train", "--steps", "0"},               {"lm", "sample", "--checkpoint", missing},
      {"lm", "eval", "--checkpoint", missing},       {"heads_study", "--steps", "0"},
  };
  for (std::vector<std::string> args : cases) {
    const std::string program = args[0];
    args.erase(args.begin());
    args.insert(args.end(), {"--threads", n});
    SCOPED_TRACE(program + " " + args[0]);
    const testing::ProgramOutcome r = testing::run_program(bin(program), args, tmp.path);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_TRUE(r.err.starts_with(warning)) << r.err;
  }
}

// W9: a bad ATTOGRAD_GEMM / ATTOGRAD_VECMATH fails before any work (here, before
// lm finds that its text is missing); an empty one is unset.
TEST(CliFlags, TheEnvironmentIsCheckedAtStartUp) {
  testing::TempDir tmp("cli_env");
  const std::vector<std::string> lm = {"train", "--text", tmp / "missing.txt"};
  auto with = [&](const std::string& var, const std::string& program, std::vector<std::string> args) {
    args.insert(args.begin(), {var, bin(program)});
    return testing::run_program("/usr/bin/env", args, tmp.path);
  };
  testing::expect_one_line_error(with("ATTOGRAD_GEMM=bogus", "lm", lm), "lm", "unknown GEMM backend 'bogus'");
  testing::expect_one_line_error(with("ATTOGRAD_VECMATH=bogus", "lm", lm), "lm", "unknown kernel set 'bogus'");
  testing::expect_one_line_error(with("ATTOGRAD_MEMORY=bogus", "lm", lm), "lm", "ATTOGRAD_MEMORY: cannot read 'bogus'");
  testing::expect_one_line_error(with("ATTOGRAD_GEMM=bogus", "copy_task", {"decode", "--checkpoint", tmp / "no"}),
                                 "copy_task", "unknown GEMM backend 'bogus'");
  for (const std::string empty : {"ATTOGRAD_GEMM=", "ATTOGRAD_VECMATH=", "ATTOGRAD_MEMORY="}) {
    const testing::ProgramOutcome r = with(empty, "copy_task", kTinyCopy);
    EXPECT_EQ(r.code, 0) << empty << ": " << r.err;
  }
}

// W3: progress is rewritten in place on a live terminal only: not with
// TERM=dumb (nor in a file, nor under mpirun, whose ranks see a pty).
TEST(CliFlags, ProgressIsPlainLinesUnlessOnALiveTerminal) {
  if (!std::filesystem::exists("/usr/bin/script")) GTEST_SKIP() << "no script(1) to give the program a pty";
  testing::TempDir tmp("cli_progress");
  std::string cmd = testing::shell_quote(bin("copy_task"));
  for (const std::string& a : kTinyCopy) cmd.append(" ").append(testing::shell_quote(a));
  cmd += " --steps 3 --log-every 1";
  auto on_pty = [&](const std::string& term) {
    return testing::run_program("/usr/bin/script", {"-qec", "TERM=" + term + " " + cmd, "/dev/null"}, tmp.path);
  };
  const testing::ProgramOutcome dumb = on_pty("dumb"), live = on_pty("xterm");
  EXPECT_EQ(dumb.code, 0) << dumb.out;
  EXPECT_NE(dumb.out.find("step 3/3"), std::string::npos) << dumb.out;
  EXPECT_EQ(dumb.out.find("\033[K"), std::string::npos) << dumb.out;
  EXPECT_NE(live.out.find("\r\033[Kstep 3/3"), std::string::npos) << live.out;  // the pty is live
  const testing::ProgramOutcome file = tiny("copy_task", kTinyCopy, {"--steps", "3", "--log-every", "1"}, tmp.path);
  EXPECT_NE(file.out.find("step 3/3"), std::string::npos) << file.out;
  EXPECT_EQ(file.out.find('\r'), std::string::npos) << file.out;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // their shadow memory needs more address space than any ulimit -v here
#else
constexpr bool kSanitized = false;
#endif

testing::ProgramOutcome under_ulimit(const std::string& kb, const std::string& program,
                                     const std::vector<std::string>& args, const std::string& scratch) {
  std::string cmd = fmt::format("ulimit -v {} && exec {}", kb, testing::shell_quote(bin(program)));
  for (const std::string& a : args) cmd.append(" ").append(testing::shell_quote(a));
  return testing::run_program("/bin/sh", {"-c", cmd}, scratch);
}

// B5 (the programs' side): running out of memory is one line and exit code 2, with a hint.
TEST(CliFlags, OutOfMemoryIsOneLineWithAHint) {
  if (kSanitized) GTEST_SKIP() << "sanitizer build";
  testing::TempDir tmp("cli_oom");
  std::vector<std::string> big = kTinyCopy;
  big.insert(big.end(), {"--d-model", "4096", "--d-ff", "16384", "--heads", "4", "--force"});
  const testing::ProgramOutcome r = under_ulimit("1500000", "copy_task", big, tmp.path);
  testing::expect_one_line_error(r, "copy_task", "out of memory (std::bad_alloc; ");
  EXPECT_NE(r.err.find("available, ulimit -v); hint: smaller --d-model/--d-ff/--layers/--batch-size, or check the "
                       "memory limit (ulimit -v, cgroup)"), std::string::npos) << r.err;
}

// W15: decode names the symbols the model knows, not a C++ API.
TEST(CliFlags, DecodeNamesTheSymbolsAnUnknownOneIsNot) {
  testing::TempDir tmp("cli_decode");
  tiny("copy_task", kTinyCopy, {"--checkpoint-dir", tmp / "ck"}, tmp.path);
  const testing::ProgramOutcome r =
      testing::run_program(bin("copy_task"), {"decode", "--checkpoint", tmp / "ck", "--threads", "1", "a b", "a b zz"},
                           tmp.path);
  testing::expect_one_line_error(r, "copy_task", "decode: sequence 2, word 3: unknown symbol 'zz'; hint: the model knows "
                                 "10 symbols, separated by spaces: a b c d e f g h i j\n");
  EXPECT_EQ(r.err.find("OnUnknown"), std::string::npos) << r.err;
  testing::expect_one_line_error(
      testing::run_program(bin("copy_task"), {"decode", "--checkpoint", tmp / "ck", "<eos>"}, tmp.path), "copy_task",
      "unknown symbol '<eos>'");
}

}  // namespace
}  // namespace attograd::app
