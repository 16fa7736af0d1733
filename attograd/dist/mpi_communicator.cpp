// The MPI world (built with ATTOGRAD_MPI on): each collective is one MPI call
// on MPI_COMM_WORLD from the main thread (MPI_THREAD_FUNNELED; attograd's
// thread pool never calls MPI). MPI errors stay fatal (MPI_ERRORS_ARE_FATAL):
// a failed collective ends the job instead of returning.
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>

#include <mpi.h>

#include <attograd/autograd/error.h>
#include <attograd/dist/communicator.h>

namespace attograd::dist {
namespace {

int count_of(const char* op, size_t n) {
  if (n > static_cast<size_t>(std::numeric_limits<int>::max()))
    fail<ValueError>(op, "at most {} elements per call, got {}; hint: use smaller buckets",
                     std::numeric_limits<int>::max(), n);
  return static_cast<int>(n);
}

// One MPI_Request; a collective still running when its handle dies is waited for.
class MpiPending : public PendingCollective {
 public:
  MPI_Request request = MPI_REQUEST_NULL;
  ~MpiPending() override { wait(); }
  void wait() override {
    if (request != MPI_REQUEST_NULL) MPI_Wait(&request, MPI_STATUS_IGNORE);  // sets it to MPI_REQUEST_NULL
  }
  bool test() override {
    int done = 1;
    if (request != MPI_REQUEST_NULL) MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    return done != 0;
  }
};

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator() {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    if (provided < MPI_THREAD_FUNNELED)
      fail<Error>("mpi", "the MPI library offers no thread support (MPI_THREAD_FUNNELED); attograd's thread pool "
                  "needs it");
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void broadcast(std::span<float> data, int root) override {
    if (root < 0 || root >= size_) fail<ValueError>("broadcast", "root must be a rank in [0, {}), got {}", size_, root);
    MPI_Bcast(data.data(), count_of("broadcast", data.size()), MPI_FLOAT, root, MPI_COMM_WORLD);
  }
  void allreduce_sum(std::span<float> data) override {
    MPI_Allreduce(MPI_IN_PLACE, data.data(), count_of("allreduce", data.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  void allreduce_sum(std::span<double> data) override {
    MPI_Allreduce(MPI_IN_PLACE, data.data(), count_of("allreduce", data.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  }
  void allgather(std::span<const float> in, std::span<float> out) override {
    if (out.size() != in.size() * static_cast<size_t>(size_))
      fail<ValueError>("allgather", "expected an output of {} * {} = {} elements, got {}", size_, in.size(),
                       in.size() * static_cast<size_t>(size_), out.size());
    const int n = count_of("allgather", in.size());
    MPI_Allgather(in.data(), n, MPI_FLOAT, out.data(), n, MPI_FLOAT, MPI_COMM_WORLD);
  }
  std::unique_ptr<PendingCollective> iallreduce_sum(std::span<float> data) override {
    auto p = std::make_unique<MpiPending>();
    MPI_Iallreduce(MPI_IN_PLACE, data.data(), count_of("allreduce", data.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                   &p->request);
    return p;
  }
  std::unique_ptr<PendingCollective> iallgather(std::span<const float> in, std::span<float> out) override {
    if (out.size() != in.size() * static_cast<size_t>(size_))
      fail<ValueError>("allgather", "expected an output of {} * {} = {} elements, got {}", size_, in.size(),
                       in.size() * static_cast<size_t>(size_), out.size());
    const int n = count_of("allgather", in.size());
    auto p = std::make_unique<MpiPending>();
    MPI_Iallgather(in.data(), n, MPI_FLOAT, out.data(), n, MPI_FLOAT, MPI_COMM_WORLD, &p->request);
    return p;
  }
  std::vector<std::string> allgather_bytes(const std::string& bytes) override {
    const int n = count_of("allgather_bytes", bytes.size());
    std::vector<int> counts(static_cast<size_t>(size_)), offsets(static_cast<size_t>(size_));
    MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
    size_t total = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      offsets[r] = count_of("allgather_bytes", total);
      total += static_cast<size_t>(counts[r]);
    }
    std::string all(total, '\0');
    MPI_Allgatherv(bytes.data(), n, MPI_CHAR, all.data(), counts.data(), offsets.data(), MPI_CHAR, MPI_COMM_WORLD);
    std::vector<std::string> out;
    for (size_t r = 0; r < counts.size(); ++r)
      out.push_back(all.substr(static_cast<size_t>(offsets[r]), static_cast<size_t>(counts[r])));
    return out;
  }
  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }
  void abort(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  std::string name() const override { return "MPI"; }

 private:
  int rank_ = 0, size_ = 1;
};

}  // namespace

Communicator& world() {
  static Communicator one;
  if (!launched_by_mpirun()) return one;
  static MpiCommunicator mpi;
  return mpi;
}

}  // namespace attograd::dist
