// dtr::segment under dtr::enable: the same gradients, bit for bit, as
// without DTR (float32, bfloat16 autocast, dropout, a GradScaler step that
// overflows), evictions that bring the peak under the threshold and their
// recomputations counted, segments evicted in parts (products' results
// last, handed back to the recomputation while kept), the minimum evictee
// size and pin() respected, a segment above the threshold by itself a
// ValueError that leaves the tape as it was, and plain functions when DTR is
// off.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autodiff/inspect.hpp"
#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"

namespace mg = mixgrad;
namespace nn = mixgrad::nn;

namespace {

// Turns DTR on for a scope, and off (with its counters reset) after it.
struct DtrOn {
  explicit DtrOn(const mg::dtr::Options& o) {
    mg::dtr::enable(o);
    mg::dtr::reset_stats();
  }
  ~DtrOn() {
    mg::dtr::disable();
    mg::dtr::reset_stats();
  }
};

struct Net {
  std::vector<nn::Sequential> blocks;
  Net() {
    mg::manual_seed(3);
    for (int i = 0; i < 6; ++i)
      blocks.push_back(nn::Sequential(nn::Linear(128, 512), nn::GELU(), nn::Dropout(0.1), nn::Linear(512, 128)));
  }
  std::vector<mg::Tensor> parameters() {
    std::vector<mg::Tensor> p;
    for (auto& b : blocks)
      for (auto& t : b.parameters()) p.push_back(t);
    return p;
  }
};

struct Run {
  std::vector<std::vector<float>> grads;
  int64_t peak = 0;
  size_t tape = 0;
  mg::dtr::Stats stats;
};

// DTR for one step: a threshold at `fraction` of `peak` above the step's
// base (parameters, gradients, input); off when fraction is 0.
struct Budget {
  double fraction = 0;
  int64_t peak = 0;
  int64_t minimum = 256 << 10;  // the blocks' parts are 512 KiB
};

// One step's gradients and activation peak; `pin` pins the first block.
Run step(bool autocast, bool scaler = false, bool poison = false, bool pin = false, Budget budget = {}) {
  Net net;
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());
  if (!scaler)  // the gradients' memory before the peak (a scaler step wants them fresh)
    for (auto& p : net.parameters()) p.set_grad(mg::zeros_like(p));
  mg::manual_seed(9);
  const mg::Tensor x = mg::normal({256, 128});
  mg::amp::GradScaler gs({.init_scale = 1024.0});
  const int64_t base = mg::allocated_bytes();
  std::optional<DtrOn> on;
  if (budget.fraction > 0)
    on.emplace(mg::dtr::Options{.eviction_threshold = base + static_cast<int64_t>(budget.fraction * budget.peak),
                                .evictee_minimum_size = budget.minimum});
  mg::reset_peak_allocated_bytes();
  Run r;
  mg::manual_seed(21);  // dropout's draws
  {
    auto rec = gm.record();
    mg::Tensor h = x, loss;
    {
      mg::amp::autocast scope(autocast);
      for (size_t i = 0; i < net.blocks.size(); ++i) {
        auto& b = net.blocks[i];
        const bool pinned = pin && i == 0;
        h = mg::dtr::segment(
            [&b, pinned](const mg::Tensor& t) {
              if (pinned) mg::dtr::pin();
              return b(t);
            },
            h, "block" + std::to_string(i));
      }
      loss = mg::F::mean(h * h);
    }
    if (poison) loss = loss * std::numeric_limits<double>::infinity();
    r.tape = mg::autodiff::detail::tape_size(gm);
    if (scaler)
      gs.backward(gm, loss);
    else
      gm.backward(loss);
  }
  r.peak = mg::peak_allocated_bytes() - base;
  r.stats = mg::dtr::stats();
  for (auto& p : net.parameters()) r.grads.push_back(p.grad().to(mg::DType::float32).to_vector<float>());
  return r;
}

using test_util::same_bits;

// Blocks as Net's (and a tanh), each recording the id of its first linear's result every
// time it runs: the same id in the recomputation means the result was handed
// back, not computed again.
struct Parted {
  std::vector<std::vector<float>> grads;
  std::vector<std::vector<uint64_t>> ids;  // by block, by run
  mg::dtr::Stats stats;
};

