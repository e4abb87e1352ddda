// The recorded collectives: each is an autodiff::Function whose forward
// moves the data (functional_transport.cpp) after the ranks agreed on the
// call (functional_check.cpp), and whose backward is another recorded
// collective, so a recorded backward (create_graph) differentiates again.
// Ops along an axis work on x viewed as [pre, extent, post] and lay the
// world's blocks out as [W, pre, extent / W, post], contiguous, for MPI.
#include "mixgrad/distributed/functional.hpp"

#include <memory>
#include <string>

#include "distributed/functional_check.hpp"
#include "distributed/functional_transport.hpp"
#include "mixgrad/amp/autocast.hpp"
#include "mixgrad/autodiff/dtr.hpp"
#include "mixgrad/autodiff/function.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/shape_ops.hpp"

namespace mixgrad::distributed::functional {

namespace {

using detail::Collective;
using detail::Reduction;

struct Extents {
  int64_t pre = 1, extent = 1, post = 1;
};

Extents extents_at(const Shape& s, int axis) {
  Extents e;
  for (int i = 0; i < axis; ++i) e.pre *= s[i];
  e.extent = s[axis];
  for (int i = axis + 1; i < s.ndim(); ++i) e.post *= s[i];
  return e;
}

Shape with_extent(Shape s, int axis, int64_t extent) {
  s[axis] = extent;
  return s;
}

// x split into W blocks along axis: [W, pre, extent / W, post], contiguous.
Tensor to_blocks(const Tensor& x, int axis, int world) {
  const Extents e = extents_at(x.shape(), axis);
  return F::permute(F::reshape(x.contiguous(), {e.pre, world, e.extent / world, e.post}), {1, 0, 2, 3}).contiguous();
}

// W blocks of shape `block` ([W, ...block]) concatenated along axis.
Tensor from_blocks(const Tensor& stacked, const Shape& block, int axis) {
  const int64_t world = stacked.size(0);
  const Extents e = extents_at(block, axis);
  const Tensor rows = F::permute(F::reshape(stacked, {world, e.pre, e.extent, e.post}), {1, 0, 2, 3}).contiguous();
  return F::reshape(rows, with_extent(block, axis, e.extent * world));
}

Tensor token_like(const Tensor& x) { return zeros(Shape{}, x.dtype(), x.device()); }

// What a non-root rank's zero gradient looks like.
struct Like {
  Shape shape;
  DType dtype = DType::float32;
  Device device = Device::cpu();
  explicit Like(const Tensor& x) : shape(x.shape()), dtype(x.dtype()), device(x.device()) {}
  Like() = default;
};

// A non-root rank's zero gradient, kept on the tape through the backward
// collective's token (whose value is 0), so that a second backward reaches
// that collective on every rank.
Tensor zeros_through(const Like& x, const Tensor& token) {
  return F::add(zeros(x.shape, x.dtype, x.device), token);
}

// The base of the recorded collectives: the group, and forward / backward
// run with autocast off (the ops keep their input's dtype).
class CollectiveFn : public autodiff::Function {
 public:
  CollectiveFn(const ProcessGroup& group, Collective op) : group_(group), op_(op) {}
  std::string name() const override { return std::string("distributed::functional::") + detail::name_of(op_); }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    amp::autocast off(false);
    return {run(in[0])};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& dy) override {
    amp::autocast off(false);
    return {grad(dy[0])};
  }

 protected:
  virtual Tensor run(const Tensor& x) = 0;
  virtual Tensor grad(const Tensor& dy) = 0;
  bool is_root(int root) const { return group_.rank() == root; }
  ProcessGroup group_;
  Collective op_;
};

// A collective must not run twice: a DTR segment around it is never evicted.
Tensor record(const std::shared_ptr<CollectiveFn>& fn, const Tensor& x) {
  dtr::pin();
  return autodiff::apply(fn, {x})[0];
}

class AllReduceFn final : public CollectiveFn {
 public:
  AllReduceFn(const ProcessGroup& g, Collective op, Reduction r) : CollectiveFn(g, op), reduction_(r) {}

