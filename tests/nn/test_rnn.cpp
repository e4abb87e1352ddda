// nn::LSTMCell, GRUCell, LSTM, GRU: values against a plain-loop reference in
// double on the same weights, gradients against finite differences, autocast,
// state_dict names and shape errors.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"

namespace mg = mixgrad;
namespace nn = mixgrad::nn;
namespace tt = boost::test_tools;

namespace {

using Vec = std::vector<double>;

double sigm(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// y[b, r] = sum_k W[r, k] x[b, k] + bias[r] (bias may be empty).
Vec affine(const Vec& w, const Vec& bias, const Vec& x, int64_t batch, int64_t rows, int64_t cols) {
  Vec y(batch * rows);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < rows; ++r) {
      double acc = bias.empty() ? 0.0 : bias[r];
      for (int64_t k = 0; k < cols; ++k) acc += w[r * cols + k] * x[b * cols + k];
      y[b * rows + r] = acc;
    }
  return y;
}

struct RefWeights {
  Vec w_ih, w_hh, b_ih, b_hh;
};

RefWeights ref_weights(const mg::Tensor& w_ih, const mg::Tensor& w_hh, const mg::Tensor& b_ih,
                       const mg::Tensor& b_hh) {
  return {w_ih.to_vector<double>(), w_hh.to_vector<double>(), b_ih.defined() ? b_ih.to_vector<double>() : Vec{},
          b_hh.defined() ? b_hh.to_vector<double>() : Vec{}};
}

// PyTorch's LSTM step, gates i, f, g, o; updates h and c ([B, H]) in place.
void ref_lstm_step(const RefWeights& w, const Vec& x, Vec& h, Vec& c, int64_t batch, int64_t in, int64_t hid) {
  const Vec gx = affine(w.w_ih, w.b_ih, x, batch, 4 * hid, in);
  const Vec gh = affine(w.w_hh, w.b_hh, h, batch, 4 * hid, hid);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < hid; ++j) {
      auto gate = [&](int k) { return gx[b * 4 * hid + k * hid + j] + gh[b * 4 * hid + k * hid + j]; };
      const double i = sigm(gate(0)), f = sigm(gate(1)), g = std::tanh(gate(2)), o = sigm(gate(3));
      c[b * hid + j] = f * c[b * hid + j] + i * g;
      h[b * hid + j] = o * std::tanh(c[b * hid + j]);
    }
}

// PyTorch's GRU step, gates r, z, n with n = tanh(W_in x + b_in + r * (W_hn h + b_hn)).
void ref_gru_step(const RefWeights& w, const Vec& x, Vec& h, int64_t batch, int64_t in, int64_t hid) {
  const Vec gx = affine(w.w_ih, w.b_ih, x, batch, 3 * hid, in);
  const Vec gh = affine(w.w_hh, w.b_hh, h, batch, 3 * hid, hid);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < hid; ++j) {
      const int64_t o = b * 3 * hid + j;
      const double r = sigm(gx[o] + gh[o]);
      const double z = sigm(gx[o + hid] + gh[o + hid]);
      const double n = std::tanh(gx[o + 2 * hid] + r * gh[o + 2 * hid]);
      h[b * hid + j] = (1 - z) * n + z * h[b * hid + j];
    }
}

// Rows [lo, lo + n) of a row-major [*, cols] buffer.
Vec rows(const Vec& v, int64_t lo, int64_t n, int64_t cols) {
  return Vec(v.begin() + lo * cols, v.begin() + (lo + n) * cols);
}

