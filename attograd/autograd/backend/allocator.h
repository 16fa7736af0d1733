// Every tensor's storage comes from one Allocator. The default is a caching
// allocator: freed blocks are kept in per-size free lists and handed out again,
// so a training loop that makes the same shapes every step stops calling malloc
// after the first step. The cache is bounded: when cached plus in-use bytes
// would exceed twice the in-use high-water mark (plus 64 MiB), the cache is
// emptied first, so shapes that keep changing (decoding without a KV cache
// grows every step) cannot pile up stale blocks. Swap it with set_allocator() without touching any op.
#pragma once
#include <cstddef>
#include <memory>

namespace attograd {

// Where tensor storage comes from: 64-byte aligned blocks, with byte counters.
// Implement it to plug in another memory source (set_allocator).
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;  // 64-byte aligned
  // Returns a block from allocate(bytes) (the same byte count). Called from
  // destructors, so it must not throw.
  virtual void deallocate(void* p, size_t bytes) noexcept = 0;
  // Bytes currently handed out, and the high-water mark.
  virtual size_t bytes_in_use() const = 0;
  // The most bytes_in_use() has been since the allocator was made.
  virtual size_t peak_bytes() const = 0;
  // Bytes held in free lists for reuse (0 without a cache).
  virtual size_t bytes_cached() const { return 0; }
  // Give cached, unused blocks back to the system.
  virtual void release_cached() {}
};

// Plain aligned new/delete, no caching.
std::shared_ptr<Allocator> make_system_allocator();
// Size-bucketed cache over the system allocator (the default).
std::shared_ptr<Allocator> make_caching_allocator();

// The allocator new storage uses now (the caching one unless set_allocator changed it).
Allocator& default_allocator();
// Replace the allocator used for new storage. Storage already allocated keeps
// a reference to the allocator that made it.
void set_allocator(std::shared_ptr<Allocator> a);
// The same allocator as a shared handle (what new storage keeps).
std::shared_ptr<Allocator> current_allocator();

}  // namespace attograd
