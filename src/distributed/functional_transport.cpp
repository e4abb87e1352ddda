// The data movement of distributed::functional. CPU tensors: one MPI call
// each (float16 / bfloat16 reductions travel as float32 and are rounded
// once). CUDA tensors: the group's NCCL all_reduce, broadcast and all_gather
// (collectives.hpp) with device ops around them; point-to-point messages
// stage them through host memory.
#include "distributed/functional_transport.hpp"

#include <climits>
#include <string>
#include <vector>

#include "core/checks.hpp"
#include "distributed/group_state.hpp"
#include "mixgrad/distributed/collectives.hpp"
#include "mixgrad/error.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/shape_ops.hpp"

namespace mixgrad::distributed::detail {

namespace {

int mpi_count(int64_t n, const char* what, const Tensor& t) {
  if (n > INT_MAX)
    throw ValueError(std::string("distributed::functional::") + what + ": " + core::describe(t) +
                     " is larger than one MPI call takes (2^31 - 1 elements or bytes)");
  return static_cast<int>(n);
}

int64_t nbytes(const Tensor& t) { return t.numel() * element_size(t.dtype()); }

MPI_Datatype reduce_type(DType d) {
  switch (d) {
    case DType::float64: return MPI_DOUBLE;
    case DType::int32: return MPI_INT32_T;
    case DType::int64: return MPI_INT64_T;
    case DType::int8: return MPI_INT8_T;
    case DType::uint8:
    case DType::bool_: return MPI_UINT8_T;  // max: or, min: and
    default: return MPI_FLOAT;              // float32, and float16 / bfloat16 staged as float32
  }
}

MPI_Op mpi_op(Reduction op) { return op == Reduction::sum ? MPI_SUM : op == Reduction::max ? MPI_MAX : MPI_MIN; }

bool staged(DType d) { return d == DType::float16 || d == DType::bfloat16; }

// What travels for a reduction: float32 for the 16-bit floats, else x.
Tensor wire(const Tensor& x) { return staged(x.dtype()) ? x.to(DType::float32) : x.contiguous(); }
Tensor unwire(const Tensor& w, DType d) { return w.dtype() == d ? w : w.to(d); }

Shape tail(const Shape& s) {
  std::vector<int64_t> dims(s.begin() + 1, s.end());
  return Shape(dims);
}

Shape stacked(int world, const Shape& s) {
  std::vector<int64_t> dims{world};
  dims.insert(dims.end(), s.begin(), s.end());
  return Shape(dims);
}

void wait(const ProcessGroup& group, MPI_Request& request, const char* what) {
  wait_request(*group.state(), request, what);
}

// Block `rank` of a [W, ...] tensor, contiguous.
Tensor block(const Tensor& blocks, int rank) { return F::squeeze(F::narrow(blocks, 0, rank, 1), 0).contiguous(); }

// An order-reversing involution, exact in every dtype: min(x) = r(max(r(x))).
Tensor reversed(const Tensor& x) {
  if (is_floating_point(x.dtype())) return F::neg(x);
  if (x.dtype() == DType::bool_) return F::eq(x, zeros_like(x));
  // ~x, which never overflows: -1 - x, or 255 - x for uint8.
  return F::sub(full_like(x, x.dtype() == DType::uint8 ? 255.0 : -1.0), x);
}

}  // namespace

Tensor all_reduce_copy(const ProcessGroup& group, const Tensor& x, Reduction op) {
  if (x.device().is_cuda()) {
    if (op == Reduction::min) return reversed(all_reduce_copy(group, reversed(x), Reduction::max));
    Tensor out = x.clone();
    all_reduce(group, out, op == Reduction::sum ? ReduceOp::sum : ReduceOp::max);
    return out;
  }
  Tensor w = wire(x);
  if (w.raw_data() == x.raw_data()) w = x.clone();  // out of place
  const int n = mpi_count(w.numel(), "all_reduce", x);
  if (n > 0) {
    MPI_Request request;
    MPI_Iallreduce(MPI_IN_PLACE, w.raw_data(), n, reduce_type(w.dtype()), mpi_op(op), group.state()->comm, &request);
    wait(group, request, "all_reduce");
  }
  return unwire(w, x.dtype());
}

Tensor all_gather_copy(const ProcessGroup& group, const Tensor& x) { return all_gather(group, x.contiguous()); }

Tensor reduce_scatter_copy(const ProcessGroup& group, const Tensor& blocks) {
  if (blocks.device().is_cuda()) {
    Tensor sum = blocks.clone();
    all_reduce(group, sum, ReduceOp::sum);
    return block(sum, group.rank());
  }
  const Tensor w = wire(blocks);
  Tensor out = empty(tail(w.shape()), w.dtype());
  const int n = mpi_count(out.numel(), "reduce_scatter_sum", blocks);
  if (n > 0) {
    MPI_Request request;
    MPI_Ireduce_scatter_block(w.raw_data(), out.raw_data(), n, reduce_type(w.dtype()), MPI_SUM,
                              group.state()->comm, &request);
    wait(group, request, "reduce_scatter_sum");
  }
  return unwire(out, blocks.dtype());
}

Tensor broadcast_copy(const ProcessGroup& group, const Tensor& x, int root) {
  Tensor out = x.clone();
  broadcast(group, out, root);
  return out;
}

Tensor reduce_copy(const ProcessGroup& group, const Tensor& x, int root) {
  const bool is_root = group.rank() == root;
  if (x.device().is_cuda()) {
    Tensor sum = x.clone();
    all_reduce(group, sum, ReduceOp::sum);
    return is_root ? sum : Tensor();
  }
  const Tensor w = wire(x);
  Tensor out = is_root ? empty(w.shape(), w.dtype()) : Tensor();
  const int n = mpi_count(w.numel(), "reduce_sum", x);
  if (n > 0) {
    MPI_Request request;
    MPI_Ireduce(w.raw_data(), is_root ? out.raw_data() : nullptr, n, reduce_type(w.dtype()), MPI_SUM, root,
                group.state()->comm, &request);
    wait(group, request, "reduce_sum");
  }
  return is_root ? unwire(out, x.dtype()) : Tensor();
}

Tensor gather_copy(const ProcessGroup& group, const Tensor& x, int root) {
  const bool is_root = group.rank() == root;
  if (x.device().is_cuda()) {
    Tensor all = all_gather(group, x.contiguous());
    return is_root ? all : Tensor();
  }
  const Tensor c = x.contiguous();
  Tensor out = is_root ? empty(stacked(group.world_size(), c.shape()), c.dtype()) : Tensor();
  const int n = mpi_count(nbytes(c) * group.world_size(), "gather", x);
  if (n > 0) {
    MPI_Request request;
    MPI_Igather(c.raw_data(), n / group.world_size(), MPI_BYTE, is_root ? out.raw_data() : nullptr,
                n / group.world_size(), MPI_BYTE, root, group.state()->comm, &request);
    wait(group, request, "gather");
  }
  return out;
}

Tensor scatter_copy(const ProcessGroup& group, const Tensor& blocks, int root) {
  if (blocks.device().is_cuda()) return block(broadcast_copy(group, blocks, root), group.rank());
  const Tensor c = blocks.contiguous();
  Tensor out = empty(tail(c.shape()), c.dtype());
  const int n = mpi_count(nbytes(c), "scatter", blocks);
  if (n > 0) {
    MPI_Request request;
    MPI_Iscatter(c.raw_data(), n / group.world_size(), MPI_BYTE, out.raw_data(), n / group.world_size(), MPI_BYTE,
                 root, group.state()->comm, &request);
    wait(group, request, "scatter");
  }
  return out;
}

Tensor all_to_all_copy(const ProcessGroup& group, const Tensor& blocks) {
  if (blocks.device().is_cuda()) {  // [W_from, W_to, ...]: keep the blocks addressed to this rank
    Tensor all = all_gather(group, blocks.contiguous());
    return F::reshape(F::narrow(all, 1, group.rank(), 1).contiguous(), blocks.shape());
  }
  const Tensor c = blocks.contiguous();
  Tensor out = empty(c.shape(), c.dtype());
  const int n = mpi_count(nbytes(c), "all_to_all", blocks);
  if (n > 0) {
    MPI_Request request;
    MPI_Ialltoall(c.raw_data(), n / group.world_size(), MPI_BYTE, out.raw_data(), n / group.world_size(), MPI_BYTE,
                  group.state()->comm, &request);
    wait(group, request, "all_to_all");
  }
  return out;
}

void send_bytes(const ProcessGroup& group, const void* data, size_t bytes, int dest, Tag tag, const char* what) {
  if (bytes > static_cast<size_t>(INT_MAX))
    throw ValueError(std::string("distributed::functional::") + what + ": " + std::to_string(bytes) +
                     " bytes are more than one MPI call takes (2^31 - 1)");
  MPI_Request request;
  MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, dest, static_cast<int>(tag), group.state()->comm, &request);
  wait(group, request, what);
}

void recv_bytes(const ProcessGroup& group, void* data, size_t bytes, int src, Tag tag, const char* what) {
  if (bytes > static_cast<size_t>(INT_MAX))
    throw ValueError(std::string("distributed::functional::") + what + ": " + std::to_string(bytes) +
                     " bytes are more than one MPI call takes (2^31 - 1)");
  MPI_Request request;
  MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, src, static_cast<int>(tag), group.state()->comm, &request);
  wait(group, request, what);
}

void send_tensor(const ProcessGroup& group, const Tensor& x, int dest, Tag tag, const char* what) {
  const Tensor host = x.to(Device::cpu()).contiguous();
  send_bytes(group, host.raw_data(), static_cast<size_t>(nbytes(host)), dest, tag, what);
}

Tensor recv_tensor(const ProcessGroup& group, const Shape& shape, DType dtype, Device device, int src, Tag tag,
                   const char* what) {
  Tensor host = empty(shape, dtype);
  recv_bytes(group, host.raw_data(), static_cast<size_t>(nbytes(host)), src, tag, what);
  return device.is_cpu() ? host : host.to(device);
}

}  // namespace mixgrad::distributed::detail
