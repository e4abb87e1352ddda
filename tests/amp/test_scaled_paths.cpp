// Every path by which a gradient that a loss scale multiplied can reach an
// optimizer (docs/grad-scaler.md, "Scaled gradients never reach an optimizer by
// mistake") either unscales it exactly once, giving the automatic gear's
// parameters bit for bit, or is refused with StateError and changes nothing.
//
// Each run trains two linear layers under bfloat16 autocast for four steps
// with a scale that doubles after every clean step (growth_interval 1), so a
// gradient unscaled with the wrong scale, twice or not at all moves the
// parameters elsewhere; the third step's batch holds an inf, so the step
// overflows, is skipped and backs the scale off.
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace F = mixgrad::F;

namespace {

constexpr int kSteps = 4;
constexpr int kOverflowStep = 2;

mg::amp::GradScalerOptions scaler_options() {
  return {.init_scale = 1024.0, .growth_factor = 2.0, .backoff_factor = 0.5, .growth_interval = 1};
}

// The tensor's bytes (and, for a gradient, its mark), for bitwise comparison.
std::string bytes(const mg::Tensor& t) {
  if (!t.defined()) return "-";
  const mg::Tensor c = t.contiguous();
  std::string out(static_cast<const char*>(c.raw_data()), static_cast<size_t>(c.numel()) * mg::element_size(c.dtype()));
  return to_string(c.shape()) + out;
}

struct Run {
  std::vector<mg::Tensor> params;  // w0, b0 (optimizer 0), w1, b1 (optimizer 1)
  mg::autodiff::GradManager gm;
  mg::optim::SGD opt0;
  mg::optim::Adam opt1;
  std::vector<mg::Tensor> xs, targets;