 private:
  Tensor run(const Tensor& x) override {
    Tensor y = detail::all_reduce_copy(group_, x, reduction_);
    if (reduction_ != Reduction::sum && is_floating_point(x.dtype())) winners_ = F::eq(x, y);
    return y;
  }
  Tensor grad(const Tensor& dy) override {
    Tensor sum = all_reduce_sum(group_, dy);
    return reduction_ == Reduction::sum ? sum : F::where(winners_, sum, zeros_like(sum));
  }
  Reduction reduction_;
  Tensor winners_;  // max / min: where this rank's element is the result
};

class AllGatherFn final : public CollectiveFn {
 public:
  AllGatherFn(const ProcessGroup& g, int axis) : CollectiveFn(g, Collective::all_gather), axis_(axis) {}

 private:
  Tensor run(const Tensor& x) override { return from_blocks(detail::all_gather_copy(group_, x), x.shape(), axis_); }
  Tensor grad(const Tensor& dy) override { return reduce_scatter_sum(group_, dy, axis_); }
  int axis_;
};

class ReduceScatterFn final : public CollectiveFn {
 public:
  ReduceScatterFn(const ProcessGroup& g, int axis) : CollectiveFn(g, Collective::reduce_scatter_sum), axis_(axis) {}

 private:
  Tensor run(const Tensor& x) override {
    const Tensor mine = detail::reduce_scatter_copy(group_, to_blocks(x, axis_, group_.world_size()));
    return F::reshape(mine, with_extent(x.shape(), axis_, x.size(axis_) / group_.world_size()));
  }
  Tensor grad(const Tensor& dy) override { return all_gather(group_, dy, axis_); }
  int axis_;
};

class BroadcastFn final : public CollectiveFn {
 public:
  BroadcastFn(const ProcessGroup& g, int root) : CollectiveFn(g, Collective::broadcast), root_(root) {}

 private:
  Tensor run(const Tensor& x) override {
    x_ = Like(x);
    return detail::broadcast_copy(group_, x.contiguous(), root_);
  }
  Tensor grad(const Tensor& dy) override {
    const Tensor sum = reduce_sum(group_, dy, root_);
    return is_root(root_) ? sum : zeros_through(x_, sum);
  }
  int root_;
  Like x_;
};

class ReduceSumFn final : public CollectiveFn {
 public:
  ReduceSumFn(const ProcessGroup& g, int root) : CollectiveFn(g, Collective::reduce_sum), root_(root) {}

 private:
  Tensor run(const Tensor& x) override {
    shape_ = x.shape();
    const Tensor sum = detail::reduce_copy(group_, x, root_);
    return is_root(root_) ? sum : token_like(x);
  }
  Tensor grad(const Tensor& dy) override {  // a non-root's dy is its token's: only the root's is sent
    return broadcast(group_, is_root(root_) ? dy : F::broadcast_to(dy, shape_), root_);
  }
  int root_;
  Shape shape_;
};

class GatherFn final : public CollectiveFn {
 public:
  GatherFn(const ProcessGroup& g, int root, int axis) : CollectiveFn(g, Collective::gather), root_(root), axis_(axis) {}

 private:
  Tensor run(const Tensor& x) override {
    gathered_ = with_extent(x.shape(), axis_, x.size(axis_) * group_.world_size());
    const Tensor all = detail::gather_copy(group_, x, root_);
    return is_root(root_) ? from_blocks(all, x.shape(), axis_) : token_like(x);
  }
  Tensor grad(const Tensor& dy) override {
    return scatter(group_, is_root(root_) ? dy : F::broadcast_to(dy, gathered_), root_, axis_);
  }
  int root_, axis_;
  Shape gathered_;
};

class ScatterFn final : public CollectiveFn {
 public:
  ScatterFn(const ProcessGroup& g, int root, int axis)
      : CollectiveFn(g, Collective::scatter), root_(root), axis_(axis) {}

