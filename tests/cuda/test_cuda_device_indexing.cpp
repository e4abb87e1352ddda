// Device tests of the CUDA indexing, scan, resize and sorting families, and
// of prod, against the CPU: embedding / index_select / gather / scatter_add
// with their gradients, cumsum and prod, pad in every mode, nearest and
// bilinear resampling, and sort / topk / argsort (stability, NaN as the
// largest, -0 == +0), in every floating dtype; an out-of-range index
// reported as a ValueError at the next sync. Part of test_cuda_device (exits
// 77 without a device).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backend/cuda/pinned.hpp"
#include "backend/host_sync.hpp"
#include "device_test_support.hpp"
#include "mixgrad/cuda.hpp"
#include "mixgrad/mixgrad.hpp"

using namespace device_test;

namespace {

// f on CPU inputs and on their GPU copies, backward with one seeded upstream
// gradient; outputs and floating inputs' gradients compared.
void check_op(const TensorFn& f, const std::vector<mg::Tensor>& inputs, double tol) {
  check_against_cpu(f, inputs, tol, seeded_normal(7));
}

mg::Tensor int_index(const std::vector<int64_t>& v, const mg::Shape& s) { return mg::tensor<int64_t>(v, s); }

// n indices in [0, extent), reproducible.
std::vector<int64_t> random_indices(int64_t n, int64_t extent, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> pick(0, extent - 1);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto& e : v) e = pick(rng);
  return v;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_device_indexing)

BOOST_AUTO_TEST_CASE(embedding_and_index_select_match_the_cpu_with_repeated_indices) {
  for (mg::DType dt : kFloatingDTypes) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      const mg::Tensor w = mg::uniform({10, 6}, -1.0, 1.0).to(dt);
      const mg::Tensor idx = int_index({3, 3, 0, 9, 3, 1, 9, 2}, {2, 4});
      check_op([&](const auto& xs) { return mg::F::embedding(xs[0], idx.to(xs[0].device())); }, {w},
               kSumTolerances.of(dt));
      const mg::Tensor x = mg::uniform({4, 5, 3}, -1.0, 1.0).to(dt);
      const mg::Tensor sel = int_index({4, 0, 4, 2}, {4});
      check_op([&](const auto& xs) { return mg::F::index_select(xs[0], 1, sel.to(xs[0].device())); }, {x},
               kSumTolerances.of(dt));
    }
  }
}

BOOST_AUTO_TEST_CASE(gather_and_scatter_add_match_the_cpu_on_every_axis) {
  for (mg::DType dt : kFloatingDTypes) {
    for (int axis : {0, 1, 2}) {
      BOOST_TEST_CONTEXT("dtype " << dt << " axis " << axis) {
        const mg::Tensor x = mg::uniform({4, 5, 6}, -1.0, 1.0).to(dt);
        const mg::Shape is{3, 4, 5};
        const mg::Tensor idx = int_index(random_indices(60, x.shape()[axis], 11u + axis), is);
        check_op([&](const auto& xs) { return mg::F::gather(xs[0], axis, idx.to(xs[0].device())); }, {x},
                 kSumTolerances.of(dt));
        const mg::Tensor src = mg::uniform(is, -1.0, 1.0).to(dt);
        check_op([&](const auto& xs) { return mg::F::scatter_add(xs[0], axis, idx.to(xs[0].device()), xs[1]); },
                 {x, src}, kSumTolerances.of(dt));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(cumsum_and_prod_match_the_cpu_with_zeros_in_a_line) {
  for (mg::DType dt : kFloatingDTypes) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      mg::Tensor x = mg::uniform({3, 7, 4}, 0.5, 1.5);
      x = mg::F::where(mg::F::lt(mg::uniform({3, 7, 4}), 0.1), mg::zeros({3, 7, 4}), x).to(dt);
      check_op([](const auto& xs) { return mg::F::cumsum(xs[0], 1); }, {x}, kSumTolerances.of(dt));
      check_op([](const auto& xs) { return mg::F::prod(xs[0], 1); }, {x}, kSumTolerances.of(dt));
      check_op([](const auto& xs) { return mg::F::prod(xs[0], -1); }, {x}, kSumTolerances.of(dt));
    }
  }
}

BOOST_AUTO_TEST_CASE(pad_matches_the_cpu_in_every_mode) {
  for (mg::DType dt : kFloatingDTypes) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      const mg::Tensor x = mg::uniform({2, 3, 5, 6}, -1.0, 1.0).to(dt);
      check_op([](const auto& xs) { return mg::F::pad(xs[0], {1, 2, 3, 0}, mg::F::PadMode::constant, 0.5); }, {x},
               kSumTolerances.of(dt));
      check_op([](const auto& xs) { return mg::F::pad(xs[0], {2, 3, 1, 4}, mg::F::PadMode::reflect); }, {x},
               kSumTolerances.of(dt));
      check_op([](const auto& xs) { return mg::F::pad(xs[0], {4, 4, 2, 3}, mg::F::PadMode::replicate); }, {x},
               kSumTolerances.of(dt));
      check_op([](const auto& xs) { return mg::F::pad(xs[0], {2, 1}, mg::F::PadMode::reflect); }, {x},
               kSumTolerances.of(dt));
    }
  }
}

