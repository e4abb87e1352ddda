// Host tests of the index arithmetic of two CUDA kernels, executed here by
// reference loops that do what the kernels do per thread, and compared with
// the CPU backend:
// - index_put (cuda/index_plan.hpp): the row each entry of the index tensors
//   names (put_row, negative indices, the first bad index the CPU reports),
//   and the last-write-wins plan (every entry claims its row for the largest
//   entry naming it, then only the claiming entries copy), run in a shuffled
//   thread order. (Accumulation runs index_add's ordered kernel; the device
//   suite compares it with the CPU.)
// - max pooling (cuda/conv_plan.hpp's window_argmax): the CPU's tie rule (the
//   first maximum, NaN beats everything, -inf is a value, padded positions
//   never win) against backend::max_pool2d_argmax's workspace on the CPU, and the
//   gather of the recorded gradient against backend::max_pool2d_gather on the CPU.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/conv_plan.hpp"
#include "backend/cuda/index_plan.hpp"
#include "backend/indexing.hpp"
#include "backend/pooling.hpp"
#include "kernels/cast.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace be = mixgrad::backend;
namespace plan = mixgrad::backend::cuda_plan;

namespace {

std::vector<int64_t> random_ints(int64_t n, int64_t lo, int64_t hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> pick(lo, hi);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto& e : v) e = pick(rng);
  return v;
}

// A permutation of 0..n-1: the order the "threads" run in.
std::vector<int64_t> shuffled(int64_t n, unsigned seed) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  std::mt19937 rng(seed);
  std::shuffle(p.begin(), p.end(), rng);
  return p;
}

// The rows the put_rows kernel computes: put_row per entry, -1 for a bad one,
// and the first bad (j * M + m, the kernel's atomicMin) as {j, value}.
struct PutRows {
  std::vector<int64_t> rows;
  int64_t bad_j = -1, bad_value = 0;
};
PutRows run_put_rows(const std::vector<std::vector<int64_t>>& idx, const mg::Shape& extents) {
  const int k = static_cast<int>(idx.size());
  const int64_t m_count = static_cast<int64_t>(idx.front().size());
  const int64_t* ptr[mg::Shape::kMaxDims];
  int64_t ext[mg::Shape::kMaxDims];
  for (int j = 0; j < k; ++j) {
    ptr[j] = idx[static_cast<size_t>(j)].data();
    ext[j] = extents[j];
  }
  PutRows out;
  out.rows.resize(static_cast<size_t>(m_count));
  int64_t first = std::numeric_limits<int64_t>::max();
  for (int64_t m : shuffled(m_count, 3u)) {
    int bad_j = -1;
    out.rows[static_cast<size_t>(m)] = plan::put_row(ptr, ext, k, m, bad_j);
    if (bad_j >= 0) first = std::min(first, bad_j * m_count + m);
  }
  if (first != std::numeric_limits<int64_t>::max()) {
    out.bad_j = first / m_count;
    out.bad_value = idx[static_cast<size_t>(out.bad_j)][static_cast<size_t>(first % m_count)];
  }
  return out;
}

// The overwrite kernels of index_put on the host: claims, then the writes,
// each in a shuffled order.
template <class T>
void run_put(const std::vector<T>& values, const std::vector<int64_t>& rows, int64_t n_rows, int64_t inner,
             std::vector<T>& out) {
  const int64_t m_count = static_cast<int64_t>(rows.size());
  std::vector<int64_t> last(static_cast<size_t>(n_rows), -1);
  for (int64_t m : shuffled(m_count, 5u)) plan::put_claim(last.data(), n_rows, rows[static_cast<size_t>(m)], m);
  for (int64_t p : shuffled(m_count * inner, 7u)) {
    const int64_t m = p / inner, r = rows[static_cast<size_t>(m)];
    if (plan::put_wins(last.data(), n_rows, r, m))
      out[static_cast<size_t>(r * inner + p % inner)] = values[static_cast<size_t>(p)];
  }
}

mg::Tensor int_tensor(const std::vector<int64_t>& v) {
  return mg::tensor<int64_t>(v, mg::Shape{static_cast<int64_t>(v.size())});
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_put_argmax_plan)

