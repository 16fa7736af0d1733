// Data-parallel gradient averaging: every parameter's .grad summed (or
// averaged) over the ranks of a Communicator, in fixed-size buckets.
//
// The gradients are laid end to end, in parameter order, as one flat f32
// array; bucket k is its elements [k * cap, (k + 1) * cap) with
// cap = bucket_bytes / 4, so a large parameter spans several buckets and
// small ones share one. Each bucket is copied into a pooled flat buffer
// (allocated once, at construction), reduced with one collective, and copied
// back: one call per bucket, never one per parameter. No call at all in a
// world of one.
//
// Reduction order:
//  - native: MPI_Allreduce, whose algorithm (and so the order of the float
//    additions) OpenMPI picks by message size and process count. Runs with the
//    same process count and bucket size repeat bit for bit in practice, but MPI
//    does not promise it, nor that every rank gets the same bits.
//  - fixed: MPI_Allgather of the bucket, then every rank adds the ranks'
//    values in rank order 0, 1, ..., N-1 itself. The sums are bit-identical on
//    every rank and from run to run, for a given process count; the cost is
//    N * bucket bytes received per rank instead of a ring's 2(N-1)/N.
//
// Overlap (options.overlap, on by default): the reducer registers a
// post-accumulate-grad hook (attograd/autograd/engine.h) on every parameter, so during
// backward it learns when each .grad is final. A bucket whose parameters are
// all final is packed into its own buffer and its collective started without
// waiting (MPI_Iallreduce for native, MPI_Iallgather for fixed) while backward
// goes on; allreduce(op) then starts the buckets still left (parameters no
// gradient reached count as zeros), waits for all, and writes the sums back
// (scaled for mean). Buckets start in one fixed order, the last bucket first
// (backward finishes the last layers' parameters first), a ready bucket
// waiting for the ones before it, so that every rank starts the same
// collectives in the same order whatever its timing. The sums are those of
// the blocking path: the fixed order adds the same gathered values in the same
// order (bit-identical); native adds what MPI's non-blocking algorithm picks
// (with 2 ranks a + b, so identical too). The price: one buffer per bucket
// (a copy of all gradients; N copies for fixed) instead of one pooled bucket.
// A backward that is not followed by allreduce() (a skipped step) has its
// collectives completed and dropped when the next backward begins.
// What overlap asks of the caller: between a backward and allreduce() no rank
// makes another collective (MPI matches collectives by their order), every
// rank either runs backward or skips it (a rank that skips starts its buckets
// in allreduce(), in the same order), and nothing changes a .grad in between
// (a started bucket sends the values it packed). The Trainer sums its loss
// across ranks before backward for the first two.
//
// Neither makes N processes bit-identical to one process with the N-times
// batch: there the GEMMs of the backward sum the batch rows in one
// accumulation, here in N partial sums added afterwards.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <attograd/autograd/engine.h>
#include <attograd/autograd/tensor.h>
#include <attograd/dist/communicator.h>

namespace attograd::dist {

enum class ReduceOrder { native, fixed };
enum class ReduceOp { sum, mean };

struct ReducerOptions {
  // 1 MiB: large enough that the per-call latency is small next to the
  // transfer (a few microseconds per call on one machine), small enough that
  // the first buckets are ready early in backward (PyTorch DDP uses 25 MiB).
  int64_t bucket_bytes = int64_t{1} << 20;
  ReduceOrder order = ReduceOrder::native;
  bool overlap = true;  // start each bucket's collective during backward (see above)
};

class GradientReducer {
 public:
  // params: f32 leaves in the same order on every rank. ValueError for another
  // dtype or a bucket smaller than one float; with overlap in a world of more
  // than one, an AutogradError for a parameter that does not require grad.
  GradientReducer(Communicator& comm, std::vector<Tensor> params, ReducerOptions options = {});
  // Its hooks capture it: neither copied nor moved.
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;
  // Every parameter's .grad becomes the sum (or mean) over ranks; an undefined
  // .grad counts as zeros and is set. With overlap, completes what backward started.
  void allreduce(ReduceOp op);
  int64_t num_buckets() const;
  int64_t calls() const { return calls_; }  // collectives made so far
  double seconds() const { return seconds_; }  // wall time in the reducer: packing, starting, waiting, unpacking
  // With overlap, the part of seconds() spent waiting for started collectives:
  // the communication backward did not hide (0 on the blocking path).
  double wait_seconds() const { return wait_seconds_; }
  int64_t overlapped() const { return overlapped_; }  // collectives started during backward so far

 private:
  struct Bucket {
    int64_t begin = 0, end = 0;        // its flat range
    int pending = 0;                   // parameters in it whose .grad is not final yet
    std::vector<float> values, gathered;  // its own buffers (overlap only)
    std::unique_ptr<PendingCollective> running;
  };
  void reduce_fixed_order(std::span<float> bucket);
  void allreduce_blocking(ReduceOp op);
  void on_final(size_t param);
  void start(Bucket& b);
  void start_ready();
  void reset_overlap();

  Communicator& comm_;
  std::vector<Tensor> params_;
  std::vector<int64_t> offsets_;  // params_[i]'s first element in the flat array; back() is the total
  ReducerOptions options_;
  std::vector<float> bucket_, gathered_;  // the pooled buffers (blocking path)
  std::vector<Bucket> buckets_;           // overlap: in flat order; started from the last
  std::vector<std::vector<size_t>> buckets_of_;  // overlap: per parameter, the buckets it lies in
  std::vector<bool> final_;               // overlap: per parameter, .grad final in this backward
  size_t started_ = 0;                    // overlap: buckets started, counted from the last
  std::vector<GradHookHandle> hooks_;     // last: removed first
  int64_t calls_ = 0, overlapped_ = 0;
  double seconds_ = 0, wait_seconds_ = 0;
};

// Every parameter takes rank 0's values (at the start of a run, so all ranks
// begin from the same weights), in buckets as above.
void broadcast_parameters(Communicator& comm, const std::vector<Tensor>& params,
                          int64_t bucket_bytes = ReducerOptions{}.bucket_bytes);

}  // namespace attograd::dist
