// autodiff::checkpoint and nn::Checkpoint: the same gradients, bit for bit,
// as without checkpointing (float32, bfloat16 autocast, dropout, a
// GradScaler step that overflows, nested checkpoints, batch norm; a double
// backward within float tolerance), a tape of one op per checkpoint, a lower
// activation peak, and a typed error for a recomputation that differs.
// Selective checkpointing (`keep`): the same, the kept results handed back
// rather than recomputed, a peak between the two, and its errors.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "autodiff/inspect.hpp"
#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"

namespace mg = mixgrad;
namespace nn = mixgrad::nn;

namespace {

nn::Sequential block(int64_t width) {
  return nn::Sequential(nn::Linear(width, 2 * width), nn::GELU(), nn::Dropout(0.1), nn::Linear(2 * width, width));
}

// Three blocks and a head, each parameter used once; `wrap` checkpoints the blocks.
struct Net {
  std::vector<nn::Sequential> blocks;
  nn::Linear head{16, 4};
  bool wrap = false;
  bool nested = false;
  mg::autodiff::CheckpointOptions options;  // `keep` for selective checkpointing
  Net() {
    mg::manual_seed(3);
    for (int i = 0; i < 3; ++i) blocks.push_back(block(16));
    head = nn::Linear(16, 4);
  }
  mg::Tensor operator()(const mg::Tensor& x) {
    mg::Tensor h = x;
    if (nested) {  // the first two blocks in one checkpoint, each also checkpointed
      h = mg::autodiff::checkpoint(
          [this](const mg::Tensor& in) {
            mg::Tensor a = mg::autodiff::checkpoint([this](const mg::Tensor& t) { return blocks[0](t); }, in, options);
            return mg::autodiff::checkpoint([this](const mg::Tensor& t) { return blocks[1](t); }, a, options);
          },
          h, options);
      h = blocks[2](h);
    } else {
      for (auto& b : blocks)
        h = wrap ? mg::autodiff::checkpoint([&b](const mg::Tensor& t) { return b(t); }, h, options) : b(h);
    }
    return head(h);
  }
  std::vector<mg::Tensor> parameters() {
    std::vector<mg::Tensor> p;
    for (auto& b : blocks)
      for (auto& t : b.parameters()) p.push_back(t);
    for (auto& t : head.parameters()) p.push_back(t);
    return p;
  }
};

struct Result {
  std::vector<std::vector<float>> grads;
  float loss = 0;
  size_t tape = 0;
  uint64_t rng_after = 0;
};

mg::Tensor inputs() {
  mg::manual_seed(9);
  return mg::normal({8, 16});
}

// One step's gradients: optional bf16 autocast, optional scaler (with `poison`
// making the loss infinite), checkpointing per `mode` (0 none, 1 each block,
// 2 nested; 3 and 4 as 1 and 2, selective: the linears' results kept).
Result run(int mode, bool autocast, bool scaler = false, bool poison = false) {
  Net net;
  net.wrap = mode == 1 || mode == 3;
  net.nested = mode == 2 || mode == 4;
  if (mode >= 3) net.options.keep = mg::autodiff::kept_products();
  mg::Tensor x = inputs();
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());
  mg::amp::GradScaler gs({.init_scale = 1024.0});
  Result r;
  mg::manual_seed(21);  // dropout's draws
  {
    auto rec = gm.record();
    mg::Tensor loss;
    {
      mg::amp::autocast scope(autocast);
      const mg::Tensor out = net(x);
      loss = mg::F::mean(out * out);
    }
    if (poison) loss = loss * std::numeric_limits<double>::infinity();
    r.loss = loss.to(mg::DType::float32).item<float>();
    r.tape = mg::autodiff::detail::tape_size(gm);
    if (scaler)
      gs.backward(gm, loss);
    else
      gm.backward(loss);
  }
  for (auto& p : net.parameters()) r.grads.push_back(p.grad().to(mg::DType::float32).to_vector<float>());
  return r;
}

using test_util::same_bits;