// |got - want| <= tol * (1 + |want|): relative for large values, absolute near zero.
void check_close(const mg::Tensor& got, const Vec& want, double tol) {
  const Vec g = got.to_vector<double>();
  BOOST_TEST_REQUIRE(g.size() == want.size());
  for (size_t k = 0; k < g.size(); ++k)
    BOOST_TEST(std::abs(g[k] - want[k]) <= tol * (1 + std::abs(want[k])), "at " << k << ": " << g[k] << " vs " << want[k]);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(rnn_layers)

BOOST_AUTO_TEST_CASE(lstm_cell_step_matches_reference) {
  mg::manual_seed(11);
  const int64_t B = 2, I = 3, H = 4;
  nn::LSTMCell cell(I, H);
  const mg::Tensor x = mg::uniform({B, I}, -1, 1), h = mg::uniform({B, H}, -1, 1), c = mg::uniform({B, H}, -1, 1);
  const auto [h1, c1] = cell(x, {h, c});
  BOOST_TEST(h1.shape() == mg::Shape({B, H}));
  Vec rh = h.to_vector<double>(), rc = c.to_vector<double>();
  ref_lstm_step(ref_weights(cell.weight_ih(), cell.weight_hh(), cell.bias_ih(), cell.bias_hh()),
                x.to_vector<double>(), rh, rc, B, I, H);
  check_close(h1, rh, 1e-5);
  check_close(c1, rc, 1e-5);
  // Undefined state = zeros; unbatched input gives unbatched output.
  Vec zh(B * H, 0.0), zc(B * H, 0.0);
  ref_lstm_step(ref_weights(cell.weight_ih(), cell.weight_hh(), cell.bias_ih(), cell.bias_hh()),
                x.to_vector<double>(), zh, zc, B, I, H);
  check_close(cell(x), zh, 1e-5);
  const mg::Tensor x0 = mg::F::squeeze(mg::F::narrow(x, 0, 0, 1), 0);
  const auto s0 = cell(x0, {});
  BOOST_TEST(s0.h.shape() == mg::Shape({H}));
  check_close(s0.c, rows(zc, 0, 1, H), 1e-5);
}

BOOST_AUTO_TEST_CASE(gru_cell_step_matches_reference) {
  mg::manual_seed(12);
  const int64_t B = 3, I = 2, H = 5;
  nn::GRUCell cell(I, H);
  const mg::Tensor x = mg::uniform({B, I}, -1, 1), h = mg::uniform({B, H}, -1, 1);
  const mg::Tensor h1 = cell(x, h);
  Vec rh = h.to_vector<double>();
  ref_gru_step(ref_weights(cell.weight_ih(), cell.weight_hh(), cell.bias_ih(), cell.bias_hh()),
               x.to_vector<double>(), rh, B, I, H);
  check_close(h1, rh, 1e-5);
  // Without bias.
  nn::GRUCell nb(I, H, {.bias = false});
  BOOST_TEST(nb.state_dict().keys() == std::vector<std::string>({"weight_ih", "weight_hh"}), tt::per_element());
  Vec rn = h.to_vector<double>();
  ref_gru_step(ref_weights(nb.weight_ih(), nb.weight_hh(), {}, {}), x.to_vector<double>(), rn, B, I, H);
  check_close(nb(x, h), rn, 1e-5);
}

BOOST_AUTO_TEST_CASE(two_layer_lstm_sequence_matches_reference) {
  mg::manual_seed(13);
  const int64_t T = 3, B = 2, I = 3, H = 4, L = 2;
  nn::LSTM lstm(I, H, {.num_layers = L});
  const mg::Tensor x = mg::uniform({T, B, I}, -1, 1);
  const mg::Tensor h0 = mg::uniform({L, B, H}, -1, 1), c0 = mg::uniform({L, B, H}, -1, 1);
  const auto [out, state] = lstm(x, {h0, c0});
  BOOST_TEST(out.shape() == mg::Shape({T, B, H}));
  BOOST_TEST(state.h.shape() == mg::Shape({L, B, H}));
  BOOST_TEST(state.c.shape() == mg::Shape({L, B, H}));

  Vec seq = x.to_vector<double>(), hn, cn;
  const Vec vh0 = h0.to_vector<double>(), vc0 = c0.to_vector<double>();
  int64_t in = I;
  for (int64_t l = 0; l < L; ++l) {
    const RefWeights w = ref_weights(lstm.weight_ih(l), lstm.weight_hh(l), lstm.bias_ih(l), lstm.bias_hh(l));
    Vec h = rows(vh0, l * B, B, H), c = rows(vc0, l * B, B, H), next;
    for (int64_t t = 0; t < T; ++t) {
      ref_lstm_step(w, rows(seq, t * B, B, in), h, c, B, in, H);
      next.insert(next.end(), h.begin(), h.end());
    }
    hn.insert(hn.end(), h.begin(), h.end());
    cn.insert(cn.end(), c.begin(), c.end());
    seq = next;
    in = H;
  }
  check_close(out, seq, 1e-5);
  check_close(state.h, hn, 1e-5);
  check_close(state.c, cn, 1e-5);

  // batch_first: the same weights on the transposed input give the transposed output.
  nn::LSTM bf(I, H, {.num_layers = L, .batch_first = true});
  bf.load_state_dict(lstm.state_dict());
  const auto r = bf(mg::F::transpose(x, 0, 1).contiguous(), {h0, c0});
  BOOST_TEST(r.output.shape() == mg::Shape({B, T, H}));
  check_close(mg::F::transpose(r.output, 0, 1).contiguous(), seq, 1e-5);
  check_close(r.state.h, hn, 1e-5);
}

BOOST_AUTO_TEST_CASE(two_layer_gru_sequence_matches_reference) {
  mg::manual_seed(14);
  const int64_t T = 3, B = 2, I = 3, H = 4, L = 2;
  nn::GRU gru(I, H, {.num_layers = L});
  const mg::Tensor x = mg::uniform({T, B, I}, -1, 1), h0 = mg::uniform({L, B, H}, -1, 1);
  const auto [out, h_n] = gru(x, h0);
  Vec seq = x.to_vector<double>(), hn;
  const Vec vh0 = h0.to_vector<double>();
  int64_t in = I;
  for (int64_t l = 0; l < L; ++l) {
    const RefWeights w = ref_weights(gru.weight_ih(l), gru.weight_hh(l), gru.bias_ih(l), gru.bias_hh(l));
    Vec h = rows(vh0, l * B, B, H), next;
    for (int64_t t = 0; t < T; ++t) {
      ref_gru_step(w, rows(seq, t * B, B, in), h, B, in, H);
      next.insert(next.end(), h.begin(), h.end());
    }
    hn.insert(hn.end(), h.begin(), h.end());
    seq = next;
    in = H;
  }
  check_close(out, seq, 1e-5);
  check_close(h_n, hn, 1e-5);
  // Unbatched [T, I] input: the first batch row's result.
  const auto u = gru(mg::F::narrow(x, 1, 0, 1).reshape({T, I}), mg::F::narrow(h0, 1, 0, 1).reshape({L, H}));
  BOOST_TEST(u.output.shape() == mg::Shape({T, H}));
  BOOST_TEST(u.h_n.shape() == mg::Shape({L, H}));
  Vec first_rows;
  for (int64_t t = 0; t < T; ++t) first_rows.insert(first_rows.end(), seq.begin() + t * B * H, seq.begin() + t * B * H + H);
  check_close(u.output, first_rows, 1e-6);
}

BOOST_AUTO_TEST_CASE(state_dict_names_shapes_and_init) {
  mg::manual_seed(15);
  nn::LSTM lstm(3, 5, {.num_layers = 2});
  const mg::StateDict sd = lstm.state_dict();
  BOOST_TEST(sd.keys() == std::vector<std::string>({"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                                                    "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1"}),
             tt::per_element());
  BOOST_TEST(lstm.weight_ih(0).shape() == mg::Shape({20, 3}));
  BOOST_TEST(lstm.weight_hh(0).shape() == mg::Shape({20, 5}));
  BOOST_TEST(lstm.weight_ih(1).shape() == mg::Shape({20, 5}));
  BOOST_TEST(lstm.bias_hh(1).shape() == mg::Shape({20}));
  nn::GRU gru(3, 5, {.bias = false});
  BOOST_TEST(gru.state_dict().keys() == std::vector<std::string>({"weight_ih_l0", "weight_hh_l0"}), tt::per_element());
  BOOST_TEST(gru.weight_ih(0).shape() == mg::Shape({15, 3}));
  nn::LSTMCell cell(3, 5);
  BOOST_TEST(cell.state_dict().keys() == std::vector<std::string>({"weight_ih", "weight_hh", "bias_ih", "bias_hh"}),
             tt::per_element());
  BOOST_TEST(cell.weight_ih().shape() == mg::Shape({20, 3}));
  // Every parameter ~ U(-1/sqrt(H), 1/sqrt(H)): inside the bound, and spread over it.
  const double bound = 1.0 / std::sqrt(5.0);
  double lo = 1, hi = -1;
  for (const mg::Tensor& p : lstm.parameters())
    for (double v : p.to_vector<double>()) lo = std::min(lo, v), hi = std::max(hi, v);
  BOOST_TEST(lo >= -bound);
  BOOST_TEST(hi <= bound);
  BOOST_TEST(lo < -0.9 * bound);
  BOOST_TEST(hi > 0.9 * bound);
  BOOST_TEST(lstm.describe() == "LSTM(3, 5, num_layers=2)");
}

BOOST_AUTO_TEST_CASE(lstm_and_gru_gradients_match_finite_differences) {
  mg::manual_seed(16);
  const int64_t T = 3, B = 2, I = 2, H = 3;
  nn::LSTM lstm(I, H, {.num_layers = 2});
  nn::GRU gru(I, H, {.num_layers = 2});
  lstm.to(mg::DType::float64);
  gru.to(mg::DType::float64);
  const mg::Tensor x = mg::uniform({T, B, I}, -1, 1, mg::DType::float64);
  const mg::Tensor wl = mg::uniform({T, B, H}, -1, 1, mg::DType::float64);
  const mg::Tensor wc = mg::uniform({2, B, H}, -1, 1, mg::DType::float64);
  // A loss that reaches output, h_n and c_n with distinct weights.
  auto lstm_loss = [&] {
    const auto r = lstm(x, {});
    return mg::F::add(mg::F::sum(mg::F::mul(r.output, wl)), mg::F::sum(mg::F::mul(r.state.c, wc)));
  };
  auto gru_loss = [&] {
    const auto r = gru(x, {});
    return mg::F::add(mg::F::sum(mg::F::mul(r.output, wl)), mg::F::sum(mg::F::mul(r.h_n, wc)));
  };
  mg::autodiff::GradManager gm;
  gm.attach(lstm.parameters());
  gm.attach(gru.parameters());
  {
    auto rec = gm.record();
    gm.backward(mg::F::add(lstm_loss(), gru_loss()));
  }
  for (const auto& [name, p] : lstm.named_parameters())
    BOOST_TEST_CONTEXT("LSTM " << name) {
      test_util::check_finite_differences(p, p.grad(), [&] { return lstm_loss().item<double>(); });
    }
  for (const auto& [name, p] : gru.named_parameters())
    BOOST_TEST_CONTEXT("GRU " << name) {
      test_util::check_finite_differences(p, p.grad(), [&] { return gru_loss().item<double>(); });
    }
}

// PyTorch's test_autocast_rnn (test/test_cuda.py) and MegEngine's autocast
// tests of RNNs: under autocast the recurrent layer runs its products in low
// precision and returns low-precision output close to the float32 one.
BOOST_AUTO_TEST_CASE(autocast_runs_rnns_in_bfloat16) {
  mg::manual_seed(17);
  const int64_t T = 4, B = 3, I = 5, H = 6;
  nn::LSTM lstm(I, H, {.num_layers = 2});
  nn::GRU gru(I, H);
  nn::LSTMCell cell(I, H);
  const mg::Tensor x = mg::uniform({T, B, I}, -1, 1);
  const mg::Tensor h0 = mg::uniform({2, B, H}, -1, 1);
  const auto l32 = lstm(x, {h0, {}});
  const auto g32 = gru(x, {});
  const auto c32 = cell(mg::F::narrow(x, 0, 0, 1).reshape({B, I}), {});
  mg::autodiff::GradManager gm;
  gm.attach(lstm.parameters());
  mg::amp::autocast scope(true, mg::DType::bfloat16);
  auto rec = gm.record();
  const auto l16 = lstm(x, {h0, {}});
  const auto g16 = gru(x, {});
  const auto c16 = cell(mg::F::narrow(x, 0, 0, 1).reshape({B, I}), {});
  for (const mg::Tensor* t : {&l16.output, &l16.state.h, &l16.state.c, &g16.output, &g16.h_n, &c16.h, &c16.c})
    BOOST_TEST((t->dtype() == mg::DType::bfloat16));
  auto close = [](const mg::Tensor& lo, const mg::Tensor& hi) {
    const Vec a = lo.to_vector<double>(), b = hi.to_vector<double>();
    BOOST_TEST_REQUIRE(a.size() == b.size());
    for (size_t k = 0; k < a.size(); ++k) BOOST_TEST(std::abs(a[k] - b[k]) < 0.03);
  };
  close(l16.output, l32.output);
  close(l16.state.c, l32.state.c);
  close(g16.output, g32.output);
  close(c16.h, c32.h);
  // The gradients reach the float32 parameters in float32.
  gm.backward(mg::F::sum(l16.output));
  for (const mg::Tensor& p : lstm.parameters()) {
    BOOST_TEST((p.grad().dtype() == mg::DType::float32));
    BOOST_TEST(std::isfinite(mg::F::sum(p.grad()).item<float>()));
  }
}

BOOST_AUTO_TEST_CASE(bad_shapes_throw_shape_error_naming_the_module) {
  nn::LSTM lstm(3, 4, {.num_layers = 2});
  nn::GRU gru(3, 4);
  nn::LSTMCell cell(3, 4);
  nn::GRUCell gcell(3, 4);
  const auto before = lstm.weight_ih(0).to_vector<float>();
  auto message_of = [](auto&& f) {
    try {
      f();
    } catch (const mg::ShapeError& e) {
      return std::string(e.what());
    }
    return std::string("no ShapeError");
  };
  const std::string m1 = message_of([&] { lstm(mg::zeros({5, 2, 7}), {}); });
  BOOST_TEST(m1.find("LSTM(3, 4, num_layers=2)") != std::string::npos, m1);
  BOOST_TEST(m1.find("float32[5, 2, 7]") != std::string::npos, m1);
  const std::string m2 = message_of([&] { lstm(mg::zeros({5, 2, 3}), {mg::zeros({1, 2, 4}), {}}); });
  BOOST_TEST(m2.find("h0") != std::string::npos, m2);
  BOOST_TEST(m2.find("[2, 2, 4]") != std::string::npos, m2);
  BOOST_TEST(m2.find("float32[1, 2, 4]") != std::string::npos, m2);
  const std::string m3 = message_of([&] { lstm(mg::zeros({5, 2, 3}), {{}, mg::zeros({2, 3, 4})}); });
  BOOST_TEST(m3.find("c0") != std::string::npos, m3);
  const std::string m4 = message_of([&] { gru(mg::zeros({5, 2, 3}), mg::zeros({1, 2, 5})); });
  BOOST_TEST(m4.find("GRU(3, 4)") != std::string::npos, m4);
  BOOST_TEST(m4.find("float32[1, 2, 5]") != std::string::npos, m4);
  const std::string m5 = message_of([&] { cell(mg::zeros({2, 4}), {}); });
  BOOST_TEST(m5.find("LSTMCell(3, 4)") != std::string::npos, m5);
  const std::string m6 = message_of([&] { gcell(mg::zeros({2, 3}), mg::zeros({3, 4})); });
  BOOST_TEST(m6.find("GRUCell(3, 4)") != std::string::npos, m6);
  BOOST_TEST(m6.find("float32[3, 4]") != std::string::npos, m6);
  BOOST_CHECK_THROW(lstm(mg::zeros({2, 3, 4, 3})), mg::ShapeError);
  BOOST_CHECK_THROW(lstm(mg::zeros({0, 2, 3})), mg::ShapeError);
  BOOST_CHECK_THROW(nn::LSTM(0, 4), mg::ValueError);
  BOOST_CHECK_THROW(nn::GRU(3, 4, {.num_layers = 0}), mg::ValueError);
  BOOST_CHECK_THROW(nn::GRUCell(3, 0), mg::ValueError);
  BOOST_TEST(lstm.weight_ih(0).to_vector<float>() == before, tt::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
