// Learning-rate schedules. Steps count from 1: step t is the t-th call of
// optimizer.step(). A schedule sets the lr of the step about to be taken:
//
//   optim::Noam sched(/*d_model=*/512, /*warmup_steps=*/4000);
//   for (...) { loss.backward(); sched.step(opt); opt.step(); opt.zero_grad(); }
//
// lr_at(t) is the pure formula; step(opt) advances the schedule's counter and
// sets lr_at(counter) on every parameter group of opt.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include <attograd/optim/optimizer.h>

namespace attograd::optim {

// Base of the learning-rate schedules: a subclass writes formula().
class Schedule {
 public:
  virtual ~Schedule() = default;
  // The lr of step `step` (>= 1; smaller steps throw a ValueError).
  double lr_at(int64_t step) const;
  // Moves to the next step, sets its lr on every group of opt, and returns it.
  double step(Optimizer& opt);
  // The last step set (0 before the first step()); restore it to resume a run.
  int64_t last_step() const { return last_step_; }
  // Resumes a run at step (>= 0; ValueError otherwise): the next step() sets lr_at(step + 1).
  void set_last_step(int64_t step);
  // "Noam", "WarmupCosine", ...: what error messages name.
  const std::string& name() const { return name_; }

 protected:
  // name is the schedule's, for error messages.
  explicit Schedule(std::string name) : name_(std::move(name)) {}
  // Throws a ValueError naming this schedule unless ok, e.g. "Noam: expected warmup_steps >= 1, got 0".
  void check_arg(bool ok, std::string_view expected, double got) const;

 private:
  // The schedule's formula at a step >= 1.
  virtual double formula(int64_t step) const = 0;

  std::string name_;
  int64_t last_step_ = 0;
};

// lr_t = lr
class Constant : public Schedule {
 public:
  // lr >= 0 (ValueError otherwise).
  explicit Constant(double lr);

 private:
  double formula(int64_t step) const override;
  double lr_;
};

// lr_t = peak_lr * min(1, t / warmup_steps)          (peak_lr throughout when warmup_steps = 0)
class LinearWarmup : public Schedule {
 public:
  // peak_lr >= 0 and warmup_steps >= 0 (ValueError otherwise).
  LinearWarmup(double peak_lr, int64_t warmup_steps);

 private:
  double formula(int64_t step) const override;
  double peak_lr_;
  int64_t warmup_;
};

// "Attention Is All You Need", section 5.3:
//   lr_t = factor * d_model^-0.5 * min(t^-0.5, t * warmup_steps^-1.5)
// It rises linearly to its peak factor * (d_model * warmup_steps)^-0.5 at t = warmup_steps,
// then decays as t^-0.5.
class Noam : public Schedule {
 public:
  // d_model >= 1, warmup_steps >= 1 and factor >= 0 (ValueError otherwise).
  Noam(int64_t d_model, int64_t warmup_steps, double factor = 1.0);

 private:
  double formula(int64_t step) const override;
  int64_t d_model_, warmup_;
  double factor_;
};

// Linear warmup to peak_lr, then decay as the inverse square root of the step
// (fairseq's inverse_sqrt, the Transformer's decay with the peak given directly):
//   t <= warmup_steps:  lr_t = peak_lr * t / warmup_steps
//   t >  warmup_steps:  lr_t = peak_lr * sqrt(warmup_steps / t)
class InverseSqrt : public Schedule {
 public:
  // peak_lr >= 0 and warmup_steps >= 1 (ValueError otherwise).
  InverseSqrt(double peak_lr, int64_t warmup_steps);

 private:
  double formula(int64_t step) const override;
  double peak_lr_;
  int64_t warmup_;
};

// Linear warmup, then a half cosine from peak_lr down to min_lr at total_steps:
//   t <= warmup_steps:     lr_t = peak_lr * t / warmup_steps
//   warmup_steps < t < T:  lr_t = min_lr + (peak_lr - min_lr) * (1 + cos(pi * (t - warmup_steps) / (T - warmup_steps))) / 2
//   t >= T:                lr_t = min_lr
class WarmupCosine : public Schedule {
 public:
  // Needs 0 <= min_lr <= peak_lr, warmup_steps >= 0 and total_steps > warmup_steps
  // (ValueError otherwise).
  WarmupCosine(double peak_lr, int64_t warmup_steps, int64_t total_steps, double min_lr = 0.0);

 private:
  double formula(int64_t step) const override;
  double peak_lr_;
  int64_t warmup_, total_;
  double min_lr_;
};

// Step decay (torch.optim.lr_scheduler.StepLR): gamma once every step_size steps,
//   lr_t = lr * gamma^floor((t - 1) / step_size)
class StepDecay : public Schedule {
 public:
  // lr >= 0, step_size >= 1 and gamma >= 0 (ValueError otherwise).
  StepDecay(double lr, int64_t step_size, double gamma = 0.1);

 private:
  double formula(int64_t step) const override;
  double lr_;
  int64_t step_size_;
  double gamma_;
};

}  // namespace attograd::optim
