// CPU padding and 2-d resampling. Every op maps output positions to input
// positions along each axis through small per-axis tables built once per
// call (source index, and for bilinear two taps and their weights), then
// walks the (image, channel) planes with OpenMP: the forward writes each
// output once; the backward scatters into a per-plane float accumulator, so
// planes are independent and no two threads touch the same input element.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "backend/cpu/plane_scatter.hpp"
#include "backend/resize.hpp"
#include "kernels/cast.hpp"
#include "kernels/loops.hpp"

namespace mixgrad::backend::cpu {

namespace {

using kernels::cast;

int64_t grain_for(int64_t work_per_item) {
  return std::max<int64_t>(1, kernels::kParallelGrain / std::max<int64_t>(1, work_per_item));
}

// ---- pad ---------------------------------------------------------------------

// Source index along one padded axis per output position; -1 is the constant border.
std::vector<int64_t> pad_axis(PadKind mode, int64_t in, int64_t out, int64_t before) {
  std::vector<int64_t> m(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    int64_t i = o - before;
    if (i < 0 || i >= in) {
      switch (mode) {
        case PadKind::constant: i = -1; break;
        case PadKind::reflect: i = i < 0 ? -i : 2 * (in - 1) - i; break;  // the op checked pad < in
        case PadKind::replicate: i = i < 0 ? 0 : in - 1; break;
      }
    }
    m[static_cast<size_t>(o)] = i;
  }
  return m;
}

struct PadGeometry {
  int dims = 0;
  int64_t planes = 1;                  // product of the unpadded leading dims
  int64_t in_plane = 1, out_plane = 1;  // elements per plane
  int64_t rows = 1;                    // output rows per plane (padded dims but the last)
  int64_t out_w = 1;                   // the last dim's output extent
  std::vector<std::vector<int64_t>> maps;
  std::vector<int64_t> in_stride, out_extent;  // per padded dim, within a plane
};

PadGeometry pad_geometry(const Shape& in, const Shape& out, const PadParams& p) {
  PadGeometry g;
  g.dims = p.dims;
  const int lead = static_cast<int>(in.ndim()) - p.dims;
  for (int d = 0; d < lead; ++d) g.planes *= in[d];
  g.maps.resize(static_cast<size_t>(p.dims));
  g.in_stride.assign(static_cast<size_t>(p.dims), 1);
  g.out_extent.resize(static_cast<size_t>(p.dims));
  for (int d = p.dims - 1; d >= 0; --d) {
    const int64_t n_in = in[lead + d], n_out = out[lead + d];
    g.in_stride[static_cast<size_t>(d)] = g.in_plane;
    g.in_plane *= n_in;
    g.out_plane *= n_out;
    g.out_extent[static_cast<size_t>(d)] = n_out;
    g.maps[static_cast<size_t>(d)] = pad_axis(p.mode, n_in, n_out, p.before[static_cast<size_t>(d)]);
  }
  g.out_w = g.out_extent.back();
  g.rows = g.out_w == 0 ? 0 : g.out_plane / g.out_w;
  return g;
}

// Offset within the input plane of output row r's source row; -1 when the
// row lies in a constant border.
int64_t source_row(const PadGeometry& g, int64_t r) {
  int64_t off = 0;
  for (int d = g.dims - 2; d >= 0; --d) {
    const int64_t n = g.out_extent[static_cast<size_t>(d)];
    const int64_t i = g.maps[static_cast<size_t>(d)][static_cast<size_t>(r % n)];
    r /= n;
    if (i < 0) return -1;
    off += i * g.in_stride[static_cast<size_t>(d)];
  }
  return off;
}

template <class T>
void pad_forward_typed(const Tensor& x, const Tensor& y, const PadGeometry& g, double value) {
  const T fill = cast<T>(value);
  const T* xp = static_cast<const T*>(x.raw_data());
  T* yp = static_cast<T*>(y.raw_data());
  const int64_t* last = g.maps.back().data();
  kernels::parallel_for(g.planes * g.rows, grain_for(g.out_w), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* out = yp + r * g.out_w;
      const int64_t src = source_row(g, r % g.rows);
      if (src < 0) {
        std::fill(out, out + g.out_w, fill);
        continue;
      }
      const T* in = xp + (r / g.rows) * g.in_plane + src;
      for (int64_t j = 0; j < g.out_w; ++j) out[j] = last[j] < 0 ? fill : in[last[j]];
    }
  });
}

template <class T>
void pad_backward_typed(const Tensor& gy, const Tensor& gx, const PadGeometry& g) {
  using Acc = kernels::compute_t<T>;
  const T* gyp = static_cast<const T*>(gy.raw_data());
  T* gxp = static_cast<T*>(gx.raw_data());
  const int64_t* last = g.maps.back().data();
  scatter_planes(gxp, g.planes, g.in_plane, grain_for(g.out_plane), [&](int64_t c, Acc* acc) {
    const T* plane = gyp + c * g.out_plane;
    for (int64_t r = 0; r < g.rows; ++r) {
      const int64_t src = source_row(g, r);
      if (src < 0) continue;
      Acc* a = acc + src;
      const T* row = plane + r * g.out_w;
      for (int64_t j = 0; j < g.out_w; ++j)
        if (last[j] >= 0) a[last[j]] += cast<Acc>(row[j]);
    }
  });
}

