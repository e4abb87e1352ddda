// DistributedSampler: the ranks' shares partition one permutation that
// every rank draws alike, new each epoch.
#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "../common/test_util.hpp"
#include "dist_util.hpp"

namespace mg = mixgrad;
namespace dist = mixgrad::distributed;
using dist_test::world;

BOOST_AUTO_TEST_SUITE(sampler)

BOOST_AUTO_TEST_CASE(shares_partition_the_epoch_and_pad_evenly) {
  for (int W : {1, 2, 3, 4})
    for (int64_t n : {0, 1, 10, 11, 97}) {
      BOOST_TEST_CONTEXT(W << " ranks, " << n << " samples") {
        std::vector<int64_t> all;
        for (int r = 0; r < W; ++r) {
          dist::DistributedSampler s(r, W, n, {.seed = 5});
          const auto mine = s.indices(3);
          BOOST_TEST(static_cast<int64_t>(mine.size()) == (n + W - 1) / W);
          all.insert(all.end(), mine.begin(), mine.end());
        }
        const std::set<int64_t> distinct(all.begin(), all.end());
        BOOST_TEST(static_cast<int64_t>(distinct.size()) == n);  // every sample, padding repeats only
        BOOST_TEST(static_cast<int64_t>(all.size()) - n < W);
        for (int r = 0; r < W; ++r) {
          dist::DistributedSampler d(r, W, n, {.seed = 5, .drop_last = true});
          BOOST_TEST(static_cast<int64_t>(d.indices(3).size()) == n / W);
        }
      }
    }
}

BOOST_AUTO_TEST_CASE(order_depends_on_seed_and_epoch_only) {
  dist::DistributedSampler a(0, 2, 1000, {.seed = 9}), b(1, 2, 1000, {.seed = 9}), c(0, 2, 1000, {.seed = 10});
  BOOST_TEST(a.order(4) == b.order(4));
  BOOST_TEST(a.order(4) != a.order(5));
  BOOST_TEST(a.order(4) != c.order(4));
  auto sorted = a.order(4);
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> id(1000);
  std::iota(id.begin(), id.end(), 0);
  BOOST_TEST(sorted == id);
  dist::DistributedSampler plain(0, 1, 5, {.shuffle = false});
  BOOST_TEST(plain.indices(2) == std::vector<int64_t>({0, 1, 2, 3, 4}));
  test_util::check_error<mg::ValueError>([] { dist::DistributedSampler(2, 2, 10); }, {"rank 2"});
  test_util::check_error<mg::ValueError>([&] { a.indices(-1); }, {"epoch"});
}

BOOST_AUTO_TEST_CASE(ranks_agree_across_processes) {
  // The shares the ranks actually drew, gathered: together one permutation.
  const int W = world().world_size(), r = world().rank();
  const int64_t n = 101;
  dist::DistributedSampler s(r, W, n, {.seed = 3});
  for (int64_t epoch : {0, 1}) {
    const auto mine = s.indices(epoch);
    mg::Tensor t = mg::tensor(mine, mg::Shape{static_cast<int64_t>(mine.size())});
    const auto all = dist::all_gather(world(), t).to_vector<int64_t>();
    const auto order = s.order(epoch);
    const int64_t per = static_cast<int64_t>(mine.size());
    for (int q = 0; q < W; ++q)
      for (int64_t k = 0; k < per; ++k) BOOST_TEST(all[q * per + k] == order[(k * W + q) % n]);
  }
}

BOOST_AUTO_TEST_CASE(sharded_dataset_maps_to_the_share) {
  mg::data::TensorDataset base(mg::arange(0.0, 10.0, 1.0).reshape(mg::Shape{10, 1}), mg::arange(10));
  auto shard = std::make_shared<dist::ShardedDataset>(std::make_shared<mg::data::TensorDataset>(base),
                                                      dist::DistributedSampler(1, 3, 10, {.seed = 1}));
  shard->set_epoch(2);
  const auto want = shard->sampler().indices(2);
  BOOST_TEST(shard->size() == 4);
  mg::data::DataLoader loader(std::shared_ptr<const mg::data::Dataset>(shard), {.batch_size = 3});
  std::vector<int64_t> seen;
  for (const auto& [x, y] : loader)
    for (int64_t v : y.to_vector<int64_t>()) seen.push_back(v);
  BOOST_TEST(seen == want);
  test_util::check_error<mg::ValueError>(
      [&] { dist::ShardedDataset(std::make_shared<mg::data::TensorDataset>(base), dist::DistributedSampler(0, 1, 9)); },
      {"9", "10"});
}

BOOST_AUTO_TEST_SUITE_END()