// One step; DTR on (with everything above the step's base evicted, down to
// parts of `minimum` bytes) unless `minimum` is empty.
Parted parted(std::optional<int64_t> minimum) {
  mg::manual_seed(5);
  std::vector<std::shared_ptr<nn::Linear>> fc1, fc2;
  mg::autodiff::GradManager gm;
  for (int i = 0; i < 4; ++i) {
    fc1.push_back(std::make_shared<nn::Linear>(128, 512));
    fc2.push_back(std::make_shared<nn::Linear>(512, 128));
    gm.attach(fc1.back()->parameters()).attach(fc2.back()->parameters());
  }
  const mg::Tensor x = mg::normal({256, 128});
  std::optional<DtrOn> on;
  if (minimum)
    on.emplace(mg::dtr::Options{.eviction_threshold = mg::allocated_bytes(), .evictee_minimum_size = *minimum});
  Parted r;
  r.ids.resize(fc1.size());
  mg::manual_seed(21);
  {
    auto rec = gm.record();
    mg::Tensor h = x;
    for (size_t i = 0; i < fc1.size(); ++i)
      h = mg::dtr::segment(
          [&, i](const mg::Tensor& t) {
            const mg::Tensor a = (*fc1[i])(t);
            r.ids[i].push_back(a.id());
            return (*fc2[i])(mg::F::dropout(mg::F::tanh(mg::F::gelu(a)), 0.1));
          },
          h, "block" + std::to_string(i));
    gm.backward(mg::F::mean(h * h));
  }
  r.stats = mg::dtr::stats();
  for (auto& l : fc1)
    for (auto& p : l->parameters()) r.grads.push_back(p.grad().to_vector<float>());
  for (auto& l : fc2)
    for (auto& p : l->parameters()) r.grads.push_back(p.grad().to_vector<float>());
  return r;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(dtr)

BOOST_AUTO_TEST_CASE(off_a_segment_is_its_function) {
  const Run plain = step(false);
  BOOST_TEST(plain.tape >= 6u * 4u);  // every op of every block on the tape
  BOOST_TEST(mg::dtr::stats().segments == 0);
}

BOOST_AUTO_TEST_CASE(kept_segments_give_the_same_gradients_and_recompute_nothing) {
  const Run plain = step(false);
  const Run kept = step(false, false, false, false, {.fraction = 1e6, .peak = plain.peak});
  BOOST_TEST(same_bits(plain.grads, kept.grads));
  BOOST_TEST(kept.tape == 6u + 2u);  // one node per segment, then the loss's ops
  BOOST_TEST(kept.stats.segments == 6);
  BOOST_TEST(kept.stats.evictions == 0);
  BOOST_TEST(kept.stats.recomputations == 0);
  BOOST_TEST(kept.peak <= plain.peak + plain.peak / 20);
}

BOOST_AUTO_TEST_CASE(evictions_bring_the_peak_down_with_the_same_gradients) {
  const Run plain = step(false);
  const Run evicting = step(false, false, false, false, {.fraction = 0.5, .peak = plain.peak});
  const mg::dtr::Stats& s = evicting.stats;
  BOOST_TEST_MESSAGE("activation peak " << plain.peak / 1024 << " KiB plain, " << evicting.peak / 1024
                                        << " KiB with DTR at half of it; " << s.evictions << " evictions, "
                                        << s.recomputations << " recomputations");
  BOOST_TEST(same_bits(plain.grads, evicting.grads));  // dropout included: the same draws again
  BOOST_TEST(s.evictions > 0);
  BOOST_TEST(s.recomputations == s.evictions);
  BOOST_TEST(s.evicted_bytes > 0);
  BOOST_TEST(evicting.peak < plain.peak * 3 / 4);
}

// A segment is evicted in parts: its graph (what the cheap ops saved) first,
// the products' results after it. A recomputation hands back the results
// still kept and computes the dropped ones again; the gradients are the same.
BOOST_AUTO_TEST_CASE(segments_are_evicted_in_parts_and_reuse_their_products) {
  const Parted plain = parted(std::nullopt);
  // Parts of 768 KiB and more: the graphs (tanh's and dropout's results and
  // the mask), not the first linear's 512 KiB result.
  const Parted graphs = parted(768 << 10);
  BOOST_TEST(same_bits(plain.grads, graphs.grads));
  BOOST_TEST(graphs.stats.evictions == 4);
  BOOST_TEST(graphs.stats.dropped_results == 0);
  BOOST_TEST(graphs.stats.recomputations == 4);
  for (const auto& runs : graphs.ids) {
    BOOST_TEST_REQUIRE(runs.size() == 2u);
    BOOST_TEST(runs[0] == runs[1]);  // handed back
  }
  const Parted all = parted(0);
  BOOST_TEST(same_bits(plain.grads, all.grads));
  BOOST_TEST(all.stats.evictions == 4);
  BOOST_TEST(all.stats.dropped_results == 4);  // the first linears' (the second's are the outputs)
  BOOST_TEST(all.stats.evicted_bytes > graphs.stats.evicted_bytes);
  for (const auto& runs : all.ids) {
    BOOST_TEST_REQUIRE(runs.size() == 2u);
    BOOST_TEST(runs[0] != runs[1]);  // computed again
  }
}

BOOST_AUTO_TEST_CASE(bfloat16_autocast_and_an_overflowing_scaler_step_match) {
  const Run plain = step(true, true), plain_inf = step(false, true, true);
  const Run evicting = step(true, true, false, false, {.fraction = 0.1, .peak = plain.peak, .minimum = 0});
  BOOST_TEST(evicting.stats.evictions > 0);
  BOOST_TEST(same_bits(plain.grads, evicting.grads));
  const Run evicting_inf = step(false, true, true, false, {.fraction = 0.1, .peak = plain.peak, .minimum = 0});
  BOOST_TEST(evicting_inf.stats.evictions > 0);
  for (size_t i = 0; i < plain_inf.grads.size(); ++i)
    for (size_t j = 0; j < plain_inf.grads[i].size(); ++j)
      BOOST_TEST((std::isfinite(plain_inf.grads[i][j]) == std::isfinite(evicting_inf.grads[i][j])));
}

BOOST_AUTO_TEST_CASE(small_and_pinned_segments_are_never_evicted) {
  const Run plain = step(false);
  const Run small = step(false, false, false, false, {.fraction = 1e-9, .peak = 1, .minimum = int64_t{1} << 40});
  BOOST_TEST(same_bits(plain.grads, small.grads));
  BOOST_TEST(small.stats.evictions == 0);  // every segment is below the minimum size
  const Run pinned = step(false, false, false, true, {.fraction = 1e-9, .peak = 1, .minimum = 0});
  BOOST_TEST(same_bits(plain.grads, pinned.grads));
  BOOST_TEST(pinned.stats.evictions == 5);  // all but the pinned first block
}

BOOST_AUTO_TEST_CASE(a_segment_above_the_threshold_by_itself_is_an_error_and_the_tape_stays) {
  mg::manual_seed(2);
  nn::Linear small(8, 8), big(8, 4096);
  mg::autodiff::GradManager gm;
  gm.attach(small.parameters()).attach(big.parameters());
  DtrOn on({.eviction_threshold = mg::allocated_bytes() + (256 << 10), .evictee_minimum_size = 0});
  auto rec = gm.record();
  const mg::Tensor x = mg::normal({64, 8});
  const mg::Tensor h = mg::F::tanh(small(x));
  try {
    (void)mg::dtr::segment([&](const mg::Tensor& t) { return mg::F::gelu(big(t)); }, h, "wide");
    BOOST_ERROR("no error");
  } catch (const mg::ValueError& e) {
    const std::string what = e.what();
    BOOST_TEST(what.find("'wide'") != std::string::npos, what);
    BOOST_TEST(what.find("MiB") != std::string::npos, what);
  }
  gm.backward(mg::F::sum(h));  // the tape before the failed segment is whole
  BOOST_TEST(small.weight().grad().defined());
  BOOST_TEST(!big.weight().grad().defined());
}

// nn::Segment: evicted and recomputed, batch norm's running statistics are
// updated once, as without DTR, and the gradients are the same.
BOOST_AUTO_TEST_CASE(segment_modules_update_batch_norm_once) {
  auto make = [] {
    mg::manual_seed(6);
    return nn::Sequential(nn::Conv2d(3, 8, 3, {.padding = 1}), nn::BatchNorm2d(8), nn::ReLU());
  };
  nn::Sequential plain = make();
  nn::Segment wrapped(make());
  mg::manual_seed(8);
  const mg::Tensor x = mg::normal({4, 3, 16, 16});
  mg::dtr::Stats st;
  for (nn::Module* m : {static_cast<nn::Module*>(&plain), static_cast<nn::Module*>(&wrapped)}) {
    mg::autodiff::GradManager gm;
    gm.attach(m->parameters());
    std::optional<DtrOn> on;
    // Room for the segment's output and some, not for what it keeps too.
    if (m == &wrapped)
      on.emplace(mg::dtr::Options{.eviction_threshold = mg::allocated_bytes() + 40000, .evictee_minimum_size = 0});
    auto rec = gm.record();
    const mg::Tensor h = mg::F::mul((*m)(x), 1.0);  // after the segment: room for it must be made
    gm.backward(mg::F::sum(h));
    st = mg::dtr::stats();
  }
  BOOST_TEST(st.evictions == 1);
  BOOST_TEST(st.recomputations == 1);
  const auto a = plain.state_dict(), b = wrapped.module().state_dict();
  for (const auto& [k, t] : a) BOOST_TEST((t.to_vector<float>() == b.find(k)->to_vector<float>()), k);
  for (size_t i = 0; i < plain.parameters().size(); ++i)
    BOOST_TEST((plain.parameters()[i].grad().to_vector<float>() ==
                wrapped.module().parameters()[i].grad().to_vector<float>()));
}

BOOST_AUTO_TEST_CASE(bad_options_are_value_errors) {
  BOOST_CHECK_THROW(mg::dtr::enable({.eviction_threshold = 0}), mg::ValueError);
  BOOST_CHECK_THROW(mg::dtr::enable({.eviction_threshold = 1, .evictee_minimum_size = -1}), mg::ValueError);
  BOOST_TEST(!mg::dtr::is_enabled());
}

BOOST_AUTO_TEST_SUITE_END()
