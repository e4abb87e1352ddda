// Benchmark: would NHWC (channels-last, MegEngine's amp.convert_tensor_format)
// speed up the bf16 convolutions of the benchmark CNN and ResNet on this CPU?
// For each of their 3x3 convolution shapes, oneDNN's forward, backward-data
// and backward-weights bf16 primitives run two ways, alternating:
//   blocked: activations kept in plain NCHW, reordered into the layout the
//            primitive picks (format any: channel blocks of 16) and back, as
//            mixgrad does today (backend/onednn/conv.cpp);
//   NHWC:    activations already in NHWC, primitives created for NHWC, no
//            reorder (what a channels-last model would run).
// Weights use the primitive's layout in both (reordered once). Prints the
// median ms per forward + backward of each layer. Not a test.
//
//   build/tests/perf/conv_layouts [--rounds 9]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

#include "dnnl.hpp"
#include "cpu_line.hpp"

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Layer {
  const char* model;
  memory::dim n, ic, oc, hw, stride;
};

// One layer's forward and backward, runnable, for one activation layout.
struct Runner {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream s{eng};
  std::vector<std::pair<dnnl::primitive, std::unordered_map<int, memory>>> steps;

  Runner(const Layer& l, bool nhwc) {
    const memory::dim oh = (l.hw + 2 - 3) / l.stride + 1;
    const memory::dims x_dims{l.n, l.ic, l.hw, l.hw}, w_dims{l.oc, l.ic, 3, 3}, y_dims{l.n, l.oc, oh, oh};
    const memory::dims strides{l.stride, l.stride}, pad{1, 1};
    const tag act = nhwc ? tag::nhwc : tag::any;
    const memory::desc x_any(x_dims, dt::bf16, act), y_any(y_dims, dt::bf16, act), w_any(w_dims, dt::bf16, tag::any);
    const memory::desc bias_md({l.oc}, dt::f32, tag::a);
    const memory::desc x_user(x_dims, dt::bf16, nhwc ? tag::nhwc : tag::nchw);
    const memory::desc y_user(y_dims, dt::bf16, nhwc ? tag::nhwc : tag::nchw);
    const memory::desc w_user(w_dims, dt::bf16, tag::oihw);

    dnnl::convolution_forward::primitive_desc fwd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, x_any,
                                        w_any, bias_md, y_any, strides, pad, pad),
        eng);
    dnnl::convolution_backward_data::primitive_desc bwd_d(
        dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, x_any, w_any, y_any, strides, pad,
                                              pad),
        eng, fwd);
    dnnl::convolution_backward_weights::primitive_desc bwd_w(
        dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, x_any, w_any, bias_md, y_any,
                                                 strides, pad, pad),
        eng, fwd);

    memory x(x_user, eng), y(y_user, eng), gy(y_user, eng), gx(x_user, eng), w(w_user, eng), bias(bias_md, eng),
        gbias(bias_md, eng);
    for (memory* m : {&x, &gy, &w, &bias}) fill(*m);
    memory w_prim(fwd.weights_desc(), eng);
    dnnl::reorder(w, w_prim).execute(s, w, w_prim);
    memory gw_prim(bwd_w.diff_weights_desc(), eng);

    // Activations: reordered in and out unless the primitive takes them as they are.
    auto in = [&](const memory& user, const memory::desc& want) {
      if (user.get_desc() == want) return user;
      memory m(want, eng);
      steps.push_back({dnnl::reorder(user, m), {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, m}}});
      return m;
    };
    auto out_mem = [&](const memory& user, const memory::desc& want) {
      return user.get_desc() == want ? user : memory(want, eng);
    };
    auto out_back = [&](const memory& prim, const memory& user) {
      if (prim.get_data_handle() == user.get_data_handle()) return;
      steps.push_back({dnnl::reorder(prim, user), {{DNNL_ARG_FROM, prim}, {DNNL_ARG_TO, user}}});
    };
    const memory xp = in(x, fwd.src_desc());
    const memory yp = out_mem(y, fwd.dst_desc());
    steps.push_back({dnnl::convolution_forward(fwd),
                     {{DNNL_ARG_SRC, xp}, {DNNL_ARG_WEIGHTS, w_prim}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, yp}}});
    out_back(yp, y);
    const memory gyp = in(gy, bwd_d.diff_dst_desc());
    const memory gxp = out_mem(gx, bwd_d.diff_src_desc());
    steps.push_back({dnnl::convolution_backward_data(bwd_d),
                     {{DNNL_ARG_DIFF_DST, gyp}, {DNNL_ARG_WEIGHTS, w_prim}, {DNNL_ARG_DIFF_SRC, gxp}}});
    out_back(gxp, gx);
    const memory xw = bwd_w.src_desc() == xp.get_desc() ? xp : in(x, bwd_w.src_desc());
    const memory gyw = bwd_w.diff_dst_desc() == gyp.get_desc() ? gyp : in(gy, bwd_w.diff_dst_desc());
    steps.push_back({dnnl::convolution_backward_weights(bwd_w), {{DNNL_ARG_SRC, xw},
                                                                 {DNNL_ARG_DIFF_DST, gyw},
                                                                 {DNNL_ARG_DIFF_WEIGHTS, gw_prim},
                                                                 {DNNL_ARG_DIFF_BIAS, gbias}}});
    chosen = fwd.src_desc() == x_user ? "nhwc" : "blocked";
  }

  static void fill(memory& m) {
    const size_t n = m.get_desc().get_size() / 2;
    auto* p = static_cast<uint16_t*>(m.get_data_handle());
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint16_t>(0x3f80 + (i * 7919 % 64));  // ~1..1.5
  }

  void run() {
    for (auto& [p, args] : steps) p.execute(s, args);
    s.wait();
  }
  std::string chosen;
};

}  // namespace

