// The map engine's contiguous loop runs as portable code or inside an
// AVX-512 target function (core/simd.hpp): both variants of elementwise ops
// and their gradients give the same values on contiguous operands in every
// dtype they inline (float32, float64, bfloat16, int32), with lengths that
// leave vector tails; bfloat16 NaN and infinities pass through relu and add.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/simd.hpp"
#include "mixgrad/mixgrad.hpp"

namespace {

namespace mg = mixgrad;
namespace F = mg::F;
using mg::DType;
using mg::Tensor;

struct UnaryCase {
  std::string name;
  std::function<Tensor(const Tensor&, const Tensor&)> run;
  bool exact;  // arithmetic and selects: same bits; libm and fused multiply-adds may differ in the last bit
};

std::vector<UnaryCase> cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; }, true},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }, true},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }, true},
      {"maximum", [](const Tensor& a, const Tensor& b) { return F::maximum(a, b); }, true},
      {"relu", [](const Tensor& a, const Tensor&) { return F::relu(a); }, true},
      {"neg", [](const Tensor& a, const Tensor&) { return -a; }, true},
      {"greater", [](const Tensor& a, const Tensor& b) { return F::gt(a, b); }, true},
      {"sigmoid", [](const Tensor& a, const Tensor&) { return F::sigmoid(a); }, false},
      {"gelu", [](const Tensor& a, const Tensor&) { return F::gelu(a); }, false},
      {"leaky_relu", [](const Tensor& a, const Tensor&) { return F::leaky_relu(a, 0.1); }, false},
  };
}

// Output and input gradient (floating dtypes) of a case.
std::vector<std::vector<double>> run(const UnaryCase& c, const Tensor& a0, const Tensor& b, const Tensor& gy_like) {
  Tensor a = a0.clone();
  const bool grads = mg::is_floating_point(a.dtype()) && c.name != "greater";
  mg::autodiff::GradManager gm;
  if (grads) gm.attach(a);
  Tensor y;
  {
    auto rec = gm.record();
    y = c.run(a, b);
    if (grads) gm.backward(y, gy_like);
  }
  std::vector<std::vector<double>> out{y.to_vector<double>()};
  if (grads) out.push_back(a.grad().to_vector<double>());
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(map_variants)

BOOST_AUTO_TEST_CASE(portable_and_avx512_loops_agree) {
  if (mg::simd::available() != mg::simd::Level::avx512) return;
  for (DType dt : {DType::float32, DType::float64, DType::bfloat16, DType::int32})
    for (int64_t n : {int64_t{37}, int64_t{70001}}) {  // 70001: split across threads, with a tail
      mg::manual_seed(static_cast<uint64_t>(n));
      const Tensor a = dt == DType::int32 ? mg::uniform({n}, -50, 50).to(dt) : mg::normal({n}, 0, 2, dt);
      const Tensor b = dt == DType::int32 ? mg::uniform({n}, -50, 50).to(dt) : mg::normal({n}, 0, 2, dt);
      const Tensor gy = mg::is_floating_point(dt) ? mg::normal({n}, 0, 1, dt) : Tensor();
      for (const UnaryCase& c : cases()) {
        if (dt == DType::int32 && !(c.name == "add" || c.name == "sub" || c.name == "mul" || c.name == "maximum" ||
                                    c.name == "relu" || c.name == "neg" || c.name == "greater"))
          continue;
        BOOST_TEST_CONTEXT(c.name << " " << mg::to_string(dt) << " n = " << n) {
          std::vector<std::vector<double>> portable, wide;
          {
            mg::simd::LevelScope scope(mg::simd::Level::portable);
            portable = run(c, a, b, gy);
          }
          wide = run(c, a, b, gy);
          BOOST_TEST_REQUIRE(portable.size() == wide.size());
          for (size_t k = 0; k < wide.size(); ++k) {
            if (c.exact) {
              BOOST_TEST(portable[k] == wide[k], boost::test_tools::per_element());
            } else {
              const double tol = dt == DType::bfloat16 ? 1e-2 : (dt == DType::float32 ? 1e-6 : 1e-14);
              for (size_t i = 0; i < wide[k].size(); ++i)
                BOOST_TEST(std::abs(portable[k][i] - wide[k][i]) <= tol * (1 + std::abs(portable[k][i])));
            }
          }
        }
      }
    }
}

BOOST_AUTO_TEST_CASE(bfloat16_specials_pass_through_the_inline_loop) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> v{nan, -nan, inf, -inf, -0.0f, 0.0f, 1e-40f, -1e-40f, 3.0f, -3.0f,
                             nan, inf, -inf, 2.5f, -2.5f, 0.5f, 7.0f};  // 17: one full vector and a tail
  const Tensor x = mg::tensor(v, {17}).to(DType::bfloat16);
  const auto r = F::relu(x).to_vector<float>();
  const auto s = (x + x).to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) {
    const float want_relu = std::isnan(v[i]) ? nan : (v[i] <= 0 ? 0.0f : static_cast<float>(mg::bfloat16(v[i])));
    if (std::isnan(want_relu)) BOOST_TEST(std::isnan(r[i]), "relu element " << i);
    else BOOST_TEST(r[i] == want_relu, "relu element " << i);
    const float b = mg::bfloat16(v[i]);
    const float want_sum = static_cast<float>(mg::bfloat16(b + b));
    if (std::isnan(want_sum)) BOOST_TEST(std::isnan(s[i]), "add element " << i);
    else BOOST_TEST(s[i] == want_sum, "add element " << i);
  }
}

BOOST_AUTO_TEST_SUITE_END()
