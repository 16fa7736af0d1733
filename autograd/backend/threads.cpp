#include <attograd/autograd/backend/threads.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <attograd/autograd/error.h>

namespace attograd {

namespace {

thread_local bool t_in_region = false;
// How long an idle worker spins for the next loop before it sleeps.
constexpr int kSpinMicros = 200;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Static assignment: a loop of c chunks gives chunk 0 to the caller and chunk
// i to worker i − 1; every worker takes part in every loop (an empty chunk
// when c is smaller), so once `pending` reaches 0 no worker touches the loop.
class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    for (std::thread& w : workers_) w.join();
  }
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void run(int64_t n, int64_t chunks, const std::function<void(int64_t, int64_t)>& f) {
    n_ = n;
    chunks_ = chunks;
    f_ = &f;
    error_ = nullptr;
    pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      generation_.fetch_add(1, std::memory_order_release);
      wake = sleeping_ > 0;
    }
    if (wake) cv_.notify_all();
    run_chunk(0);
    while (pending_.load(std::memory_order_acquire) != 0) cpu_relax();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void run_chunk(int64_t i) {
    if (i >= chunks_) return;
    const int64_t begin = n_ * i / chunks_, end = n_ * (i + 1) / chunks_;
    t_in_region = true;
    try {
      (*f_)(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    t_in_region = false;
  }

  void work(int id) {
    uint64_t seen = 0;
    for (;;) {
      // Spin for the next loop before sleeping on the condition variable.
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
      for (int k = 0; generation_.load(std::memory_order_acquire) == seen; ++k) {
        cpu_relax();
        if ((k & 255) == 255 && std::chrono::steady_clock::now() > until) {
          std::unique_lock<std::mutex> lock(mu_);
          ++sleeping_;
          cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
          --sleeping_;
          break;
        }
      }
      seen = generation_.load(std::memory_order_acquire);
      if (stop_) return;
      run_chunk(id);
      pending_.fetch_sub(1, std::memory_order_release);
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  int sleeping_ = 0;   // guarded by mu_
  bool stop_ = false;  // guarded by mu_, read after a generation change
  // The current loop; written by the caller before the generation changes.
  int64_t n_ = 0, chunks_ = 0;
  const std::function<void(int64_t, int64_t)>* f_ = nullptr;
  std::exception_ptr error_;
};

std::unique_ptr<Pool>& pool() {
  static std::unique_ptr<Pool> p;
  return p;
}
std::mutex g_pool_mu;  // one parallel loop at a time from outside the pool

}  // namespace

void set_num_threads(int n) {
  if (n < 1) fail<ValueError>("set_num_threads", "thread count must be >= 1, got {}", n);
  if (in_parallel_region())
    fail<ValueError>("set_num_threads", "called inside a parallel_for chunk; hint: set the thread count before "
                     "training, from the main thread");
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (num_threads() == n) return;
  pool().reset();
  if (n > 1) pool() = std::make_unique<Pool>(n);
}

int num_threads() { return pool() ? pool()->size() : 1; }

bool in_parallel_region() { return t_in_region; }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
  if (n <= 0) return;
  const int64_t chunks = std::min<int64_t>(num_threads(), std::max<int64_t>(1, n / std::max<int64_t>(grain, 1)));
  if (chunks <= 1 || t_in_region) {
    f(0, n);
    return;
  }
  std::unique_lock<std::mutex> lock(g_pool_mu, std::try_to_lock);
  if (!lock.owns_lock()) {  // another thread of the program is using the pool: run here
    f(0, n);
    return;
  }
  pool()->run(n, chunks, f);
}

}  // namespace attograd
