// Master weights (apex's O2): float16 / bfloat16 parameters updated through
// float32 master copies in the fused update. Follows apex's
// tests/L0/run_amp/test_fused_sgd.py and test_multi_tensor_axpby idea: the
// master copy must track a float32 run, the 16-bit parameter must be its
// rounding, and no cast pass or allocation may remain in a step.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "mixgrad/allocator.hpp"
#include "mixgrad/io/checkpoint.hpp"
#include "mixgrad/mixgrad.hpp"
#include "mixgrad/ops/creation.hpp"

namespace mg = mixgrad;
using mg::DType;
using Vec = std::vector<double>;

namespace {

mg::Tensor make(const Vec& v, DType dt) { return mg::tensor(v, {static_cast<int64_t>(v.size())}, dt); }

Vec values(const mg::Tensor& t) { return t.to(DType::float64).to_vector<double>(); }

// Values exact in bfloat16 and float16, so the 16-bit and float32 runs start
// from the same point.
const Vec kStart = {1.0, -0.5, 2.0, 0.25, -3.0, 0.75};
// A gradient exact in both 16-bit types; lr * g (1e-4 and less) is below
// half an ulp of every start value in bfloat16, so a 16-bit parameter
// updated without a master copy never moves.
const Vec kGrad = {0.001953125, -0.0009765625, 0.00390625, 0.0009765625, -0.001953125, 0.00048828125};

using Factory = std::function<std::unique_ptr<mg::optim::Optimizer>(std::vector<mg::Tensor>, bool master)>;

struct Case {
  const char* name;
  Factory make;
};

std::vector<Case> cases() {
  return {
      {"SGD momentum",
       [](std::vector<mg::Tensor> p, bool m) {
         return std::make_unique<mg::optim::SGD>(std::move(p), mg::optim::SGDOptions{
                                                                   .lr = 0.05, .momentum = 0.9, .master_weights = m});
       }},
      {"SGD plain",
       [](std::vector<mg::Tensor> p, bool m) {
         return std::make_unique<mg::optim::SGD>(std::move(p),
                                                 mg::optim::SGDOptions{.lr = 0.05, .master_weights = m});
       }},
      {"Adam",
       [](std::vector<mg::Tensor> p, bool m) {
         return std::make_unique<mg::optim::Adam>(std::move(p),
                                                  mg::optim::AdamOptions{.lr = 1e-4, .master_weights = m});
       }},
      {"AdamW amsgrad",
       [](std::vector<mg::Tensor> p, bool m) {
         return std::make_unique<mg::optim::AdamW>(
             std::move(p),
             mg::optim::AdamWOptions{.lr = 1e-4, .weight_decay = 0.1, .amsgrad = true, .master_weights = m});
       }},
  };
}

// n steps of `opt` on `p` with the fixed gradient (in the parameter's dtype).
void run_steps(mg::optim::Optimizer& opt, const mg::Tensor& p, int n) {
  for (int i = 0; i < n; ++i) {
    p.set_grad(make(kGrad, p.dtype()));
    opt.step();
  }
}

// Counts the CPU allocations made while it is registered.
class CountingAllocator final : public mg::Allocator {
 public:
  explicit CountingAllocator(mg::Allocator* inner) : inner_(inner) {}
  void* allocate(int64_t nbytes, mg::Device device) override {
    ++count;
    return inner_->allocate(nbytes, device);
  }
  void release(void* data, int64_t nbytes, mg::Device device) noexcept override {
    inner_->release(data, nbytes, device);
  }
  std::atomic<int> count{0};

