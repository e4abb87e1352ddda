// GradManager groups (MegEngine's `with gm1 | gm2:`) and which manager sees
// which backward. Cases named "MegEngine test_..." follow the test of that name
// in MegEngine's imperative/python/test/unit/autodiff/test_grad_manger.py.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autodiff/inspect.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace F = mixgrad::F;
using mg::autodiff::GradManager;
using mg::autodiff::GradManagerGroup;
using mg::autodiff::detail::tape_size;
namespace tt = boost::test_tools;

namespace {
mg::Tensor vec(std::initializer_list<float> v) { return mg::tensor(v, {static_cast<int64_t>(v.size())}); }
std::vector<float> values(const mg::Tensor& t) { return t.to_vector<float>(); }
const std::vector<float> kX = {0.1f, 0.5f, 0.9f, 1.7f};
std::vector<float> minus_sin(float times = 1) {
  std::vector<float> out;
  for (float x : kX) out.push_back(-times * std::sin(x));
  return out;
}
mg::Tensor x_tensor() { return mg::tensor(std::vector<float>(kX), {static_cast<int64_t>(kX.size())}); }
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

BOOST_AUTO_TEST_SUITE(grad_manager_group)

// MegEngine test_grad_manager_group: both members record cos(x); each backward
// adds its own -sin(x), and the second member still records after the first's
// backward has ended the first's recording.
BOOST_AUTO_TEST_CASE(both_members_record_and_each_backward_adds_its_gradient) {
  auto x = x_tensor();
  GradManager gm, gm2;
  gm.attach(x);
  gm2.attach(x);
  {
    auto recording = (gm | gm2).record();
    BOOST_TEST(gm.is_recording());
    BOOST_TEST(gm2.is_recording());
    auto y = F::cos(x);
    gm.backward(y);
    BOOST_TEST(!gm.is_recording());
    BOOST_TEST(gm2.is_recording());
    gm2.backward(y);
  }
  BOOST_TEST(values(x.grad()) == minus_sin(2), tt::tolerance(1e-5f) << tt::per_element());
}

// MegEngine test_grad_manager_group_visibility: a member does not see another
// member's backward, so x.grad (written by gm2's backward) is a plain tensor to
// gm and gm.backward(x.grad) adds nothing.
BOOST_AUTO_TEST_CASE(members_do_not_see_each_others_backward) {
  auto x = x_tensor();
  GradManager gm, gm2;
  gm.attach(x);
  gm2.attach(x);
  auto recording = (gm | gm2).record();
  auto y = F::cos(x);
  gm2.backward(y);
  BOOST_TEST(values(x.grad()) == minus_sin(), tt::tolerance(1e-5f) << tt::per_element());
  gm.backward(x.grad());
  BOOST_TEST(values(x.grad()) == minus_sin(), tt::tolerance(1e-5f) << tt::per_element());
  BOOST_TEST(!gm.is_recording());
}

// MegEngine test_grad_manager_visibility_by_order: gm2 records first (outer),
// gm inside it (inner). The inner manager never sees the outer one's
// backward: gm.backward(x.grad) adds nothing.
BOOST_AUTO_TEST_CASE(an_inner_manager_does_not_see_the_outer_backward) {
  auto x = x_tensor();
  GradManager gm, gm2;
  gm.attach(x);
  gm2.attach(x);
  {
    auto outer = gm2.record();
    auto inner = gm.record();
    auto y = F::cos(x);
    gm2.backward(y);
    BOOST_TEST(values(x.grad()) == minus_sin(), tt::tolerance(1e-5f) << tt::per_element());
    gm.backward(x.grad());
  }
  BOOST_TEST(values(x.grad()) == minus_sin(), tt::tolerance(1e-5f) << tt::per_element());
}

// MegEngine test_2nd_grad_with_manager: the outer manager records the inner
// backward, so differentiating x.grad = -sin(x) again adds -cos(x).
// Upstream: MegEngine test_grad_manager.py test_2nd_grad_with_manager.
BOOST_AUTO_TEST_CASE(an_outer_manager_differentiates_an_inner_backward) {
  auto x = x_tensor();
  GradManager gm, gm2;
  gm.attach(x);
  gm2.attach(x);
  {
    auto outer = gm.record();
    {
      auto inner = gm2.record();
      gm2.backward(F::cos(x));
    }
    BOOST_TEST(values(x.grad()) == minus_sin(), tt::tolerance(1e-5f) << tt::per_element());
    gm.backward(x.grad());
  }
  std::vector<float> expect;
  for (float v : kX) expect.push_back(-std::sin(v) - std::cos(v));
  BOOST_TEST(values(x.grad()) == expect, tt::tolerance(1e-5f) << tt::per_element());
}

// The same nesting through an op whose backward is not differentiable
// (a once_differentiable function): the outer backward refuses, naming the op, rather than return a
// gradient without the second-order term, and changes no .grad().
BOOST_AUTO_TEST_CASE(an_outer_backward_through_a_non_differentiable_inner_backward_is_refused) {
  auto x = x_tensor();
  GradManager gm, gm2;
  gm.attach(x);
  gm2.attach(x);
  {
    auto outer = gm.record();
    {
      auto inner = gm2.record();
      struct OnceCube : mg::autodiff::Function {
        mg::Tensor x;
        OnceCube() { once_differentiable = true; }
        std::string name() const override { return "OnceCube"; }
        std::vector<mg::Tensor> forward(const std::vector<mg::Tensor>& in) override {
          x = in[0];
          return {F::mul(F::mul(x, x), x)};
        }
        std::vector<mg::Tensor> backward(const std::vector<mg::Tensor>& dy) override {
          return {F::mul(F::mul(F::mul(x, x), 3.0), dy[0])};
        }
      };
      gm2.backward(F::sum(mg::autodiff::apply(std::make_shared<OnceCube>(), {x})[0]));
    }
    const std::vector<float> first = values(x.grad());
    try {
      gm.backward(x.grad());
      BOOST_FAIL("expected StateError");
    } catch (const mg::StateError& e) {
      BOOST_TEST(contains(e.what(), "GradManager::backward"));
      BOOST_TEST(contains(e.what(), "float32[4]"));
      BOOST_TEST(contains(e.what(), "OnceCube"));
      BOOST_TEST(contains(e.what(), "not twice differentiable"));
    }
    BOOST_TEST(!gm.is_recording());  // the tape is spent, as for any throwing backward
    BOOST_TEST(values(x.grad()) == first, tt::per_element());
  }
}

// MegEngine test_emulate_forward_mode_with_reverse_mode: the jvp trick. The
// outer manager differentiates the inner backward with respect to the inner
// dy (attached to the outer one while it records): d(sum dL/dx)/d(dy) is
// f'(x), here for upstream's three targets 2x + 1, cos and sin, against
// central differences.
BOOST_AUTO_TEST_CASE(forward_mode_emulation_with_reverse_mode) {
  for (int target = 0; target < 3; ++target) {
    auto f = [target](const mg::Tensor& t) {
      return target == 0 ? F::add(F::mul(t, 2.0), 1.0) : target == 1 ? F::cos(t) : F::sin(t);
    };
    auto inp = x_tensor();
    GradManager gm, gm2;
    gm2.attach(inp);
    mg::Tensor oup, oup_grad;
    {
      auto outer = gm.record();
      {
        auto inner = gm2.record();
        oup = f(inp);
        oup_grad = mg::zeros_like(oup);
        gm.attach(oup_grad);
        gm2.backward(oup, oup_grad);
      }
      gm.backward(inp.grad());
    }
    const float delta = 1e-3f;
    const auto up = values(f(F::add(inp, delta))), down = values(f(F::sub(inp, delta)));
    std::vector<float> fake;
    for (size_t i = 0; i < up.size(); ++i) fake.push_back((up[i] - down[i]) / (2 * delta));
    BOOST_TEST_REQUIRE(oup_grad.grad().defined());
    BOOST_TEST(values(oup_grad.grad()) == fake, tt::tolerance(2e-3f) << tt::per_element());
  }
}

// Gradients that do not pass through the inner backward are unaffected: the
// outer manager gets its own first-order gradient, as MegEngine gives.
BOOST_AUTO_TEST_CASE(nested_managers_on_one_loss_each_add_their_gradient) {
  auto w = vec({1, 2, 3});
  GradManager outer_gm, inner_gm;
  outer_gm.attach(w);
  inner_gm.attach(w);
  {
    auto outer = outer_gm.record();
    auto inner = inner_gm.record();
    auto loss = F::sum(F::mul(w, w));
    inner_gm.backward(loss);
    BOOST_TEST(values(w.grad()) == std::vector<float>({2, 4, 6}), tt::per_element());
    auto unused = F::mul(w.grad(), 0.5);  // an op on the inner result, not on the loss's path
    outer_gm.backward(loss);
  }
  BOOST_TEST(values(w.grad()) == std::vector<float>({4, 8, 12}), tt::per_element());
}

// A group nested in a solo manager's recording: the group's partner does not
// see the member's backward, the outer solo manager does (and records it).
BOOST_AUTO_TEST_CASE(a_group_inside_an_outer_manager) {
  auto x = x_tensor();
  GradManager outer_gm, gm1, gm2;
  outer_gm.attach(x);
  gm1.attach(x);
  gm2.attach(x);
  auto outer = outer_gm.record();
  auto group = (gm1 | gm2).record();
  auto y = F::cos(x);
  gm1.backward(y);
  auto penalty = F::sum(F::mul(x.grad(), x.grad()));  // recorded by outer_gm only
  gm2.backward(penalty);                              // penalty is plain to gm2
  BOOST_TEST(values(x.grad()) == minus_sin(), tt::tolerance(1e-5f) << tt::per_element());
  outer_gm.backward(penalty);  // d(sin^2 x)/dx = sin 2x, added to -sin x
  std::vector<float> expect;
  for (float v : kX) expect.push_back(-std::sin(v) + std::sin(2 * v));
  BOOST_TEST(values(x.grad()) == expect, tt::tolerance(1e-5f) << tt::per_element());
}

// Disjoint parameter sets (a generator / critic split): each member's
// backward fills only its own attached tensors.
BOOST_AUTO_TEST_CASE(disjoint_members_fill_only_their_own_tensors) {
  auto a = vec({2, 3}), b = vec({5, 7});
  GradManager gm_a, gm_b;
  gm_a.attach(a);
  gm_b.attach(b);
  auto recording = (gm_a | gm_b).record();
  auto y = F::sum(F::mul(a, b));  // on both tapes
  BOOST_TEST(tape_size(gm_a) == 2u);
  BOOST_TEST(tape_size(gm_b) == 2u);
  auto only_a = F::mul(a, 4.0);  // on gm_a's tape only
  BOOST_TEST(tape_size(gm_a) == 3u);
  BOOST_TEST(tape_size(gm_b) == 2u);
  (void)only_a;
  gm_b.backward(y);
  BOOST_TEST(values(b.grad()) == std::vector<float>({2, 3}), tt::per_element());
  BOOST_TEST(!a.grad().defined());
  gm_a.backward(y);
  BOOST_TEST(values(a.grad()) == std::vector<float>({5, 7}), tt::per_element());
  BOOST_TEST(values(b.grad()) == std::vector<float>({2, 3}), tt::per_element());
}

// Overlapping sets: the shared tensor gets one contribution per backward.
BOOST_AUTO_TEST_CASE(overlapping_members_share_a_tensor) {
  auto a = vec({1, 2}), w = vec({3, 4}), b = vec({5, 6});
  GradManager gm1, gm2;
  gm1.attach({a, w});
  gm2.attach({w, b});
  auto recording = (gm1 | gm2).record();
  auto y = F::sum(F::mul(F::mul(a, w), b));
  gm1.backward(y);
  BOOST_TEST(values(a.grad()) == std::vector<float>({15, 24}), tt::per_element());  // w*b
  BOOST_TEST(values(w.grad()) == std::vector<float>({5, 12}), tt::per_element());   // a*b
  BOOST_TEST(!b.grad().defined());
  gm2.backward(y);
  BOOST_TEST(values(w.grad()) == std::vector<float>({10, 24}), tt::per_element());
  BOOST_TEST(values(b.grad()) == std::vector<float>({3, 8}), tt::per_element());  // a*w
  BOOST_TEST(values(a.grad()) == std::vector<float>({15, 24}), tt::per_element());
}

// The scope ends every member that still records, and only the recording it
// started: a member that finished its backward and started recording alone
// keeps that recording.
BOOST_AUTO_TEST_CASE(the_scope_ends_only_its_own_recordings) {
  GradManager gm1, gm2;
  auto w = vec({1});
  gm1.attach(w);
  gm2.attach(w);
  std::optional<mg::autodiff::GroupRecordingScope> group;
  group.emplace((gm1 | gm2).record());
  gm1.backward(F::mul(w, 2.0));
  auto alone = gm1.record();
  (void)F::mul(w, 3.0);
  group.reset();
  BOOST_TEST(gm1.is_recording());
  BOOST_TEST(!gm2.is_recording());
  BOOST_TEST(tape_size(gm1) == 1u);
  BOOST_TEST(tape_size(gm2) == 0u);
}

// MegEngine raises "already recording" when a member records; here the group
// refuses before starting any member.
BOOST_AUTO_TEST_CASE(a_member_already_recording_is_refused_and_nothing_starts) {
  GradManager gm1, gm2, gm3;
  auto r = gm2.record();
  try {
    (void)(gm1 | gm2 | gm3).record();
    BOOST_FAIL("expected StateError");
  } catch (const mg::StateError& e) {
    BOOST_TEST(contains(e.what(), "GradManagerGroup::record"));
    BOOST_TEST(contains(e.what(), "member 1"));
    BOOST_TEST(contains(e.what(), "already recording"));
  }
  BOOST_TEST(!gm1.is_recording());
  BOOST_TEST(gm2.is_recording());
  BOOST_TEST(!gm3.is_recording());
}

BOOST_AUTO_TEST_CASE(a_member_listed_twice_or_an_empty_group_is_refused) {
  GradManager gm1, gm2;
  BOOST_CHECK_THROW((void)(gm1 | gm2 | gm1).record(), mg::StateError);
  BOOST_TEST(!gm1.is_recording());
  BOOST_TEST(!gm2.is_recording());
  BOOST_CHECK_THROW((void)GradManagerGroup({}).record(), mg::StateError);
}

// MegEngine's merge_with: a group of groups is one flat group, in order.
BOOST_AUTO_TEST_CASE(groups_of_groups_flatten_in_order) {
  GradManager gm1, gm2, gm3, gm4;
  auto g = (gm1 | gm2) | gm3;
  BOOST_TEST_REQUIRE(g.members().size() == 3u);
  BOOST_TEST(g.members()[0] == &gm1);
  BOOST_TEST(g.members()[2] == &gm3);
  auto h = gm4 | (gm1 | gm2);
  BOOST_TEST_REQUIRE(h.members().size() == 3u);
  BOOST_TEST(h.members()[0] == &gm4);
  auto all = (gm1 | gm2) | (gm3 | gm4);
  BOOST_TEST_REQUIRE(all.members().size() == 4u);
  BOOST_TEST(all.members()[3] == &gm4);

  auto w = vec({1, 2});
  gm1.attach(w);
  gm3.attach(w);
  {
    auto recording = all.record();
    for (GradManager* gm : all.members()) BOOST_TEST(gm->is_recording());
    auto y = F::sum(F::mul(w, w));
    gm1.backward(y);
    gm3.backward(y);  // same group: gm1's backward is not nested for gm3
  }
  for (GradManager* gm : all.members()) BOOST_TEST(!gm->is_recording());
  BOOST_TEST(values(w.grad()) == std::vector<float>({4, 8}), tt::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