BOOST_AUTO_TEST_CASE(put_rows_match_the_cpu_with_negative_indices_for_one_to_three_index_tensors) {
  const std::vector<mg::Shape> families = {{7}, {4, 5}, {3, 2, 4}};
  for (const mg::Shape& extents : families) {
    BOOST_TEST_CONTEXT("extents " << extents) {
      const int k = extents.ndim();
      const int64_t m_count = 23;
      std::vector<std::vector<int64_t>> idx;
      std::vector<mg::Tensor> tensors;
      for (int j = 0; j < k; ++j) {
        idx.push_back(random_ints(m_count, -extents[j], extents[j] - 1, 11u + static_cast<unsigned>(j)));
        tensors.push_back(int_tensor(idx.back()));
      }
      const mg::Tensor rows = mg::empty(mg::Shape{m_count}, mg::DType::int64);
      be::index_put_rows(tensors, extents, "x", rows);
      const PutRows got = run_put_rows(idx, extents);
      BOOST_TEST(got.bad_j == -1);
      BOOST_TEST(got.rows == rows.to_vector<int64_t>(), boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(the_first_bad_index_put_rows_reports_is_the_one_the_cpu_names) {
  // Bad entries in both tensors; the CPU checks tensor 0 entirely first.
  const mg::Shape extents{3, 4};
  const std::vector<std::vector<int64_t>> cases[] = {
      {{0, 2, -3, 1}, {3, 9, -5, 0}},   // only tensor 1: its first bad entry, 9
      {{0, 3, -4, 1}, {7, 0, 0, 0}},    // tensor 0's 3 comes before tensor 1's 7
      {{-4, 0, 0, 5}, {0, 0, 0, 0}},    // the first of tensor 0's two
  };
  const int64_t want_j[] = {1, 0, 0}, want_v[] = {9, 3, -4};
  for (size_t c = 0; c < 3; ++c) {
    BOOST_TEST_CONTEXT("case " << c) {
      const PutRows got = run_put_rows(cases[c], extents);
      BOOST_TEST(got.bad_j == want_j[c]);
      BOOST_TEST(got.bad_value == want_v[c]);
      std::vector<mg::Tensor> tensors{int_tensor(cases[c][0]), int_tensor(cases[c][1])};
      const mg::Tensor rows = mg::empty(mg::Shape{4}, mg::DType::int64);
      std::string message;
      try {
        be::index_put_rows(tensors, extents, "x", rows);
      } catch (const mg::ValueError& e) {
        message = e.what();
      }
      const std::string expect =
          "index " + std::to_string(want_v[c]) + " is out of range for dimension " + std::to_string(want_j[c]);
      BOOST_TEST(message.find(expect) != std::string::npos, message);
      // The bad entries' rows are -1: the put kernels skip them.
      for (size_t m = 0; m < 4; ++m) {
        const bool bad = cases[c][0][m] < -3 || cases[c][0][m] >= 3 || cases[c][1][m] < -4 || cases[c][1][m] >= 4;
        BOOST_TEST((got.rows[m] == -1) == bad, "entry " << m);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(last_write_wins_in_any_thread_order_as_the_cpu_writes_in_order) {
  for (const int64_t inner : {int64_t{1}, int64_t{5}}) {
    BOOST_TEST_CONTEXT("inner " << inner) {
      const int64_t n_rows = 9, m_count = 40;  // many repeats
      const std::vector<int64_t> rows = random_ints(m_count, 0, n_rows - 1, 21u);
      const mg::Tensor values = mg::uniform({m_count, inner}, -1.0, 1.0);
      const mg::Tensor base = mg::uniform({n_rows, inner}, -1.0, 1.0);
      const mg::Tensor out = base.clone();
      be::index_put(values, int_tensor(rows), false, out);
      std::vector<float> got = base.to_vector<float>();
      run_put(values.to_vector<float>(), rows, n_rows, inner, got);
      BOOST_TEST(got == out.to_vector<float>(), boost::test_tools::per_element());
      // A row named by no entry keeps its value; one named twice keeps the later.
      std::vector<float> again = base.to_vector<float>();
      run_put(values.to_vector<float>(), std::vector<int64_t>(m_count, 4), n_rows, inner, again);
      const std::vector<float> vv = values.to_vector<float>();
      for (int64_t i = 0; i < inner; ++i)
        BOOST_TEST(again[static_cast<size_t>(4 * inner + i)] == vv[static_cast<size_t>((m_count - 1) * inner + i)]);
      // A bad row (-1) is skipped: the CPU's result without that entry.
      std::vector<int64_t> with_bad = rows, kept_rows;
      with_bad[3] = -1;
      std::vector<float> kept_values;
      for (int64_t m = 0; m < m_count; ++m) {
        if (m == 3) continue;
        kept_rows.push_back(rows[static_cast<size_t>(m)]);
        for (int64_t i = 0; i < inner; ++i) kept_values.push_back(vv[static_cast<size_t>(m * inner + i)]);
      }
      const mg::Tensor out_kept = base.clone();
      be::index_put(mg::tensor(kept_values, {m_count - 1, inner}), int_tensor(kept_rows), false, out_kept);
      std::vector<float> skipped = base.to_vector<float>();
      run_put(vv, with_bad, n_rows, inner, skipped);
      BOOST_TEST(skipped == out_kept.to_vector<float>(), boost::test_tools::per_element());
    }
  }
}

// Windows with ties, NaN, -inf and padding, in every floating dtype: the
// plan's argmax is the CPU built-in path's workspace, and its values and
// gather follow.
BOOST_AUTO_TEST_CASE(window_argmax_is_the_cpus_tie_rule_and_gather_follows) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  // One 4 x 5 plane: ties (2.0 twice in a row, 1.0 in columns), a NaN after
  // a larger value, an all -inf corner, a second NaN after the first.
  const std::vector<double> plane = {2.0,  2.0,  -1.0, 1.0,  1.0,   //
                                     0.5,  nan,  3.0,  nan,  1.0,   //
                                     -inf, -inf, 0.0,  0.0,  -2.0,  //
                                     -inf, -inf, 0.0,  -0.0, -2.0};
  const be::Pool2dParams geometries[] = {
      {{2, 2}, {2, 2}, {0, 0}}, {{3, 3}, {1, 1}, {1, 1}}, {{2, 3}, {1, 2}, {1, 1}}, {{4, 5}, {1, 1}, {0, 0}}};
  for (mg::DType dt : {mg::DType::float32, mg::DType::float16, mg::DType::bfloat16, mg::DType::float64}) {
    for (const be::Pool2dParams& p : geometries) {
      BOOST_TEST_CONTEXT("dtype " << dt << " kernel " << p.kernel.h << "x" << p.kernel.w << " pad " << p.padding.h) {
        const int64_t h = 4, w = 5;
        const int64_t oh = plan::conv_out_extent(h, p.kernel.h, p.stride.h, p.padding.h, 1);
        const int64_t ow = plan::conv_out_extent(w, p.kernel.w, p.stride.w, p.padding.w, 1);
        std::vector<double> two_planes = plane;
        for (double v : plane) two_planes.push_back(-v);  // a second plane: other ties
        const mg::Tensor x = mg::tensor(two_planes, {1, 2, h, w}, dt);
        const mg::Tensor y = mg::empty({1, 2, oh, ow}, dt);
        const be::MaxPoolWorkspace ws = be::max_pool2d_argmax(x, y, p);
        BOOST_TEST_REQUIRE((ws.kind == be::MaxPoolWorkspace::Kind::argmax));
        const std::vector<int32_t> cpu_argmax = ws.data.to_vector<int32_t>();
        const std::vector<double> xv = x.to_vector<double>();  // the dtype's values, widened exactly
        std::vector<int32_t> argmax;
        for (int64_t c = 0; c < 2; ++c)
          for (int64_t a = 0; a < oh; ++a)
            for (int64_t b = 0; b < ow; ++b) {
              int64_t h0, h1, w0, w1;
              plan::fixed_window(a, p.kernel.h, p.stride.h, p.padding.h, h, h0, h1);
              plan::fixed_window(b, p.kernel.w, p.stride.w, p.padding.w, w, w0, w1);
              // Compare in the kernel's compute type: float for 16-bit and float32.
              const double* in = xv.data() + c * h * w;
              const int64_t at =
                  dt == mg::DType::float64
                      ? plan::window_argmax<double>(h0, h1, w0, w1, w, [in](int64_t k) { return in[k]; })
                      : plan::window_argmax<float>(h0, h1, w0, w1, w,
                                                   [in](int64_t k) { return static_cast<float>(in[k]); });
              argmax.push_back(static_cast<int32_t>(at));
            }
        BOOST_TEST(argmax == cpu_argmax, boost::test_tools::per_element());
        // y is the input at the argmax (NaN included).
        const std::vector<double> yv = y.to_vector<double>();
        for (size_t o = 0; o < yv.size(); ++o) {
          if (argmax[o] < 0) continue;
          const double want = xv[(o / static_cast<size_t>(oh * ow)) * static_cast<size_t>(h * w) +
                                 static_cast<size_t>(argmax[o])];
          BOOST_TEST((std::isnan(want) ? std::isnan(yv[o]) : yv[o] == want), "output " << o);
        }
        // The gather of the recorded gradient: gy[o] = gx at the argmax.
        const mg::Tensor gx = mg::uniform({1, 2, h, w}, -1.0, 1.0).to(dt);
        const mg::Tensor gy = mg::empty({1, 2, oh, ow}, dt);
        be::max_pool2d_gather(gx, ws, gy);
        const std::vector<double> gxv = gx.to_vector<double>(), gyv = gy.to_vector<double>();
        for (size_t o = 0; o < gyv.size(); ++o) {
          const double want = argmax[o] < 0 ? 0.0
                                            : gxv[(o / static_cast<size_t>(oh * ow)) * static_cast<size_t>(h * w) +
                                                  static_cast<size_t>(argmax[o])];
          BOOST_TEST(gyv[o] == want, "gathered output " << o);
        }
      }
    }
  }
}

// Padding can leave a window with no inside position: -1, never a padded one.
BOOST_AUTO_TEST_CASE(a_window_wholly_in_the_padding_has_no_argmax) {
  int64_t h0, h1, w0, w1;
  plan::fixed_window(0, 2, 1, 2, 3, h0, h1);  // covers [-2, 0): nothing inside
  plan::fixed_window(1, 2, 1, 0, 3, w0, w1);
  BOOST_TEST(h0 == h1);
  BOOST_TEST(plan::window_argmax<float>(h0, h1, w0, w1, 3, [](int64_t) { return 1.0f; }) == -1);
}

BOOST_AUTO_TEST_SUITE_END()