BOOST_AUTO_TEST_CASE(nearest_and_bilinear_resampling_match_the_cpu) {
  for (mg::DType dt : kFloatingDTypes) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      const mg::Tensor x = mg::uniform({2, 3, 5, 7}, -1.0, 1.0).to(dt);
      mg::F::InterpolateOptions up2{.scale_factor = 2.0};
      mg::F::InterpolateOptions odd{.size = mg::Size2(8, 4)};
      mg::F::InterpolateOptions bil{.size = mg::Size2(9, 13), .mode = mg::F::InterpolateMode::bilinear};
      mg::F::InterpolateOptions bil_ac{.size = mg::Size2(3, 11), .mode = mg::F::InterpolateMode::bilinear,
                                       .align_corners = true};
      mg::F::InterpolateOptions bil_s{.scale_factor = mg::F::Scale2(1.5, 0.5),
                                      .mode = mg::F::InterpolateMode::bilinear};
      for (const auto& o : {up2, odd, bil, bil_ac, bil_s})
        check_op([&](const auto& xs) { return mg::F::interpolate(xs[0], o); }, {x}, 4 * kSumTolerances.of(dt));
    }
  }
}

BOOST_AUTO_TEST_CASE(sort_topk_argsort_match_the_cpu_with_ties_nans_and_signed_zeros) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> line{3, -0.0, nan, 1, 0.0, 3, -2, nan, 1, -1e30, 7, 0.0};
  for (mg::DType dt : kFloatingDTypes) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      std::vector<double> v;
      for (int r = 0; r < 6; ++r) v.insert(v.end(), line.begin(), line.end());
      const mg::Tensor x = mg::tensor(v, {2, 12, 3}, dt);  // lines along a middle axis
      for (int dim : {1, -1}) {
        for (bool desc : {false, true}) {
          const auto c = mg::F::sort(x, dim, desc);
          const auto g = mg::F::sort(x.to(kGpu), dim, desc);
          check_close(g.values, c.values, 0, "sort values");
          check_close(g.indices, c.indices, 0, "sort indices");
          check_close(mg::F::argsort(x.to(kGpu), dim, desc), mg::F::argsort(x, dim, desc), 0, "argsort");
        }
        const auto tc = mg::F::topk(x, 2, dim);
        const auto tg = mg::F::topk(x.to(kGpu), 2, dim);
        check_close(tg.values, tc.values, 0, "topk values");
        check_close(tg.indices, tc.indices, 0, "topk indices");
      }
    }
  }
  for (mg::DType dt : {mg::DType::int32, mg::DType::int64}) {
    std::vector<double> iv;
    for (int64_t e : random_indices(200, 41, 5u)) iv.push_back(static_cast<double>(e - 20));
    const mg::Tensor x = mg::tensor(iv, {5, 40}, dt);
    check_close(mg::F::argsort(x.to(kGpu), -1, true), mg::F::argsort(x, -1, true), 0, "int argsort");
  }
  const mg::Tensor big = mg::uniform({3, 5000}, -1.0, 1.0);
  check_op([](const auto& xs) { return mg::F::topk(xs[0], 17, -1).values; }, {big}, 1e-6);
}