 private:
  mg::Allocator* inner_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(master_weights)

BOOST_AUTO_TEST_CASE(master_copy_tracks_a_float32_run_and_the_parameter_is_its_rounding) {
  constexpr int kSteps = 40;
  for (const Case& c : cases()) {
    for (DType low : {DType::bfloat16, DType::float16}) {
      BOOST_TEST_CONTEXT(c.name << ", " << mg::to_string(low)) {
        mg::Tensor p32 = make(kStart, DType::float32);
        auto ref = c.make({p32}, false);
        run_steps(*ref, p32, kSteps);

        mg::Tensor p16 = make(kStart, low);
        auto opt = c.make({p16}, true);
        BOOST_TEST(opt->master_weights());
        BOOST_TEST_REQUIRE(opt->master_weight(0).defined());
        BOOST_TEST(opt->master_weight(0).dtype() == DType::float32);
        run_steps(*opt, p16, kSteps);

        const Vec master = values(opt->master_weight(0));
        const Vec want = values(p32);
        for (size_t i = 0; i < want.size(); ++i) BOOST_TEST(master[i] == want[i], boost::test_tools::tolerance(1e-6));
        // The parameter holds the master copy rounded to its dtype, bit for bit.
        BOOST_TEST(values(p16) == values(opt->master_weight(0).to(low)), boost::test_tools::per_element());

        // Without master copies most updates are rounded away (each is below
        // half an ulp of the parameter), so the 16-bit run drifts far from
        // the float32 one.
        mg::Tensor plain = make(kStart, low);
        auto lossy = c.make({plain}, false);
        BOOST_TEST(!lossy->master_weight(0).defined());
        run_steps(*lossy, plain, kSteps);
        double lossy_err = 0, master_err = 0;
        const Vec got = values(plain);
        for (size_t i = 0; i < want.size(); ++i) {
          lossy_err = std::max(lossy_err, std::abs(got[i] - want[i]));
          master_err = std::max(master_err, std::abs(master[i] - want[i]));
        }
        BOOST_TEST(lossy_err > 1e-3);
        BOOST_TEST(master_err < 1e-5);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_step_writes_the_parameter_in_place_and_allocates_nothing) {
  mg::Tensor p = make(kStart, DType::bfloat16);
  mg::Tensor q = mg::full({64, 32}, 0.5, DType::bfloat16);
  mg::optim::SGD opt({p, q}, {.lr = 0.05, .momentum = 0.9, .master_weights = true});
  const mg::Tensor master = opt.master_weight(0);
  p.set_grad(make(kGrad, DType::bfloat16));
  q.set_grad(mg::full({64, 32}, 0.25, DType::bfloat16));
  opt.step();  // the first step creates the momentum buffers
  const void* p_data = p.raw_data();
  const void* m_data = master.raw_data();

  CountingAllocator counting(mg::registered_allocator(mg::DeviceType::cpu));
  mg::Allocator* before = mg::register_allocator(mg::DeviceType::cpu, &counting);
  for (int i = 0; i < 3; ++i) opt.step();
  mg::register_allocator(mg::DeviceType::cpu, before);

  // No cast of the weights (or of anything else): not one new tensor.
  BOOST_TEST(counting.count.load() == 0);
  BOOST_TEST(p.raw_data() == p_data);
  BOOST_TEST(opt.master_weight(0).raw_data() == m_data);
  BOOST_TEST(p.dtype() == DType::bfloat16);
  BOOST_TEST(values(p) == values(opt.master_weight(0).to(DType::bfloat16)), boost::test_tools::per_element());
  BOOST_TEST(values(q) == values(opt.master_weight(1).to(DType::bfloat16)), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(float32_parameters_get_no_master_copy) {
  mg::Tensor a = make(kStart, DType::float32);
  mg::Tensor b = make(kStart, DType::bfloat16);
  mg::optim::Adam opt({a, b}, {.master_weights = true});
  BOOST_TEST(!opt.master_weight(0).defined());
  BOOST_TEST(opt.master_weight(1).defined());
  BOOST_CHECK_THROW(opt.master_weight(2), mg::ShapeError);
  const mg::StateDict sd = opt.state_dict();
  BOOST_TEST(!sd.contains("state.0.master"));
  BOOST_TEST(sd.contains("state.1.master"));
}

BOOST_AUTO_TEST_CASE(a_parameter_written_outside_the_optimizer_replaces_its_master_copy) {
  mg::manual_seed(5);
  mg::nn::Linear net(3, 2);
  net.to(DType::bfloat16);
  mg::optim::SGD opt(net.parameters(), {.lr = 0.05, .master_weights = true});
  const mg::Tensor w = net.parameters()[0];
  for (int i = 0; i < 3; ++i) {
    w.set_grad(mg::full({2, 3}, 0.001, DType::bfloat16));
    opt.step();
  }
  // A model load writes the parameter (and bumps its version): the next step
  // starts from the loaded value, not from the stale master copy.
  mg::StateDict loaded = net.state_dict();
  loaded.insert_or_assign("weight", mg::full({2, 3}, 4.0, DType::bfloat16));
  net.load_state_dict(loaded);
  w.set_grad(mg::full({2, 3}, 0.5, DType::bfloat16));
  opt.step();
  const Vec after = values(opt.master_weight(0));
  for (double v : after) BOOST_TEST(v == 4.0 - 0.05 * 0.5, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(values(w) == values(opt.master_weight(0).to(DType::bfloat16)), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(state_dict_round_trips_the_master_copies) {
  for (const Case& c : cases()) {
    BOOST_TEST_CONTEXT(c.name) {
      mg::Tensor pa = make(kStart, DType::bfloat16);
      auto a = c.make({pa}, true);
      run_steps(*a, pa, 5);
      const mg::StateDict sd = a->state_dict();
      BOOST_TEST_REQUIRE(sd.contains("state.0.master"));
      BOOST_TEST(sd.at("state.0.master").dtype() == DType::float32);

      // A fresh run restores the model (the 16-bit values) and the optimizer:
      // the master copy is the saved float32 value, not the rounded parameter.
      mg::Tensor pb = pa.clone();
      auto b = c.make({pb}, true);
      b->load_state_dict(sd);
      BOOST_TEST(values(b->master_weight(0)) == values(a->master_weight(0)), boost::test_tools::per_element());
      BOOST_TEST(values(b->master_weight(0)) != values(pb));
      run_steps(*a, pa, 3);
      run_steps(*b, pb, 3);
      BOOST_TEST(values(pb) == values(pa), boost::test_tools::per_element());
      BOOST_TEST(values(b->master_weight(0)) == values(a->master_weight(0)), boost::test_tools::per_element());
    }
  }
}

// save_checkpoint / load_checkpoint with the model and the optimizer: the
// model load writes the parameters (bumping their versions) after the
// optimizer's, yet the float32 master copies survive, because the loaded
// parameters are their rounding.
BOOST_AUTO_TEST_CASE(checkpoint_file_round_trips_the_master_copies) {
  const std::filesystem::path file = std::filesystem::temp_directory_path() / "mixgrad_master_weights.safetensors";
  const mg::Tensor x = mg::tensor(Vec{0.5, -1.0, 2.0, 1.5, 0.25, -0.75}, {2, 3}, DType::bfloat16);
  const auto train = [&](mg::nn::Linear& net, mg::optim::Optimizer& opt, int steps) {
    mg::autodiff::GradManager gm;
    gm.attach(net.parameters());
    for (int i = 0; i < steps; ++i) {
      {
        auto rec = gm.record();
        gm.backward(mg::F::sum(mg::F::astype(net(x), DType::float32)));
      }
      opt.step().clear_grad();
    }
  };
  mg::manual_seed(11);
  mg::nn::Linear a_net(3, 2);
  a_net.to(DType::bfloat16);
  mg::optim::Adam a(a_net.parameters(), {.lr = 1e-4, .master_weights = true});
  train(a_net, a, 4);
  mg::io::save_checkpoint(file, {.model = &a_net, .optimizer = &a, .step = 4});

  mg::manual_seed(12);  // other initial weights
  mg::nn::Linear b_net(3, 2);
  b_net.to(DType::bfloat16);
  mg::optim::Adam b(b_net.parameters(), {.lr = 1e-4, .master_weights = true});
  mg::io::load_checkpoint(file, {.model = &b_net, .optimizer = &b});
  std::filesystem::remove(file);
  for (size_t i = 0; i < 2; ++i) {
    BOOST_TEST(values(b.master_weight(i)) == values(a.master_weight(i)), boost::test_tools::per_element());
    BOOST_TEST(values(b.master_weight(i)) != values(b_net.parameters()[i]));  // more than the 16-bit values
  }
  train(a_net, a, 2);
  train(b_net, b, 2);
  for (size_t i = 0; i < 2; ++i) {
    BOOST_TEST(values(b_net.parameters()[i]) == values(a_net.parameters()[i]), boost::test_tools::per_element());
    BOOST_TEST(values(b.master_weight(i)) == values(a.master_weight(i)), boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(bad_master_entries_are_refused_and_nothing_changes) {
  mg::Tensor pa = make(kStart, DType::bfloat16);
  mg::optim::SGD a({pa}, {.lr = 0.05, .momentum = 0.9, .master_weights = true});
  run_steps(a, pa, 2);
  const mg::StateDict good = a.state_dict();
  const Vec master_before = values(a.master_weight(0));

  mg::StateDict wrong_dtype = good;
  wrong_dtype.insert_or_assign("state.0.master", good.at("state.0.master").to(DType::bfloat16));
  BOOST_CHECK_THROW(a.load_state_dict(wrong_dtype), mg::DTypeError);
  mg::StateDict wrong_shape = good;
  wrong_shape.insert_or_assign("state.0.master", mg::zeros({2, 3}));
  BOOST_CHECK_THROW(a.load_state_dict(wrong_shape), mg::ShapeError);
  BOOST_TEST(values(a.master_weight(0)) == master_before, boost::test_tools::per_element());
  BOOST_TEST(a.step_count(0) == 2);

  // An optimizer without master copies has no place for one.
  mg::Tensor pc = make(kStart, DType::bfloat16);
  mg::optim::SGD c({pc}, {.lr = 0.05, .momentum = 0.9});
  BOOST_CHECK_THROW(c.load_state_dict(good), mg::ValueError);
  BOOST_TEST(c.step_count(0) == 0);

  // A dict saved without master copies (an O1 run) loads: the master copy is
  // taken from the parameter.
  mg::StateDict o1 = good;
  o1.erase("state.0.master");
  mg::Tensor pd = make({8.0, 8.0, 8.0, 8.0, 8.0, 8.0}, DType::bfloat16);
  mg::optim::SGD d({pd}, {.lr = 0.05, .momentum = 0.9, .master_weights = true});
  d.load_state_dict(o1);
  BOOST_TEST(values(d.master_weight(0)) == values(pd), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(lr_changes_keep_the_construction_settings) {
  mg::Tensor p = make(kStart, DType::bfloat16);
  mg::optim::AdamW opt({p}, {.master_weights = true, .step_supports_amp_scaling = true});
  opt.set_lr(0.5);
  opt.load_state_dict(opt.state_dict());
  BOOST_TEST(opt.master_weights());
  BOOST_TEST(opt.step_supports_amp_scaling());
  BOOST_TEST(opt.options().master_weights);
}

BOOST_AUTO_TEST_CASE(master_weights_switched_before_the_first_step_equal_the_option) {
  constexpr int kSteps = 20;
  for (const Case& c : cases()) {
    BOOST_TEST_CONTEXT(c.name) {
      // On after construction: the same copies and the same run as the option.
      mg::Tensor p_built = make(kStart, DType::bfloat16), p_switched = make(kStart, DType::bfloat16);
      auto built = c.make({p_built}, true);
      auto switched = c.make({p_switched}, false);
      BOOST_TEST(&switched->set_master_weights(true) == switched.get());
      BOOST_TEST(switched->master_weights());
      BOOST_TEST_REQUIRE(switched->master_weight(0).defined());
      BOOST_TEST(values(switched->master_weight(0)) == values(p_switched), boost::test_tools::per_element());
      run_steps(*built, p_built, kSteps);
      run_steps(*switched, p_switched, kSteps);
      BOOST_TEST(values(p_switched) == values(p_built), boost::test_tools::per_element());
      BOOST_TEST(values(switched->master_weight(0)) == values(built->master_weight(0)),
                 boost::test_tools::per_element());

      // After a step a change is refused, and changes nothing; the same setting is accepted.
      const Vec master = values(switched->master_weight(0));
      BOOST_CHECK_THROW(switched->set_master_weights(false), mg::StateError);
      BOOST_TEST(switched->master_weights());
      BOOST_TEST(values(switched->master_weight(0)) == master, boost::test_tools::per_element());
      switched->set_master_weights(true);

      // Off before the first step: the plain 16-bit run.
      mg::Tensor p_off = make(kStart, DType::bfloat16), p_plain = make(kStart, DType::bfloat16);
      auto off = c.make({p_off}, true);
      off->set_master_weights(false);
      BOOST_TEST(!off->master_weight(0).defined());
      auto plain = c.make({p_plain}, false);
      run_steps(*off, p_off, kSteps);
      run_steps(*plain, p_plain, kSteps);
      BOOST_TEST(values(p_off) == values(p_plain), boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(master_weights_switched_on_after_a_cast_copy_the_cast_parameters) {
  // apex's order: the optimizer is built over float32 parameters, the model
  // is cast in place, then master weights start from the cast values.
  mg::manual_seed(3);
  mg::nn::Linear lin(4, 3);
  mg::optim::SGD opt(lin.parameters(), {.lr = 0.1});
  lin.to(DType::bfloat16);
  BOOST_TEST(!opt.master_weight(0).defined());
  opt.set_master_weights(true);
  BOOST_TEST(opt.options().master_weights);
  for (size_t i = 0; i < lin.parameters().size(); ++i) {
    const mg::Tensor p = lin.parameters()[i];
    BOOST_TEST(opt.master_weight(i).dtype() == DType::float32);
    BOOST_TEST(values(opt.master_weight(i)) == values(p), boost::test_tools::per_element());
    p.set_grad(mg::full(p.shape(), 0.001, DType::bfloat16));
  }
  opt.step();
  for (size_t i = 0; i < lin.parameters().size(); ++i)
    BOOST_TEST(values(lin.parameters()[i]) == values(opt.master_weight(i).to(DType::bfloat16)),
               boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
