// Host tests of the CUDA multi-tensor, dropout and row plans
// (src/backend/cuda/multi_tensor_plan.hpp, row_plan.hpp): every element of
// every tensor is covered by exactly one block, the kernel-parameter tables
// stay within their limits, the dropout kernel's counter / word mapping
// reproduces the CPU's mask, the row and channel kernels' rows tile a tensor
// in the CPU's order, and CPU statuses handed to the pending checks are
// checked at once. No device needed.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <vector>

#include "backend/cuda/multi_tensor_plan.hpp"
#include "backend/cuda/row_plan.hpp"
#include "backend/dropout.hpp"
#include "backend/pending_checks.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace plan = mixgrad::backend::cuda_plan;

namespace {

// Counts how often each element of each tensor is covered by the plan, and
// checks the per-launch invariants on the way.
std::vector<std::vector<int>> coverage(const std::vector<plan::TensorRef>& refs,
                                       const std::vector<plan::MultiLaunch>& launches, int64_t chunk, int max_tensors,
                                       int max_blocks) {
  std::vector<std::vector<int>> seen(refs.size());
  for (size_t i = 0; i < refs.size(); ++i) seen[i].assign(static_cast<size_t>(refs[i].numel), 0);
  int64_t expected_first = 0;
  for (const plan::MultiLaunch& l : launches) {
    BOOST_TEST(!l.blocks.empty());
    BOOST_TEST(l.first_block == expected_first);
    expected_first += static_cast<int64_t>(l.blocks.size());
    BOOST_TEST(static_cast<int>(l.tensors.size()) <= max_tensors);
    BOOST_TEST(static_cast<int>(l.blocks.size()) <= max_blocks);
    const int key = refs[static_cast<size_t>(l.tensors.front())].dtype;
    for (int t : l.tensors) {
      BOOST_TEST(refs[static_cast<size_t>(t)].dtype == key);
      BOOST_TEST(refs[static_cast<size_t>(t)].contiguous == !l.strided);
    }
    if (l.strided) BOOST_TEST(l.tensors.size() == 1u);
    for (const plan::Chunk& c : l.blocks) {
      BOOST_REQUIRE(c.tensor >= 0);
      BOOST_REQUIRE(c.tensor < static_cast<int>(l.tensors.size()));
      const int t = l.tensors[static_cast<size_t>(c.tensor)];
      // The kernels rebuild the offset from the chunk index.
      BOOST_TEST(c.offset % chunk == 0);
      BOOST_TEST(c.length == std::min(chunk, refs[static_cast<size_t>(t)].numel - c.offset));
      for (int64_t e = c.offset; e < c.offset + c.length; ++e) ++seen[static_cast<size_t>(t)][static_cast<size_t>(e)];
    }
  }
  return seen;
}

void check_plan(const std::vector<plan::TensorRef>& refs, int64_t chunk, int max_tensors, int max_blocks) {
  const auto launches = plan::plan_multi_tensor(refs, chunk, max_tensors, max_blocks);
  const auto seen = coverage(refs, launches, chunk, max_tensors, max_blocks);
  for (size_t t = 0; t < refs.size(); ++t)
    for (size_t e = 0; e < seen[t].size(); ++e) {
      if (seen[t][e] != 1) {
        BOOST_ERROR("tensor " << t << " element " << e << " covered " << seen[t][e] << " times");
        return;
      }
    }
  BOOST_TEST(
      plan::plan_blocks(launches) ==
      (launches.empty() ? 0 : launches.back().first_block + static_cast<int64_t>(launches.back().blocks.size())));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_multi_tensor_plan)

BOOST_AUTO_TEST_CASE(a_small_list_of_one_dtype_is_one_launch) {
  const std::vector<plan::TensorRef> refs = {{10, 0, true}, {70000, 0, true}, {1, 0, true}};
  const auto launches = plan::plan_multi_tensor(refs);
  BOOST_REQUIRE(launches.size() == 1u);
  BOOST_TEST(launches[0].tensors == (std::vector<int>{0, 1, 2}), boost::test_tools::per_element());
  // 10 -> 1 chunk, 70000 -> 2 chunks of 65536 and 4464, 1 -> 1 chunk
  BOOST_REQUIRE(launches[0].blocks.size() == 4u);
  BOOST_TEST(launches[0].blocks[1].offset == 0);
  BOOST_TEST(launches[0].blocks[2].offset == plan::kChunkElements);
  BOOST_TEST(launches[0].blocks[2].length == 70000 - plan::kChunkElements);
  check_plan(refs, plan::kChunkElements, plan::kMaxLaunchTensors, plan::kMaxLaunchBlocks);
}

BOOST_AUTO_TEST_CASE(dtypes_are_grouped_in_order_of_first_appearance) {
  const std::vector<plan::TensorRef> refs = {{5, 2, true}, {5, 1, true}, {5, 2, true}, {5, 1, true}};
  const auto launches = plan::plan_multi_tensor(refs);
  BOOST_REQUIRE(launches.size() == 2u);
  BOOST_TEST(launches[0].tensors == (std::vector<int>{0, 2}), boost::test_tools::per_element());
  BOOST_TEST(launches[1].tensors == (std::vector<int>{1, 3}), boost::test_tools::per_element());
  BOOST_TEST(launches[1].first_block == 2);
}

BOOST_AUTO_TEST_CASE(full_tables_start_a_new_launch_and_cover_everything_once) {
  // Many tiny tensors (the tensor table fills), one huge one (the block
  // table fills mid-tensor), empty ones, mixed dtypes and strided tensors.
  std::vector<plan::TensorRef> refs;
  for (int i = 0; i < 100; ++i) refs.push_back({1 + i % 7, i % 3 == 0 ? 1 : 0, true});
  refs.push_back({0, 0, true});
  refs.push_back({25 * 16 + 3, 0, true});
  refs.push_back({40, 1, false});
  refs.push_back({0, 1, false});
  refs.push_back({33, 0, true});
  check_plan(refs, 16, 8, 12);
  check_plan(refs, 16, 1, 1);
  check_plan(refs, 1000, 36, 320);
}

BOOST_AUTO_TEST_CASE(strided_tensors_get_launches_of_their_own) {
  const std::vector<plan::TensorRef> refs = {{10, 0, true}, {50, 0, false}, {10, 0, true}};
  const auto launches = plan::plan_multi_tensor(refs, 16, 36, 2);
  // the strided tensor: 4 chunks in launches of at most 2 blocks
  int strided = 0;
  for (const auto& l : launches)
    if (l.strided) {
      ++strided;
      BOOST_TEST(l.tensors == (std::vector<int>{1}), boost::test_tools::per_element());
    }
  BOOST_TEST(strided == 2);
  check_plan(refs, 16, 36, 2);
}

BOOST_AUTO_TEST_CASE(an_empty_list_plans_nothing) {
  BOOST_TEST(plan::plan_multi_tensor({}).empty());
  BOOST_TEST(plan::plan_multi_tensor({{0, 0, true}}).empty());
  BOOST_TEST(plan::plan_blocks({}) == 0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(cuda_dropout_plan)

// The CUDA kernel's mapping (one thread per Philox block, dropout_span's
// elements, dropout_keep's words) must give the mask the CPU's dropout
// applies: run the CPU kernel on ones with scale 1 and compare which
// elements survive.
BOOST_AUTO_TEST_CASE(the_kernel_mapping_gives_the_cpu_mask) {
  for (int64_t n : {1, 3, 4, 5, 1023, 4097}) {
    BOOST_TEST_CONTEXT("n " << n) {
      const mg::backend::DropoutParams p{.mask = {0x1234abcdull, 977, uint64_t{1} << 31}, .scale = 1.0};
      const mg::Tensor ones = mg::ones({n});
      const mg::Tensor out = mg::empty({n});
      mg::backend::dropout_apply(ones, out, p);
      const float* cpu = out.data<float>();
      std::vector<int> covered(static_cast<size_t>(n), 0);
      int64_t kept = 0;
      for (uint64_t b = 0; b < mg::kernels::DropoutMask::counters(n); ++b) {
        const plan::DropoutSpan s = plan::dropout_span(static_cast<int64_t>(b), n);
        bool keep[4];
        plan::dropout_keep(p.mask, static_cast<int64_t>(b), keep);
        BOOST_REQUIRE(s.count >= 1);
        BOOST_REQUIRE(s.count <= 4);
        for (int k = 0; k < s.count; ++k) {
          const int64_t i = s.first + k;
          BOOST_REQUIRE(i < n);
          ++covered[static_cast<size_t>(i)];
          BOOST_TEST((cpu[i] == 1.0f) == keep[k], "element " << i);
          kept += keep[k] ? 1 : 0;
        }
      }
      for (int64_t i = 0; i < n; ++i) BOOST_TEST(covered[static_cast<size_t>(i)] == 1);
      // p = 1/2: not all kept and not all dropped once there are enough elements
      if (n > 1000) {
        BOOST_TEST(kept > n / 4);
        BOOST_TEST(kept < 3 * n / 4);
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(cuda_row_plan)

// Row r, element j of the plan is the CPU loops' element (o, a, i) with
// o * inner + i == r and a == j: exactly once each.
BOOST_AUTO_TEST_CASE(rows_tile_the_tensor_in_the_cpu_order) {
  const int64_t shapes[][3] = {{1, 1, 1}, {4, 10, 1}, {3, 7, 5}, {1, 300, 2}, {70000, 3, 1}, {2, 1, 9}};
  for (const auto& s : shapes) {
    BOOST_TEST_CONTEXT("[" << s[0] << ", " << s[1] << ", " << s[2] << "]") {
      const plan::RowPlan rp = plan::row_plan(s[0], s[1], s[2]);
      BOOST_TEST(rp.rows == s[0] * s[2]);
      BOOST_TEST(rp.blocks >= 1u);
      BOOST_TEST(static_cast<int64_t>(rp.blocks) <= std::min(rp.rows, plan::kMaxRowBlocks));
      std::vector<int> seen(static_cast<size_t>(s[0] * s[1] * s[2]), 0);
      for (int64_t o = 0; o < s[0]; ++o)
        for (int64_t i = 0; i < s[2]; ++i)
          for (int64_t a = 0; a < s[1]; ++a) {
            const int64_t at = rp.at(o * s[2] + i, a);
            BOOST_REQUIRE(at == (o * s[1] + a) * s[2] + i);
            ++seen[static_cast<size_t>(at)];
          }
      BOOST_TEST(std::count(seen.begin(), seen.end(), 1) == static_cast<std::ptrdiff_t>(seen.size()));
    }
  }
  BOOST_TEST(plan::row_plan(0, 5, 1).blocks == 0u);
  BOOST_TEST(plan::row_plan(5, 0, 1).blocks == 0u);
  BOOST_TEST(plan::row_plan(5, 3, 0).blocks == 0u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(cuda_channel_plan)

// Element j of channel c is the CPU's (n, c, s) with j = n * S + s: each
// element of [N, C, S] exactly once.
BOOST_AUTO_TEST_CASE(channels_tile_the_tensor_in_the_cpu_order) {
  const int64_t shapes[][3] = {{1, 1, 1}, {8, 3, 1}, {2, 5, 49}, {3, 70000, 1}, {4, 1, 7}};
  for (const auto& s : shapes) {
    BOOST_TEST_CONTEXT("[" << s[0] << ", " << s[1] << ", " << s[2] << "]") {
      const plan::ChannelPlan cp = plan::channel_plan(s[0], s[1], s[2]);
      BOOST_TEST(cp.count() == s[0] * s[2]);
      BOOST_TEST(cp.blocks >= 1u);
      BOOST_TEST(static_cast<int64_t>(cp.blocks) <= std::min(s[1], plan::kMaxRowBlocks));
      std::vector<int> seen(static_cast<size_t>(s[0] * s[1] * s[2]), 0);
      for (int64_t c = 0; c < s[1]; ++c)
        for (int64_t n = 0; n < s[0]; ++n)
          for (int64_t k = 0; k < s[2]; ++k) {
            const int64_t at = cp.at(c, n * s[2] + k);
            BOOST_REQUIRE(at == (n * s[1] + c) * s[2] + k);
            ++seen[static_cast<size_t>(at)];
          }
      BOOST_TEST(std::count(seen.begin(), seen.end(), 1) == static_cast<std::ptrdiff_t>(seen.size()));
    }
  }
  BOOST_TEST(plan::channel_plan(4, 0, 3).blocks == 0u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(pending_status_checks)

// A CPU status is checked at once (the CPU kernel has returned): the error
// comes from the call, and nothing is left pending.
BOOST_AUTO_TEST_CASE(a_cpu_status_is_checked_at_once) {
  const mg::Tensor status = mg::tensor<int64_t>({3, 17}, {2});
  int calls = 0;
  mg::backend::defer_status_check(status, [&](const int64_t* st) {
    ++calls;
    BOOST_TEST(st[0] == 3);
    BOOST_TEST(st[1] == 17);
  });
  BOOST_TEST(calls == 1);
  BOOST_CHECK_THROW(mg::backend::defer_status_check(
                        status, [](const int64_t* st) { if (st[0] >= 0) throw mg::ValueError("bad label"); }),
                    mg::ValueError);
  BOOST_TEST(mg::backend::pending_check_count() == 0);
  mg::backend::run_pending_checks(0);  // nothing pending: nothing happens
}

BOOST_AUTO_TEST_CASE(eager_checks_can_be_switched) {
  const bool before = mg::backend::eager_status_checks();
  mg::backend::set_eager_status_checks(true);
  BOOST_TEST(mg::backend::eager_status_checks());
  mg::backend::set_eager_status_checks(false);
  BOOST_TEST(!mg::backend::eager_status_checks());
  mg::backend::set_eager_status_checks(before);
}

BOOST_AUTO_TEST_SUITE_END()
