// ProcessGroup over MPI: initialisation, the environment checks, waiting with
// a timeout, and the abort path that keeps a failing rank from leaving the
// others hanging.
#include "mixgrad/distributed/process_group.hpp"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "distributed/group_state.hpp"
#include "mixgrad/error.hpp"

namespace mixgrad::distributed {

namespace detail {

namespace {

std::mutex g_world_mutex;
std::shared_ptr<GroupState> g_world;  // the group init_process_group hands out
std::terminate_handler g_previous_terminate = nullptr;
// Written when the launcher stops this rank (another rank failed): formatted
// at initialisation, as a signal handler may only write().
char g_stopped_message[160] = {};
size_t g_stopped_length = 0;
struct sigaction g_previous_sigterm = {};

// mpirun stops the other ranks of a failed job with SIGTERM: say so on each,
// then let the previous disposition act (by default, the process ends).
void on_sigterm(int sig, siginfo_t* info, void* context) {
  if (g_stopped_length) [[maybe_unused]] auto n = write(STDERR_FILENO, g_stopped_message, g_stopped_length);
  if (g_previous_sigterm.sa_flags & SA_SIGINFO) {
    if (g_previous_sigterm.sa_sigaction) g_previous_sigterm.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous_sigterm.sa_handler == SIG_IGN) return;
  if (g_previous_sigterm.sa_handler != SIG_DFL && g_previous_sigterm.sa_handler) {
    g_previous_sigterm.sa_handler(sig);
    return;
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void install_sigterm_message(int rank, int size) {
  const int n = std::snprintf(g_stopped_message, sizeof g_stopped_message,
                              "mixgrad.distributed: rank %d of %d: stopped by the launcher (SIGTERM), as another "
                              "rank failed or the job was cancelled\n",
                              rank, size);
  g_stopped_length = n > 0 ? std::min(static_cast<size_t>(n), sizeof g_stopped_message - 1) : 0;
  struct sigaction sa = {};
  sa.sa_sigaction = on_sigterm;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, &g_previous_sigterm);
}

// At exit, before MPI_Finalize: the world's communicator is freed while MPI
// still runs (its destructor would otherwise run after finalisation).
void finalize_at_exit() {
  {
    std::lock_guard lock(g_world_mutex);
    g_world.reset();
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// An exception escaping main() on one rank ends the whole job: the other
// ranks may be waiting for this one in a collective.
[[noreturn]] void terminate_job() {
  std::string what = "terminate called without an active exception";
  if (auto e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = std::string("uncaught exception: ") + ex.what();
    } catch (...) {
      what = "uncaught exception of unknown type";
    }
  }
  int rank = -1, size = 0, inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    std::fprintf(stderr, "mixgrad.distributed: rank %d of %d: %s; aborting the job\n", rank, size, what.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (g_previous_terminate) g_previous_terminate();
  std::abort();
}

// An integer environment variable, or -1 when unset.
long env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0)
    throw ValueError(std::string("init_process_group: environment variable ") + name + "=\"" + v +
                     "\" is not a non-negative integer");
  return x;
}

void check_env(const char* rank_var, const char* size_var, int rank, int size) {
  const long r = env_int(rank_var), s = env_int(size_var);
  if ((r >= 0 && r != rank) || (s >= 0 && s != size))
    throw StateError(std::string("init_process_group: the environment says ") + rank_var + "=" + std::to_string(r) +
                     " " + size_var + "=" + std::to_string(s) + " but MPI started this process as rank " +
                     std::to_string(rank) + " of " + std::to_string(size) +
                     " (start the job with mpirun -np N, or unset the variables)");
}

double timeout_from_env(double given) {
  if (given >= 0.0) return given;
  const char* v = std::getenv("MIXGRAD_DIST_TIMEOUT");
  if (!v || !*v) return 300.0;
  char* end = nullptr;
  const double t = std::strtod(v, &end);
  if (*end != '\0' || !(t >= 0.0))
    throw ValueError(std::string("init_process_group: MIXGRAD_DIST_TIMEOUT=\"") + v +
                     "\" is not a non-negative number of seconds");
  return t;
}

}  // namespace

GroupState::~GroupState() {
  nccl.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
}

void abort_job(const GroupState& g, const std::string& message, int code) {
  std::fprintf(stderr, "mixgrad.distributed: rank %d of %d: %s; aborting the job\n", g.rank, g.size, message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();
}

void wait_request(const GroupState& g, MPI_Request& request, const char* what) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  int done = 0;
  for (long polls = 0;; ++polls) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    // Spin briefly (most waits are short), then yield the core: two ranks on
    // two cores must not starve each other, or the peer this rank waits for.
    if (polls > 64) std::this_thread::sleep_for(std::chrono::microseconds(polls > 4096 ? 200 : 20));
    if (g.timeout > 0.0 && (polls & 255) == 0 &&
        std::chrono::duration<double>(Clock::now() - start).count() > g.timeout)
      abort_job(g, std::string(what) + " waited more than " + std::to_string(static_cast<int>(g.timeout)) +
                       " s for the other ranks (MIXGRAD_DIST_TIMEOUT)");
  }
}

}  // namespace detail

int ProcessGroup::rank() const { return state_->rank; }
int ProcessGroup::world_size() const { return state_->size; }
double ProcessGroup::timeout_seconds() const { return state_->timeout; }

void ProcessGroup::barrier() const {
  MPI_Request request;
  MPI_Ibarrier(state_->comm, &request);
  detail::wait_request(*state_, request, "barrier");
}

void ProcessGroup::abort(const char* message, int code) const { detail::abort_job(*state_, message, code); }

ProcessGroup init_process_group(double timeout_seconds) {
  std::lock_guard lock(detail::g_world_mutex);
  if (detail::g_world) return ProcessGroup(detail::g_world);
  const double timeout = detail::timeout_from_env(timeout_seconds);
  int inited = 0, finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) throw StateError("init_process_group: MPI was already finalised");
  MPI_Initialized(&inited);
  if (!inited) {
    // MULTIPLE: the gradient reducer's progress thread calls MPI while the
    // main thread computes (OpenMP's threads never communicate). An MPI
    // that provides less runs the reducer without that thread.
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    std::atexit(detail::finalize_at_exit);
  }
  auto g = std::make_shared<detail::GroupState>();
  MPI_Comm_dup(MPI_COMM_WORLD, &g->comm);
  MPI_Comm_rank(g->comm, &g->rank);
  MPI_Comm_size(g->comm, &g->size);
  g->timeout = timeout;
  detail::check_env("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", g->rank, g->size);
  detail::check_env("RANK", "WORLD_SIZE", g->rank, g->size);
  if (detail::g_previous_terminate == nullptr) detail::g_previous_terminate = std::set_terminate(detail::terminate_job);
  if (g->size > 1) detail::install_sigterm_message(g->rank, g->size);
  detail::g_world = g;
  return ProcessGroup(std::move(g));
}

}  // namespace mixgrad::distributed
