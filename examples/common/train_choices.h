// The example programs' shared code (namespace attograd::app, never installed), not the library.
// The optimizers and lr schedules a training program chooses by name
// (--optimizer, --schedule), and the settings --on-nonfinite and
// --allreduce-order and --precision name: one table each, a row per choice with its name,
// one line of help and a factory (or the setting). The flags' help, their validation and the
// trainer all read these tables, so a new choice is a new row.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <attograd/autograd/error.h>
#include <attograd/optim/optimizer.h>
#include <attograd/optim/schedule.h>
#include "examples/common/trainer.h"

namespace attograd::app {

struct OptimizerChoice {
  std::string_view name;
  std::string_view help;
  int state_buffers;  // parameter-sized buffers it keeps (momentum, moments): for the memory estimate
  std::unique_ptr<optim::Optimizer> (*make)(std::vector<Tensor> params, const TrainOptions& opt);
};

struct ScheduleChoice {
  std::string_view name;
  std::string_view help;
  // Throws a ValueError naming the flags to change, and values that work, when opt cannot build this schedule.
  void (*check)(const TrainOptions& opt);
  std::unique_ptr<optim::Schedule> (*make)(const TrainOptions& opt, int64_t d_model);
};

std::span<const OptimizerChoice> optimizer_choices();
std::span<const ScheduleChoice> schedule_choices();

// A flag whose names each stand for one setting: --on-nonfinite, --allreduce-order.
template <class T>
struct SettingChoice {
  std::string_view name;
  std::string_view help;
  T value;
};

std::span<const SettingChoice<OnNonfinite>> nonfinite_choices();
std::span<const SettingChoice<dist::ReduceOrder>> reduce_order_choices();
std::span<const SettingChoice<Precision>> precision_choices();

// "a, b or c": the names in a table.
template <class Choice>
std::string choice_names(std::span<const Choice> table) {
  std::string s;
  for (size_t i = 0; i < table.size(); ++i)
    s += std::string(i == 0 ? "" : i + 1 == table.size() ? " or " : ", ") + std::string(table[i].name);
  return s;
}

// "<what>: a (help), b (help)": a flag's help line.
template <class Choice>
std::string choice_help(std::string_view what, std::span<const Choice> table) {
  std::string s(what);
  for (size_t i = 0; i < table.size(); ++i)
    s += std::string(i == 0 ? ": " : ", ") + std::string(table[i].name) + " (" + std::string(table[i].help) + ")";
  return s;
}

// The name of the row holding `value` (a flag's default); every value has a row.
template <class T>
std::string choice_name(std::span<const SettingChoice<T>> table, T value) {
  for (const SettingChoice<T>& c : table)
    if (c.value == value) return std::string(c.name);
  fail<ValueError>("flags", "a setting with no name in its table");
}

// The row named `name`, else ValueError "flags: --<flag> must be a, b or c, got 'x'".
template <class Choice>
const Choice& find_choice(std::span<const Choice> table, std::string_view name, std::string_view flag) {
  for (const Choice& c : table)
    if (c.name == name) return c;
  fail<ValueError>("flags", "--{} must be {}, got '{}'", flag, choice_names(table), name);
}

}  // namespace attograd::app