  explicit Run(bool fused = false)
      : params(make_params()),
        opt0({params[0], params[1]}, {.lr = 0.05, .momentum = 0.9, .step_supports_amp_scaling = fused}),
        opt1({params[2], params[3]}, {.lr = 0.01, .step_supports_amp_scaling = fused}) {
    gm.attach(params);
    mg::manual_seed(5);
    for (int i = 0; i < 2 * kSteps; ++i) {
      xs.push_back(mg::normal({8, 16}));
      targets.push_back(mg::normal({8, 4}));
    }
    xs[2 * kOverflowStep].data<float>()[3] = std::numeric_limits<float>::infinity();
  }
  static std::vector<mg::Tensor> make_params() {
    mg::manual_seed(3);
    return {mg::uniform({16, 16}, -0.25, 0.25), mg::uniform({16}, -0.25, 0.25), mg::uniform({4, 16}, -0.25, 0.25),
            mg::uniform({4}, -0.25, 0.25)};
  }
  // Loss `which` (0 or 1) of micro-batch `mb` of a step; record first.
  mg::Tensor loss(int step, int mb = 0, int which = 0) {
    mg::amp::autocast ac(true, mg::DType::bfloat16);
    const int i = 2 * step + mb;
    mg::Tensor h = F::relu(F::linear(xs[i], params[0], params[1]));
    mg::Tensor y = F::linear(h, params[2], params[3]);
    return which == 0 ? F::mse_loss(y, targets[i]) : F::mean(F::mul(y, y));
  }
  std::vector<mg::Tensor> opt0_params() const { return {params[0], params[1]}; }
  void clear() {
    opt0.clear_grad();
    opt1.clear_grad();
  }
  void step() {
    opt0.step();
    opt1.step();
  }
  // Parameters, gradients with their marks, optimizer states.
  std::string state() const {
    std::string s;
    for (const mg::Tensor& p : params) {
      const mg::GradScaling m = mg::grad_scaling(p.grad());
      s += bytes(p) + "|" + bytes(p.grad()) + "|" + mg::to_string(m.state) + std::to_string(m.epoch) + "|";
    }
    for (const auto& [k, t] : opt0.state_dict()) s += k + bytes(t);
    for (const auto& [k, t] : opt1.state_dict()) s += k + bytes(t);
    return s;
  }
};

std::string scaler_state(const mg::amp::GradScaler& s) {
  std::string out;
  for (const auto& [k, t] : s.state_dict()) out += k + bytes(t);
  return out;
}

using Recipe = std::function<void(Run&, mg::amp::GradScaler&, int step)>;

// kSteps steps of `recipe`; the parameters and scaler state at the end.
std::pair<std::vector<std::string>, std::string> train(const Recipe& recipe, bool fused = false) {
  Run r(fused);
  mg::amp::GradScaler scaler(scaler_options());
  for (int step = 0; step < kSteps; ++step) recipe(r, scaler, step);
  std::vector<std::string> params;
  for (const mg::Tensor& p : r.params) params.push_back(bytes(p));
  return {params, scaler_state(scaler)};
}

// The automatic gear, MegEngine's: the reference every path must reproduce.
void automatic(Run& r, mg::amp::GradScaler& scaler, int step) {
  r.clear();
  {
    auto rec = r.gm.record();
    scaler.backward(r.gm, r.loss(step));
  }
  r.step();
}

void check_same_as(const Recipe& reference, const Recipe& recipe, bool fused = false) {
  const auto want = train(reference), got = train(recipe, fused);
  BOOST_TEST((got.second == want.second), "the scaler state differs");
  for (size_t k = 0; k < want.first.size(); ++k) BOOST_TEST((got.first[k] == want.first[k]), "parameter " << k);
  // The run trained and skipped: a run that never stepped would match nothing.
  BOOST_TEST((want.first[0] != bytes(Run::make_params()[0])));
}

// Runs `misuse` on a run prepared by `setup` and checks that it throws
// StateError naming `needle`, with parameters, gradients, marks, optimizers
// and scaler unchanged.
void check_refused(const Recipe& setup, const std::function<void(Run&, mg::amp::GradScaler&)>& misuse,
                   const std::string& needle) {
  Run r;
  mg::amp::GradScaler scaler(scaler_options());
  setup(r, scaler, 0);
  const std::string before = r.state(), scaler_before = scaler_state(scaler);
  bool thrown = false;
  try {
    misuse(r, scaler);
  } catch (const mg::StateError& e) {
    thrown = true;
    BOOST_TEST(std::string(e.what()).find(needle) != std::string::npos, e.what());
  }
  BOOST_TEST(thrown, "no StateError for a misuse that expected '" << needle << "'");
  BOOST_TEST((r.state() == before), "the refused call changed the run");
  BOOST_TEST((scaler_state(scaler) == scaler_before), "the refused call changed the scaler");
}

mg::Tensor hand_scaled_dy(const mg::Tensor& loss, const mg::amp::GradScaler& scaler) {
  return mg::full_like(loss, scaler.scale_factor());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(scaled_paths)

// The manual gear through scaler.backward(..., {.unscale_grad = false}), in
// PyTorch's order (step, then update) and in MegEngine's (unscale, update,
// then a plain step).
BOOST_AUTO_TEST_CASE(manual_gear_in_either_order_is_the_automatic_gear) {
  check_same_as(automatic, [](Run& r, mg::amp::GradScaler& scaler, int step) {
    r.clear();
    {
      auto rec = r.gm.record();
      scaler.backward(r.gm, r.loss(step), {}, {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
    }
    scaler.step(r.opt0);
    scaler.step(r.opt1);
    scaler.update();
  });
  check_same_as(automatic, [](Run& r, mg::amp::GradScaler& scaler, int step) {
    r.clear();
    {
      auto rec = r.gm.record();
      scaler.backward(r.gm, r.loss(step), {}, {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
    }
    scaler.unscale(r.gm.attached_tensors());
    scaler.update();
    r.step();
  });
}

// MegEngine's manual gear written out: gm.backward(loss, dy = scale), then
// unscale and update; the step may be plain or the scaler's.
BOOST_AUTO_TEST_CASE(a_hand_scaled_dy_unscaled_by_the_user_is_the_automatic_gear) {
  const auto backward_and_unscale = [](Run& r, mg::amp::GradScaler& scaler, int step) {
    r.clear();
    {
      auto rec = r.gm.record();
      auto loss = r.loss(step);
      r.gm.backward(loss, hand_scaled_dy(loss, scaler));
    }
    scaler.unscale(r.gm.attached_tensors());
  };
  check_same_as(automatic, [&](Run& r, mg::amp::GradScaler& scaler, int step) {
    backward_and_unscale(r, scaler, step);
    scaler.update();
    r.step();
  });
  check_same_as(automatic, [&](Run& r, mg::amp::GradScaler& scaler, int step) {
    backward_and_unscale(r, scaler, step);
    scaler.step(r.opt0);
    scaler.step(r.opt1);
    scaler.update();
  });
}

// The silent 16x update this file exists for: a hand-scaled dy stepped by
// scaler.step(opt) without an unscale is refused, as are gradients of an
// unscaled loss and of an op on the scaled loss (which carries no mark).
BOOST_AUTO_TEST_CASE(gradients_step_cannot_vouch_for_are_refused) {
  const auto backward_with = [](std::function<void(Run&, mg::amp::GradScaler&, const mg::Tensor&)> bw) {
    return [bw](Run& r, mg::amp::GradScaler& scaler, int) {
      r.clear();
      auto rec = r.gm.record();
      bw(r, scaler, r.loss(0));
    };
  };
  const auto step0 = [](Run& r, mg::amp::GradScaler& scaler) { scaler.step(r.opt0); };
  check_refused(backward_with([](Run& r, mg::amp::GradScaler& s, const mg::Tensor& loss) {
                  r.gm.backward(loss, hand_scaled_dy(loss, s));
                }),
                step0, "scaler.unscale(...)");
  check_refused(backward_with([](Run& r, mg::amp::GradScaler&, const mg::Tensor& loss) { r.gm.backward(loss); }),
                step0, "did not come through this scaler");
  check_refused(backward_with([](Run& r, mg::amp::GradScaler& s, const mg::Tensor& loss) {
                  r.gm.backward(F::mul(s.scale(loss), 0.5));
                }),
                step0, "did not come through this scaler");
  // The fused form refuses the same, before its read-only pass.
  check_refused(backward_with([](Run& r, mg::amp::GradScaler& s, const mg::Tensor& loss) {
                  r.gm.backward(loss, hand_scaled_dy(loss, s));
                }),
                [](Run& r, mg::amp::GradScaler& s) { r.opt0.step(s); }, "scaler.unscale(...)");
}

// PyTorch's recipe: gm.backward(scaler.scale(loss)); scaler.step(opt);
// scaler.update(); with plain and fused optimizers, and through opt.step(scaler).
BOOST_AUTO_TEST_CASE(the_pytorch_recipe_is_the_automatic_gear) {
  const Recipe pytorch = [](Run& r, mg::amp::GradScaler& scaler, int step) {
    r.clear();
    {
      auto rec = r.gm.record();
      r.gm.backward(scaler.scale(r.loss(step)));
    }
    scaler.step(r.opt0);
    scaler.step(r.opt1);
    scaler.update();
  };
  check_same_as(automatic, pytorch);
  check_same_as(automatic, pytorch, /*fused=*/true);
  check_same_as(automatic, [](Run& r, mg::amp::GradScaler& scaler, int step) {
    r.clear();
    {
      auto rec = r.gm.record();
      r.gm.backward(scaler.scale(r.loss(step)));
    }
    r.opt0.step(scaler);
    r.opt1.step(scaler);
    scaler.update();
  });
}

// PyTorch's test_grad_scaling_clipping behaviour: unscale, clip the true
// gradients, step: the automatic gear with the same clip.
BOOST_AUTO_TEST_CASE(the_pytorch_recipe_with_clipping_is_the_automatic_gear_with_clipping) {
  constexpr double kMaxNorm = 0.2;
  check_same_as(
      [](Run& r, mg::amp::GradScaler& scaler, int step) {
        r.clear();
        {
          auto rec = r.gm.record();
          scaler.backward(r.gm, r.loss(step));
        }
        if (step != kOverflowStep) (void)mg::optim::clip_grad_norm(r.params, kMaxNorm);
        r.step();
      },
      [](Run& r, mg::amp::GradScaler& scaler, int step) {
        r.clear();
        {
          auto rec = r.gm.record();
          r.gm.backward(scaler.scale(r.loss(step)));
        }
        scaler.unscale(r.params);
        if (step != kOverflowStep) (void)mg::optim::clip_grad_norm(r.params, kMaxNorm);
        scaler.step(r.opt0);
        scaler.step(r.opt1);
        scaler.update();
      });
}

// PyTorch's test_grad_scaling_accumulation behaviour: two micro-batches a
// step, scaled gradients added up, one unscale. The reference is MegEngine's
// accumulation through the manual gear.
BOOST_AUTO_TEST_CASE(accumulation_over_micro_batches_unscales_once_on_every_path) {
  const auto accumulate = [](std::function<void(Run&, mg::amp::GradScaler&, const mg::Tensor&)> backward,
                             std::function<void(Run&, mg::amp::GradScaler&)> finish) {
    return [=](Run& r, mg::amp::GradScaler& scaler, int step) {
      r.clear();
      for (int mb = 0; mb < 2; ++mb) {
        auto rec = r.gm.record();
        backward(r, scaler, r.loss(step, mb));
      }
      finish(r, scaler);
    };
  };
  const auto unscale_update_step = [](Run& r, mg::amp::GradScaler& s) {
    s.unscale(r.gm.attached_tensors());
    s.update();
    r.step();
  };
  const auto scaler_steps = [](Run& r, mg::amp::GradScaler& s) {
    s.step(r.opt0);
    s.step(r.opt1);
    s.update();
  };
  const Recipe reference = accumulate(
      [](Run& r, mg::amp::GradScaler& s, const mg::Tensor& loss) {
        s.backward(r.gm, loss, {}, {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
      },
      unscale_update_step);
  check_same_as(reference, accumulate([](Run& r, mg::amp::GradScaler& s,
                                         const mg::Tensor& loss) { r.gm.backward(s.scale(loss)); },
                                      scaler_steps));
  check_same_as(reference, accumulate(
                               [](Run& r, mg::amp::GradScaler& s, const mg::Tensor& loss) {
                                 r.gm.backward(loss, hand_scaled_dy(loss, s));
                               },
                               unscale_update_step));
  check_same_as(reference, accumulate(
                               [](Run& r, mg::amp::GradScaler& s, const mg::Tensor& loss) {
                                 s.backward(r.gm, loss, {},
                                            {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
                               },
                               scaler_steps));
}

// Several losses in one backward, and PyTorch's test_grad_scaling_multiple
// behaviour: two losses, two optimizers (one fused, one not), one scaler.
BOOST_AUTO_TEST_CASE(several_losses_and_optimizers_are_the_automatic_gear) {
  const Recipe reference = [](Run& r, mg::amp::GradScaler& scaler, int step) {
    r.clear();
    {
      auto rec = r.gm.record();
      scaler.backward(r.gm, std::vector<mg::Tensor>{r.loss(step, 0, 0), r.loss(step, 0, 1)});
    }
    r.step();
  };
  check_same_as(reference, [](Run& r, mg::amp::GradScaler& scaler, int step) {
    r.clear();
    {
      auto rec = r.gm.record();
      r.gm.backward(scaler.scale(std::vector<mg::Tensor>{r.loss(step, 0, 0), r.loss(step, 0, 1)}));
    }
    scaler.step(r.opt0, /*fused_unscale=*/true);
    scaler.step(r.opt1, /*fused_unscale=*/false);
    scaler.update();
  });
  check_same_as(reference, [](Run& r, mg::amp::GradScaler& scaler, int step) {
    r.clear();
    {
      auto rec = r.gm.record();
      const mg::Tensor l0 = r.loss(step, 0, 0), l1 = r.loss(step, 0, 1);
      r.gm.backward({l0, l1}, {hand_scaled_dy(l0, scaler), hand_scaled_dy(l1, scaler)});
    }
    scaler.unscale(r.params);
    scaler.step(r.opt1);
    scaler.step(r.opt0);
    scaler.update();
  });
  // One loss scaled and one not: the gradients are mixed, and refused.
  check_refused(
      [](Run& r, mg::amp::GradScaler& scaler, int) {
        auto rec = r.gm.record();
        r.gm.backward({scaler.scale(r.loss(0, 0, 0)), r.loss(0, 0, 1)});
      },
      [](Run& r, mg::amp::GradScaler& scaler) { scaler.step(r.opt0); }, "sums values scaled");
}

// Gradients left over from an earlier step (not cleared) must not have
// scaled values added to them, nor be unscaled again.
BOOST_AUTO_TEST_CASE(gradients_left_over_from_an_earlier_step_are_never_unscaled_again) {
  const Recipe one_step = automatic;
  check_refused(one_step, [](Run& r, mg::amp::GradScaler& s) { s.unscale(r.params); }, "already unscaled");
  check_refused(
      one_step,
      [](Run& r, mg::amp::GradScaler& s) {
        auto rec = r.gm.record();
        s.backward(r.gm, r.loss(1));
      },
      "already unscaled");
  // Through scaler.scale the backward itself goes through (the GradManager
  // cannot know who will read the sum); everything that would read it refuses.
  const Recipe added = [](Run& r, mg::amp::GradScaler& s, int) {
    automatic(r, s, 0);
    auto rec = r.gm.record();
    r.gm.backward(s.scale(r.loss(1)));
  };
  check_refused(added, [](Run& r, mg::amp::GradScaler& s) { s.step(r.opt0); }, "sums values scaled");
  check_refused(added, [](Run& r, mg::amp::GradScaler&) { r.opt0.step(); }, "sums values scaled");
  check_refused(added, [](Run& r, mg::amp::GradScaler& s) { s.unscale(r.params); }, "sums values scaled");
}

// A scaled gradient survives an update() only to be refused: the scale may
// have changed since (MegEngine's update_scale=True with unscale_grad=False
// would unscale it with the new one).
BOOST_AUTO_TEST_CASE(gradients_scaled_before_an_update_are_refused) {
  const Recipe scaled_then_update = [](Run& r, mg::amp::GradScaler& s, int) {
    auto rec = r.gm.record();
    s.backward(r.gm, r.loss(0), {}, {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::always});
  };
  check_refused(scaled_then_update, [](Run& r, mg::amp::GradScaler& s) { s.step(r.opt0); }, "last update()");
  check_refused(scaled_then_update, [](Run& r, mg::amp::GradScaler& s) { s.unscale(r.params); }, "last update()");
  check_refused(scaled_then_update, [](Run& r, mg::amp::GradScaler&) { r.opt0.step(); }, "scaled");
}

// Another scaler's gradients: neither this scaler's step nor its unscale
// takes them.
BOOST_AUTO_TEST_CASE(gradients_of_another_scaler_are_refused) {
  static mg::amp::GradScaler other(scaler_options());
  const Recipe by_other = [](Run& r, mg::amp::GradScaler&, int) {
    auto rec = r.gm.record();
    r.gm.backward(other.scale(r.loss(0)));
  };
  check_refused(by_other, [](Run& r, mg::amp::GradScaler& s) { s.step(r.opt0); }, "another GradScaler");
  check_refused(by_other, [](Run& r, mg::amp::GradScaler& s) { s.unscale(r.params); }, "another GradScaler");
}

// scale(): the product is the loss times the scale in the loss's dtype, its
// gradient the scale; a disabled scaler returns the loss itself.
BOOST_AUTO_TEST_CASE(scale_multiplies_the_loss_and_marks_it) {
  mg::amp::GradScaler scaler({.init_scale = 8.0});
  const mg::Tensor loss = mg::scalar(1.5, mg::DType::float32);
  const mg::Tensor scaled = scaler.scale(loss);
  BOOST_TEST(scaled.dtype() == mg::DType::float32);
  BOOST_TEST(scaled.item<float>() == 12.0f);
  BOOST_TEST((mg::grad_scaling(scaled).state == mg::ScaleState::scaled));
  BOOST_TEST((mg::grad_scaling(loss).state == mg::ScaleState::none));
  const auto both = scaler.scale(std::vector<mg::Tensor>{loss, mg::scalar(2.0, mg::DType::float64)});
  BOOST_TEST(both.size() == 2u);
  BOOST_TEST(both[1].item<double>() == 16.0);
  BOOST_TEST(both[1].dtype() == mg::DType::float64);
  mg::amp::GradScaler disabled({.enabled = false});
  BOOST_TEST(disabled.scale(loss).id() == loss.id());
  BOOST_CHECK_THROW((void)scaler.scale(mg::Tensor()), mg::DTypeError);
  BOOST_CHECK_THROW((void)scaler.scale({loss, mg::scalar(1.0, mg::DType::int64)}), mg::DTypeError);
}

BOOST_AUTO_TEST_SUITE_END()
