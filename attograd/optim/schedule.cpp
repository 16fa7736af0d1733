#include <attograd/optim/schedule.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include <attograd/autograd/error.h>

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

double Schedule::lr_at(int64_t step) const {
  if (step < 1)
    fail<ValueError>(name_, "lr_at: steps count from 1, got {}; hint: step t is the t-th call "
                     "of optimizer.step()", step);
  return formula(step);
}

void Schedule::check_arg(bool ok, std::string_view expected, double got) const {
  if (!ok) fail<ValueError>(name_, "expected {}, got {}", expected, got);
}

// ---- Constant -------------------------------------------------------------------

Constant::Constant(double lr) : Schedule("Constant"), lr_(lr) { check_arg(lr >= 0, "lr >= 0", lr); }
double Constant::formula(int64_t) const { return lr_; }

// ---- LinearWarmup -------------------------------------------------------------

LinearWarmup::LinearWarmup(double peak_lr, int64_t warmup_steps) : Schedule("LinearWarmup"), peak_lr_(peak_lr), warmup_(warmup_steps) {
  check_arg(peak_lr >= 0, "peak_lr >= 0", peak_lr);
  check_arg(warmup_steps >= 0, "warmup_steps >= 0", static_cast<double>(warmup_steps));
}
double LinearWarmup::formula(int64_t step) const {
  if (step >= warmup_) return peak_lr_;
  return peak_lr_ * static_cast<double>(step) / static_cast<double>(warmup_);
}

// ---- Noam -----------------------------------------------------------------------

Noam::Noam(int64_t d_model, int64_t warmup_steps, double factor)
    : Schedule("Noam"), d_model_(d_model), warmup_(warmup_steps), factor_(factor) {
  check_arg(d_model >= 1, "d_model >= 1", static_cast<double>(d_model));
  check_arg(warmup_steps >= 1, "warmup_steps >= 1", static_cast<double>(warmup_steps));
  check_arg(factor >= 0, "factor >= 0", factor);
}
double Noam::formula(int64_t step) const {
  const double t = static_cast<double>(step), w = static_cast<double>(warmup_);
  return factor_ * std::pow(static_cast<double>(d_model_), -0.5) *
         std::min(std::pow(t, -0.5), t * std::pow(w, -1.5));
}

// ---- InverseSqrt ----------------------------------------------------------------

InverseSqrt::InverseSqrt(double peak_lr, int64_t warmup_steps)
    : Schedule("InverseSqrt"), peak_lr_(peak_lr), warmup_(warmup_steps) {
  check_arg(peak_lr >= 0, "peak_lr >= 0", peak_lr);
  check_arg(warmup_steps >= 1, "warmup_steps >= 1", static_cast<double>(warmup_steps));
}
double InverseSqrt::formula(int64_t step) const {
  const double t = static_cast<double>(step), w = static_cast<double>(warmup_);
  return t <= w ? peak_lr_ * t / w : peak_lr_ * std::sqrt(w / t);
}

// ---- WarmupCosine ---------------------------------------------------------------

WarmupCosine::WarmupCosine(double peak_lr, int64_t warmup_steps, int64_t total_steps, double min_lr)
    : Schedule("WarmupCosine"), peak_lr_(peak_lr), warmup_(warmup_steps), total_(total_steps), min_lr_(min_lr) {
  check_arg(peak_lr >= 0, "peak_lr >= 0", peak_lr);
  if (!(min_lr >= 0 && min_lr <= peak_lr))
    fail<ValueError>(name(), "expected 0 <= min_lr <= peak_lr, got min_lr {} and peak_lr {}",
                     min_lr, peak_lr);
  check_arg(warmup_steps >= 0, "warmup_steps >= 0", static_cast<double>(warmup_steps));
  if (total_steps <= warmup_steps)
    fail<ValueError>(name(), "expected total_steps > warmup_steps, got total_steps {} and "
                     "warmup_steps {}", total_steps, warmup_steps);
}
double WarmupCosine::formula(int64_t step) const {
  if (step <= warmup_) return peak_lr_ * static_cast<double>(step) / static_cast<double>(warmup_);
  if (step >= total_) return min_lr_;
  const double progress = static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
  return min_lr_ + (peak_lr_ - min_lr_) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

// ---- StepDecay ------------------------------------------------------------------

StepDecay::StepDecay(double lr, int64_t step_size, double gamma) : Schedule("StepDecay"), lr_(lr), step_size_(step_size), gamma_(gamma) {
  check_arg(lr >= 0, "lr >= 0", lr);
  check_arg(step_size >= 1, "step_size >= 1", static_cast<double>(step_size));
  check_arg(gamma >= 0, "gamma >= 0", gamma);
}
double StepDecay::formula(int64_t step) const {
  return lr_ * std::pow(gamma_, static_cast<double>((step - 1) / step_size_));
}

}  // namespace attograd::optim
