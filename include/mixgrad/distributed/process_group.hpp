// mixgrad/distributed/process_group.hpp — the processes of a data-parallel job.
//
// A ProcessGroup is the set of processes (ranks) that train one model
// together: every rank holds a replica, sees its own share of the data, and
// the ranks agree on gradients through collectives (collectives.hpp). The
// transport is MPI (Open MPI) for CPU tensors and NCCL, bootstrapped over
// MPI, for CUDA tensors; mixgrad carries no transport of its own.
//
//   // mpirun -np 2 ./train
//   auto group = mg::distributed::init_process_group();
//   group.rank();          // 0 or 1
//   group.world_size();    // 2
//   group.barrier();
//
// Initialisation. init_process_group() initialises MPI on first use (and
// finalises it at exit), or adopts an MPI the program already initialised.
// Under `mpirun -np N` the group has the N processes; a program started
// without mpirun is a group of one (MPI's singleton start), so the same
// binary trains alone. The launch is described by the environment, which is
// checked rather than trusted:
//   - OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE (set by Open MPI's mpirun)
//     or the generic RANK / WORLD_SIZE (torchrun's names, e.g. set by a
//     scheduler that starts MPI itself): when set, they must agree with
//     MPI's view, else StateError (a launch mistake such as N copies of a
//     singleton would otherwise train N unrelated models silently).
//   - MIXGRAD_DIST_TIMEOUT: seconds a collective may wait for the other
//     ranks before the job is aborted (default 300; 0 waits for ever).
// There is no TCP rendezvous of mixgrad's own: processes find each other
// through MPI's launcher (mpirun, or a hostfile for several machines).
//
// Failure. Collectives wait with a timeout, and an exception that escapes
// main() on any rank (std::terminate) aborts the whole job with
// MPI_Abort after printing "mixgrad.distributed: rank R of W: ..." with the
// error, so a rank that fails never leaves the others hanging in a
// collective: mpirun stops every rank and exits non-zero. In a group of
// several ranks, a rank the launcher stops that way (SIGTERM) prints
// "mixgrad.distributed: rank R of W: stopped by the launcher (SIGTERM) ..."
// before the signal's previous disposition acts, so every rank's output
// says why it ended.
#pragma once

#include <memory>

namespace mixgrad::distributed {

namespace detail {
struct GroupState;
}

class ProcessGroup {
 public:
  /// This process's index in [0, world_size()).
  int rank() const;
  /// The number of processes.
  int world_size() const;
  /// Seconds a collective waits before the job is aborted (0: for ever).
  double timeout_seconds() const;
  /// Blocks until every rank has called barrier() (with the timeout).
  void barrier() const;
  /// Stops every rank of the job (MPI_Abort) after printing `message` with
  /// this rank's number to stderr. Does not return.
  [[noreturn]] void abort(const char* message, int code = 1) const;

  /// The shared implementation (MPI communicator, NCCL communicator).
  const std::shared_ptr<detail::GroupState>& state() const { return state_; }

 private:
  friend ProcessGroup init_process_group(double);
  explicit ProcessGroup(std::shared_ptr<detail::GroupState> s) : state_(std::move(s)) {}
  std::shared_ptr<detail::GroupState> state_;
};

/// The group of every process of the job (MPI_COMM_WORLD, duplicated so that
/// mixgrad's messages never mix with the program's own MPI traffic).
/// Initialises MPI if needed. `timeout_seconds` < 0 takes
/// MIXGRAD_DIST_TIMEOUT (default 300). Each call returns a handle to the same
/// group. Throws StateError when the environment disagrees with MPI (see the
/// overview) and ValueError for a malformed MIXGRAD_DIST_TIMEOUT.
ProcessGroup init_process_group(double timeout_seconds = -1.0);

}  // namespace mixgrad::distributed
