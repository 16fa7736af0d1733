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

// Chunks are claimed, not assigned: the caller and every awake worker take
// the next unclaimed chunk of the current loop until none is left, and the
// caller returns once every chunk is done. A worker that is asleep or
// descheduled when a loop starts therefore never holds it up (the caller
// runs its share), and it never has to acknowledge a loop it missed. Which
// thread runs a chunk never changes the chunk's range, so results do not
// depend on it.
class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
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
    f_ = &f;
    error_ = nullptr;
    done_.store(0, std::memory_order_relaxed);
    claim_.store(pack(chunks, 0), std::memory_order_release);
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      generation_.fetch_add(1, std::memory_order_release);
      wake = sleeping_ > 0;
    }
    if (wake) cv_.notify_all();
    run_chunks();
    while (done_.load(std::memory_order_acquire) != chunks) cpu_relax();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // The claim word: the current loop's chunk count (high half) and its next
  // unclaimed chunk (low half), in one atomic. A successful claim is a chunk
  // of a loop that is still running (its caller waits for that chunk), so
  // n_ and f_ are that loop's, however late the claiming thread is.
  static uint64_t pack(int64_t chunks, int64_t next) {
    return static_cast<uint64_t>(chunks) << 32 | static_cast<uint64_t>(next);
  }

  // Runs unclaimed chunks of the current loop until none is left.
  void run_chunks() {
    uint64_t v = claim_.load(std::memory_order_acquire);
    for (;;) {
      const auto chunks = static_cast<int64_t>(v >> 32), i = static_cast<int64_t>(v & 0xffffffffu);
      if (i >= chunks) return;
      if (!claim_.compare_exchange_weak(v, pack(chunks, i + 1), std::memory_order_acq_rel,
                                        std::memory_order_acquire))
        continue;
      const int64_t begin = n_ * i / chunks, end = n_ * (i + 1) / chunks;
      t_in_region = true;
      try {
        (*f_)(begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
      t_in_region = false;
      done_.fetch_add(1, std::memory_order_acq_rel);
      v = claim_.load(std::memory_order_acquire);
    }
  }

  void work() {
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
      run_chunks();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};  // bumped by each loop and by the stop signal
  std::atomic<uint64_t> claim_{0};       // pack(chunks, next) of the current loop
  std::atomic<int64_t> done_{0};         // chunks of the current loop finished
  int sleeping_ = 0;   // guarded by mu_
  bool stop_ = false;  // guarded by mu_, read after a generation change
  // The current loop; written by the caller before its claim word is published.
  int64_t n_ = 0;
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
  const int threads = num_threads();
  const int64_t chunks = std::min<int64_t>(kChunksPerThread * threads, std::max<int64_t>(1, n / std::max<int64_t>(grain, 1)));
  if (threads == 1 || chunks <= 1 || t_in_region) {
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
