// remote_send / remote_recv: a pair of point-to-point messages on the tape.
//
// The sender sends a description (dtype, shape, and whether a recording
// GradManager tracks x), then the data, and waits for the receiver's reply:
// whether it recorded the received tensor. The receiver records it as the
// output of an op whose input is a scalar it attaches to its recording
// managers (MegEngine's dummy input: a received tensor depends on nothing
// of this process). In backward, the receiver's op sends the gradient back
// and the sender's token receives it as x's gradient.
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "core/checks.hpp"
#include "distributed/functional_transport.hpp"
#include "hooks/op_hooks.hpp"
#include "mixgrad/autodiff/dtr.hpp"
#include "mixgrad/autodiff/function.hpp"
#include "mixgrad/autodiff/grad_manager.hpp"
#include "mixgrad/distributed/functional.hpp"
#include "mixgrad/error.hpp"
#include "mixgrad/ops/creation.hpp"

namespace mixgrad::distributed::functional {

namespace {

using detail::Tag;

// dtype, tracked, ndim, extents.
constexpr int kHead = 3;
using Description = std::array<int64_t, kHead + Shape::kMaxDims>;

void check_peer(const ProcessGroup& group, int peer, const char* op, const char* role, const std::string& what) {
  if (peer < 0 || peer >= group.world_size() || peer == group.rank())
    throw ValueError(std::string("distributed::functional::") + op + ": " + role + " " + std::to_string(peer) +
                     " is not another rank of a group of " + std::to_string(group.world_size()) + " (this is rank " +
                     std::to_string(group.rank()) + ")" + what);
}

bool tracked(const Tensor& x) {
  if (!is_floating_point(x.dtype()) || !autodiff::is_recording()) return false;
  for (autodiff::GradManager* gm : autodiff::detail::recording_managers())
    if (autodiff::detail::tracks(gm, x.id())) return true;
  return false;
}

// The sender's token: backward receives x's gradient from `dest`.
class SendFn final : public autodiff::Function {
 public:
  SendFn(const ProcessGroup& g, int dest, const Tensor& x, bool grad_comes)
      : group_(g), dest_(dest), shape_(x.shape()), dtype_(x.dtype()), device_(x.device()), grad_comes_(grad_comes) {
    once_differentiable = true;
  }
  std::string name() const override { return "distributed::functional::remote_send"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    return {zeros(Shape{}, in[0].dtype(), in[0].device())};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>&) override {
    if (!grad_comes_) return {Tensor()};
    return {detail::recv_tensor(group_, shape_, dtype_, device_, dest_, Tag::gradient, "remote_send (backward)")};
  }

 private:
  ProcessGroup group_;
  int dest_;
  Shape shape_;
  DType dtype_;
  Device device_;
  bool grad_comes_;
};

// The receiver's op: its output is the received tensor; backward sends the
// gradient back to `src`.
class RecvFn final : public autodiff::Function {
 public:
  RecvFn(const ProcessGroup& g, int src, Tensor received) : group_(g), src_(src), received_(std::move(received)) {
    once_differentiable = true;
  }
  std::string name() const override { return "distributed::functional::remote_recv"; }
  std::vector<Tensor> forward(const std::vector<Tensor>&) override {
    dtype_ = received_.dtype();
    return {std::move(received_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& dy) override {
    detail::send_tensor(group_, dy[0].to(dtype_), src_, Tag::gradient, "remote_recv (backward)");
    return {Tensor()};
  }

 private:
  ProcessGroup group_;
  int src_;
  Tensor received_;
  DType dtype_ = DType::float32;
};

}  // namespace

Tensor remote_send(const ProcessGroup& group, const Tensor& x, int dest) {
  if (!x.defined()) throw ValueError("distributed::functional::remote_send: undefined tensor");
  check_peer(group, dest, "remote_send", "dest", " (x: " + core::describe(x) + ")");
  const bool is_tracked = tracked(x);
  Description d{};
  d[0] = static_cast<int64_t>(x.dtype());
  d[1] = is_tracked;
  d[2] = x.ndim();
  for (int i = 0; i < x.ndim(); ++i) d[kHead + i] = x.size(i);
  detail::send_bytes(group, d.data(), sizeof d, dest, Tag::description, "remote_send");
  detail::send_tensor(group, x, dest, Tag::data, "remote_send");
  int64_t recorded = 0;
  detail::recv_bytes(group, &recorded, sizeof recorded, dest, Tag::reply, "remote_send");
  dtr::pin();  // a send must not run twice: a DTR segment around it is never evicted
  return autodiff::apply(std::make_shared<SendFn>(group, dest, x, is_tracked && recorded), {x})[0];
}

Tensor remote_recv(const ProcessGroup& group, int src, Device device) {
  check_peer(group, src, "remote_recv", "src", "");
  Description d{};
  detail::recv_bytes(group, d.data(), sizeof d, src, Tag::description, "remote_recv");
  const auto dtype = static_cast<DType>(d[0]);
  const Shape shape(std::vector<int64_t>(d.begin() + kHead, d.begin() + kHead + d[2]));
  Tensor received = detail::recv_tensor(group, shape, dtype, device, src, Tag::data, "remote_recv");
  const int64_t records = d[1] && is_floating_point(dtype) && autodiff::is_recording();
  detail::send_bytes(group, &records, sizeof records, src, Tag::reply, "remote_recv");
  if (!records) return received;
  // The op's input: a scalar the recording managers track, held by nothing
  // else (they hold it weakly), so it is gone with the tape.
  const Tensor dummy = zeros(Shape{}, DType::float32, device);
  for (autodiff::GradManager* gm : autodiff::detail::recording_managers()) gm->attach(dummy);
  dtr::pin();
  return autodiff::apply(std::make_shared<RecvFn>(group, src, std::move(received)), {dummy})[0];
}

}  // namespace mixgrad::distributed::functional
