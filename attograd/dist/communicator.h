// The processes of a data-parallel run and the collectives the trainer needs.
// The base class is the world of one process: every collective leaves its
// data as it is, so a program runs the same code path with or without MPI.
// Under mpirun (and with ATTOGRAD_MPI on) world() is the MPI world instead
// (attograd/dist/mpi_communicator.cpp); then each call is one MPI collective, made
// from the main thread only.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace attograd::dist {

// A collective started by one of Communicator's i* calls: its buffers must
// stay alive and untouched until wait() has returned.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  // Returns once the collective is complete.
  virtual void wait() {}
  // Whether it is complete; lets MPI progress it (OpenMPI moves a non-blocking
  // collective on only inside MPI calls).
  virtual bool test() { return true; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const { return 0; }
  virtual int size() const { return 1; }
  // data takes root's values on every rank.
  virtual void broadcast(std::span<float> data, int root);
  // data becomes the element-wise sum over ranks, in the order MPI chooses.
  virtual void allreduce_sum(std::span<float> data);
  virtual void allreduce_sum(std::span<double> data);
  // out [size * in.size()]: rank r's `in` at out[r * in.size()], on every rank.
  virtual void allgather(std::span<const float> in, std::span<float> out);
  // allreduce_sum and allgather started without waiting (MPI_Iallreduce,
  // MPI_Iallgather); every rank must start the same collectives in the same
  // order. This base class runs the blocking call and returns it complete.
  virtual std::unique_ptr<PendingCollective> iallreduce_sum(std::span<float> data);
  virtual std::unique_ptr<PendingCollective> iallgather(std::span<const float> in, std::span<float> out);
  // Every rank's bytes, in rank order, on every rank.
  virtual std::vector<std::string> allgather_bytes(const std::string& bytes);
  virtual void barrier() {}
  // Ends every process of the job with `code` (MPI_Abort); the world of one
  // has no other process to end and returns, leaving the exit to the caller.
  virtual void abort(int code);
  virtual std::string name() const { return "single process"; }
};

// True when this process was started by mpirun (OpenMPI's or a PMI launcher's
// environment variables are set).
bool launched_by_mpirun();

// This process's world: MPI's when launched by mpirun in a build with MPI
// (initialized on the first call; finalized at exit), else the world of one.
// Launched by mpirun in a build without MPI (CMake option ATTOGRAD_MPI off),
// where each process would train alone, it throws a ValueError saying so.
Communicator& world();

}  // namespace attograd::dist
