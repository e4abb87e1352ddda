// Every recorded collective's result and gradient equal the same
// computation done in one process on every rank's tensor (on 1, 2 and 3
// ranks), for several axes and roots.
#include <vector>

#include "test_functional_util.hpp"

namespace mg = mixgrad;
namespace F = mixgrad::F;
namespace DF = mixgrad::distributed::functional;
using dist_test::check_against_one_process;
using dist_test::data;
using dist_test::sum_of;
using dist_test::world;

namespace {

int W() { return world().world_size(); }

// [2W, 3, 2W]: axes 0 and 2 split into W blocks; axis 1 does not (W = 2).
mg::Shape cube() { return {2 * W(), 3, 2 * W()}; }

std::vector<mg::Tensor> each_rank(const mg::Tensor& y) { return std::vector<mg::Tensor>(W(), y); }

// Block r of W of x along axis.
mg::Tensor block(const mg::Tensor& x, int axis, int r) {
  const int64_t n = x.size(axis) / W();
  return F::narrow(x, axis, r * n, n);
}

std::vector<mg::Tensor> only_root(int root, const mg::Tensor& y) {
  std::vector<mg::Tensor> ys(W());
  ys[root] = y;
  return ys;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(functional_collectives)

BOOST_AUTO_TEST_CASE(all_reduce_sum_max_min) {
  check_against_one_process({3, 4}, [](const mg::Tensor& x) { return DF::all_reduce_sum(world(), x); },
                            [](const std::vector<mg::Tensor>& xs) { return each_rank(sum_of(xs)); });
  check_against_one_process({3, 4}, [](const mg::Tensor& x) { return DF::all_reduce_max(world(), x); },
                            [](const std::vector<mg::Tensor>& xs) {
                              mg::Tensor m = xs[0];
                              for (size_t k = 1; k < xs.size(); ++k) m = F::maximum(m, xs[k]);
                              return each_rank(m);
                            });
  check_against_one_process({3, 4}, [](const mg::Tensor& x) { return DF::all_reduce_min(world(), x); },
                            [](const std::vector<mg::Tensor>& xs) {
                              mg::Tensor m = xs[0];
                              for (size_t k = 1; k < xs.size(); ++k) m = F::minimum(m, xs[k]);
                              return each_rank(m);
                            });
}

BOOST_AUTO_TEST_CASE(all_gather_on_each_axis) {
  for (int axis : {0, 1, -1})
    BOOST_TEST_CONTEXT("axis " << axis) {
      check_against_one_process(cube(), [axis](const mg::Tensor& x) { return DF::all_gather(world(), x, axis); },
                                [axis](const std::vector<mg::Tensor>& xs) { return each_rank(F::concat(xs, axis)); });
    }
}

BOOST_AUTO_TEST_CASE(reduce_scatter_sum_on_each_axis) {
  for (int axis : {0, 2})
    BOOST_TEST_CONTEXT("axis " << axis) {
      check_against_one_process(
          cube(), [axis](const mg::Tensor& x) { return DF::reduce_scatter_sum(world(), x, axis); },
          [axis](const std::vector<mg::Tensor>& xs) {
            std::vector<mg::Tensor> ys;
            const mg::Tensor s = sum_of(xs);
            for (int r = 0; r < W(); ++r) ys.push_back(block(s, axis, r));
            return ys;
          });
    }
}

BOOST_AUTO_TEST_CASE(broadcast_and_reduce_sum_from_each_root) {
  for (int root : {0, W() - 1})
    BOOST_TEST_CONTEXT("root " << root) {
      check_against_one_process({4, 3}, [root](const mg::Tensor& x) { return DF::broadcast(world(), x, root); },
                                [root](const std::vector<mg::Tensor>& xs) { return each_rank(xs[root]); });
      check_against_one_process({4, 3}, [root](const mg::Tensor& x) { return DF::reduce_sum(world(), x, root); },
                                [root](const std::vector<mg::Tensor>& xs) { return only_root(root, sum_of(xs)); });
    }
}

BOOST_AUTO_TEST_CASE(gather_and_scatter_from_each_root) {
  for (int root : {0, W() - 1})
    for (int axis : {0, 2})
      BOOST_TEST_CONTEXT("root " << root << ", axis " << axis) {
        check_against_one_process(
            cube(), [root, axis](const mg::Tensor& x) { return DF::gather(world(), x, root, axis); },
            [root, axis](const std::vector<mg::Tensor>& xs) { return only_root(root, F::concat(xs, axis)); });
        check_against_one_process(
            cube(), [root, axis](const mg::Tensor& x) { return DF::scatter(world(), x, root, axis); },
            [root, axis](const std::vector<mg::Tensor>& xs) {
              std::vector<mg::Tensor> ys;
              for (int r = 0; r < W(); ++r) ys.push_back(block(xs[root], axis, r));
              return ys;
            });
      }
}

BOOST_AUTO_TEST_CASE(all_to_all_on_each_pair_of_axes) {
  for (auto [split, concat] : {std::pair{0, 0}, std::pair{0, 2}, std::pair{2, 1}, std::pair{-1, 0}})
    BOOST_TEST_CONTEXT("split " << split << ", concat " << concat) {
      check_against_one_process(
          cube(), [split, concat](const mg::Tensor& x) { return DF::all_to_all(world(), x, split, concat); },
          [split, concat](const std::vector<mg::Tensor>& xs) {
            std::vector<mg::Tensor> ys;
            for (int r = 0; r < W(); ++r) {
              std::vector<mg::Tensor> received;
              for (const mg::Tensor& x : xs) received.push_back(block(x, split < 0 ? split + 3 : split, r));
              ys.push_back(F::concat(received, concat));
            }
            return ys;
          });
    }
}

// MegEngine's rule for ties: every rank whose element equals the maximum
// gets the whole summed gradient (here every rank ties everywhere).
BOOST_AUTO_TEST_CASE(all_reduce_max_ties_give_every_tied_rank_the_whole_gradient) {
  const int r = world().rank();
  mg::Tensor x = data(7, {5});  // the same on every rank
  mg::autodiff::GradManager gm;
  gm.attach(x);
  {
    auto recording = gm.record();
    gm.backward(F::sum(F::mul(DF::all_reduce_max(world(), x), data(100 + r, {5}))));
  }
  std::vector<mg::Tensor> ws;
  for (int k = 0; k < W(); ++k) ws.push_back(data(100 + k, {5}));
  test_util::check_close(x.grad(), sum_of(ws), 0.0);
}

// Each dtype is reduced as all_reduce reduces it: 16-bit floats in float32
// and rounded once, integers exactly, bool as or (max) and and (min).
BOOST_AUTO_TEST_CASE(reductions_on_every_dtype) {
  const int r = world().rank();
  for (mg::DType d : {mg::DType::float16, mg::DType::bfloat16, mg::DType::float64, mg::DType::int32, mg::DType::int64})
    BOOST_TEST_CONTEXT(mg::to_string(d)) {
      std::vector<mg::Tensor> xs;
      for (int k = 0; k < W(); ++k) xs.push_back(F::mul(data(k, {2 * W(), 3}, mg::DType::float64), 4.0));
      const mg::Tensor x = mg::F::astype(xs[r], d);
      mg::Tensor mx = xs[0], mn = xs[0];
      for (const mg::Tensor& t : xs) mx = F::maximum(mx, t), mn = F::minimum(mn, t);
      BOOST_TEST(DF::all_reduce_sum(world(), x).dtype() == d);
      test_util::check_close(DF::all_reduce_sum(world(), x), sum_of(xs), 0.0);
      test_util::check_close(DF::all_reduce_max(world(), x), mx, 0.0);
      test_util::check_close(DF::all_reduce_min(world(), x), mn, 0.0);
      test_util::check_close(DF::reduce_scatter_sum(world(), x), block(sum_of(xs), 0, r), 0.0);
      const mg::Tensor s = DF::reduce_sum(world(), x, 0);
      if (r == 0) test_util::check_close(s, sum_of(xs), 0.0);
    }
  mg::Tensor b = mg::tensor(std::vector<double>{1, 0, r == 0 ? 1.0 : 0.0, r == 0 ? 0.0 : 1.0}, mg::Shape{4},
                            mg::DType::bool_);
  BOOST_TEST(test_util::values(DF::all_reduce_max(world(), b)) ==
             (std::vector<double>{1, 0, 1, W() > 1 ? 1.0 : 0.0}));
  BOOST_TEST(test_util::values(DF::all_reduce_min(world(), b)) ==
             (std::vector<double>{1, 0, W() > 1 ? 0.0 : 1.0, 0}));
}

// A DTR segment around a collective is pinned (the collective must not run
// twice); the plain segment beside it is evicted and recomputed, and the
// gradient is the one without DTR.
BOOST_AUTO_TEST_CASE(a_dtr_segment_around_a_collective_is_never_evicted) {
  auto grad = [](bool dtr) {
    mg::Tensor x = F::mul(data(world().rank(), {64, 64}), 1.0);
    mg::autodiff::GradManager gm;
    gm.attach(x);
    // Each segment keeps 16 KiB (sin's input): room for one and a bit, not for both.
    if (dtr) mg::dtr::enable({.eviction_threshold = mg::allocated_bytes() + 40000, .evictee_minimum_size = 0});
    mg::dtr::reset_stats();
    {
      auto rec = gm.record();
      const mg::Tensor h = mg::dtr::segment([](const mg::Tensor& t) { return F::sin(F::mul(t, t)); }, x, "plain");
      const mg::Tensor y = mg::dtr::segment(
          [](const mg::Tensor& t) { return F::sin(DF::all_reduce_sum(world(), F::mul(t, t))); }, h, "collective");
      gm.backward(F::sum(y));
    }
    const mg::dtr::Stats st = mg::dtr::stats();
    mg::dtr::disable();
    if (dtr) {
      BOOST_TEST(st.segments == 2);
      BOOST_TEST(st.evictions == 1);  // "plain" only
      BOOST_TEST(st.recomputations == 1);
    }
    return test_util::values(x.grad());
  };
  BOOST_TEST(grad(false) == grad(true), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
