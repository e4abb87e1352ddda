// Host tests of cuda/resize_plan.hpp: the index maps the CUDA padding and
// resampling kernels compute per thread, executed here by reference loops
// (one iteration per output element, as the grid-stride kernels do) and
// compared with the CPU backend's F::pad and F::interpolate.
#include <boost/test/unit_test.hpp>

#include <vector>

#include "backend/cuda/index_plan.hpp"
#include "backend/cuda/resize_plan.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace plan = mixgrad::backend::cuda_plan;

namespace {

// The pad forward kernel on the host: y[p] = x[source(p)] or the fill.
std::vector<float> run_pad(const mg::Tensor& x, const mg::Shape& out, const mg::backend::PadParams& p) {
  const plan::PadPlan pp = plan::pad_plan(x.shape(), out, p);
  const std::vector<float> xv = x.to_vector<float>();
  std::vector<float> y(static_cast<size_t>(out.numel()));
  for (int64_t q = 0; q < out.numel(); ++q) {
    const int64_t s = pp.source(q);
    y[static_cast<size_t>(q)] = s < 0 ? static_cast<float>(p.value) : xv[static_cast<size_t>(s)];
  }
  return y;
}

// The upsample forward kernel on the host, float accumulation.
std::vector<float> run_upsample(const mg::Tensor& x, int64_t oh, int64_t ow, const mg::backend::UpsampleParams& p) {
  const int64_t planes = x.shape()[0] * x.shape()[1], h = x.shape()[2], w = x.shape()[3];
  const std::vector<float> xv = x.to_vector<float>();
  std::vector<float> y(static_cast<size_t>(planes * oh * ow));
  for (int64_t q = 0; q < planes * oh * ow; ++q) {
    const int64_t j = q % ow, i = (q / ow) % oh, c = q / (ow * oh);
    const auto th = plan::axis_taps<float>(i, h, oh, p.bilinear, p.align_corners, p.scale_h);
    const auto tw = plan::axis_taps<float>(j, w, ow, p.bilinear, p.align_corners, p.scale_w);
    auto at = [&](int64_t r, int64_t s) { return xv[static_cast<size_t>((c * h + r) * w + s)]; };
    y[static_cast<size_t>(q)] = p.bilinear ? th.w0 * (tw.w0 * at(th.i0, tw.i0) + tw.w1 * at(th.i0, tw.i1)) +
                                                 th.w1 * (tw.w0 * at(th.i1, tw.i0) + tw.w1 * at(th.i1, tw.i1))
                                           : at(th.i0, tw.i0);
  }
  return y;
}

void check_equal(const std::vector<float>& got, const mg::Tensor& want, float tol) {
  const std::vector<float> w = want.to_vector<float>();
  BOOST_TEST_REQUIRE(got.size() == w.size());
  for (size_t i = 0; i < w.size(); ++i)
    BOOST_TEST(std::abs(got[i] - w[i]) <= tol, "element " << i << ": " << got[i] << " vs " << w[i]);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_resize_plan)

BOOST_AUTO_TEST_CASE(pad_plan_reads_what_the_cpu_pad_reads_in_every_mode) {
  const mg::Tensor x = mg::uniform({2, 3, 4, 5}, -1.0, 1.0);
  struct Case {
    std::vector<int64_t> pads;  // F::pad order: last dim first, (before, after) pairs
    mg::F::PadMode mode;
    mg::backend::PadKind kind;
  };
  const Case cases[] = {
      {{1, 2}, mg::F::PadMode::constant, mg::backend::PadKind::constant},
      {{2, 1, 3, 0}, mg::F::PadMode::reflect, mg::backend::PadKind::reflect},
      {{4, 4, 2, 3}, mg::F::PadMode::replicate, mg::backend::PadKind::replicate},
      {{0, 2, 1, 1, 2, 0}, mg::F::PadMode::constant, mg::backend::PadKind::constant},
      {{3, 3}, mg::F::PadMode::reflect, mg::backend::PadKind::reflect},
  };
  for (const Case& c : cases) {
    BOOST_TEST_CONTEXT("pads of " << c.pads.size() / 2 << " dims, mode " << static_cast<int>(c.kind)) {
      const mg::Tensor want = mg::F::pad(x, c.pads, c.mode, 0.25);
      mg::backend::PadParams p{.mode = c.kind, .value = 0.25, .dims = static_cast<int>(c.pads.size() / 2)};
      // before[i] counts from the first padded dim; F::pad lists the last dim first.
      for (int d = 0; d < p.dims; ++d) p.before[static_cast<size_t>(d)] = c.pads[static_cast<size_t>(2 * (p.dims - 1 - d))];
      check_equal(run_pad(x, want.shape(), p), want, 0.0f);
    }
  }
}

BOOST_AUTO_TEST_CASE(resampling_taps_give_the_cpu_interpolation) {
  const mg::Tensor x = mg::uniform({2, 2, 5, 7}, -1.0, 1.0);
  struct Case {
    mg::F::InterpolateOptions o;
    mg::backend::UpsampleParams p;
  };
  const Case cases[] = {
      {{.scale_factor = 2.0}, {.scale_h = 2.0, .scale_w = 2.0}},
      {{.size = mg::Size2(8, 4)}, {}},
      {{.size = mg::Size2(5, 7)}, {}},
      {{.size = mg::Size2(9, 13), .mode = mg::F::InterpolateMode::bilinear}, {.bilinear = true}},
      {{.size = mg::Size2(3, 11), .mode = mg::F::InterpolateMode::bilinear, .align_corners = true},
       {.bilinear = true, .align_corners = true}},
      {{.scale_factor = mg::F::Scale2(1.5, 0.5), .mode = mg::F::InterpolateMode::bilinear},
       {.bilinear = true, .scale_h = 1.5, .scale_w = 0.5}},
      {{.size = mg::Size2(1, 1), .mode = mg::F::InterpolateMode::bilinear, .align_corners = true},
       {.bilinear = true, .align_corners = true}},
  };
  for (const Case& c : cases) {
    BOOST_TEST_CONTEXT("bilinear " << c.p.bilinear << " align " << c.p.align_corners << " scale " << c.p.scale_h) {
      const mg::Tensor want = mg::F::interpolate(x, c.o);
      check_equal(run_upsample(x, want.shape()[2], want.shape()[3], c.p), want, 1e-6f);
    }
  }
}

// The gather kernel on the host: out[p] = x at (p's coordinates, axis
// replaced by index[p]), through the axis-free indexer and x's strides.
BOOST_AUTO_TEST_CASE(the_gather_plan_reads_what_the_cpu_gather_reads_from_strided_views) {
  const mg::Tensor base = mg::uniform({5, 4, 6}, -1.0, 1.0);
  const mg::Tensor x = mg::F::transpose(base, 0, 2);  // [6, 4, 5], not contiguous
  const std::vector<float> storage = base.to_vector<float>();
  for (int axis = 0; axis < 3; ++axis) {
    BOOST_TEST_CONTEXT("axis " << axis) {
      const mg::Shape is{3, 2, 4};
      std::vector<int64_t> idx;
      for (int64_t p = 0; p < is.numel(); ++p) idx.push_back((p * 7 + axis) % x.shape()[axis]);
      const mg::Tensor index = mg::tensor<int64_t>(idx, is);
      const mg::Tensor want = mg::F::gather(x, axis, index);
      const auto ix = plan::axis_free_indexer(is, x.strides(), 4, axis);
      std::vector<float> got(static_cast<size_t>(is.numel()));
      for (int64_t p = 0; p < is.numel(); ++p) {
        int64_t off[1];
        ix.offsets(p, off);
        const int64_t bytes = off[0] + idx[static_cast<size_t>(p)] * x.strides()[axis] * 4;
        got[static_cast<size_t>(p)] = storage[static_cast<size_t>(bytes / 4)];
      }
      check_equal(got, want, 0.0f);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
