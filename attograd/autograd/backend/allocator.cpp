#include <attograd/autograd/backend/allocator.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace attograd {
namespace {

constexpr size_t kAlign = 64;

// The block size for a request of `bytes`: a multiple of kAlign, at least
// one; bad_alloc for a request that rounding would wrap around.
size_t round_up(size_t bytes) {
  if (bytes > std::numeric_limits<size_t>::max() - kAlign) throw std::bad_alloc();
  return (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
}

class SystemAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    size_t n = round_up(bytes);
    void* p = std::aligned_alloc(kAlign, n);
    if (!p) throw std::bad_alloc();
    size_t now = in_use_ += n;
    size_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {}
    return p;
  }
  void deallocate(void* p, size_t bytes) noexcept override {
    in_use_ -= round_up(bytes);
    std::free(p);
  }
  size_t bytes_in_use() const override { return in_use_; }
  size_t peak_bytes() const override { return peak_; }

 private:
  std::atomic<size_t> in_use_{0}, peak_{0};
};

// Exact-size buckets: toy-transformer training reuses a small set of sizes.
class CachingAllocator final : public Allocator {
 public:
  static constexpr size_t kSlack = size_t{64} << 20;
  void* allocate(size_t bytes) override {
    size_t n = round_up(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(n);
    void* p = nullptr;
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      cached_ -= n;
    } else if (!(p = std::aligned_alloc(kAlign, n))) {
      release_locked();
      if (!(p = std::aligned_alloc(kAlign, n))) throw std::bad_alloc();
    }
    in_use_ += n;
    if (in_use_ > peak_) peak_ = in_use_;
    return p;
  }
  // Runs inside Storage's destructor, so it never throws: a block the free
  // list has no room for (out of memory) goes back to the system.
  void deallocate(void* p, size_t bytes) noexcept override {
    const size_t n = round_up(bytes);  // cannot throw: allocate() accepted this size
    std::lock_guard<std::mutex> lock(mu_);
    in_use_ -= n;
    if (cached_ + in_use_ + n > 2 * peak_ + kSlack) release_locked();
    try {
      free_[n].push_back(p);
      cached_ += n;
    } catch (const std::bad_alloc&) {
      std::free(p);
    }
  }
  size_t bytes_in_use() const override { return in_use_; }
  size_t peak_bytes() const override { return peak_; }
  size_t bytes_cached() const override { return cached_; }
  void release_cached() override {
    std::lock_guard<std::mutex> lock(mu_);
    release_locked();
  }
  ~CachingAllocator() override { release_locked(); }

 private:
  void release_locked() {
    for (auto& [n, list] : free_)
      for (void* p : list) std::free(p);
    free_.clear();
    cached_ = 0;
  }
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t in_use_ = 0, peak_ = 0, cached_ = 0;
};

std::shared_ptr<Allocator>& slot() {
  static std::shared_ptr<Allocator> a = make_caching_allocator();
  return a;
}

}  // namespace

std::shared_ptr<Allocator> make_system_allocator() { return std::make_shared<SystemAllocator>(); }
std::shared_ptr<Allocator> make_caching_allocator() { return std::make_shared<CachingAllocator>(); }
Allocator& default_allocator() { return *slot(); }
void set_allocator(std::shared_ptr<Allocator> a) { slot() = std::move(a); }
std::shared_ptr<Allocator> current_allocator() { return slot(); }

}  // namespace attograd