 private:
  Tensor run(const Tensor& x) override {
    const int world = group_.world_size();
    x_ = Like(x);
    const Extents e = extents_at(x.shape(), axis_);
    // Only the root's blocks are read (on CPU, MPI_Scatter's other ranks give no data).
    const Tensor blocks = is_root(root_) || x.device().is_cuda()
                              ? to_blocks(x, axis_, world)
                              : empty({world, e.pre, e.extent / world, e.post}, x.dtype(), x.device());
    const Tensor mine = detail::scatter_copy(group_, blocks, root_);
    return F::reshape(mine, with_extent(x.shape(), axis_, e.extent / world));
  }
  Tensor grad(const Tensor& dy) override {
    const Tensor all = gather(group_, dy, root_, axis_);
    return is_root(root_) ? all : zeros_through(x_, all);
  }
  int root_, axis_;
  Like x_;
};

class AllToAllFn final : public CollectiveFn {
 public:
  AllToAllFn(const ProcessGroup& g, int split_axis, int concat_axis)
      : CollectiveFn(g, Collective::all_to_all), split_(split_axis), concat_(concat_axis) {}

 private:
  Tensor run(const Tensor& x) override {
    const int world = group_.world_size();
    const Shape block = with_extent(x.shape(), split_, x.size(split_) / world);
    const Tensor received = detail::all_to_all_copy(group_, to_blocks(x, split_, world));
    std::vector<int64_t> stacked{world};
    stacked.insert(stacked.end(), block.begin(), block.end());
    return from_blocks(F::reshape(received, Shape(stacked)), block, concat_);
  }
  Tensor grad(const Tensor& dy) override { return all_to_all(group_, dy, concat_, split_); }
  int split_, concat_;
};

}  // namespace

Tensor all_reduce_sum(const ProcessGroup& group, const Tensor& x) {
  detail::agree(group, {Collective::all_reduce_sum}, x);
  return record(std::make_shared<AllReduceFn>(group, Collective::all_reduce_sum, Reduction::sum), x);
}

Tensor all_reduce_max(const ProcessGroup& group, const Tensor& x) {
  detail::agree(group, {Collective::all_reduce_max}, x);
  return record(std::make_shared<AllReduceFn>(group, Collective::all_reduce_max, Reduction::max), x);
}

Tensor all_reduce_min(const ProcessGroup& group, const Tensor& x) {
  detail::agree(group, {Collective::all_reduce_min}, x);
  return record(std::make_shared<AllReduceFn>(group, Collective::all_reduce_min, Reduction::min), x);
}

Tensor all_gather(const ProcessGroup& group, const Tensor& x, int axis) {
  const auto a = detail::agree(group, {Collective::all_gather, 0, axis}, x);
  return record(std::make_shared<AllGatherFn>(group, a.axis), x);
}

Tensor reduce_scatter_sum(const ProcessGroup& group, const Tensor& x, int axis) {
  const auto a = detail::agree(group, {Collective::reduce_scatter_sum, 0, axis}, x);
  return record(std::make_shared<ReduceScatterFn>(group, a.axis), x);
}

Tensor broadcast(const ProcessGroup& group, const Tensor& x, int root) {
  detail::agree(group, {Collective::broadcast, root}, x);
  return record(std::make_shared<BroadcastFn>(group, root), x);
}

Tensor reduce_sum(const ProcessGroup& group, const Tensor& x, int root) {
  detail::agree(group, {Collective::reduce_sum, root}, x);
  return record(std::make_shared<ReduceSumFn>(group, root), x);
}

Tensor gather(const ProcessGroup& group, const Tensor& x, int root, int axis) {
  const auto a = detail::agree(group, {Collective::gather, root, axis}, x);
  return record(std::make_shared<GatherFn>(group, root, a.axis), x);
}

Tensor scatter(const ProcessGroup& group, const Tensor& x, int root, int axis) {
  const auto a = detail::agree(group, {Collective::scatter, root, axis}, x);
  return record(std::make_shared<ScatterFn>(group, root, a.axis), x);
}

Tensor all_to_all(const ProcessGroup& group, const Tensor& x, int split_axis, int concat_axis) {
  const auto a = detail::agree(group, {Collective::all_to_all, 0, split_axis, concat_axis}, x);
  return record(std::make_shared<AllToAllFn>(group, a.axis, a.axis2), x);
}

}  // namespace mixgrad::distributed::functional
