// Every switch that changes how attograd runs, in one place. Each is a small
// struct (value_type, get(), set()) and each scope guard is Scoped<Setting>:
// it remembers get(), sets a value, and puts the remembered one back when it
// dies, also when an exception unwinds through it.
//
//   setting                  scope        default          environment variable
//   -----------------------  -----------  ---------------  ---------------------------------------------------
//   GradMode                 this thread  true (records)   -
//   AnomalyMode              this thread  false            -
//   BackwardObserverSetting  this thread  null (none)      -
//   AutocastMode             this thread  f32 (off)        -   (the programs' --precision)
//   MemoryOptionsSetting     process      lean             ATTOGRAD_MEMORY=lean|fast|attention=…,layer_norm=…
//   GemmBackendSetting       process      blas             ATTOGRAD_GEMM=blas|openblas|xsmm|naive
//   NumThreadsSetting        process      1                - (the programs' --threads)
//   vector math kernel set   process      the CPU's widest ATTOGRAD_VECMATH=scalar|avx2|avx512
//
//   setting                  get / set                                  guard (what a program writes)
//   -----------------------  -----------------------------------------  ------------------------------------
//   GradMode                 GradMode::enabled() / set_enabled()        NoGradGuard (off), GradModeGuard(bool)
//   AnomalyMode              AnomalyMode::enabled() / set_enabled()     AnomalyGuard (on)
//   BackwardObserverSetting  backward_observer() / ...Setting::set()    BackwardObserverGuard(observer*)
//   AutocastMode             AutocastMode::get() / set()                AutocastGuard (bf16)  (autocast.h)
//   MemoryOptionsSetting     memory_options() / set_memory_options()    MemoryOptionsGuard(MemoryOptions)
//   GemmBackendSetting       gemm_backend() / set_gemm_backend()        GemmBackendGuard(GemmBackend)  (backend/gemm.h)
//   NumThreadsSetting        num_threads() / set_num_threads()          NumThreadsGuard(int)
//   vector math kernel set   vecmath().name / - (fixed at first use)    -   (backend/vecmath.h)
//
// An environment variable is read once, at the setting's first get or set
// (ATTOGRAD_VECMATH: at the first vector math call); empty counts as unset.
// A bad value is a ValueError naming the variable, the value and the accepted
// ones, thrown there, or earlier by read_settings_from_environment(), which
// programs call first thing so that the error comes before any work.
//
// "this thread": a thread starts with the default whatever another thread set
// (a std::thread under NoGradGuard records again). "process": one value for
// every thread; set it while no other thread runs ops (a recorded node keeps
// what it saved under the old value).
//
// Not a setting: AttentionObserverGuard (nn/attention.h) sets the observer of
// every attention module below a root, a field of those modules, not a switch
// of the process or the thread.
#pragma once
#include <utility>

#include <attograd/autograd/backend/gemm.h>
#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/memory.h>

namespace attograd {

// Sets Setting to a value for its lifetime and restores the value it found;
// not copyable (one restore per set). Setting has `using value_type`,
// `static value_type get()` and `static void set(value_type)`.
template <class Setting>
class Scoped {
 public:
  // The setting's value type.
  using value_type = typename Setting::value_type;
  // Remembers Setting::get(), then sets `value`.
  explicit Scoped(value_type value) : prev_(Setting::get()) { Setting::set(std::move(value)); }
  // Puts the remembered value back.
  ~Scoped() { Setting::set(std::move(prev_)); }
  // Not copyable: a copy would restore a second time.
  Scoped(const Scoped&) = delete;
  // Not assignable, for the same reason.
  Scoped& operator=(const Scoped&) = delete;

