// Collectives on CPU tensors through MPI's non-blocking calls; CUDA tensors
// go to nccl.cpp. float16 / bfloat16 travel as float32 (see the header).
#include "mixgrad/distributed/collectives.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>

#include "distributed/group_state.hpp"
#include "distributed/nccl.hpp"
#include "distributed/reduce_scatter_work.hpp"
#include "mixgrad/error.hpp"
#include "mixgrad/half.hpp"
#include "mixgrad/ops/creation.hpp"
#include "core/checks.hpp"

namespace mixgrad::distributed {

struct Work::Impl {
  std::shared_ptr<detail::GroupState> group;
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<MPI_Request> messages;  // the point-to-point sends and receives of reduce_scatter_async
  const char* what = "all_reduce";
  std::function<void()> on_complete;  // copy back from staging, divide for mean
  bool done = false;

  void finish() {
    if (done) return;
    if (request != MPI_REQUEST_NULL) detail::wait_request(*group, request, what);
    for (MPI_Request& m : messages)
      if (m != MPI_REQUEST_NULL) detail::wait_request(*group, m, what);
    done = true;
    if (on_complete) on_complete();
  }
  bool test() {
    if (done) return true;
    int flag = 1;
    if (request != MPI_REQUEST_NULL) MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
    if (flag && !messages.empty())
      MPI_Testall(static_cast<int>(messages.size()), messages.data(), &flag, MPI_STATUSES_IGNORE);
    if (!flag) return false;
    finish();
    return true;
  }
};

Work::Work() = default;
Work::Work(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Work::Work(Work&&) noexcept = default;
Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    if (impl_) impl_->finish();
    impl_ = std::move(other.impl_);
  }
  return *this;
}
Work::~Work() {
  if (impl_) impl_->finish();
}
void Work::wait() {
  if (impl_) impl_->finish();
}
bool Work::test() { return !impl_ || impl_->test(); }

ReduceOp parse_reduce_op(const std::string& op) {
  if (op == "sum") return ReduceOp::sum;
  if (op == "mean") return ReduceOp::mean;
  if (op == "max") return ReduceOp::max;
  throw ValueError("distributed: unknown reduction \"" + op + "\" (expected \"sum\", \"mean\" or \"max\")");
}

namespace {

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::mean: return "mean";
    case ReduceOp::max: return "max";
  }
  return "?";
}

void check_tensor(const char* fn, const Tensor& t) {
  if (!t.defined()) throw ValueError(std::string("distributed::") + fn + ": undefined tensor");
  if (!t.is_contiguous())
    throw ValueError(std::string("distributed::") + fn + ": " + core::describe(t) +
                     " is not contiguous (collectives write the tensor's memory in place)");
  if (t.numel() * element_size(t.dtype()) > INT_MAX)
    throw ValueError(std::string("distributed::") + fn + ": " + core::describe(t) +
                     " is larger than 2 GiB, the most one MPI call takes");
}

void check_op(const Tensor& t, ReduceOp op) {
  const DType d = t.dtype();
  const bool ok = is_floating_point(d) || (is_integral(d) && op != ReduceOp::mean) ||
                  (d == DType::bool_ && op == ReduceOp::max);
  if (!ok)
    throw DTypeError(std::string("distributed::all_reduce: ") + op_name(op) + " of " + core::describe(t) +
                     " is not defined (integers take sum and max, bool takes max)");
}

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::float32: return MPI_FLOAT;
    case DType::float64: return MPI_DOUBLE;
    case DType::int32: return MPI_INT32_T;
    case DType::int64: return MPI_INT64_T;
    case DType::bool_: return MPI_UINT8_T;
    case DType::int8: return MPI_INT8_T;  // sums wrap modulo 256, as in PyTorch
    case DType::uint8: return MPI_UINT8_T;
    default: return MPI_FLOAT;  // float16 / bfloat16 are staged as float32
  }
}

template <class T>
void divide(void* p, int64_t n, double by) {
  T* x = static_cast<T*>(p);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(x[i] / by);
}

using half_t = half;
constexpr int kScatterTag = 0x6d72;  // reduce_scatter_async's messages

// Where rank r's block of a reduce_scatter_async arrives on rank `me`: the
// first other rank's in `out` itself when it has out's type (float32,
// float64), the others end to end in the inbox.
int64_t inbox_slot(int r, int me, bool first_in_out) {
  const int64_t k = r < me ? r : r - 1;  // among the other ranks
  return first_in_out ? k - 1 : k;       // -1: in out
}

