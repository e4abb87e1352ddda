// The agreement check: one MPI_Allgather of a fixed-size description per
// collective, then the same checks on every rank, in a fixed order, each
// naming the first rank that differs from rank 0.
#include "distributed/functional_check.hpp"

#include <array>
#include <string>
#include <vector>

#include "distributed/group_state.hpp"
#include "mixgrad/error.hpp"

namespace mixgrad::distributed::detail {

namespace {

// One rank's description: op, defined, dtype, device type, root, axis,
// axis2, ndim, then the extents.
constexpr int kFirstDim = 8, kSlots = kFirstDim + Shape::kMaxDims;
using Description = std::array<int64_t, kSlots>;
enum Slot { kOp, kDefined, kDType, kDevice, kRoot, kAxis, kAxis2, kNdim };

Description describe_call(const Call& call, const Tensor& x) {
  Description d{};
  d[kOp] = static_cast<int64_t>(call.op);
  d[kDefined] = x.defined();
  d[kRoot] = call.root;
  d[kAxis] = call.axis;
  d[kAxis2] = call.axis2;
  if (!x.defined()) return d;
  d[kDType] = static_cast<int64_t>(x.dtype());
  d[kDevice] = static_cast<int64_t>(x.device().type());
  d[kNdim] = x.ndim();
  for (int i = 0; i < x.ndim(); ++i) d[kFirstDim + i] = x.size(i);
  return d;
}

Shape shape_of(const Description& d) {
  std::vector<int64_t> dims(d.begin() + kFirstDim, d.begin() + kFirstDim + d[kNdim]);
  return Shape(dims);
}

std::string tensor_of(const Description& d) {
  return std::string(to_string(static_cast<DType>(d[kDType]))) + to_string(shape_of(d));
}

std::string device_of(const Description& d) {
  return static_cast<DeviceType>(d[kDevice]) == DeviceType::cuda ? "cuda" : "cpu";
}

struct Table {
  Collective op;
  std::vector<Description> rows;  // one per rank
  std::string where() const { return std::string("distributed::functional::") + name_of(op) + ": "; }
  std::string rank_vs_0(size_t r, const std::string& mine, const std::string& first) const {
    return "rank " + std::to_string(r) + " passed " + mine + ", rank 0 " + first;
  }
};

// The first rank whose slots in [from, to) differ from rank 0's, or 0.
size_t first_differing(const Table& t, int from, int to) {
  for (size_t r = 1; r < t.rows.size(); ++r)
    for (int s = from; s < to; ++s)
      if (t.rows[r][s] != t.rows[0][s]) return r;
  return 0;
}

void check_same_call(const Table& t) {
  for (size_t r = 0; r < t.rows.size(); ++r) {
    const auto op = static_cast<Collective>(t.rows[r][kOp]);
    if (op != t.op)
      throw StateError(t.where() + "rank " + std::to_string(r) + " called " + name_of(op) +
                       " (every rank calls the same collectives in the same order)");
    if (!t.rows[r][kDefined]) throw ValueError(t.where() + "rank " + std::to_string(r) + " passed an undefined tensor");
  }
  const auto& first = t.rows[0];
  if (size_t r = first_differing(t, kDType, kDType + 1))
    throw DTypeError(t.where() + t.rank_vs_0(r, tensor_of(t.rows[r]), tensor_of(first)) +
                     " (every rank passes the same dtype)");
  if (size_t r = first_differing(t, kDevice, kDevice + 1))
    throw DeviceError(t.where() + "rank " + std::to_string(r) + " passed " + tensor_of(t.rows[r]) + " on " +
                      device_of(t.rows[r]) + ", rank 0 on " + device_of(first) +
                      " (every rank passes the same device type)");
  if (size_t r = first_differing(t, kNdim, kSlots))
    throw ShapeError(t.where() + t.rank_vs_0(r, tensor_of(t.rows[r]), tensor_of(first)) +
                     " (every rank passes the same shape)");
  if (size_t r = first_differing(t, kRoot, kAxis2 + 1))
    throw ValueError(t.where() + "rank " + std::to_string(r) + " passed root " + std::to_string(t.rows[r][kRoot]) +
                     " and axes " + std::to_string(t.rows[r][kAxis]) + ", " + std::to_string(t.rows[r][kAxis2]) +
                     ", rank 0 root " + std::to_string(first[kRoot]) + " and axes " + std::to_string(first[kAxis]) +
                     ", " + std::to_string(first[kAxis2]) + " (every rank passes the same)");
}

bool has_root(Collective op) {
  return op == Collective::broadcast || op == Collective::reduce_sum || op == Collective::gather ||
         op == Collective::scatter;
}
bool has_axis(Collective op) {
  return op == Collective::all_gather || op == Collective::reduce_scatter_sum || op == Collective::gather ||
         op == Collective::scatter || op == Collective::all_to_all;
}
bool splits(Collective op) {
  return op == Collective::reduce_scatter_sum || op == Collective::scatter || op == Collective::all_to_all;
}
bool sums(Collective op) {
  return op == Collective::all_reduce_sum || op == Collective::reduce_scatter_sum || op == Collective::reduce_sum;
}
bool reduces(Collective op) { return sums(op) || op == Collective::all_reduce_max || op == Collective::all_reduce_min; }

int checked_axis(const Table& t, int64_t axis, const char* which) {
  const auto& d = t.rows[0];
  const int64_t ndim = d[kNdim];
  if (axis < -ndim || axis >= ndim || ndim == 0)
    throw ShapeError(t.where() + which + " " + std::to_string(axis) + " is out of range for " + tensor_of(d));
  return static_cast<int>(axis < 0 ? axis + ndim : axis);
}

Agreed check_call(const Table& t) {
  const auto& d = t.rows[0];
  const int64_t world = static_cast<int64_t>(t.rows.size());
  const auto dtype = static_cast<DType>(d[kDType]);
  if (reduces(t.op) && !is_floating_point(dtype) && !is_integral(dtype) && (sums(t.op) || dtype != DType::bool_))
    throw DTypeError(t.where() + "cannot reduce " + tensor_of(d) + " (floating and integer tensors sum, max and min; " +
                     "bool takes max and min)");
  if (has_root(t.op) && (d[kRoot] < 0 || d[kRoot] >= world))
    throw ValueError(t.where() + "root " + std::to_string(d[kRoot]) + " is not a rank of a group of " +
                     std::to_string(world) + " (x: " + tensor_of(d) + ")");
  Agreed a;
  if (!has_axis(t.op)) return a;
  a.axis = checked_axis(t, d[kAxis], t.op == Collective::all_to_all ? "split_axis" : "axis");
  if (t.op == Collective::all_to_all) a.axis2 = checked_axis(t, d[kAxis2], "concat_axis");
  if (splits(t.op) && d[kFirstDim + a.axis] % world != 0)
    throw ShapeError(t.where() + tensor_of(d) + " has extent " + std::to_string(d[kFirstDim + a.axis]) + " on axis " +
                     std::to_string(a.axis) + ", which does not split into " + std::to_string(world) +
                     " equal blocks, one per rank");
  return a;
}

}  // namespace

const char* name_of(Collective op) {
  switch (op) {
    case Collective::all_reduce_sum: return "all_reduce_sum";
    case Collective::all_reduce_max: return "all_reduce_max";
    case Collective::all_reduce_min: return "all_reduce_min";
    case Collective::all_gather: return "all_gather";
    case Collective::reduce_scatter_sum: return "reduce_scatter_sum";
    case Collective::broadcast: return "broadcast";
    case Collective::reduce_sum: return "reduce_sum";
    case Collective::gather: return "gather";
    case Collective::scatter: return "scatter";
    case Collective::all_to_all: return "all_to_all";
  }
  return "an unknown collective";
}

Agreed agree(const ProcessGroup& group, const Call& call, const Tensor& x) {
  const Description mine = describe_call(call, x);
  Table t{call.op, std::vector<Description>(static_cast<size_t>(group.world_size()))};
  MPI_Request request;
  MPI_Iallgather(mine.data(), kSlots, MPI_INT64_T, t.rows.data(), kSlots, MPI_INT64_T, group.state()->comm, &request);
  wait_request(*group.state(), request, name_of(call.op));
  check_same_call(t);
  return check_call(t);
}

}  // namespace mixgrad::distributed::detail
