// ShardedOptimizer (ZeRO stages 1 and 2) against plain data parallel (the
// all-reduce callback and the same optimizer, whole) on 1, 2 and 3 ranks:
// the parameters after several steps, the state bytes per rank, an
// overflow on one rank, clipping, checkpoints and bad input.
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "test_functional_util.hpp"

namespace mg = mixgrad;
namespace F = mixgrad::F;
namespace D = mixgrad::distributed;
using dist_test::data;
using dist_test::world;

namespace {

int W() { return world().world_size(); }
int R() { return world().rank(); }

// Sizes that do not split evenly, and a parameter (index 3) no loss reaches.
std::vector<mg::Shape> shapes() { return {{5, 3}, {7}, {2, 4}, {3}, {1}}; }

std::vector<mg::Tensor> make_params(mg::DType dtype = mg::DType::float32) {
  std::vector<mg::Tensor> ps;
  int seed = 0;
  for (const mg::Shape& s : shapes()) ps.push_back(F::mul(data(seed++, s), 0.2).to(dtype));
  return ps;
}

// Rank r's loss at `step`: every parameter but the unused one, through tanh.
void backward(mg::autodiff::GradManager& gm, const std::vector<mg::Tensor>& ps, int step, double poison = 0.0) {
  auto recording = gm.record();
  mg::Tensor loss;
  for (size_t i = 0; i < ps.size(); ++i) {
    if (i == 3) continue;
    mg::Tensor w = data(40 + 3 * step + R() + static_cast<int>(i), ps[i].shape(), ps[i].dtype());
    const mg::Tensor term = F::sum(F::mul(F::tanh(ps[i]), w));
    loss = loss.defined() ? F::add(loss, term) : term;
  }
  gm.backward(poison != 0.0 ? F::mul(loss, poison) : loss);
}

using Make = std::function<std::unique_ptr<mg::optim::Optimizer>(std::vector<mg::Tensor>)>;

std::vector<std::pair<const char*, Make>> optimizers() {
  return {
      {"Adam",
       [](std::vector<mg::Tensor> p) {
         return std::make_unique<mg::optim::Adam>(std::move(p), mg::optim::AdamOptions{.lr = 0.05});
       }},
      {"AdamW",
       [](std::vector<mg::Tensor> p) {
         return std::make_unique<mg::optim::AdamW>(std::move(p),
                                                   mg::optim::AdamWOptions{.lr = 0.05, .weight_decay = 0.1});
       }},
      {"SGD momentum",
       [](std::vector<mg::Tensor> p) {
         return std::make_unique<mg::optim::SGD>(std::move(p), mg::optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
       }},
  };
}

// K steps of plain data parallel; returns the parameters.
std::vector<mg::Tensor> plain(const Make& make, int steps, double clip = 0.0, mg::DType dtype = mg::DType::float32) {
  std::vector<mg::Tensor> ps = make_params(dtype);
  mg::autodiff::GradManager gm;
  gm.attach(ps, {D::make_allreduce_callback(gm, world(), "mean")});
  auto opt = make(ps);
  for (int s = 0; s < steps; ++s) {
    backward(gm, ps, s);
    if (clip > 0.0) mg::optim::clip_grad_norm(ps, clip);
    opt->step().clear_grad();
  }
  return ps;
}

void check_all_close(const std::vector<mg::Tensor>& got, const std::vector<mg::Tensor>& want, double tol) {
  for (size_t i = 0; i < got.size(); ++i) BOOST_TEST_CONTEXT("parameter " << i) {
      test_util::check_close(got[i], want[i], tol);
    }
}

std::filesystem::path shared_dir(const char* name) {  // the same on every rank
  mg::Tensor id = mg::tensor<int64_t>({static_cast<int64_t>(::getpid())}, mg::Shape{1});
  D::broadcast(world(), id, 0);
  return std::filesystem::temp_directory_path() / ("mixgrad-zero-" + std::to_string(id.item<int64_t>()) + "-" + name);
}

// `during`: attach(gm), the gradients reduce-scattered in buckets during
// backward; otherwise the step reduces them.
void attach(bool during, D::ShardedOptimizer& opt, mg::autodiff::GradManager& gm, const std::vector<mg::Tensor>& ps) {
  if (during)
    opt.attach(gm);
  else
    gm.attach(ps);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(sharded_optimizer)

// With 8-byte buckets the reduction and the all-gather run one or two
// elements per rank at a time: every parameter straddles chunks.
BOOST_AUTO_TEST_CASE(parameters_after_k_steps_equal_plain_data_parallel) {
  for (bool during : {false, true})
    for (int stage : {1, 2})
      for (int64_t bucket : {int64_t{4} << 20, int64_t{8}})
        for (const auto& [name, make] : optimizers())
          BOOST_TEST_CONTEXT((during ? "during backward" : "in the step")
                             << ", stage " << stage << ", bucket " << bucket << " B, " << name) {
            std::vector<mg::Tensor> ps = make_params();
            const mg::Tensor unused = ps[3].clone();
            mg::autodiff::GradManager gm;
            D::ShardedOptimizer opt(world(), ps, make, {.stage = stage, .bucket_bytes = bucket});
            attach(during, opt, gm, ps);
            for (int s = 0; s < 4; ++s) {
              backward(gm, ps, s);
              if (during) {  // stage 2 holds no full gradient after backward; stage 1 this rank's own
                BOOST_TEST(ps[0].grad().defined() == (stage == 1));
                for (const mg::Tensor& piece : opt.shard()) BOOST_TEST(piece.grad().defined());
              }
              opt.step().clear_grad();
            }
            check_all_close(ps, plain(make, 4), 1e-6);
            test_util::check_close(ps[3], unused, 0.0);  // no gradient anywhere: skipped
            if (stage == 2) BOOST_TEST(!ps[0].grad().defined());
          }
}

// Two micro-batches per step against plain data parallel's accumulation:
// reduced at every backward, or only at the last (the first under no_sync);
// a parameter that only the no_sync micro-batch reaches still gets its sum.
// SGD with momentum: Adam would turn the summation order's rounding in a
// near-zero gradient into a whole step of lr on 3 ranks.
BOOST_AUTO_TEST_CASE(gradient_accumulation_during_backward_equals_plain_data_parallel) {
  const Make make = optimizers()[2].second;
  const auto partial = [](mg::autodiff::GradManager& gm, const std::vector<mg::Tensor>& ps, int step) {
    auto recording = gm.record();  // parameter 0 only
    gm.backward(F::sum(F::mul(F::tanh(ps[0]), data(70 + step + R(), ps[0].shape()))));
  };
  std::vector<mg::Tensor> ref = make_params();
  mg::autodiff::GradManager ref_gm;
  ref_gm.attach(ref, {D::make_allreduce_callback(ref_gm, world(), "mean")});
  auto ref_opt = make(ref);
  for (int s = 0; s < 3; ++s) {
    backward(ref_gm, ref, s);
    partial(ref_gm, ref, s);
    ref_opt->step().clear_grad();
  }
  for (bool no_sync : {false, true})
    for (int stage : {1, 2}) BOOST_TEST_CONTEXT((no_sync ? "no_sync" : "every backward") << ", stage " << stage) {
        std::vector<mg::Tensor> ps = make_params();
        mg::autodiff::GradManager gm;
        D::ShardedOptimizer opt(world(), ps, make, {.stage = stage, .bucket_bytes = 16});
        opt.attach(gm);
        for (int s = 0; s < 3; ++s) {
          if (no_sync) {
            auto guard = opt.no_sync();
            backward(gm, ps, s);
          } else {
            backward(gm, ps, s);
          }
          partial(gm, ps, s);
          opt.step().clear_grad();
        }
        check_all_close(ps, ref, 1e-6);
      }
}

// Under attach the buckets exist from the start: already in the first
// backward, bucket 0 (the last parameters) is reduce-scattered before
// backward reaches parameter 0, and so before backward ends.
BOOST_AUTO_TEST_CASE(attach_reduce_scatters_while_backward_runs) {
  std::vector<mg::Tensor> ps = make_params();
  mg::autodiff::GradManager gm;
  D::ShardedOptimizer opt(world(), ps, optimizers()[0].second, {.stage = 2, .bucket_bytes = 16});
  BOOST_TEST(opt.reducer() == nullptr);
  double first_ready = -1.0;
  gm.attach(ps[0], {[&](const mg::Tensor&, const mg::Tensor& g) {  // runs before the reducer's callback
              first_ready = opt.reducer()->now();
              return g;
            }});
  opt.attach(gm);
  BOOST_TEST_REQUIRE(opt.reducer() != nullptr);
  opt.reducer()->record_timeline(true);
  {
    auto recording = gm.record();  // every parameter, the last ones' gradients first
    mg::Tensor loss;
    for (size_t i = 0; i < ps.size(); ++i) {
      const mg::Tensor term = F::sum(F::mul(F::tanh(ps[i]), data(90 + R() + static_cast<int>(i), ps[i].shape())));
      loss = loss.defined() ? F::add(loss, term) : term;
    }
    gm.backward(loss);
  }
  const std::vector<D::BucketEvent>& events = opt.reducer()->timeline();
  BOOST_TEST_REQUIRE(events.size() == static_cast<size_t>(opt.reducer()->num_buckets()));
  BOOST_TEST(events.size() > 2u);
  BOOST_TEST(events[0].start < first_ready, "bucket 0 started at " << events[0].start
                                                                    << " s, parameter 0's gradient was final at "
                                                                    << first_ready << " s");
  BOOST_TEST(events[0].start < events[0].backward_end);
  opt.step();
}

BOOST_AUTO_TEST_CASE(reducing_during_backward_refuses_misuse_and_changes_nothing) {
  const Make make = optimizers()[0].second;
  const std::string rank = std::string("rank ").append(std::to_string(R()));
  std::vector<mg::Tensor> ps = make_params();
  const mg::Tensor before = ps[0].clone();
  mg::autodiff::GradManager gm;
  D::ShardedOptimizer opt(world(), ps, make, {.stage = 2});
  test_util::check_error<mg::StateError>([&] { auto guard = opt.no_sync(); }, {"no_sync", rank, "not attached"});
  opt.attach(gm);
  test_util::check_error<mg::StateError>([&] { opt.attach(gm); }, {"attach", rank, "already attached"});
  {
    auto guard = opt.no_sync();
    backward(gm, ps, 0);
  }
  test_util::check_error<mg::StateError>([&] { opt.step(); }, {"step", rank, "under no_sync()"});
  test_util::check_close(ps[0], before, 0.0);
  backward(gm, ps, 1);  // the last micro-batch outside no_sync: both are reduced
  opt.step().clear_grad();
  BOOST_TEST(test_util::values(ps[0]) != test_util::values(before));
}

BOOST_AUTO_TEST_CASE(state_bytes_per_rank_are_one_nth) {
  for (bool o2 : {false, true}) BOOST_TEST_CONTEXT((o2 ? "bfloat16 parameters, float32 master weights" : "float32")) {
      const mg::DType dtype = o2 ? mg::DType::bfloat16 : mg::DType::float32;
      std::vector<mg::Tensor> ps{mg::zeros({40, 25}, dtype), mg::zeros({333}, dtype), mg::zeros({7}, dtype)};
      for (const mg::Tensor& p : ps) p.set_grad(mg::full_like(p, 0.5));
      std::vector<mg::Tensor> whole{ps[0].clone(), ps[1].clone(), ps[2].clone()};
      for (const mg::Tensor& p : whole) p.set_grad(mg::full_like(p, 0.5));
      mg::optim::Adam unsharded(whole, {.master_weights = o2});
      unsharded.step();
      int64_t total = 0;
      for (const auto& [key, t] : unsharded.state_dict())
        if (key.rfind("state.", 0) == 0) total += t.numel() * mg::element_size(t.dtype());
      D::ShardedOptimizer opt(world(), ps,
                              [](std::vector<mg::Tensor> s) { return std::make_unique<mg::optim::Adam>(std::move(s)); },
                              {.stage = 2, .master_weights = o2});
      opt.step();
      const int64_t mine = opt.state_bytes();
      BOOST_TEST_MESSAGE("rank " << R() << ": " << mine << " of " << total << " bytes");
      BOOST_TEST(mine <= total / W() * 1.05);
      mg::Tensor sum = mg::tensor<int64_t>({mine}, mg::Shape{1});
      D::all_reduce(world(), sum, D::ReduceOp::sum);
      BOOST_TEST(sum.item<int64_t>() >= total * 0.95);  // the state is all there, once
    }
}

BOOST_AUTO_TEST_CASE(overflow_on_one_rank_skips_the_step_on_every_rank) {
  for (bool during : {false, true}) BOOST_TEST_CONTEXT((during ? "during backward" : "in the step")) {
    std::vector<mg::Tensor> ps = make_params();
    const std::vector<mg::Tensor> before{ps[0].clone(), ps[1].clone()};
    mg::autodiff::GradManager gm;
    D::ShardedOptimizer opt(world(), ps, optimizers()[0].second, {.stage = 2});
    attach(during, opt, gm, ps);
    mg::amp::GradScaler scaler;  // in the step, not synchronised: the sharded step agrees the flag itself
    // During backward the ranks' scaled gradients are summed: their scales must agree.
    if (during) D::sync_grad_scaler(world(), scaler);
    {
      auto recording = gm.record();
      mg::Tensor loss = F::sum(F::mul(F::tanh(ps[0]), data(40 + R(), ps[0].shape())));
      if (R() == W() - 1)
        loss = F::add(loss, F::sum(F::mul(ps[1], INFINITY)));
      else
        loss = F::add(loss, F::sum(ps[1]));
      scaler.backward(gm, loss);
    }
    opt.step().clear_grad();
    test_util::check_close(ps[0], before[0], 0.0);
    test_util::check_close(ps[1], before[1], 0.0);
    for (size_t j = 0; j < opt.shard().size(); ++j) BOOST_TEST(opt.shard_optimizer().step_count(j) == 0);
    backward(gm, ps, 0);  // the next step goes through
    opt.step().clear_grad();
    BOOST_TEST(test_util::values(ps[0]) != test_util::values(before[0]));
  }
}

// PyTorch's gear: scaler.step(opt) unscales in place, then steps the
// sharded optimizer with the step's flag; an overflow on the last rank
// skips every rank's step, and a finite step equals the unscaled one.
BOOST_AUTO_TEST_CASE(scaler_step_skips_on_every_rank_and_unscales) {
  for (bool during : {false, true}) BOOST_TEST_CONTEXT((during ? "during backward" : "in the step")) {
    std::vector<mg::Tensor> ps = make_params();
    const mg::Tensor before = ps[0].clone();
    mg::autodiff::GradManager gm;
    D::ShardedOptimizer opt(world(), ps, optimizers()[2].second, {.stage = during ? 2 : 1});
    attach(during, opt, gm, ps);
    mg::amp::GradScaler scaler({.init_scale = 1024.0});
    if (during) D::sync_grad_scaler(world(), scaler);  // the ranks' scaled gradients are summed
    {
      auto recording = gm.record();
      mg::Tensor loss = F::sum(F::mul(F::tanh(ps[0]), data(40 + R(), ps[0].shape())));
      if (R() == W() - 1) loss = F::add(loss, F::sum(F::mul(ps[1], INFINITY)));
      gm.backward(scaler.scale(loss));
    }
    scaler.step(opt);
    scaler.update();
    opt.clear_grad();
    test_util::check_close(ps[0], before, 0.0);
    for (int s = 0; s < 2; ++s) {
      {
        auto recording = gm.record();
        mg::Tensor loss;
        for (size_t i = 0; i < ps.size(); ++i) {
          if (i == 3) continue;
          const mg::Tensor term = F::sum(F::mul(F::tanh(ps[i]), data(40 + 3 * s + R() + int(i), ps[i].shape())));
          loss = loss.defined() ? F::add(loss, term) : term;
        }
        gm.backward(scaler.scale(loss));
      }
      scaler.step(opt);
      scaler.update();
      opt.clear_grad();
    }
    // plain data parallel from the same start, without the scaler, after the skipped step
    check_all_close(ps, plain(optimizers()[2].second, 2), 1e-6);
  }
}

BOOST_AUTO_TEST_CASE(clipping_by_the_global_norm_matches_plain_data_parallel) {
  for (bool during : {false, true})
    for (double norm_type : {2.0, double(INFINITY)})
      for (int stage : {1, 2})
        BOOST_TEST_CONTEXT("norm " << norm_type << ", stage " << stage << (during ? ", during backward" : "")) {
          const Make make = optimizers()[2].second;
          std::vector<mg::Tensor> ref = make_params();
          mg::autodiff::GradManager ref_gm;
          ref_gm.attach(ref, {D::make_allreduce_callback(ref_gm, world(), "mean")});
          backward(ref_gm, ref, 0);
          const mg::Tensor want = mg::optim::clip_grad_norm(ref, 0.5, norm_type);
          make(ref)->step();

          std::vector<mg::Tensor> ps = make_params();
          mg::autodiff::GradManager gm;
          D::ShardedOptimizer opt(world(), ps, make, {.stage = stage});
          attach(during, opt, gm, ps);
          backward(gm, ps, 0);
          const mg::Tensor norm = opt.reduce_gradients().clip_grad_norm(0.5, norm_type);
          opt.step();
          BOOST_TEST(want.item<double>() > 0.5);  // the clip acts
          test_util::check_close(norm, want, 1e-6);
          check_all_close(ps, ref, 1e-6);
        }
}

// bfloat16 parameters with float32 master weights: the reduce-scatter
// during backward goes through its 16-bit staging too.
BOOST_AUTO_TEST_CASE(checkpoint_resumes_bit_exact_at_the_same_world_size) {
  for (bool during : {false, true}) BOOST_TEST_CONTEXT((during ? "during backward" : "in the step")) {
      const std::filesystem::path dir = shared_dir(during ? "resume-during" : "resume");
      const Make make = optimizers()[0].second;
      std::vector<mg::Tensor> ps = make_params(mg::DType::bfloat16);
      mg::autodiff::GradManager gm;
      D::ShardedOptimizer opt(world(), ps, make, {.stage = 2, .master_weights = true});
      attach(during, opt, gm, ps);
      backward(gm, ps, 0);
      opt.step().clear_grad();
      opt.save(dir);
      std::vector<mg::Tensor> saved;
      for (const mg::Tensor& p : ps) saved.push_back(p.clone());
      for (int s = 1; s < 3; ++s) backward(gm, ps, s), opt.step().clear_grad();

      std::vector<mg::Tensor> qs = make_params(mg::DType::bfloat16);  // a new run: the model, then the optimizer
      for (size_t i = 0; i < qs.size(); ++i) qs[i] = saved[i].clone();
      mg::autodiff::GradManager gm2;
      D::ShardedOptimizer resumed(world(), qs, make, {.stage = 2, .master_weights = true});
      attach(during, resumed, gm2, qs);
      resumed.load(dir);
      for (int s = 1; s < 3; ++s) backward(gm2, qs, s), resumed.step().clear_grad();
      check_all_close(qs, ps, 0.0);
      world().barrier();
      if (R() == 0) std::filesystem::remove_all(dir);
    }
}

BOOST_AUTO_TEST_CASE(a_checkpoint_of_another_model_or_with_missing_shards_changes_nothing) {
  const std::filesystem::path dir = shared_dir("bad");
  const Make make = optimizers()[0].second;
  std::vector<mg::Tensor> ps = make_params();
  mg::autodiff::GradManager gm;
  gm.attach(ps);
  D::ShardedOptimizer opt(world(), ps, make);
  backward(gm, ps, 0);
  opt.step().clear_grad();
  opt.save(dir);

  std::vector<mg::Tensor> other{F::mul(data(1, {4, 4}), 0.1), F::mul(data(2, {3}), 0.1)};
  std::vector<mg::Tensor> kept{other[0].clone(), other[1].clone()};
  D::ShardedOptimizer wrong(world(), other, make);
  test_util::check_error<mg::ValueError>([&] { wrong.load(dir); },
                                         {"checkpoint of another model", "15, 7, 8, 3, 1", "16, 3"});
  BOOST_TEST(wrong.state_bytes() == 0);
  check_all_close(other, kept, 0.0);

  std::vector<mg::Tensor> same = make_params();
  D::ShardedOptimizer sgd(world(), same, optimizers()[2].second);
  test_util::check_error<mg::ValueError>([&] { sgd.load(dir); }, {"holds the state of Adam", "wraps SGD"});
  BOOST_TEST(sgd.state_bytes() == 0);

  world().barrier();
  const std::string first = "optimizer-shard-0-of-" + std::to_string(W()) + ".safetensors";
  if (R() == 0) std::filesystem::remove(dir / first);
  world().barrier();
  const int64_t bytes = opt.state_bytes();
  if (W() > 1)
    test_util::check_error<mg::IOError>([&] { opt.load(dir); }, {"missing shards", first});
  else  // the only file is gone
    test_util::check_error<mg::IOError>([&] { opt.load(dir); }, {"no optimizer-shard-R-of-W.safetensors in"});
  BOOST_TEST(opt.state_bytes() == bytes);
  world().barrier();
  if (R() == 0) std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(mismatched_parameter_lists_across_ranks_are_typed_errors) {
  if (W() == 1) return;  // nothing to mismatch
  const Make make = optimizers()[0].second;
  std::vector<mg::Tensor> ps = make_params();
  if (R() == 1) ps.push_back(mg::zeros({2}));
  test_util::check_error<mg::ValueError>([&] { D::ShardedOptimizer(world(), ps, make); },
                                         {"rank 0 passed 5 parameters, rank 1 passed 6"});
  std::vector<mg::Tensor> qs = make_params();
  if (R() == 1) qs[2] = mg::zeros({4, 2});
  test_util::check_error<mg::ShapeError>([&] { D::ShardedOptimizer(world(), qs, make); },
                                         {"parameter 2 is float32[2, 4] on rank 0 but float32[4, 2] on rank 1"});
  std::vector<mg::Tensor> rs = make_params();
  if (R() == 1) rs[1] = rs[1].to(mg::DType::float64);
  test_util::check_error<mg::DTypeError>([&] { D::ShardedOptimizer(world(), rs, make); }, {"parameter 1", "float64"});
}

// Fewer elements than ranks: the ranks past the last element hold no
// optimizer, and still take part in every collective.
BOOST_AUTO_TEST_CASE(fewer_elements_than_ranks) {
  const Make make = optimizers()[0].second;
  std::vector<mg::Tensor> ps{mg::full({2}, 0.5)};
  mg::autodiff::GradManager gm;
  gm.attach(ps);
  D::ShardedOptimizer opt(world(), ps, make, {.stage = 2});
  for (int s = 0; s < 2; ++s) {
    {
      auto recording = gm.record();
      gm.backward(F::sum(F::mul(F::tanh(ps[0]), data(40 + R() + s, {2}))));
    }
    opt.step().clear_grad();
  }
  std::vector<mg::Tensor> ref{mg::full({2}, 0.5)};
  mg::autodiff::GradManager ref_gm;
  ref_gm.attach(ref, {D::make_allreduce_callback(ref_gm, world(), "mean")});
  auto ref_opt = make(ref);
  for (int s = 0; s < 2; ++s) {
    {
      auto recording = ref_gm.record();
      ref_gm.backward(F::sum(F::mul(F::tanh(ref[0]), data(40 + R() + s, {2}))));
    }
    ref_opt->step().clear_grad();
  }
  test_util::check_close(ps[0], ref[0], 1e-6);
  if (R() >= 2) {
    BOOST_TEST(opt.shard().empty());
    BOOST_TEST(opt.state_bytes() == 0);
    BOOST_CHECK_THROW(opt.shard_optimizer(), mg::StateError);
  }
}

BOOST_AUTO_TEST_CASE(bad_options_are_value_errors) {
  const Make make = optimizers()[0].second;
  test_util::check_error<mg::ValueError>([&] { D::ShardedOptimizer(world(), make_params(), make, {.stage = 3}); },
                                         {"stage must be 1 or 2, got 3"});
  test_util::check_error<mg::ValueError>([&] { D::ShardedOptimizer(world(), make_params(), make, {.op = "max"}); },
                                         {"op must be mean or sum, got max"});
  test_util::check_error<mg::ValueError>(
      [&] { D::ShardedOptimizer(world(), make_params(), make, {.bucket_bytes = 0}); },
      {"bucket_bytes must be > 0, got 0"});
  std::vector<mg::Tensor> mixed = make_params();
  mixed[1] = mixed[1].to(mg::DType::float64);
  test_util::check_error<mg::ValueError>([&] { D::ShardedOptimizer(world(), mixed, make); },
                                         {"parameter 1 is float64", "one dtype and one device"});
}

BOOST_AUTO_TEST_SUITE_END()
