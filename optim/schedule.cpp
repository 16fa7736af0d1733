#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "autograd/error.h"

namespace attograd::optim {

double Schedule::step(Optimizer& opt) {
  const double lr = lr_at(last_step_ + 1);
  opt.set_lr(lr);
  ++last_step_;
  return lr;
}

void Schedule::set_last_step(int64_t step) {
  if (step < 0) fail<ValueError>("Schedule::set_last_step", "expected a step >= 0, got {}", step);
  last_step_ = step;
}

void Schedule::check_step(int64_t step, std::string_view schedule) const {
  if (step < 1)
    fail<ValueError>(schedule, "lr_at: steps count from 1, got {}; hint: step t is the t-th call "
                     "of optimizer.step()", step);
}

// ---- Constant -------------------------------------------------------------------

Constant::Constant(double lr) : lr_(lr) {
  if (!(lr >= 0)) fail<ValueError>("Constant", "expected lr >= 0, got {}", lr);
}
double Constant::lr_at(int64_t step) const {
  check_step(step, "Constant");
  return lr_;
}

// ---- LinearWarmup -------------------------------------------------------------

LinearWarmup::LinearWarmup(double peak_lr, int64_t warmup_steps) : peak_lr_(peak_lr), warmup_(warmup_steps) {
  if (!(peak_lr >= 0)) fail<ValueError>("LinearWarmup", "expected peak_lr >= 0, got {}", peak_lr);
  if (warmup_steps < 0)
    fail<ValueError>("LinearWarmup", "expected warmup_steps >= 0, got {}", warmup_steps);
}
double LinearWarmup::lr_at(int64_t step) const {
  check_step(step, "LinearWarmup");
  if (step >= warmup_) return peak_lr_;
  return peak_lr_ * static_cast<double>(step) / static_cast<double>(warmup_);
}

// ---- Noam -----------------------------------------------------------------------

Noam::Noam(int64_t d_model, int64_t warmup_steps, double factor)
    : d_model_(d_model), warmup_(warmup_steps), factor_(factor) {
  if (d_model < 1) fail<ValueError>("Noam", "expected d_model >= 1, got {}", d_model);
  if (warmup_steps < 1)
    fail<ValueError>("Noam", "expected warmup_steps >= 1, got {}", warmup_steps);
  if (!(factor >= 0)) fail<ValueError>("Noam", "expected factor >= 0, got {}", factor);
}
double Noam::lr_at(int64_t step) const {
  check_step(step, "Noam");
  const double t = static_cast<double>(step), w = static_cast<double>(warmup_);
  return factor_ * std::pow(static_cast<double>(d_model_), -0.5) *
         std::min(std::pow(t, -0.5), t * std::pow(w, -1.5));
}

// ---- WarmupCosine ---------------------------------------------------------------

WarmupCosine::WarmupCosine(double peak_lr, int64_t warmup_steps, int64_t total_steps, double min_lr)
    : peak_lr_(peak_lr), warmup_(warmup_steps), total_(total_steps), min_lr_(min_lr) {
  if (!(peak_lr >= 0)) fail<ValueError>("WarmupCosine", "expected peak_lr >= 0, got {}", peak_lr);
  if (!(min_lr >= 0 && min_lr <= peak_lr))
    fail<ValueError>("WarmupCosine", "expected 0 <= min_lr <= peak_lr, got min_lr {} and peak_lr {}",
                     min_lr, peak_lr);
  if (warmup_steps < 0)
    fail<ValueError>("WarmupCosine", "expected warmup_steps >= 0, got {}", warmup_steps);
  if (total_steps <= warmup_steps)
    fail<ValueError>("WarmupCosine", "expected total_steps > warmup_steps, got total_steps {} and "
                     "warmup_steps {}", total_steps, warmup_steps);
}
double WarmupCosine::lr_at(int64_t step) const {
  check_step(step, "WarmupCosine");
  if (step <= warmup_) return peak_lr_ * static_cast<double>(step) / static_cast<double>(warmup_);
  if (step >= total_) return min_lr_;
  const double progress = static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
  return min_lr_ + (peak_lr_ - min_lr_) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

// ---- StepDecay ------------------------------------------------------------------

StepDecay::StepDecay(double lr, int64_t step_size, double gamma) : lr_(lr), step_size_(step_size), gamma_(gamma) {
  if (!(lr >= 0)) fail<ValueError>("StepDecay", "expected lr >= 0, got {}", lr);
  if (step_size < 1) fail<ValueError>("StepDecay", "expected step_size >= 1, got {}", step_size);
  if (!(gamma >= 0)) fail<ValueError>("StepDecay", "expected gamma >= 0, got {}", gamma);
}
double StepDecay::lr_at(int64_t step) const {
  check_step(step, "StepDecay");
  return lr_ * std::pow(gamma_, static_cast<double>((step - 1) / step_size_));
}

}  // namespace attograd::optim