 private:
  value_type prev_;
};

// Gradient recording on this thread (torch.is_grad_enabled): on by default;
// ops record no graph while it is off.
struct GradMode {
  // A flag.
  using value_type = bool;
  // Whether ops record the graph on this thread.
  static bool get();
  // Turns recording on or off for this thread (prefer a guard, which restores it).
  static void set(bool on);
  // The same as get(), by torch's name.
  static bool enabled() { return get(); }
  // The same as set(), by torch's name.
  static void set_enabled(bool on) { set(on); }
};
// No graph recording on this thread while it lives (torch.no_grad()); the
// previous mode comes back after.
class NoGradGuard : public Scoped<GradMode> {
 public:
  // Turns recording off.
  NoGradGuard() : Scoped(false) {}
};
// Sets grad mode to a given value in a scope (torch.set_grad_enabled): the
// engine turns it on while it creates a backward graph, gradgradcheck while
// it evaluates gradients inside gradcheck's no-grad evaluations.
using GradModeGuard = Scoped<GradMode>;

// Anomaly detection on this thread (torch.autograd.detect_anomaly): while it
// is on, every recorded op checks its forward output (for NaN and +Inf; -Inf
// is how masks enter a softmax), and every backward checks each gradient it
// produces (for any non-finite value); the first one throws an AutogradError
// naming the op and its input shapes.
struct AnomalyMode {
  // A flag.
  using value_type = bool;
  // Whether anomaly checks run on this thread.
  static bool get();
  // Turns them on or off for this thread (prefer AnomalyGuard, which restores it).
  static void set(bool on);
  // The same as get().
  static bool enabled() { return get(); }
  // The same as set().
  static void set_enabled(bool on) { set(on); }
};
// Anomaly detection on this thread while it lives (see AnomalyMode).
class AnomalyGuard : public Scoped<AnomalyMode> {
 public:
  // Turns the checks on.
  AnomalyGuard() : Scoped(true) {}
};

class BackwardObserver;
// The observer run_backward shows each node to on this thread (engine.h's
// BackwardObserver), or null. Not owned: it must outlive its installation.
struct BackwardObserverSetting {
  // Not owned.
  using value_type = BackwardObserver*;
  // The observer installed on this thread, or null.
  static BackwardObserver* get();
  // Installs `observer` on this thread (null: none).
  static void set(BackwardObserver* observer);
};
// The observer installed on this thread (the innermost live
// BackwardObserverGuard's), or null when there is none.
inline BackwardObserver* backward_observer() { return BackwardObserverSetting::get(); }
// Installs a BackwardObserver on this thread while it lives; the previous one
// (or none) comes back after.
using BackwardObserverGuard = Scoped<BackwardObserverSetting>;

// The precision autocast runs matrix products in: f32 (autocast off) or
// bf16 (torch.autocast("cpu", dtype=torch.bfloat16)).
enum class Precision { f32, bf16 };
// Mixed precision on this thread: at bf16, the matrix products of f32
// operands (linear, matmul, the fused attention) read them rounded to bf16
// and sum in f32; everything else stays f32. autocast.h has the whole policy.
struct AutocastMode {
  // f32 or bf16.
  using value_type = Precision;
  // The precision in force on this thread.
  static Precision get();
  // Sets it for this thread (prefer AutocastGuard, which restores it).
  static void set(Precision precision);
};
// bf16 autocast on this thread while it lives (or the precision given); the
// previous one comes back after. A recorded op keeps the precision its
// forward ran in for its backward, whatever is in force then.
class AutocastGuard : public Scoped<AutocastMode> {
 public:
  // Turns bf16 autocast on.
  AutocastGuard() : Scoped(Precision::bf16) {}
  // Sets `precision` (Precision::f32 turns autocast off in a scope).
  explicit AutocastGuard(Precision precision) : Scoped(precision) {}
};

// What the fused ops keep for backward (memory.h explains the choices).
struct MemoryOptionsSetting {
  // Both choices.
  using value_type = MemoryOptions;
  // memory_options().
  static MemoryOptions get() { return memory_options(); }
  // set_memory_options().
  static void set(const MemoryOptions& options) { set_memory_options(options); }
};
// Sets the memory options while it lives; the previous ones come back after.
using MemoryOptionsGuard = Scoped<MemoryOptionsSetting>;

// The GEMM backend as a setting (GemmBackend and its functions: backend/gemm.h).
struct GemmBackendSetting {
  // One of the backends.
  using value_type = GemmBackend;
  // gemm_backend().
  static GemmBackend get() { return gemm_backend(); }
  // set_gemm_backend().
  static void set(GemmBackend backend) { set_gemm_backend(backend); }
};
// Sets the GEMM backend while it lives; the previous one comes back after.
using GemmBackendGuard = Scoped<GemmBackendSetting>;

// The thread pool's size as a setting (backend/threads.h).
struct NumThreadsSetting {
  // Threads, >= 1.
  using value_type = int;
  // num_threads().
  static int get() { return num_threads(); }
  // set_num_threads(): a ValueError for n < 1 or inside a parallel_for chunk.
  static void set(int n) { set_num_threads(n); }
};
// Sizes the pool while it lives; the previous size comes back after.
using NumThreadsGuard = Scoped<NumThreadsSetting>;

// Reads ATTOGRAD_GEMM, ATTOGRAD_MEMORY and ATTOGRAD_VECMATH now rather than
// at their first use, so that a bad value is a ValueError before any work
// (the programs call it first thing). Calling it again does nothing more.
void read_settings_from_environment();

}  // namespace attograd
