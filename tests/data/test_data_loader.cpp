#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
using mg::data::DataLoader;
using mg::data::TensorDataset;

namespace {

// Sample i: images row [i, 100 + i] (float32), label 1000 + i (int64).
TensorDataset numbered(int64_t n) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    x.push_back(static_cast<float>(i));
    x.push_back(static_cast<float>(100 + i));
    y.push_back(1000 + i);
  }
  return TensorDataset(mg::tensor(x, {n, 2}), mg::tensor(y, {n}));
}

// The sample indices of one epoch, batch by batch; checks rows and labels agree.
std::vector<std::vector<int64_t>> epoch_of(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& [x, y] : loader) {
    BOOST_TEST(x.is_contiguous());
    std::vector<int64_t> ids;
    const auto xs = x.to_vector<float>();
    const auto ys = y.to_vector<int64_t>();
    for (size_t r = 0; r < ys.size(); ++r) {
      BOOST_TEST(xs[2 * r] + 1000 == ys[r]);
      BOOST_TEST(xs[2 * r + 1] + 900 == ys[r]);
      ids.push_back(ys[r] - 1000);
    }
    out.push_back(ids);
  }
  return out;
}

std::vector<int64_t> flat(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> out;
  for (const auto& b : batches) out.insert(out.end(), b.begin(), b.end());
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(data_loader)

BOOST_AUTO_TEST_CASE(sequential_batches_keep_the_partial_last_one) {
  DataLoader loader(numbered(10), {.batch_size = 4});
  BOOST_TEST(loader.size() == 3);
  const auto batches = epoch_of(loader);
  BOOST_REQUIRE_EQUAL(batches.size(), 3u);
  BOOST_TEST(batches[0] == std::vector<int64_t>({0, 1, 2, 3}), boost::test_tools::per_element());
  BOOST_TEST(batches[2] == std::vector<int64_t>({8, 9}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(drop_last) {
  DataLoader loader(numbered(10), {.batch_size = 4, .drop_last = true});
  BOOST_TEST(loader.size() == 2);
  BOOST_TEST(epoch_of(loader).size() == 2u);
  DataLoader exact(numbered(8), {.batch_size = 4, .drop_last = true});
  BOOST_TEST(epoch_of(exact).size() == 2u);
  DataLoader tiny(numbered(3), {.batch_size = 4, .drop_last = true});
  BOOST_TEST(epoch_of(tiny).empty());
}

BOOST_AUTO_TEST_CASE(shuffle_is_a_seeded_permutation_per_epoch) {
  DataLoader a(numbered(50), {.batch_size = 8, .shuffle = true, .seed = 3});
  DataLoader b(numbered(50), {.batch_size = 8, .shuffle = true, .seed = 3});
  DataLoader c(numbered(50), {.batch_size = 8, .shuffle = true, .seed = 4});
  const auto a0 = flat(epoch_of(a)), a1 = flat(epoch_of(a));
  const auto b0 = flat(epoch_of(b)), b1 = flat(epoch_of(b));
  const auto c0 = flat(epoch_of(c));
  std::vector<int64_t> sorted = a0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(50);
  for (int i = 0; i < 50; ++i) identity[i] = i;
  BOOST_TEST(sorted == identity, boost::test_tools::per_element());  // every sample once
  BOOST_TEST(a0 != identity);
  BOOST_TEST(a0 == b0, boost::test_tools::per_element());  // same seed, same epoch
  BOOST_TEST(a1 == b1, boost::test_tools::per_element());
  BOOST_TEST(a0 != a1);  // the epoch mixes into the order
  BOOST_TEST(a0 != c0);
  BOOST_TEST(a.epoch() == 2);
  // Resuming at epoch 1 replays epoch 1.
  a.set_epoch(1);
  BOOST_TEST(flat(epoch_of(a)) == a1, boost::test_tools::per_element());
  BOOST_TEST(a.order(0) == a0, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(unset_seed_follows_manual_seed) {
  mg::manual_seed(11);
  DataLoader a(numbered(30), {.batch_size = 30, .shuffle = true});
  mg::manual_seed(11);
  DataLoader b(numbered(30), {.batch_size = 30, .shuffle = true});
  BOOST_TEST(a.order(0) == b.order(0), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(batches_are_copies) {
  auto ds = numbered(6);
  DataLoader loader(ds, {.batch_size = 6});
  for (const auto& batch : loader) {
    mg::Tensor x = batch.images;
    x.data<float>()[0] = -1.f;
  }
  BOOST_TEST(ds.images().at<float>({0, 0}) == 0.f);
}

BOOST_AUTO_TEST_CASE(datasets_check_their_inputs) {
  BOOST_CHECK_THROW(TensorDataset(mg::zeros({4, 2}), mg::zeros({3})), mg::ShapeError);
  auto ds = numbered(5);
  BOOST_CHECK_THROW(ds.get_batch(std::vector<int64_t>{0, 5}), mg::ShapeError);
  BOOST_CHECK_THROW(ds.get_batch(std::vector<int64_t>{-1}), mg::ShapeError);
  BOOST_CHECK_THROW(DataLoader(ds, {.batch_size = 0}), mg::ValueError);
  auto head = ds.narrow(1, 3);
  BOOST_TEST(head.size() == 3);
  BOOST_TEST(head.labels().at<int64_t>({0}) == 1001);
  BOOST_CHECK_THROW(ds.narrow(3, 3), mg::ShapeError);
  BOOST_TEST(ds.get_batch(std::vector<int64_t>{}).images.shape() == mg::Shape({0, 2}));
}

BOOST_AUTO_TEST_CASE(the_device_option_on_the_cpu_changes_nothing) {
  DataLoader plain(numbered(10), {.batch_size = 4, .shuffle = true, .seed = 9});
  DataLoader on_cpu(numbered(10), {.batch_size = 4, .shuffle = true, .seed = 9, .device = mg::Device::cpu()});
  BOOST_TEST(on_cpu.options().device == mg::Device::cpu());
  const auto a = epoch_of(plain), b = epoch_of(on_cpu);
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) BOOST_TEST(a[i] == b[i], boost::test_tools::per_element());
  for (const auto& [x, y] : on_cpu) {
    BOOST_TEST(x.device() == mg::Device::cpu());
    BOOST_TEST(y.device() == mg::Device::cpu());
  }
}

BOOST_AUTO_TEST_CASE(a_cuda_device_that_is_not_there_is_refused_up_front) {
  const int count = mg::cuda::device_count();
  // Device index `count` never exists; cuda:0 does not either on a machine without a GPU.
  try {
    DataLoader loader(numbered(10), {.batch_size = 4, .device = mg::Device::cuda(count)});
    BOOST_ERROR("expected DeviceError");
  } catch (const mg::DeviceError& e) {
    const std::string msg = e.what();
    BOOST_TEST(msg.find("DataLoader") != std::string::npos, msg);
    BOOST_TEST(msg.find("cuda:" + std::to_string(count)) != std::string::npos, msg);
  }
  if (count == 0) BOOST_CHECK_THROW(DataLoader(numbered(3), {.device = mg::Device::cuda(0)}), mg::DeviceError);
}

BOOST_AUTO_TEST_SUITE_END()
