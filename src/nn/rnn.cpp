#include "mixgrad/nn/rnn.hpp"

#include <cmath>
#include <string>

#include "hooks/op_hooks.hpp"
#include "core/sizes.hpp"
#include "mixgrad/nn/init.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/linalg.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "core/checks.hpp"

namespace mixgrad::nn {
namespace {

void check_sizes(const char* name, int64_t input_size, int64_t hidden_size, int64_t num_layers = 1) {
  if (input_size < 1 || hidden_size < 1 || num_layers < 1)
    throw ValueError(std::string(name) + ": input_size, hidden_size and num_layers must be >= 1, got " +
                     std::to_string(input_size) + ", " + std::to_string(hidden_size) + " and " +
                     std::to_string(num_layers));
}

// PyTorch's reset_parameters() of every recurrent module: all ~ U(-1/sqrt(H), 1/sqrt(H)).
void reset_uniform(const std::vector<Tensor>& params, int64_t hidden_size) {
  autodiff::NoRecordScope no_record;
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  for (const Tensor& p : params)
    if (p.defined()) init::uniform_(p, -bound, bound);
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (int d = 0; d < s.ndim(); ++d) out += (d ? ", " : "") + std::to_string(s[d]);
  return out + "]";
}

// Under autocast the gates come out in the low-precision dtype while a zero
// or user-given state is float32; casting the state to the gates' dtype keeps
// the whole step (and its output) in one dtype, as PyTorch's autocast of the
// fused cell does. A no-op outside autocast.
Tensor as_dtype(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : F::astype(t, dtype); }

// One LSTM step. `gx` is x·W_ihᵀ + b_ih ([B, 4H]); h and c are [B, H].
LSTMState lstm_step(const Tensor& gx, const Tensor& h, const Tensor& c, const Tensor& w_hh, const Tensor& b_hh,
                    int64_t hidden) {
  const Tensor gates = F::add(gx, F::linear(h, w_hh, b_hh));
  const Tensor i = F::sigmoid(F::narrow(gates, 1, 0, hidden));
  const Tensor f = F::sigmoid(F::narrow(gates, 1, hidden, hidden));
  const Tensor g = F::tanh(F::narrow(gates, 1, 2 * hidden, hidden));
  const Tensor o = F::sigmoid(F::narrow(gates, 1, 3 * hidden, hidden));
  const Tensor c_next = F::add(F::mul(f, as_dtype(c, gates.dtype())), F::mul(i, g));
  return {F::mul(o, F::tanh(c_next)), c_next};
}

// One GRU step. `gx` is x·W_ihᵀ + b_ih ([B, 3H]); h is [B, H].
Tensor gru_step(const Tensor& gx, const Tensor& h, const Tensor& w_hh, const Tensor& b_hh, int64_t hidden) {
  const Tensor gh = F::linear(h, w_hh, b_hh);
  const Tensor r = F::sigmoid(F::add(F::narrow(gx, 1, 0, hidden), F::narrow(gh, 1, 0, hidden)));
  const Tensor z = F::sigmoid(F::add(F::narrow(gx, 1, hidden, hidden), F::narrow(gh, 1, hidden, hidden)));
  const Tensor n =
      F::tanh(F::add(F::narrow(gx, 1, 2 * hidden, hidden), F::mul(r, F::narrow(gh, 1, 2 * hidden, hidden))));
  // (1 - z) * n + z * h, with one product fewer.
  return F::add(n, F::mul(z, F::sub(as_dtype(h, gx.dtype()), n)));
}

// The input of a cell: [B, I] or unbatched [I]. Returns it as [B, I].
Tensor cell_input(const std::string& who, const Tensor& x, int64_t input_size) {
  core::check_defined("RNN cell", {&x});
  if ((x.ndim() != 1 && x.ndim() != 2) || x.size(-1) != input_size)
    throw ShapeError(who + ": expected an input of shape [B, " + std::to_string(input_size) + "] or [" +
                     std::to_string(input_size) + "], got " + core::describe(x));
  return x.ndim() == 1 ? F::unsqueeze(x, 0) : x;
}

// A cell's state (h or c) for a [B, I] input: [B, H], or [H] for an
// unbatched input; zeros when undefined. Returns it as [B, H].
Tensor cell_state(const std::string& who, const char* name, const Tensor& s, const Tensor& x, bool unbatched,
                  int64_t hidden) {
  const int64_t batch = x.size(0);
  if (!s.defined()) return zeros({batch, hidden}, x.dtype(), x.device());
  const Shape want = unbatched ? Shape{hidden} : Shape{batch, hidden};
  if (s.shape() != want)
    throw ShapeError(who + ": expected " + name + " of shape " + shape_str(want) + " for the input " +
                     core::describe(x) + ", got " + core::describe(s));
  return unbatched ? F::unsqueeze(s, 0) : s;
}

// A layer's input: [T, B, I] ([B, T, I] with batch_first) or unbatched
// [T, I]. Returns it as [T, B, I].
Tensor seq_input(const std::string& who, const Tensor& x, int64_t input_size, bool batch_first) {
  core::check_defined("RNN", {&x});
  if ((x.ndim() != 2 && x.ndim() != 3) || x.size(-1) != input_size)
    throw ShapeError(who + ": expected an input of shape " + (batch_first ? "[B, T, " : "[T, B, ") +
                     std::to_string(input_size) + "] or [T, " + std::to_string(input_size) + "], got " +
                     core::describe(x));
  if (x.size(x.ndim() == 3 && batch_first ? 1 : 0) == 0)
    throw ShapeError(who + ": expected a sequence of at least one step, got " + core::describe(x));
  if (x.ndim() == 2) return F::unsqueeze(x, 1);
  return batch_first ? F::transpose(x, 0, 1) : x;
}

// A layer's initial state: [L, B, H] ([L, H] unbatched); zeros when
// undefined. Returns it as [L, B, H].
Tensor seq_state(const std::string& who, const char* name, const Tensor& s, const Tensor& x_tbi, bool unbatched,
                 int64_t layers, int64_t hidden) {
  const int64_t batch = x_tbi.size(1);
  if (!s.defined()) return zeros({layers, batch, hidden}, x_tbi.dtype(), x_tbi.device());
  const Shape want = unbatched ? Shape{layers, hidden} : Shape{layers, batch, hidden};
  if (s.shape() != want)
    throw ShapeError(who + ": expected " + name + " of shape " + shape_str(want) + " (num_layers, batch, " +
                     "hidden_size) for the input " + core::describe(x_tbi) + ", got " + core::describe(s));
  return unbatched ? F::unsqueeze(s, 1) : s;
}

// Back from [T, B, H] to the caller's layout.
Tensor seq_output(const Tensor& y, bool unbatched, bool batch_first) {
  if (unbatched) return F::squeeze(y, 1);
  return batch_first ? F::transpose(y, 0, 1) : y;
}

Tensor step_of(const Tensor& seq, int64_t t) { return F::squeeze(F::narrow(seq, 0, t, 1), 0); }
Tensor layer_of(const Tensor& states, int64_t l) { return F::squeeze(F::narrow(states, 0, l, 1), 0); }

std::string rnn_describe(const char* name, int64_t in, int64_t hidden, const RNNOptions& o) {
  std::string s = std::string(name) + "(" + std::to_string(in) + ", " + std::to_string(hidden);
  if (o.num_layers != 1) s += ", num_layers=" + std::to_string(o.num_layers);
  if (!o.bias) s += ", bias=false";
  if (o.batch_first) s += ", batch_first=true";
  return s + ")";
}

std::string cell_describe(const char* name, int64_t in, int64_t hidden, bool bias) {
  return std::string(name) + "(" + std::to_string(in) + ", " + std::to_string(hidden) +
         (bias ? "" : ", bias=false") + ")";
}

// Registers one layer's (or a cell's) four parameters in PyTorch's order.
template <class Register>
void register_layer(Register&& reg, std::vector<Tensor>& out, const std::string& suffix, int64_t gates,
                    int64_t in, int64_t hidden, bool bias) {
  sizes::nbytes(Shape{gates * hidden, in}, DType::float32, "RNN");
  out.push_back(reg("weight_ih" + suffix, empty({gates * hidden, in})));
  out.push_back(reg("weight_hh" + suffix, empty({gates * hidden, hidden})));
  out.push_back(bias ? reg("bias_ih" + suffix, empty({gates * hidden})) : Tensor());
  out.push_back(bias ? reg("bias_hh" + suffix, empty({gates * hidden})) : Tensor());
}

}  // namespace

// ---- cells ----

LSTMCell::LSTMCell(int64_t input_size, int64_t hidden_size, const RNNCellOptions& options)
    : input_(input_size), hidden_(hidden_size) {
  check_sizes("LSTMCell", input_size, hidden_size);
  std::vector<Tensor> p;
  register_layer([this](std::string n, Tensor t) { return register_parameter(std::move(n), std::move(t)); }, p,
                 "", 4, input_, hidden_, options.bias);
  weight_ih_ = p[0], weight_hh_ = p[1], bias_ih_ = p[2], bias_hh_ = p[3];
  reset_uniform(p, hidden_);
}

LSTMState LSTMCell::forward(const Tensor& x, const LSTMState& state) {
  const std::string who = describe();
  const bool unbatched = x.defined() && x.ndim() == 1;
  const Tensor xb = cell_input(who, x, input_);
  const Tensor h = cell_state(who, "h", state.h, xb, unbatched, hidden_);
  const Tensor c = cell_state(who, "c", state.c, xb, unbatched, hidden_);
  LSTMState next = lstm_step(F::linear(xb, weight_ih_, bias_ih_), h, c, weight_hh_, bias_hh_, hidden_);
  if (unbatched) next = {F::squeeze(next.h, 0), F::squeeze(next.c, 0)};
  return next;
}

std::string LSTMCell::describe() const { return cell_describe("LSTMCell", input_, hidden_, bias_ih_.defined()); }

GRUCell::GRUCell(int64_t input_size, int64_t hidden_size, const RNNCellOptions& options)
    : input_(input_size), hidden_(hidden_size) {
  check_sizes("GRUCell", input_size, hidden_size);
  std::vector<Tensor> p;
  register_layer([this](std::string n, Tensor t) { return register_parameter(std::move(n), std::move(t)); }, p,
                 "", 3, input_, hidden_, options.bias);
  weight_ih_ = p[0], weight_hh_ = p[1], bias_ih_ = p[2], bias_hh_ = p[3];
  reset_uniform(p, hidden_);
}

Tensor GRUCell::forward(const Tensor& x, const Tensor& h) {
  const std::string who = describe();
  const bool unbatched = x.defined() && x.ndim() == 1;
  const Tensor xb = cell_input(who, x, input_);
  const Tensor hb = cell_state(who, "h", h, xb, unbatched, hidden_);
  const Tensor next = gru_step(F::linear(xb, weight_ih_, bias_ih_), hb, weight_hh_, bias_hh_, hidden_);
  return unbatched ? F::squeeze(next, 0) : next;
}

std::string GRUCell::describe() const { return cell_describe("GRUCell", input_, hidden_, bias_ih_.defined()); }

// ---- layers ----

LSTM::LSTM(int64_t input_size, int64_t hidden_size, const RNNOptions& options)
    : input_(input_size), hidden_(hidden_size), options_(options) {
  check_sizes("LSTM", input_size, hidden_size, options.num_layers);
  for (int64_t l = 0; l < options_.num_layers; ++l)
    register_layer([this](std::string n, Tensor t) { return register_parameter(std::move(n), std::move(t)); },
                   weights_, "_l" + std::to_string(l), 4, l == 0 ? input_ : hidden_, hidden_, options_.bias);
  reset_uniform(weights_, hidden_);
}

LSTMOutput LSTM::forward(const Tensor& x, const LSTMState& state) {
  const std::string who = describe();
  const bool unbatched = x.defined() && x.ndim() == 2;
  Tensor seq = seq_input(who, x, input_, options_.batch_first);
  const int64_t layers = options_.num_layers;
  const Tensor h0 = seq_state(who, "h0", state.h, seq, unbatched, layers, hidden_);
  const Tensor c0 = seq_state(who, "c0", state.c, seq, unbatched, layers, hidden_);
  const int64_t steps = seq.size(0);
  std::vector<Tensor> h_n, c_n, outs;
  outs.reserve(steps);
  for (int64_t l = 0; l < layers; ++l) {
    // The input projection of every step in one product.
    const Tensor gx = F::linear(seq, weight_ih(l), bias_ih(l));
    LSTMState s{layer_of(h0, l), layer_of(c0, l)};
    outs.clear();
    for (int64_t t = 0; t < steps; ++t) {
      s = lstm_step(step_of(gx, t), s.h, s.c, weight_hh(l), bias_hh(l), hidden_);
      outs.push_back(s.h);
    }
    h_n.push_back(s.h);
    c_n.push_back(s.c);
    seq = F::stack(outs, 0);
  }
  Tensor hn = F::stack(h_n, 0), cn = F::stack(c_n, 0);
  if (unbatched) hn = F::squeeze(hn, 1), cn = F::squeeze(cn, 1);
  return {seq_output(seq, unbatched, options_.batch_first), {hn, cn}};
}

std::string LSTM::describe() const { return rnn_describe("LSTM", input_, hidden_, options_); }

GRU::GRU(int64_t input_size, int64_t hidden_size, const RNNOptions& options)
    : input_(input_size), hidden_(hidden_size), options_(options) {
  check_sizes("GRU", input_size, hidden_size, options.num_layers);
  for (int64_t l = 0; l < options_.num_layers; ++l)
    register_layer([this](std::string n, Tensor t) { return register_parameter(std::move(n), std::move(t)); },
                   weights_, "_l" + std::to_string(l), 3, l == 0 ? input_ : hidden_, hidden_, options_.bias);
  reset_uniform(weights_, hidden_);
}

GRUOutput GRU::forward(const Tensor& x, const Tensor& h0_in) {
  const std::string who = describe();
  const bool unbatched = x.defined() && x.ndim() == 2;
  Tensor seq = seq_input(who, x, input_, options_.batch_first);
  const int64_t layers = options_.num_layers;
  const Tensor h0 = seq_state(who, "h0", h0_in, seq, unbatched, layers, hidden_);
  const int64_t steps = seq.size(0);
  std::vector<Tensor> h_n, outs;
  outs.reserve(steps);
  for (int64_t l = 0; l < layers; ++l) {
    const Tensor gx = F::linear(seq, weight_ih(l), bias_ih(l));
    Tensor h = layer_of(h0, l);
    outs.clear();
    for (int64_t t = 0; t < steps; ++t) {
      h = gru_step(step_of(gx, t), h, weight_hh(l), bias_hh(l), hidden_);
      outs.push_back(h);
    }
    h_n.push_back(h);
    seq = F::stack(outs, 0);
  }
  Tensor hn = F::stack(h_n, 0);
  if (unbatched) hn = F::squeeze(hn, 1);
  return {seq_output(seq, unbatched, options_.batch_first), hn};
}

std::string GRU::describe() const { return rnn_describe("GRU", input_, hidden_, options_); }

}  // namespace mixgrad::nn