// ---- upsample ----------------------------------------------------------------

// PyTorch's nearest_idx: float arithmetic, with the exact 1x and 2x shortcuts.
int64_t nearest_index(int64_t o, int64_t in, int64_t out, double scale) {
  if (out == in) return o;
  if (out == 2 * in) return o >> 1;
  const float s = scale > 0 ? static_cast<float>(1.0 / scale) : static_cast<float>(in) / static_cast<float>(out);
  return std::min(static_cast<int64_t>(std::floor(static_cast<float>(o) * s)), in - 1);
}

// Two taps per output position along one axis, PyTorch's linear source index.
template <class Acc>
struct Taps {
  std::vector<int64_t> i0, i1;
  std::vector<Acc> w0, w1;
};

template <class Acc>
Taps<Acc> linear_taps(int64_t in, int64_t out, bool align_corners, double scale) {
  Acc s;
  if (align_corners)
    s = out > 1 ? static_cast<Acc>(in - 1) / static_cast<Acc>(out - 1) : Acc(0);
  else
    s = scale > 0 ? static_cast<Acc>(1.0 / scale) : static_cast<Acc>(in) / static_cast<Acc>(out);
  Taps<Acc> t;
  const auto n = static_cast<size_t>(out);
  t.i0.resize(n), t.i1.resize(n), t.w0.resize(n), t.w1.resize(n);
  for (int64_t o = 0; o < out; ++o) {
    const Acc src = align_corners ? s * static_cast<Acc>(o)
                                  : std::max(s * (static_cast<Acc>(o) + Acc(0.5)) - Acc(0.5), Acc(0));
    const int64_t i0 = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
    const Acc l1 = std::min(std::max(src - static_cast<Acc>(i0), Acc(0)), Acc(1));
    const auto k = static_cast<size_t>(o);
    t.i0[k] = i0;
    t.i1[k] = i0 + (i0 < in - 1 ? 1 : 0);
    t.w0[k] = Acc(1) - l1;
    t.w1[k] = l1;
  }
  return t;
}

template <class Acc>
Taps<Acc> nearest_taps(int64_t in, int64_t out, double scale) {
  Taps<Acc> t;
  t.i0.resize(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) t.i0[static_cast<size_t>(o)] = nearest_index(o, in, out, scale);
  return t;
}

struct Plane2 {
  int64_t count, h, w, oh, ow;
};

// Nearest taps: output (oh, ow) reads one input element. A tap functor's
// row(oh, plane, w) binds the source rows of output row oh in a plane of
// width w (the input, or the gradient's accumulator); the row then reads
// (sample) or accumulates into (scatter) them for output column ow.
template <class Acc>
struct NearestTaps {
  Taps<Acc> h, w;
  NearestTaps(const Plane2& pl, const UpsampleParams& p)
      : h(nearest_taps<Acc>(pl.h, pl.oh, p.scale_h)), w(nearest_taps<Acc>(pl.w, pl.ow, p.scale_w)) {}

  template <class P>
  struct Row {
    P* src;
    const int64_t* j;
    P& sample(int64_t ow) const { return src[j[ow]]; }
    void scatter(int64_t ow, Acc v) const { src[j[ow]] += v; }
  };
  template <class P>
  Row<P> row(int64_t oh, P* plane, int64_t width) const {
    return {plane + h.i0[static_cast<size_t>(oh)] * width, w.i0.data()};
  }
};

// Bilinear taps: two rows by two columns, weighted.
template <class Acc>
struct BilinearTaps {
  Taps<Acc> h, w;
  BilinearTaps(const Plane2& pl, const UpsampleParams& p)
      : h(linear_taps<Acc>(pl.h, pl.oh, p.align_corners, p.scale_h)),
        w(linear_taps<Acc>(pl.w, pl.ow, p.align_corners, p.scale_w)) {}

  template <class P>
  struct Row {
    P *r0, *r1;
    Acc a0, a1;
    const int64_t *j0, *j1;
    const Acc *b0, *b1;
    std::remove_const_t<P> sample(int64_t ow) const {
      const int64_t c0 = j0[ow], c1 = j1[ow];
      return cast<std::remove_const_t<P>>(a0 * (b0[ow] * cast<Acc>(r0[c0]) + b1[ow] * cast<Acc>(r0[c1])) +
                                          a1 * (b0[ow] * cast<Acc>(r1[c0]) + b1[ow] * cast<Acc>(r1[c1])));
    }
    void scatter(int64_t ow, Acc v) const {
      const int64_t c0 = j0[ow], c1 = j1[ow];
      r0[c0] += a0 * b0[ow] * v;
      r0[c1] += a0 * b1[ow] * v;
      r1[c0] += a1 * b0[ow] * v;
      r1[c1] += a1 * b1[ow] * v;
    }
  };
  template <class P>
  Row<P> row(int64_t oh, P* plane, int64_t width) const {
    const auto r = static_cast<size_t>(oh);
    return {plane + h.i0[r] * width, plane + h.i1[r] * width, h.w0[r], h.w1[r],
            w.i0.data(), w.i1.data(), w.w0.data(), w.w1.data()};
  }
};