int main(int argc, char** argv) {
  perf::print_cpu_line();
  int rounds = 9;
  if (argc == 3 && std::string(argv[1]) == "--rounds") rounds = std::atoi(argv[2]);
  const std::vector<Layer> layers = {
      {"CNN", 128, 1, 32, 28, 1},   {"CNN", 128, 32, 64, 14, 1},  {"ResNet", 64, 1, 16, 28, 1},
      {"ResNet", 64, 16, 16, 28, 1}, {"ResNet", 64, 16, 32, 28, 2}, {"ResNet", 64, 32, 32, 14, 1},
      {"ResNet", 64, 32, 64, 14, 2}, {"ResNet", 64, 64, 64, 7, 1},
  };
  std::printf("| model | conv (N, C_in -> C_out, HxW, stride) | NCHW + reorders to blocked, ms | NHWC, ms | NHWC / blocked |\n");
  std::printf("|---|---|---|---|---|\n");
  for (const Layer& l : layers) {
    Runner a(l, false), b(l, true);
    for (int i = 0; i < 3; ++i) {
      a.run();
      b.run();
    }
    std::vector<double> ta, tb;
    for (int r = 0; r < rounds; ++r) {
      double t0 = now_ms();
      for (int i = 0; i < 3; ++i) a.run();
      ta.push_back((now_ms() - t0) / 3);
      t0 = now_ms();
      for (int i = 0; i < 3; ++i) b.run();
      tb.push_back((now_ms() - t0) / 3);
    }
    std::sort(ta.begin(), ta.end());
    std::sort(tb.begin(), tb.end());
    const double ma = ta[ta.size() / 2], mb = tb[tb.size() / 2];
    std::printf("| %s | %lld, %lld -> %lld, %lldx%lld, %lld | %.3f | %.3f (%s) | %.2f |\n", l.model,
                static_cast<long long>(l.n), static_cast<long long>(l.ic), static_cast<long long>(l.oc),
                static_cast<long long>(l.hw), static_cast<long long>(l.hw), static_cast<long long>(l.stride), ma, mb,
                b.chosen.c_str(), mb / ma);
  }
  return 0;
}