// out[i] = (the sum over ranks of rank r's block's element i) / by, rounded
// once to O: this rank's block is `own`, the others' as inbox_slot says (n
// elements of T each). The sum pairs the ranks as recursive doubling does
// ((r0 + r1) + (r2 + r3), then + r4 ...), the order of Open MPI's
// all-reduce on these sizes, so the sharded gradients keep plain data
// parallel's bits, which Adam needs where a gradient is near zero.
template <class T, class O>
void sum_blocks(const char* own, const char* inbox, void* out, int64_t n, int world, int me, double by) {
  constexpr bool first_in_out = std::is_same_v<T, O>;
  const T* mine = reinterpret_cast<const T*>(own);
  const T* b = reinterpret_cast<const T*>(inbox);
  O* o = static_cast<O*>(out);
  const auto block = [&](int r, int64_t i) -> T {
    if (r == me) return mine[i];
    const int64_t k = inbox_slot(r, me, first_in_out);
    if constexpr (first_in_out)
      if (k < 0) return o[i];
    return b[k * n + i];
  };
  std::vector<T> v(static_cast<size_t>(world));
  for (int64_t i = 0; i < n; ++i) {
    for (int r = 0; r < world; ++r) v[r] = block(r, i);
    for (int step = 1; step < world; step *= 2)
      for (int r = 0; r + step < world; r += 2 * step) v[r] += v[r + step];
    o[i] = O(static_cast<T>(by == 1.0 ? v[0] : v[0] / by));
  }
}

template <class H>
std::shared_ptr<std::vector<float>> stage(const Tensor& t) {
  const H* x = static_cast<const H*>(t.raw_data());
  auto s = std::make_shared<std::vector<float>>(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) (*s)[i] = static_cast<float>(x[i]);
  return s;
}

template <class H>
void unstage(const std::vector<float>& s, void* dst, double by) {
  H* x = static_cast<H*>(dst);
  for (size_t i = 0; i < s.size(); ++i) x[i] = H(static_cast<float>(by == 1.0 ? s[i] : s[i] / by));
}

}  // namespace

Work all_reduce_async(const ProcessGroup& group, const Tensor& tensor, ReduceOp op) {
  check_tensor("all_reduce", tensor);
  check_op(tensor, op);
  if (tensor.device().is_cuda()) return detail::nccl_all_reduce(group, tensor, op);
  const auto& g = group.state();
  auto impl = std::make_unique<Work::Impl>();
  impl->group = g;
  const int64_t n = tensor.numel();
  if (g->size == 1 || n == 0) return Work(std::move(impl));  // already the sum, mean and max of one rank
  const MPI_Op mop = op == ReduceOp::max ? MPI_MAX : MPI_SUM;
  const double by = op == ReduceOp::mean ? static_cast<double>(g->size) : 1.0;
  void* data = tensor.raw_data();
  const DType d = tensor.dtype();
  if (d == DType::float16 || d == DType::bfloat16) {
    auto s = d == DType::float16 ? stage<half>(tensor) : stage<bfloat16>(tensor);
    MPI_Iallreduce(MPI_IN_PLACE, s->data(), static_cast<int>(n), MPI_FLOAT, mop, g->comm, &impl->request);
    impl->on_complete = [s, data, d, by] {
      if (d == DType::float16)
        unstage<half>(*s, data, by);
      else
        unstage<bfloat16>(*s, data, by);
    };
  } else {
    MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), mpi_type(d), mop, g->comm, &impl->request);
    if (by != 1.0)
      impl->on_complete = [data, n, d, by] {
        if (d == DType::float32)
          divide<float>(data, n, by);
        else
          divide<double>(data, n, by);
      };
  }
  tensor.bump_version();
  return Work(std::move(impl));
}

