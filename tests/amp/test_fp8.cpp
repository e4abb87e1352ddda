// FP8 emulation: the rounding against every code of both formats decoded
// here independently, the delayed-scaling update against hand-computed
// values, the emulated products and their straight-through gradients
// against float64 references on the rounded operands, training, the
// checkpoint round trip and the errors.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backend/fp8.hpp"
#include "kernels/fp8.hpp"
#include "mixgrad/mixgrad.hpp"
#include "mixgrad/ops/fp8.hpp"

namespace mg = mixgrad;
namespace F = mg::F;
using mg::DType;
using mg::Fp8Format;

namespace {

// The value of code c (0..255), decoded from the format's definition.
double decode(Fp8Format f, int c) {
  const int sign = c >> 7;
  const int ebits = f == Fp8Format::e4m3 ? 4 : 5, mbits = 7 - ebits;
  const int e = (c >> mbits) & ((1 << ebits) - 1), m = c & ((1 << mbits) - 1);
  const int bias = (1 << (ebits - 1)) - 1;
  double v;
  if (f == Fp8Format::e4m3 && e == 15 && m == 7) return std::nan("");
  if (f == Fp8Format::e5m2 && e == 31) v = m == 0 ? INFINITY : NAN;
  else if (e == 0) v = std::ldexp(m, 1 - bias - mbits);
  else v = std::ldexp((1 << mbits) + m, e - bias - mbits);
  return sign ? -v : v;
}

// The finite non-negative values with their codes, ascending.
std::vector<std::pair<double, int>> finite_values(Fp8Format f) {
  std::vector<std::pair<double, int>> out;
  for (int c = 0; c < 128; ++c)
    if (std::isfinite(decode(f, c))) out.push_back({decode(f, c), c});
  std::sort(out.begin(), out.end());
  return out;
}

// Round to nearest, ties to the even code, finite values saturating: by
// search over the table, not by the library's arithmetic.
double reference_round(Fp8Format f, double x) {
  if (std::isnan(x)) return x;
  if (std::isinf(x)) return f == Fp8Format::e5m2 ? x : std::nan("");
  const auto vals = finite_values(f);
  const double a = std::min(std::abs(x), vals.back().first);
  auto hi = std::lower_bound(vals.begin(), vals.end(), std::make_pair(a, -1));
  double r;
  if (hi->first == a || hi == vals.begin()) r = hi->first;
  else {
    const auto lo = hi - 1;
    const double dl = a - lo->first, dh = hi->first - a;
    r = dl < dh ? lo->first : dh < dl ? hi->first : ((lo->second & 1) == 0 ? lo->first : hi->first);
  }
  return std::signbit(x) ? -r : r;
}

std::vector<double> round_all(const std::vector<double>& xs, Fp8Format f, DType dtype) {
  return F::fp8_round(mg::tensor(xs, {static_cast<int64_t>(xs.size())}, dtype), f).to_vector<double>();
}

bool same(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
}

const Fp8Format kFormats[] = {Fp8Format::e4m3, Fp8Format::e5m2};

}  // namespace

BOOST_AUTO_TEST_SUITE(fp8)

BOOST_AUTO_TEST_CASE(every_code_of_both_formats_rounds_to_itself_in_every_floating_dtype) {
  for (Fp8Format f : kFormats) {
    std::vector<double> codes;
    for (int c = 0; c < 256; ++c)
      if (std::isfinite(decode(f, c))) codes.push_back(decode(f, c));
    BOOST_TEST(codes.size() == (f == Fp8Format::e4m3 ? 254u : 248u));
    for (DType d : {DType::float32, DType::float64, DType::bfloat16, DType::float16}) {
      const auto r = round_all(codes, f, d);
      for (size_t i = 0; i < codes.size(); ++i)
        BOOST_TEST(same(r[i], codes[i]), codes[i] << " in " << d << " -> " << r[i]);
    }
  }
  BOOST_TEST(decode(Fp8Format::e4m3, 0x7e) == 448.0);
  BOOST_TEST(decode(Fp8Format::e5m2, 0x7b) == 57344.0);
  BOOST_TEST(decode(Fp8Format::e4m3, 0x01) == std::ldexp(1.0, -9));
  BOOST_TEST(decode(Fp8Format::e5m2, 0x01) == std::ldexp(1.0, -16));
}