// x [N, C, h, w] -> y [N, C, oh, ow]: each output is its taps' sample.
template <class T, class TapSet>
void upsample_forward_typed(const Tensor& x, const Tensor& y, const UpsampleParams& p) {
  const Plane2 pl{x.shape()[0] * x.shape()[1], x.shape()[2], x.shape()[3], y.shape()[2], y.shape()[3]};
  const TapSet taps(pl, p);
  const T* xp = static_cast<const T*>(x.raw_data());
  T* yp = static_cast<T*>(y.raw_data());
  kernels::parallel_for(pl.count, grain_for(pl.oh * pl.ow), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const T* in = xp + c * pl.h * pl.w;
      T* out = yp + c * pl.oh * pl.ow;
      for (int64_t oh = 0; oh < pl.oh; ++oh) {
        const auto row = taps.row(oh, in, pl.w);
        T* orow = out + oh * pl.ow;
        for (int64_t ow = 0; ow < pl.ow; ++ow) orow[ow] = row.sample(ow);
      }
    }
  });
}

// The adjoint: each output's gradient scattered into its taps.
template <class T, class TapSet>
void upsample_backward_typed(const Tensor& gy, const Tensor& gx, const UpsampleParams& p) {
  using Acc = kernels::compute_t<T>;
  const Plane2 pl{gx.shape()[0] * gx.shape()[1], gx.shape()[2], gx.shape()[3], gy.shape()[2], gy.shape()[3]};
  const TapSet taps(pl, p);
  const T* gyp = static_cast<const T*>(gy.raw_data());
  T* gxp = static_cast<T*>(gx.raw_data());
  scatter_planes(gxp, pl.count, pl.h * pl.w, grain_for(pl.oh * pl.ow), [&](int64_t c, Acc* acc) {
    const T* g = gyp + c * pl.oh * pl.ow;
    for (int64_t oh = 0; oh < pl.oh; ++oh) {
      const auto row = taps.row(oh, acc, pl.w);
      const T* grow = g + oh * pl.ow;
      for (int64_t ow = 0; ow < pl.ow; ++ow) row.scatter(ow, cast<Acc>(grow[ow]));
    }
  });
}

}  // namespace

void pad_forward(const Tensor& x, const Tensor& y, const PadParams& p) {
  if (y.numel() == 0) return;
  const PadGeometry g = pad_geometry(x.shape(), y.shape(), p);
  visit_floating(y.dtype(), "pad", [&]<class T>() { pad_forward_typed<T>(x, y, g, p.value); });
}

void pad_backward(const Tensor& gy, const Tensor& gx, const PadParams& p) {
  if (gx.numel() == 0) return;
  const PadGeometry g = pad_geometry(gx.shape(), gy.shape(), p);
  visit_floating(gx.dtype(), "pad", [&]<class T>() { pad_backward_typed<T>(gy, gx, g); });
}

void upsample2d_forward(const Tensor& x, const Tensor& y, const UpsampleParams& p) {
  if (y.numel() == 0) return;
  visit_floating(y.dtype(), "interpolate", [&]<class T>() {
    using Acc = kernels::compute_t<T>;
    if (p.bilinear)
      upsample_forward_typed<T, BilinearTaps<Acc>>(x, y, p);
    else
      upsample_forward_typed<T, NearestTaps<Acc>>(x, y, p);
  });
}

void upsample2d_backward(const Tensor& gy, const Tensor& gx, const UpsampleParams& p) {
  if (gx.numel() == 0) return;
  visit_floating(gx.dtype(), "interpolate", [&]<class T>() {
    using Acc = kernels::compute_t<T>;
    if (p.bilinear)
      upsample_backward_typed<T, BilinearTaps<Acc>>(gy, gx, p);
    else
      upsample_backward_typed<T, NearestTaps<Acc>>(gy, gx, p);
  });
}

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

MIXGRAD_CPU_KERNEL(pad_forward, cpu::pad_forward);
MIXGRAD_CPU_KERNEL(pad_backward, cpu::pad_backward);
MIXGRAD_CPU_KERNEL(upsample2d_forward, cpu::upsample2d_forward);
MIXGRAD_CPU_KERNEL(upsample2d_backward, cpu::upsample2d_backward);

}  // namespace mixgrad::backend