BOOST_AUTO_TEST_CASE(an_out_of_range_index_is_a_value_error_at_the_next_sync) {
  const mg::Tensor w = mg::uniform({4, 3}).to(kGpu);
  const mg::Tensor bad = int_index({0, 4}, {2}).to(kGpu);
  BOOST_CHECK_THROW(
      {
        const mg::Tensor y = mg::F::embedding(w, bad);
        mg::cuda::synchronize(0);
        (void)y.to(kCpu);
      },
      mg::ValueError);
  const mg::Tensor neg = int_index({-1, 0, 1}, {1, 3}).to(kGpu);
  BOOST_CHECK_THROW(
      {
        const mg::Tensor y = mg::F::gather(w, 0, neg);
        (void)y.to(kCpu);
      },
      mg::ValueError);
  // Later work on the device is unaffected.
  const mg::Tensor ok = mg::F::embedding(w, int_index({3, 0}, {2}).to(kGpu));
  check_close(ok, mg::F::embedding(w.to(kCpu), int_index({3, 0}, {2})), 0, "after the error");
}

BOOST_AUTO_TEST_CASE(host_to_device_copies_are_staged_without_waiting_and_survive_the_source) {
  (void)mg::ones({8}).to(kGpu);  // warm-up: the pool's first buffer
  mg::cuda::synchronize(0);
  BOOST_TEST(mg::backend::cuda::staging_pool_bytes(0) > 0u);
  std::vector<mg::Tensor> on_gpu;
  std::vector<std::vector<float>> want;
  const int64_t before = mg::backend::host_sync_count();
  for (int i = 0; i < 20; ++i) {
    mg::Tensor host = mg::uniform({257, 1031});  // ~1 MiB: several staging buffers in flight
    want.push_back(host.to_vector<float>());
    on_gpu.push_back(host.to(kGpu));
    host.data<float>()[0] = -7.f;  // the copy took the bytes before it returned
  }
  BOOST_TEST(mg::backend::host_sync_count() == before);
  for (size_t i = 0; i < on_gpu.size(); ++i) BOOST_TEST(on_gpu[i].to_vector<float>() == want[i]);
  BOOST_TEST(mg::backend::cuda::staging_pool_bytes(0) <= mg::backend::cuda::kStagingPoolBytes);
}

BOOST_AUTO_TEST_CASE(a_data_loader_on_the_device_hands_out_device_batches) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < 10; ++i) {
    x.push_back(static_cast<float>(i));
    y.push_back(i);
  }
  mg::data::TensorDataset ds(mg::tensor(x, {10, 1}), mg::tensor(y, {10}));
  mg::data::DataLoader loader(ds, {.batch_size = 4, .shuffle = true, .seed = 1, .device = kGpu});
  mg::data::DataLoader host(ds, {.batch_size = 4, .shuffle = true, .seed = 1});
  auto h = host.begin();
  for (const auto& [bx, by] : loader) {
    BOOST_TEST(bx.device() == kGpu);
    BOOST_TEST(by.device() == kGpu);
    BOOST_TEST(bx.to_vector<float>() == h->images.to_vector<float>());
    BOOST_TEST(by.to_vector<int64_t>() == h->labels.to_vector<int64_t>());
    ++h;
  }
}

BOOST_AUTO_TEST_SUITE_END()