BOOST_AUTO_TEST_CASE(midpoints_round_to_the_even_code_and_their_neighbours_to_the_nearest) {
  for (Fp8Format f : kFormats) {
    const auto vals = finite_values(f);
    std::vector<double> xs, want;
    for (size_t i = 0; i + 1 < vals.size(); ++i) {
      const auto [lo, lo_code] = vals[i];
      const double hi = vals[i + 1].first;
      const double mid = (lo + hi) / 2;
      for (double sign : {1.0, -1.0}) {
        xs.push_back(sign * mid);
        want.push_back(sign * ((lo_code & 1) == 0 ? lo : hi));
        xs.push_back(sign * std::nextafter(static_cast<float>(mid), 0.f));
        want.push_back(sign * lo);
        xs.push_back(sign * std::nextafter(static_cast<float>(mid), INFINITY));
        want.push_back(sign * hi);
      }
    }
    const auto r = round_all(xs, f, DType::float32);
    for (size_t i = 0; i < xs.size(); ++i) BOOST_TEST(same(r[i], want[i]), xs[i] << " -> " << r[i]);
    // float64: a value above a midpoint by less than a float ulp rounds up
    // (converting to float first would land on the midpoint and round to even).
    const double lo = vals[8].first, hi = vals[9].first;
    const double x = (lo + hi) / 2 + std::ldexp(lo, -40);
    BOOST_TEST(round_all({x}, f, DType::float64)[0] == hi);
  }
}

BOOST_AUTO_TEST_CASE(saturation_nan_infinity_zero_and_subnormals) {
  const double e4max = 448, e5max = 57344;
  const std::vector<double> xs{449, 463.99, 464, 465, 1e30, FLT_MAX, -500, INFINITY, -INFINITY, NAN, 0.0, -0.0,
                               std::ldexp(1.0, -10), std::ldexp(1.0, -10) * 1.0001, std::ldexp(3.0, -10)};
  const auto r4 = round_all(xs, Fp8Format::e4m3, DType::float32);
  const std::vector<double> w4{e4max, e4max, e4max, e4max, e4max, e4max, -e4max, NAN, NAN, NAN, 0.0, -0.0, 0.0,
                               std::ldexp(1.0, -9), std::ldexp(2.0, -9)};
  for (size_t i = 0; i < xs.size(); ++i) BOOST_TEST(same(r4[i], w4[i]), "e4m3 " << xs[i] << " -> " << r4[i]);
  const std::vector<double> ys{57345, 61439, 61440, 1e30, -1e6, INFINITY, -INFINITY, std::ldexp(1.0, -17),
                               std::ldexp(3.0, -17), std::ldexp(5.0, -17)};
  const auto r5 = round_all(ys, Fp8Format::e5m2, DType::float32);
  const std::vector<double> w5{e5max, e5max, e5max, e5max, -e5max, INFINITY, -INFINITY, 0.0, std::ldexp(4.0, -17),
                               std::ldexp(4.0, -17)};
  for (size_t i = 0; i < ys.size(); ++i) BOOST_TEST(same(r5[i], w5[i]), "e5m2 " << ys[i] << " -> " << r5[i]);
}