namespace detail {

Work reduce_scatter_async(const ProcessGroup& group, const Tensor& send, const Tensor& recv,
                          const std::vector<int>& counts, ReduceOp op) {
  check_tensor("reduce_scatter", send);
  check_tensor("reduce_scatter", recv);
  check_op(send, op);
  const auto& g = group.state();
  int64_t offset = 0;
  for (int r = 0; r < g->rank; ++r) offset += counts[r];
  const int64_t n = counts[g->rank];
  const DType d = send.dtype();
  if (send.device().is_cuda()) {
    Work work = nccl_all_reduce(group, send, op);
    const int64_t es = element_size(d);
    copy_bytes(send.device(), recv.raw_data(), static_cast<const char*>(send.raw_data()) + offset * es,
               static_cast<size_t>(n * es));
    return work;
  }
  if (!is_floating_point(d) || op == ReduceOp::max)
    throw DTypeError(std::string("distributed::reduce_scatter: rank ")
                         .append(std::to_string(g->rank))
                         .append(": takes sum and mean of floating tensors, got ")
                         .append(core::describe(send)));
  // A direct exchange: rank r sends every other rank its block and sums
  // the blocks it receives, in rank order. (Open MPI's MPI_Ireduce_scatter
  // reduces the whole buffer at rank 0 first, which then holds a bucket
  // more than the others while it runs.)
  auto impl = std::make_unique<Work::Impl>();
  impl->group = g;
  impl->what = "reduce_scatter";
  const bool wide = d == DType::float16 || d == DType::bfloat16;  // travels as float32
  auto staged = wide ? (d == DType::float16 ? stage<half_t>(send) : stage<bfloat16>(send)) : nullptr;
  const MPI_Datatype type = wide ? MPI_FLOAT : mpi_type(d);
  const int64_t es = wide ? int64_t{4} : element_size(d);
  const char* base = wide ? reinterpret_cast<const char*>(staged->data()) : static_cast<const char*>(send.raw_data());
  const int world = g->size, me = g->rank;
  const bool first_in_out = !wide;  // the first other rank's block arrives in recv itself
  auto inbox = std::make_shared<std::vector<char>>(
      static_cast<size_t>(n * es * std::max(0, world - 1 - (first_in_out ? 1 : 0))));
  void* out = recv.raw_data();
  int64_t at = 0;
  for (int r = 0; r < world; at += counts[r], ++r) {
    if (r == me) continue;
    MPI_Request m;
    if (counts[r] > 0) {
      MPI_Isend(base + at * es, counts[r], type, r, kScatterTag, g->comm, &m);
      impl->messages.push_back(m);
    }
    if (n > 0) {
      const int64_t k = inbox_slot(r, me, first_in_out);
      MPI_Irecv(k < 0 ? out : inbox->data() + k * n * es, static_cast<int>(n), type, r, kScatterTag, g->comm, &m);
      impl->messages.push_back(m);
    }
  }
  const double by = op == ReduceOp::mean ? static_cast<double>(world) : 1.0;
  const char* own = base + offset * es;
  impl->on_complete = [send, staged, inbox, own, out, n, d, by, world, me] {
    const char* in = inbox->data();
    if (d == DType::float64) return sum_blocks<double, double>(own, in, out, n, world, me, by);
    if (d == DType::float32) return sum_blocks<float, float>(own, in, out, n, world, me, by);
    if (d == DType::float16) return sum_blocks<float, half_t>(own, in, out, n, world, me, by);
    sum_blocks<float, bfloat16>(own, in, out, n, world, me, by);
  };
  recv.bump_version();
  return Work(std::move(impl));
}

}  // namespace detail

void all_reduce(const ProcessGroup& group, const Tensor& tensor, ReduceOp op) {
  all_reduce_async(group, tensor, op).wait();
}

void broadcast(const ProcessGroup& group, const Tensor& tensor, int root) {
  check_tensor("broadcast", tensor);
  const auto& g = group.state();
  if (root < 0 || root >= g->size)
    throw ValueError("distributed::broadcast: root " + std::to_string(root) + " is not a rank of a group of " +
                     std::to_string(g->size));
  if (tensor.device().is_cuda()) return detail::nccl_broadcast(group, tensor, root);
  if (g->size == 1 || tensor.numel() == 0) return;
  MPI_Request request;
  MPI_Ibcast(tensor.raw_data(), static_cast<int>(tensor.numel() * element_size(tensor.dtype())), MPI_BYTE, root,
             g->comm, &request);
  detail::wait_request(*g, request, "broadcast");
  tensor.bump_version();
}

Tensor all_gather(const ProcessGroup& group, const Tensor& tensor) {
  check_tensor("all_gather", tensor);
  const auto& g = group.state();
  std::vector<int64_t> dims{g->size};
  for (int i = 0; i < tensor.ndim(); ++i) dims.push_back(tensor.size(i));
  Tensor out = empty(Shape(dims), tensor.dtype(), tensor.device());
  if (tensor.device().is_cuda()) {
    detail::nccl_all_gather(group, tensor, out);
    return out;
  }
  const int64_t bytes = tensor.numel() * element_size(tensor.dtype());
  if (bytes * g->size > INT_MAX)
    throw ValueError("distributed::all_gather: " + std::to_string(g->size) + " x " + core::describe(tensor) +
                     " is larger than 2 GiB, the most one MPI call takes");
  if (bytes == 0) return out;
  MPI_Request request;
  MPI_Iallgather(tensor.raw_data(), static_cast<int>(bytes), MPI_BYTE, out.raw_data(), static_cast<int>(bytes),
                 MPI_BYTE, g->comm, &request);
  detail::wait_request(*g, request, "all_gather");
  return out;
}

void barrier(const ProcessGroup& group) { group.barrier(); }

}  // namespace mixgrad::distributed
