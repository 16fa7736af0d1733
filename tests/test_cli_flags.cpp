// examples/common/cli.h: a flag value that does not parse names the flag and
// the type it expects, in every program; the arguments that are not flags
// (a sentence to translate, a sequence to decode) are kept whole, commas and all.
#include <gtest/gtest.h>

#include <vector>

#include "examples/common/cli.h"
#include "test_util.h"

namespace attograd {
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
      ("quiet", "no output")
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
  EXPECT_EQ(error_for({"--quiet=maybe"}), "flags: --quiet expects true or false (or no value), got 'maybe'");
  EXPECT_EQ(error_for({"-n", "x"}), "flags: -n expects an integer, got 'x'");
  // The bad flag is found among good ones, whatever its position.
  EXPECT_EQ(error_for({"--quiet", "--name", "x,y", "--steps", "9", "--lr", "fast"}),
            "flags: --lr expects a finite number, got 'fast' (default 0.003)");
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

}  // namespace
}  // namespace attograd
