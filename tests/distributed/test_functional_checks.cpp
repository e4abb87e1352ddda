// The recorded collectives' contract beyond their values: bad calls throw
// the same typed exception on every rank, naming the op, the ranks' dtypes
// and shapes, with nothing moved, recorded or changed (and the group still
// in step); a second backward through linear collectives; autocast leaves
// their dtype alone.
#include <string>
#include <vector>

#include "test_functional_util.hpp"

namespace mg = mixgrad;
namespace F = mixgrad::F;
namespace DF = mixgrad::distributed::functional;
using dist_test::data;
using dist_test::sum_of;
using dist_test::world;
using test_util::check_error;

namespace {

int W() { return world().world_size(); }

// After a failed call, x is as it was and the ranks are still in step: the
// next collective pairs up and is right.
void check_unchanged_and_in_step(const mg::Tensor& x, const std::vector<double>& before, uint64_t version) {
  BOOST_TEST(test_util::values(x) == before);
  BOOST_TEST(x.version() == version);
  const mg::Tensor one = mg::ones({2});
  BOOST_TEST(test_util::values(DF::all_reduce_sum(world(), one)) == (std::vector<double>(2, W())));
}

template <class E>
void check_rejected(const mg::Tensor& x, const std::function<mg::Tensor(const mg::Tensor&)>& op,
                    const std::vector<std::string>& needles) {
  const std::vector<double> before = test_util::values(x);
  const uint64_t version = x.version();
  mg::autodiff::GradManager gm;
  if (mg::is_floating_point(x.dtype())) gm.attach(x);
  {
    auto recording = gm.record();
    check_error<E>([&] { op(x); }, needles);
  }
  BOOST_TEST(!x.grad().defined());
  check_unchanged_and_in_step(x, before, version);
}

// A second backward through a collective: loss_r = sum(y_r^2 w_r), the
// penalty sum(grad^2) differentiated again, against one process. The
// backward of a linear collective is recorded under create_graph; on the
// ranks where it gives a zero gradient (broadcast's and scatter's non-roots)
// that zero hangs on the backward collective's token, so the second
// backward reaches that collective on every rank too.
void check_twice_differentiable(const dist_test::Distributed& op, const dist_test::Reference& ref) {
  const int r = world().rank();
  const mg::Shape shape{2 * W(), 3};
  auto loss_of = [](const mg::Tensor& y, int k) { return F::sum(F::mul(F::mul(y, y), data(100 + k, y.shape()))); };
  std::vector<mg::Tensor> xs;
  for (int k = 0; k < W(); ++k) xs.push_back(data(k, shape));
  mg::autodiff::GradManager ref_gm;
  ref_gm.attach(xs);
  {
    auto recording = ref_gm.record();
    const std::vector<mg::Tensor> ys = ref(xs);
    std::vector<mg::Tensor> losses, penalties;
    for (int k = 0; k < W(); ++k) losses.push_back(loss_of(ys[k], k));
    ref_gm.backward(sum_of(losses), {}, {.create_graph = true});
    for (const mg::Tensor& x : xs)
      if (x.grad().defined()) penalties.push_back(F::sum(F::mul(x.grad(), x.grad())));
    for (const mg::Tensor& x : xs) x.set_grad({});
    ref_gm.backward(sum_of(penalties));
  }
  mg::Tensor x = data(r, shape);
  mg::autodiff::GradManager gm;
  gm.attach(x);
  {
    auto recording = gm.record();
    gm.backward(loss_of(op(x), r), {}, {.create_graph = true});
    const mg::Tensor penalty = F::sum(F::mul(x.grad(), x.grad()));
    x.set_grad({});
    gm.backward(penalty);
  }
  BOOST_TEST_REQUIRE(x.grad().defined());
  test_util::check_close(x.grad(), xs[r].grad().defined() ? xs[r].grad() : mg::zeros_like(x), 1e-6);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(functional_checks)

BOOST_AUTO_TEST_CASE(a_rank_with_another_shape_is_a_shape_error_on_every_rank) {
  if (W() == 1) {  // alone, only the call itself can be wrong: an axis that does not exist
    check_rejected<mg::ShapeError>(data(0, {2, 3}), [](const mg::Tensor& x) { return DF::all_gather(world(), x, 2); },
                                   {"distributed::functional::all_gather", "axis 2 is out of range for float32[2, 3]"});
    return;
  }
  const mg::Shape shape = world().rank() == 1 ? mg::Shape{2, 4} : mg::Shape{2, 3};
  check_rejected<mg::ShapeError>(data(0, shape), [](const mg::Tensor& x) { return DF::all_gather(world(), x); },
                                 {"distributed::functional::all_gather", "rank 1 passed float32[2, 4]",
                                  "rank 0 float32[2, 3]", "same shape"});
}

BOOST_AUTO_TEST_CASE(a_rank_with_another_dtype_is_a_dtype_error_on_every_rank) {
  const mg::DType d = world().rank() == W() - 1 && W() > 1 ? mg::DType::float64 : mg::DType::float32;
  const std::string mine = W() > 1 ? "rank " + std::to_string(W() - 1) + " passed float64[3]" : "bool[3]";
  if (W() == 1) {  // alone: a sum of bool
    check_rejected<mg::DTypeError>(mg::zeros({3}, mg::DType::bool_),
                                   [](const mg::Tensor& x) { return DF::reduce_scatter_sum(world(), x); },
                                   {"distributed::functional::reduce_scatter_sum", "cannot reduce bool[3]"});
    return;
  }
  check_rejected<mg::DTypeError>(data(0, {3}, d), [](const mg::Tensor& x) { return DF::all_reduce_sum(world(), x); },
                                 {"distributed::functional::all_reduce_sum", mine, "rank 0 float32[3]"});
}

BOOST_AUTO_TEST_CASE(a_root_outside_the_group_or_differing_is_a_value_error) {
  check_rejected<mg::ValueError>(data(0, {3}), [](const mg::Tensor& x) { return DF::broadcast(world(), x, W()); },
                                 {"distributed::functional::broadcast", "root " + std::to_string(W()) +
                                  " is not a rank of a group of " + std::to_string(W()), "float32[3]"});
  check_rejected<mg::ValueError>(data(0, {3}), [](const mg::Tensor& x) { return DF::gather(world(), x, -1); },
                                 {"distributed::functional::gather", "root -1 is not a rank"});
  if (W() > 1)
    check_rejected<mg::ValueError>(
        data(0, {3}), [](const mg::Tensor& x) { return DF::reduce_sum(world(), x, world().rank()); },
        {"distributed::functional::reduce_sum", "rank 1 passed root 1", "rank 0 root 0"});
}

BOOST_AUTO_TEST_CASE(an_extent_that_does_not_split_is_a_shape_error) {
  if (W() == 1) {  // every extent splits into one block: the axis is what can be wrong
    check_rejected<mg::ShapeError>(data(0, {3}), [](const mg::Tensor& x) { return DF::scatter(world(), x, 0, -2); },
                                   {"distributed::functional::scatter", "axis -2 is out of range for float32[3]"});
    return;
  }
  const std::string split = "does not split into " + std::to_string(W());
  check_rejected<mg::ShapeError>(data(0, {W() + 1, 2}),
                                 [](const mg::Tensor& x) { return DF::reduce_scatter_sum(world(), x); },
                                 {"distributed::functional::reduce_scatter_sum", "float32[" + std::to_string(W() + 1) +
                                  ", 2] has extent " + std::to_string(W() + 1) + " on axis 0", split});
  check_rejected<mg::ShapeError>(data(0, {2, W() + 1}),
                                 [](const mg::Tensor& x) { return DF::all_to_all(world(), x, 1, 0); },
                                 {"distributed::functional::all_to_all", split});
}

BOOST_AUTO_TEST_CASE(a_rank_calling_another_collective_is_a_state_error) {
  if (W() == 1) {  // alone: an undefined tensor
    check_error<mg::ValueError>([] { DF::all_reduce_max(world(), mg::Tensor()); },
                                {"distributed::functional::all_reduce_max", "rank 0 passed an undefined tensor"});
    return;
  }
  const bool first = world().rank() == 0;
  check_rejected<mg::StateError>(
      data(0, {3}),
      [first](const mg::Tensor& x) { return first ? DF::all_gather(world(), x) : DF::broadcast(world(), x); },
      {first ? "distributed::functional::all_gather: rank 1 called broadcast"
             : "distributed::functional::broadcast: rank 0 called all_gather"});
}

BOOST_AUTO_TEST_CASE(remote_send_and_recv_name_a_bad_peer) {
  const int r = world().rank();
  check_error<mg::ValueError>([&] { DF::remote_send(world(), data(0, {2}), r); },
                              {"distributed::functional::remote_send", "dest " + std::to_string(r) +
                               " is not another rank of a group of " + std::to_string(W()), "float32[2]"});
  check_error<mg::ValueError>([&] { DF::remote_recv(world(), W()); },
                              {"distributed::functional::remote_recv", "src " + std::to_string(W())});
}

BOOST_AUTO_TEST_CASE(linear_collectives_are_twice_differentiable) {
  const int root = W() - 1;
  BOOST_TEST_CONTEXT("all_gather") {
    check_twice_differentiable([](const mg::Tensor& x) { return DF::all_gather(world(), x, 1); },
                               [](const std::vector<mg::Tensor>& xs) {
                                 return std::vector<mg::Tensor>(W(), F::concat(xs, 1));
                               });
  }
  BOOST_TEST_CONTEXT("broadcast from rank " << root) {
    check_twice_differentiable([root](const mg::Tensor& x) { return DF::broadcast(world(), x, root); },
                               [root](const std::vector<mg::Tensor>& xs) {
                                 return std::vector<mg::Tensor>(W(), xs[root]);
                               });
  }
  BOOST_TEST_CONTEXT("scatter from rank " << root) {
    check_twice_differentiable([root](const mg::Tensor& x) { return DF::scatter(world(), x, root); },
                               [root](const std::vector<mg::Tensor>& xs) {
                                 std::vector<mg::Tensor> ys;
                                 for (int k = 0; k < W(); ++k) ys.push_back(F::narrow(xs[root], 0, 2 * k, 2));
                                 return ys;
                               });
  }
}

// Under autocast the collectives keep their input's dtype, in both passes:
// a float32 value that bfloat16 or float16 would round comes through exactly.
BOOST_AUTO_TEST_CASE(autocast_keeps_the_input_dtype) {
  const double fine = 1.0 + 1.0 / (1 << 20);
  mg::Tensor x = mg::full({2, 2}, fine);
  mg::autodiff::GradManager gm;
  gm.attach(x);
  mg::Tensor y;
  {
    mg::amp::autocast on;
    auto recording = gm.record();
    y = DF::all_gather(world(), x);
    gm.backward(y, mg::full(y.shape(), fine));
  }
  BOOST_TEST(y.dtype() == mg::DType::float32);
  BOOST_TEST(test_util::values(y) == std::vector<double>(static_cast<size_t>(4 * W()), fine));
  BOOST_TEST(x.grad().dtype() == mg::DType::float32);
  BOOST_TEST(test_util::values(x.grad()) == std::vector<double>(4, fine * W()));
}

BOOST_AUTO_TEST_SUITE_END()
