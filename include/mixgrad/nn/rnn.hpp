// mixgrad/nn/rnn.hpp — recurrent layers: LSTMCell, GRUCell, and the
// multi-layer LSTM and GRU that run the cells over a sequence.
//
//   mg::nn::LSTM lstm(16, 32, {.num_layers = 2});
//   auto [out, state] = lstm(x, {});          // x: [T, B, 16] -> out [T, B, 32],
//                                             // state.h, state.c: [2, B, 32]
//   auto [out2, h_n] = mg::nn::GRU(16, 32)(x, h0);   // h0: [1, B, 32] (or undefined: zeros)
//   mg::nn::LSTMCell cell(16, 32);
//   auto [h1, c1] = cell(x0, {h0, c0});       // x0: [B, 16], h0/c0: [B, 32]
//
// PyTorch's semantics: the same gate order (LSTM i, f, g, o; GRU r, z, n with
// n = tanh(W_in x + b_in + r * (W_hn h + b_hn))), the same parameter names
// and shapes (weight_ih_l0 [4H, I], weight_hh_l0 [4H, H], bias_ih_l0 [4H],
// bias_hh_l0 [4H]; cells: weight_ih, weight_hh, bias_ih, bias_hh; GRU with
// 3H), so a PyTorch state_dict loads as is, and the same initialisation:
// every parameter ~ U(-1/sqrt(H), 1/sqrt(H)).
//
// The layers are compositions of existing ops (F::linear, narrow, sigmoid,
// tanh, mul, add, stack), so gradients and autocast come from those ops and
// no op-table entry exists for them. All four gates of a step come from one
// product per input (x and h) split with narrow; a layer projects the whole
// input sequence with one product before the time loop. Under autocast the
// products run in low precision and the recurrent state is cast to the
// gates' dtype at each step, so the output and state are low precision, as
// PyTorch's autocast of its fused LSTM/GRU gives.
//
// Inputs are batched ([B, I] for a cell; [T, B, I], or [B, T, I] with
// batch_first, for a layer) or unbatched ([I]; [T, I]); states follow
// PyTorch's shapes ([B, H]; [num_layers, B, H]), and an undefined state is
// zeros. Unidirectional, without inter-layer dropout or projections.
#pragma once

#include "mixgrad/nn/module.hpp"

namespace mixgrad::nn {

struct RNNCellOptions {
  bool bias = true;
};

struct RNNOptions {
  int64_t num_layers = 1;
  bool bias = true;
  /// Input and output as [B, T, features] rather than [T, B, features]
  /// (the states keep [num_layers, B, H], as in PyTorch).
  bool batch_first = false;
};

/// The (h, c) state of an LSTM or LSTMCell; undefined members mean zeros.
struct LSTMState {
  Tensor h;
  Tensor c;
};

/// What LSTM returns: PyTorch's (output, (h_n, c_n)).
struct LSTMOutput {
  Tensor output;  ///< the last layer's h at every step: [T, B, H]
  LSTMState state;  ///< each layer's final h and c: [num_layers, B, H]
};

/// What GRU returns: PyTorch's (output, h_n).
struct GRUOutput {
  Tensor output;  ///< [T, B, H]
  Tensor h_n;     ///< [num_layers, B, H]
};

class LSTMCell : public Module {
 public:
  /// Throws ValueError unless both sizes are >= 1.
  LSTMCell(int64_t input_size, int64_t hidden_size, const RNNCellOptions& options = {});

  /// One step from `state` (undefined members: zeros). ShapeError, naming the
  /// cell and the shapes, for an input or state of the wrong shape.
  LSTMState forward(const Tensor& x, const LSTMState& state);
  /// One step from the zero state; returns the new h.
  Tensor forward(const Tensor& x) override { return forward(x, LSTMState{}).h; }
  using Module::operator();
  LSTMState operator()(const Tensor& x, const LSTMState& state) { return forward(x, state); }
  std::string describe() const override;

  const Tensor& weight_ih() const { return weight_ih_; }  ///< [4H, I]: i, f, g, o rows
  const Tensor& weight_hh() const { return weight_hh_; }  ///< [4H, H]
  const Tensor& bias_ih() const { return bias_ih_; }      ///< [4H]; undefined without bias
  const Tensor& bias_hh() const { return bias_hh_; }      ///< [4H]; undefined without bias
  int64_t input_size() const { return input_; }
  int64_t hidden_size() const { return hidden_; }

