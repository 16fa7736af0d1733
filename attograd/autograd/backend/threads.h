// attograd's one thread pool. Every parallel loop in the library runs on it,
// and so do large GEMMs: gemm<T>() (backend/blas.h) splits its output rows (or
// columns) across the pool and calls OpenBLAS single-threaded on each part.
// The GEMM layer keeps OpenBLAS at one thread itself, so the two never compete
// for the cores (measured on 2 cores, an OpenMP pool plus OpenBLAS's pool ran
// 3-30x slower than one). The pool knows nothing of BLAS: it is the bottom of
// the backend.
//
//   set_num_threads(n)    the pool: the calling thread plus n − 1 workers
//   parallel_for(n, grain, f)
//                         calls f(begin, end) on disjoint ranges covering
//                         [0, n), at most kChunksPerThread · num_threads() of
//                         them, each at least `grain` long (except when
//                         n < grain); blocks until all are done and rethrows
//                         the first exception
//
// Nested calls (a parallel_for inside a chunk of another) run inline on the
// calling thread. Loops whose result depends on how they are split (sums)
// must not depend on the thread count: the callers cut such reductions into
// fixed blocks and add the blocks' partial sums in order (see block_count),
// so a training run gives the same numbers with 1 or 2 threads.
//
// The caller and the workers claim the ranges one by one, so a worker that
// is asleep or descheduled when a loop starts takes fewer ranges instead of
// holding the loop up, and several ranges per thread even out uneven ones.
// Workers spin briefly after a loop (the next one usually follows within
// microseconds), then sleep; with one thread there are no workers at all.
#pragma once
#include <cstdint>
#include <functional>

namespace attograd {

// The most ranges parallel_for makes per thread of the pool.
inline constexpr int64_t kChunksPerThread = 4;

// The grain of flat elementwise loops (the kernels' and the optimizers'
// updates): each range is at least this long, so a loop under twice it runs on
// one thread. 32 K elements keep the pool's hand-off small next to the work;
// 8 K was 3-10% slower in the one comparison made (docs/performance.md,
// "Tried and not kept").
inline constexpr int64_t kElementwiseGrain = int64_t{1} << 15;

// Process-wide; n >= 1 (NumThreadsGuard in settings.h sets it for a scope).
void set_num_threads(int n);
// The pool's size: the calling thread plus its workers (1: no workers).
int num_threads();
// True inside a chunk of parallel_for (on any thread).
bool in_parallel_region();

// f(begin, end) over disjoint ranges covering [0, n) on the pool, blocking
// until all are done (see above); rethrows the first exception a chunk threw.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& f);

// Fixed blocks of `block` rows for deterministic reductions: block k covers
// rows [k·block, min(n, (k+1)·block)). The count depends on n only.
inline int64_t block_count(int64_t n, int64_t block) { return n == 0 ? 0 : (n + block - 1) / block; }

}  // namespace attograd
