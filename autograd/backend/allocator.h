// Every tensor's storage comes from one Allocator. The default is a caching
// allocator: freed blocks are kept in per-size free lists and handed out again,
// so a training loop that makes the same shapes every step stops calling malloc
// after the first step. The cache is bounded: when cached plus in-use bytes
// would exceed twice the in-use high-water mark (plus 64 MiB), the cache is
// emptied first, so shapes that keep changing (decoding without a KV cache
// grows every step) cannot pile up stale blocks.
//
// What a miss does with the blocks cached for other sizes is a CachePolicy:
// `keep` leaves them (the bound above aside), so the process holds, for each
// size, the most blocks of it ever free at once, although a backward needs
// other sizes than the forward that freed them; `trade` first gives cached
// blocks of other sizes back to the system (largest first, until the request
// is covered), so cached plus in-use bytes never exceed the in-use high-water
// mark. docs/performance.md ("Memory") has what each costs. The environment
// variable ATTOGRAD_ALLOCATOR=keep|trade|system picks the default allocator
// (system: no cache). Swap it with set_allocator() without touching any op.
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
  // Returns a block from allocate(bytes) (the same byte count).
  virtual void deallocate(void* p, size_t bytes) = 0;
  // Bytes currently handed out, and the high-water mark.
  virtual size_t bytes_in_use() const = 0;
  // The most bytes_in_use() has been since the allocator was made.
  virtual size_t peak_bytes() const = 0;
  // Bytes held in free lists for reuse (0 without a cache).
  virtual size_t bytes_cached() const { return 0; }
  // Give cached, unused blocks back to the system.
  virtual void release_cached() {}
};

// What the caching allocator does with blocks cached for other sizes on a miss (see above).
enum class CachePolicy { keep, trade };

// Plain aligned new/delete, no caching.
std::shared_ptr<Allocator> make_system_allocator();
// Size-bucketed cache over the system allocator (the default, with CachePolicy::trade).
std::shared_ptr<Allocator> make_caching_allocator(CachePolicy policy = CachePolicy::trade);

// The allocator new storage uses now (the caching one, or what ATTOGRAD_ALLOCATOR
// names, unless set_allocator changed it).
Allocator& default_allocator();
// Replace the allocator used for new storage. Storage already allocated keeps
// a reference to the allocator that made it.
void set_allocator(std::shared_ptr<Allocator> a);
// The same allocator as a shared handle (what new storage keeps).
std::shared_ptr<Allocator> current_allocator();

}  // namespace attograd