 private:
  int64_t input_, hidden_;
  Tensor weight_ih_, weight_hh_, bias_ih_, bias_hh_;
};

class GRUCell : public Module {
 public:
  /// Throws ValueError unless both sizes are >= 1.
  GRUCell(int64_t input_size, int64_t hidden_size, const RNNCellOptions& options = {});

  /// One step from h (undefined: zeros); returns the new h. ShapeError for
  /// an input or h of the wrong shape.
  Tensor forward(const Tensor& x, const Tensor& h);
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
  using Module::operator();
  Tensor operator()(const Tensor& x, const Tensor& h) { return forward(x, h); }
  std::string describe() const override;

  const Tensor& weight_ih() const { return weight_ih_; }  ///< [3H, I]: r, z, n rows
  const Tensor& weight_hh() const { return weight_hh_; }  ///< [3H, H]
  const Tensor& bias_ih() const { return bias_ih_; }
  const Tensor& bias_hh() const { return bias_hh_; }
  int64_t input_size() const { return input_; }
  int64_t hidden_size() const { return hidden_; }

 private:
  int64_t input_, hidden_;
  Tensor weight_ih_, weight_hh_, bias_ih_, bias_hh_;
};

class LSTM : public Module {
 public:
  /// Throws ValueError unless the sizes and num_layers are >= 1.
  LSTM(int64_t input_size, int64_t hidden_size, const RNNOptions& options = {});

  /// Runs every layer over the sequence from `state` (undefined members:
  /// zeros). ShapeError, naming the module and shapes, for an input whose
  /// feature size is not input_size or a state not [num_layers, B, H].
  LSTMOutput forward(const Tensor& x, const LSTMState& state);
  /// The output sequence alone, from the zero state.
  Tensor forward(const Tensor& x) override { return forward(x, LSTMState{}).output; }
  using Module::operator();
  LSTMOutput operator()(const Tensor& x, const LSTMState& state) { return forward(x, state); }
  std::string describe() const override;

  /// Layer `layer`'s parameters, as the cells name them (weight_ih ...).
  const Tensor& weight_ih(int64_t layer) const { return weights_.at(layer * 4); }
  const Tensor& weight_hh(int64_t layer) const { return weights_.at(layer * 4 + 1); }
  const Tensor& bias_ih(int64_t layer) const { return weights_.at(layer * 4 + 2); }
  const Tensor& bias_hh(int64_t layer) const { return weights_.at(layer * 4 + 3); }
  int64_t input_size() const { return input_; }
  int64_t hidden_size() const { return hidden_; }
  int64_t num_layers() const { return options_.num_layers; }

 private:
  int64_t input_, hidden_;
  RNNOptions options_;
  std::vector<Tensor> weights_;  // per layer: weight_ih, weight_hh, bias_ih, bias_hh (undefined biases)
};

class GRU : public Module {
 public:
  /// Throws ValueError unless the sizes and num_layers are >= 1.
  GRU(int64_t input_size, int64_t hidden_size, const RNNOptions& options = {});

  /// Runs every layer over the sequence from h0 ([num_layers, B, H];
  /// undefined: zeros). ShapeError as LSTM::forward.
  GRUOutput forward(const Tensor& x, const Tensor& h0);
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()).output; }
  using Module::operator();
  GRUOutput operator()(const Tensor& x, const Tensor& h0) { return forward(x, h0); }
  std::string describe() const override;

  const Tensor& weight_ih(int64_t layer) const { return weights_.at(layer * 4); }
  const Tensor& weight_hh(int64_t layer) const { return weights_.at(layer * 4 + 1); }
  const Tensor& bias_ih(int64_t layer) const { return weights_.at(layer * 4 + 2); }
  const Tensor& bias_hh(int64_t layer) const { return weights_.at(layer * 4 + 3); }
  int64_t input_size() const { return input_; }
  int64_t hidden_size() const { return hidden_; }
  int64_t num_layers() const { return options_.num_layers; }

 private:
  int64_t input_, hidden_;
  RNNOptions options_;
  std::vector<Tensor> weights_;
};

}  // namespace mixgrad::nn