// Peak memory of a forward and backward above what the parameters, their
// gradients and the input hold: 8 blocks of width 128, batch 512. mode 0:
// plain, 1: each block checkpointed, 2: checkpointed keeping the linears.
int64_t activation_peak(int mode) {
  mg::manual_seed(1);
  std::vector<nn::Sequential> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(nn::Sequential(nn::Linear(128, 512), nn::GELU(), nn::Linear(512, 128)));
  mg::autodiff::GradManager gm;
  for (auto& b : blocks) {
    gm.attach(b.parameters());
    for (auto& p : b.parameters()) p.set_grad(mg::zeros_like(p));  // the gradients' memory, before the peak
  }
  const mg::Tensor x = mg::normal({512, 128});
  const int64_t base = mg::allocated_bytes();
  mg::reset_peak_allocated_bytes();
  {
    auto rec = gm.record();
    mg::Tensor h = x;
    mg::autodiff::CheckpointOptions o;
    if (mode == 2) o.keep = {"linear"};
    for (auto& b : blocks)
      h = mode > 0 ? mg::autodiff::checkpoint([&b](const mg::Tensor& t) { return b(t); }, h, o) : b(h);
    gm.backward(mg::F::mean(h));
  }
  return mg::peak_allocated_bytes() - base;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(checkpointing)

BOOST_AUTO_TEST_CASE(float32_gradients_are_bit_identical_and_the_tape_shorter) {
  const Result plain = run(0, false), ckpt = run(1, false), nested = run(2, false);
  BOOST_TEST(plain.loss == ckpt.loss);
  BOOST_TEST(same_bits(plain.grads, ckpt.grads));
  BOOST_TEST(same_bits(plain.grads, nested.grads));
  // Without: every op of the three blocks (4 each and more); with: one per block.
  BOOST_TEST(plain.tape >= 12u);
  BOOST_TEST(ckpt.tape < plain.tape / 2);
}

BOOST_AUTO_TEST_CASE(bfloat16_autocast_is_recomputed_in_bfloat16) {
  const Result plain = run(0, true), ckpt = run(1, true), fp32 = run(0, false);
  BOOST_TEST(same_bits(plain.grads, ckpt.grads));
  BOOST_TEST(!same_bits(plain.grads, fp32.grads));  // the autocast run differs from float32: the test sees the dtype
}

BOOST_AUTO_TEST_CASE(grad_scaler_steps_and_overflows_match) {
  BOOST_TEST(same_bits(run(0, true, true).grads, run(1, true, true).grads));
  const Result plain = run(0, false, true, true), ckpt = run(1, false, true, true);
  BOOST_TEST(plain.grads.size() == ckpt.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i)
    for (size_t j = 0; j < plain.grads[i].size(); ++j)
      BOOST_TEST((std::isfinite(plain.grads[i][j]) == std::isfinite(ckpt.grads[i][j])));
}

BOOST_AUTO_TEST_CASE(checkpointing_cuts_the_activation_peak) {
  const int64_t plain = activation_peak(0), ckpt = activation_peak(1);
  BOOST_TEST_MESSAGE("activation peak: " << plain / 1024 << " KiB plain, " << ckpt / 1024 << " KiB checkpointed");
  BOOST_TEST(ckpt < plain / 2);
}

BOOST_AUTO_TEST_CASE(the_input_gets_its_gradient) {
  mg::manual_seed(4);
  nn::Sequential b = block(8);
  b.eval();  // no dropout: the two runs draw differently otherwise
  mg::Tensor x1 = mg::normal({4, 8}), x2 = x1.clone();
  mg::autodiff::GradManager gm;
  gm.attach({x1, x2});
  {
    auto rec = gm.record();
    gm.backward({mg::F::sum(b(x1)), mg::F::sum(mg::autodiff::checkpoint([&](const mg::Tensor& t) { return b(t); }, x2))});
  }
  BOOST_TEST((x1.grad().to_vector<float>() == x2.grad().to_vector<float>()));
}

BOOST_AUTO_TEST_CASE(batch_norm_statistics_are_updated_once) {
  auto make = [] {
    mg::manual_seed(6);
    return nn::Sequential(nn::Conv2d(3, 4, 3, {.padding = 1}), nn::BatchNorm2d(4), nn::ReLU());
  };
  nn::Sequential plain = make();
  nn::Checkpoint wrapped(make());
  mg::manual_seed(8);
  const mg::Tensor x = mg::normal({2, 3, 6, 6});
  for (nn::Module* m : {static_cast<nn::Module*>(&plain), static_cast<nn::Module*>(&wrapped)}) {
    mg::autodiff::GradManager gm;
    gm.attach(m->parameters());
    auto rec = gm.record();
    gm.backward(mg::F::sum((*m)(x)));
  }
  const auto a = plain.state_dict(), b = wrapped.module().state_dict();
  for (const auto& [k, t] : a) BOOST_TEST((t.to_vector<float>() == b.find(k)->to_vector<float>()), k);
  for (size_t i = 0; i < plain.parameters().size(); ++i)
    BOOST_TEST((plain.parameters()[i].grad().to_vector<float>() ==
                wrapped.module().parameters()[i].grad().to_vector<float>()));
}

BOOST_AUTO_TEST_CASE(a_recomputation_that_differs_is_an_error_naming_the_checkpoint) {
  mg::manual_seed(2);
  nn::Linear fc(4, 4);
  int calls = 0;
  mg::autodiff::GradManager gm;
  gm.attach(fc.parameters());
  {
    auto rec = gm.record();
    mg::Tensor y = mg::autodiff::checkpoint(
        [&](const mg::Tensor& t) { return ++calls == 1 ? fc(t) : mg::F::narrow(fc(t), 1, 0, 2); }, mg::normal({2, 4}),
        {.name = "shrinking"});
    try {
      gm.backward(mg::F::sum(y));
      BOOST_ERROR("no error");
    } catch (const mg::StateError& e) {
      BOOST_TEST(std::string(e.what()).find("'shrinking'") != std::string::npos, e.what());
    }
  }
  for (const auto& p : fc.parameters()) BOOST_TEST(!p.grad().defined());
}

// A gradient penalty (create_graph, then a backward through the gradient)
// gives the same gradients with and without the checkpoint.
BOOST_AUTO_TEST_CASE(double_backward_goes_through_the_recomputation) {
  auto run = [](bool wrap) {
    mg::manual_seed(2);
    nn::Linear fc1(4, 6), fc2(6, 3);
    mg::Tensor x = mg::normal({5, 4});
    mg::autodiff::GradManager gm;
    gm.attach(fc1.parameters()).attach(fc2.parameters()).attach(x);
    auto rec = gm.record();
    auto body = [&](const mg::Tensor& t) { return fc2(mg::F::tanh(fc1(t))); };
    mg::Tensor y = wrap ? mg::autodiff::checkpoint(body, x) : body(x);
    gm.backward(mg::F::sum(y * y), mg::Tensor(), {.create_graph = true});
    const mg::Tensor g1 = fc1.weight().grad(), gx = x.grad();
    std::vector<float> first = g1.to_vector<float>();
    gm.backward(mg::F::sum(g1 * g1) + mg::F::sum(gx * gx));
    std::vector<std::vector<float>> out{first};
    for (const auto& p : {fc1.weight(), fc1.bias(), fc2.weight(), fc2.bias(), x}) out.push_back(p.grad().to_vector<float>());
    return out;
  };
  const auto plain = run(false), ckpt = run(true);
  BOOST_REQUIRE_EQUAL(plain.size(), ckpt.size());
  for (size_t i = 0; i < plain.size(); ++i)
    for (size_t j = 0; j < plain[i].size(); ++j)
      BOOST_TEST(ckpt[i][j] == plain[i][j], boost::test_tools::tolerance(1e-5f));
  // The second backward added a second-order term to fc2's weight gradient.
  BOOST_TEST(!same_bits({plain[0]}, {plain[1]}));
}

BOOST_AUTO_TEST_CASE(outside_a_recording_the_function_just_runs) {
  int calls = 0;
  const mg::Tensor x = mg::normal({3});
  const mg::Tensor y = mg::autodiff::checkpoint([&](const mg::Tensor& t) { ++calls; return t * 2.0; }, x);
  BOOST_TEST(calls == 1);
  BOOST_TEST((y.to_vector<float>()[0] == 2 * x.to_vector<float>()[0]));
  BOOST_CHECK_THROW(mg::autodiff::checkpoint(mg::autodiff::CheckpointFn(), {x}), mg::ValueError);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(selective_checkpointing)

BOOST_AUTO_TEST_CASE(gradients_are_bit_identical_in_float32_bfloat16_nested_and_scaled) {
  for (bool autocast : {false, true}) {
    const Result plain = run(0, autocast);
    BOOST_TEST(same_bits(plain.grads, run(3, autocast).grads), "autocast " << autocast);
    BOOST_TEST(same_bits(plain.grads, run(4, autocast).grads), "nested, autocast " << autocast);
  }
  BOOST_TEST(same_bits(run(0, true, true).grads, run(3, true, true).grads));
  const Result plain = run(0, false, true, true), sel = run(3, false, true, true);
  for (size_t i = 0; i < plain.grads.size(); ++i)
    for (size_t j = 0; j < plain.grads[i].size(); ++j)
      BOOST_TEST((std::isfinite(plain.grads[i][j]) == std::isfinite(sel.grads[i][j])));
}

// The recomputation gets the kept result itself (the same tensor) and computes
// the others again.
BOOST_AUTO_TEST_CASE(kept_results_are_handed_back_and_the_rest_recomputed) {
  mg::manual_seed(5);
  nn::Linear fc(6, 6);
  mg::autodiff::GradManager gm;
  gm.attach(fc.parameters());
  for (bool keep : {false, true}) {
    std::vector<uint64_t> linear_ids, tanh_ids;
    auto fn = [&](const mg::Tensor& t) {
      const mg::Tensor h = fc(t);
      const mg::Tensor y = mg::F::tanh(h);
      linear_ids.push_back(h.id());
      tanh_ids.push_back(y.id());
      return y;
    };
    auto rec = gm.record();
    mg::autodiff::CheckpointOptions o;
    if (keep) o.keep = {"linear"};
    gm.backward(mg::F::sum(mg::autodiff::checkpoint(fn, mg::normal({3, 6}), o)));
    BOOST_REQUIRE_EQUAL(linear_ids.size(), 2u);
    BOOST_TEST((linear_ids[0] == linear_ids[1]) == keep);
    BOOST_TEST(tanh_ids[0] != tanh_ids[1]);
  }
}

// keep_if picks the calls: the first linear of each run is kept, the second
// computed again; the gradients are still the plain ones.
BOOST_AUTO_TEST_CASE(keep_if_keeps_the_calls_it_names) {
  mg::manual_seed(5);
  nn::Linear fc1(6, 12), fc2(12, 6);
  mg::autodiff::GradManager gm;
  gm.attach(fc1.parameters()).attach(fc2.parameters());
  std::vector<uint64_t> ids1, ids2;
  auto fn = [&](const mg::Tensor& t) {
    const mg::Tensor h = fc1(t), y = fc2(mg::F::gelu(h));
    ids1.push_back(h.id());
    ids2.push_back(y.id());
    return y;
  };
  const mg::Tensor x = mg::normal({3, 6});
  std::vector<float> plain;
  {
    auto rec = gm.record();
    const mg::Tensor y = fn(x);
    gm.backward(mg::F::sum(y * y));
    plain = fc1.weight().grad().to_vector<float>();
    fc1.weight().set_grad({});
  }
  ids1.clear();
  ids2.clear();
  std::vector<std::string> seen;
  mg::autodiff::CheckpointOptions o{.keep = {"linear"}, .keep_if = [&](std::string_view op, int64_t n) {
                                      seen.push_back(std::string(op) + std::to_string(n));
                                      return n % 2 == 0;
                                    }};
  {
    auto rec = gm.record();
    const mg::Tensor y = mg::autodiff::checkpoint(fn, x, o);
    gm.backward(mg::F::sum(y * y));
  }
  BOOST_REQUIRE_EQUAL(ids1.size(), 2u);
  BOOST_TEST(ids1[0] == ids1[1]);  // linear call 0: kept
  BOOST_TEST(ids2[0] != ids2[1]);  // linear call 1: computed again
  BOOST_TEST((seen == std::vector<std::string>{"linear0", "linear1", "linear0", "linear1"}));
  BOOST_TEST(fc1.weight().grad().to_vector<float>() == plain, boost::test_tools::per_element());
}

// A kept result written in place after the first run is not handed back: the
// recomputation computes it again, and the gradient is the plain one.
BOOST_AUTO_TEST_CASE(a_kept_result_written_in_place_is_recomputed) {
  auto grads = [](bool checkpointed) {
    mg::manual_seed(7);
    nn::Linear fc(5, 5);
    mg::autodiff::GradManager gm;
    gm.attach(fc.parameters());
    mg::Tensor first;
    auto fn = [&](const mg::Tensor& t) {
      const mg::Tensor h = fc(t);
      if (!first.defined()) first = h;
      return mg::F::gelu(h);
    };
    auto rec = gm.record();
    const mg::Tensor x = mg::normal({4, 5});
    const mg::Tensor y = checkpointed ? mg::autodiff::checkpoint(fn, x, {.keep = {"linear"}}) : fn(x);
    const mg::Tensor loss = mg::F::sum(y * y);
    if (checkpointed) nn::init::constant_(first, 5.0);  // after the forward, before the backward
    gm.backward(loss);
    return fc.weight().grad().to_vector<float>();
  };
  BOOST_TEST(grads(false) == grads(true), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(keeping_lands_the_peak_between_full_checkpointing_and_none) {
  const int64_t plain = activation_peak(0), full = activation_peak(1), selective = activation_peak(2);
  BOOST_TEST_MESSAGE("activation peak: " << plain / 1024 << " KiB plain, " << selective / 1024 << " KiB selective, "
                                         << full / 1024 << " KiB full");
  // Plain keeps each block's input, first linear's result and GELU's; selective
  // keeps the two linears' results; full, the block inputs only.
  BOOST_TEST(full < selective);
  BOOST_TEST(selective < plain);
}

BOOST_AUTO_TEST_CASE(fused_attention_is_kept_bit_identically) {
  auto grads = [](int mode) {
    mg::manual_seed(3);
    nn::TransformerEncoderLayer layer(16, 2, {.dim_feedforward = 32, .dropout = 0.0, .batch_first = true});
    mg::autodiff::GradManager gm;
    gm.attach(layer.parameters());
    const mg::Tensor x = mg::normal({2, 5, 16});
    auto fn = [&](const mg::Tensor& t) { return layer(t); };
    auto rec = gm.record();
    mg::Tensor y = mode == 0 ? fn(x) : mg::autodiff::checkpoint(fn, x, {.keep = mg::autodiff::kept_products()});
    gm.backward(mg::F::sum(y * y));
    std::vector<std::vector<float>> g;
    for (const auto& p : layer.parameters()) g.push_back(p.grad().to_vector<float>());
    return g;
  };
  BOOST_TEST(same_bits(grads(0), grads(1)));
}

BOOST_AUTO_TEST_CASE(a_recomputation_that_runs_other_kept_ops_is_an_error) {
  mg::manual_seed(2);
  nn::Linear fc(4, 4), fc2(4, 4);
  int calls = 0;
  mg::autodiff::GradManager gm;
  gm.attach(fc.parameters()).attach(fc2.parameters());
  {
    auto rec = gm.record();
    mg::Tensor y = mg::autodiff::checkpoint(
        [&](const mg::Tensor& t) { return ++calls == 1 ? fc2(fc(t)) : mg::F::tanh(fc(t)); }, mg::normal({2, 4}),
        {.name = "drifting", .keep = {"linear"}});
    try {
      gm.backward(mg::F::sum(y));
      BOOST_ERROR("no error");
    } catch (const mg::StateError& e) {
      const std::string what = e.what();
      BOOST_TEST(what.find("'drifting'") != std::string::npos, what);
      BOOST_TEST(what.find("1 of the first run's 2 kept ops") != std::string::npos, what);
    }
  }
  for (const auto& p : fc.parameters()) BOOST_TEST(!p.grad().defined());
}

BOOST_AUTO_TEST_CASE(an_op_that_cannot_be_kept_is_a_value_error_before_anything_runs) {
  nn::Linear fc(3, 3);
  mg::autodiff::GradManager gm;
  gm.attach(fc.parameters());
  auto rec = gm.record();
  int calls = 0;
  try {
    (void)mg::autodiff::checkpoint([&](const mg::Tensor& t) { ++calls; return fc(t); }, mg::normal({2, 3}),
                                   {.name = "c", .keep = {"linear", "relu"}});
    BOOST_ERROR("no error");
  } catch (const mg::ValueError& e) {
    const std::string what = e.what();
    BOOST_TEST(what.find("'relu'") != std::string::npos, what);
    BOOST_TEST(what.find("scaled_dot_product_attention") != std::string::npos, what);
  }
  BOOST_TEST(calls == 0);
}

BOOST_AUTO_TEST_SUITE_END()