BOOST_AUTO_TEST_CASE(scaled_cast_of_random_values_matches_the_table_search) {
  std::mt19937 gen(5);
  std::uniform_real_distribution<double> log2_mag(-20, 20);
  std::vector<double> xs;
  for (int i = 0; i < 4000; ++i)
    xs.push_back((i % 2 ? -1 : 1) * static_cast<float>(std::exp2(log2_mag(gen))));
  const float s = 3.7f;
  const mg::Tensor x = mg::tensor(xs, {static_cast<int64_t>(xs.size())}, DType::float32);
  for (Fp8Format f : kFormats) {
    const auto q = F::fp8_quantize(x, mg::scalar(s), f);
    BOOST_TEST(q.dtype() == DType::float32);
    const auto got = q.to_vector<double>();
    int bad = 0;
    for (size_t i = 0; i < xs.size(); ++i)
      bad += !same(got[i], reference_round(f, static_cast<double>(static_cast<float>(xs[i]) * s)));
    BOOST_TEST(bad == 0);
    // A strided (transposed) input gives the same values.
    const auto m = x.reshape({40, 100});
    const auto qt = F::fp8_quantize(F::transpose(m, 0, 1), mg::scalar(s), f);
    BOOST_TEST(F::transpose(qt, 0, 1).contiguous().reshape({4000}).to_vector<double>() == got);
  }
}

BOOST_AUTO_TEST_CASE(fp8_round_gradient_is_straight_through) {
  auto x = mg::tensor({0.3f, -2.9f, 1000.f}, {3});
  auto s = mg::scalar(2.0f);
  mg::autodiff::GradManager gm;
  gm.attach({x});
  {
    auto r = gm.record();
    gm.backward(F::sum(F::mul(F::fp8_quantize(x, s, Fp8Format::e4m3), mg::tensor({1.f, 2.f, 3.f}, {3}))));
  }
  BOOST_TEST(x.grad().to_vector<float>() == (std::vector<float>{2.f, 4.f, 6.f}));  // g * scale, saturated too
}

BOOST_AUTO_TEST_CASE(codes_encode_and_decode_as_the_formats_define_them) {
  for (Fp8Format f : kFormats) {
    const mg::kernels::Fp8Params p = f == Fp8Format::e4m3 ? mg::kernels::kE4M3 : mg::kernels::kE5M2;
    for (int c = 0; c < 256; ++c) {
      const double want = decode(f, c);
      const float got = mg::kernels::fp8_decode(static_cast<uint8_t>(c), p);
      BOOST_TEST(same(got, want), "code " << c << " -> " << got);
      const int back = mg::kernels::fp8_encode(got, p);
      if (std::isnan(want)) BOOST_TEST((back & 0x7f) == 0x7f, "code " << c << " -> " << back);
      else BOOST_TEST(back == c, "code " << c << " -> " << back);
    }
  }
}

BOOST_AUTO_TEST_CASE(the_reference_fp8_gemm_is_the_scaled_product_of_the_decoded_operands) {
  namespace backend = mg::backend;
  mg::manual_seed(4);
  const int64_t m = 16, n = 32, k = 48;
  const mg::Tensor x = mg::normal({m, k}), w = mg::normal({n, k});
  const mg::Tensor sx = mg::scalar(100.0f), sw = mg::scalar(30.0f);
  const mg::Tensor xc = mg::empty({m, k}, DType::uint8), wc = mg::empty({n, k}, DType::uint8);
  backend::fp8_encode(x, xc, sx, mg::kernels::kE4M3);
  backend::fp8_encode(w, wc, sw, mg::kernels::kE5M2);
  const auto qx = F::fp8_quantize(x, sx, Fp8Format::e4m3).to_vector<double>();
  const auto qw = F::fp8_quantize(w, sw, Fp8Format::e5m2).to_vector<double>();
  const mg::Tensor out = mg::empty({m, n});
  const mg::Tensor ix = mg::scalar(1.0f / 100), iw = mg::scalar(1.0f / 30);
  backend::fp8_gemm({xc, ix, mg::kernels::kE4M3}, {wc, iw, mg::kernels::kE5M2}, out);
  const auto got = out.to_vector<double>();
  double err = 0, top = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t l = 0; l < k; ++l) acc += qx[i * k + l] * qw[j * k + l];
      const double ref = acc * (1.0f / 100) * (1.0f / 30);
      err = std::max(err, std::abs(got[i * n + j] - ref));
      top = std::max(top, std::abs(ref));
    }
  BOOST_TEST(err <= 1e-6 * top, "error " << err << " of " << top);
}

BOOST_AUTO_TEST_SUITE_END()
