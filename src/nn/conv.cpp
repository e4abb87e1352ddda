// The convolution modules share one description of their geometry (ConvSpec,
// with Conv1d's as a single spatial dimension): the constructor's validation
// and weight shape, forward's input check and describe() all read it, so the
// modules differ only in which F:: op they call.
#include "mixgrad/nn/conv.hpp"

#include <array>
#include <tuple>
#include <utility>
#include <vector>

#include "core/sizes.hpp"
#include "mixgrad/ops/nn.hpp"
#include "mixgrad/ops/resize.hpp"
#include "nn/default_init.hpp"
#include "core/checks.hpp"

namespace mixgrad::nn {

namespace {

using Dims = std::array<int64_t, 2>;  // the first `rank` entries count

struct ConvSpec {
  const char* name;
  int64_t in, out;
  int rank;  // spatial dimensions: 1 (Conv1d) or 2
  Dims kernel, stride, padding, dilation, output_padding;
  int64_t groups;
  bool transposed;  // weight [in, out / groups, k...]; output_padding applies
  PaddingMode mode = PaddingMode::zeros;
};

Dims dims(Size2 s) { return {s.h, s.w}; }
Dims dims(int64_t v) { return {v, 0}; }

ConvSpec spec_of(int64_t in, int64_t out, Size2 k, const Conv2dOptions& o) {
  return {"Conv2d", in, out, 2, dims(k), dims(o.stride), dims(o.padding), dims(o.dilation), {0, 0}, o.groups, false,
          o.padding_mode};
}

ConvSpec spec_of(int64_t in, int64_t out, int64_t k, const Conv1dOptions& o) {
  return {"Conv1d", in, out, 1, dims(k), dims(o.stride), dims(o.padding), dims(o.dilation), {0, 0}, o.groups, false,
          o.padding_mode};
}

ConvSpec spec_of(int64_t in, int64_t out, Size2 k, const ConvTranspose2dOptions& o) {
  return {"ConvTranspose2d", in, out, 2, dims(k), dims(o.stride), dims(o.padding), dims(o.dilation),
          dims(o.output_padding), o.groups, true};
}

// "3" for one dimension, "(3, 3)" for two. Appended piece by piece: GCC 12
// warns (-Wrestrict, a false positive) at "(" + std::string once inlined.
std::string str(const ConvSpec& s, const Dims& d) {
  if (s.rank == 1) return std::to_string(d[0]);
  std::string r = "(";
  r.append(std::to_string(d[0])).append(", ").append(std::to_string(d[1])).append(")");
  return r;
}

bool any_below(const ConvSpec& s, const Dims& d, int64_t least) {
  for (int i = 0; i < s.rank; ++i)
    if (d[static_cast<size_t>(i)] < least) return true;
  return false;
}

bool any_other_than(const ConvSpec& s, const Dims& d, int64_t v) {
  for (int i = 0; i < s.rank; ++i)
    if (d[static_cast<size_t>(i)] != v) return true;
  return false;
}

// Every extent of `d` below the matching one of `bound`.
bool all_below(const ConvSpec& s, const Dims& d, const Dims& bound) {
  for (int i = 0; i < s.rank; ++i)
    if (d[static_cast<size_t>(i)] >= bound[static_cast<size_t>(i)]) return false;
  return true;
}

Shape weight_shape(const ConvSpec& s) {
  std::vector<int64_t> w = s.transposed ? std::vector<int64_t>{s.in, s.out / s.groups}
                                        : std::vector<int64_t>{s.out, s.in / s.groups};
  w.insert(w.end(), s.kernel.begin(), s.kernel.begin() + s.rank);
  return Shape(w);
}

// ValueError naming the module for a geometry no convolution has.
void validate(const ConvSpec& s) {
  auto bad = [&](const std::string& what) {
    throw ValueError(std::string(s.name) + "(" + std::to_string(s.in) + ", " + std::to_string(s.out) +
                     ", kernel_size=" + str(s, s.kernel) + "): " + what);
  };
  if (s.in < 1 || s.out < 1) bad("channels must be >= 1");
  if (any_below(s, s.kernel, 1)) bad("kernel_size must be >= 1");
  if (any_below(s, s.stride, 1)) bad("stride must be >= 1, got " + str(s, s.stride));
  if (any_below(s, s.dilation, 1)) bad("dilation must be >= 1, got " + str(s, s.dilation));
  if (any_below(s, s.padding, 0)) bad("padding must be >= 0, got " + str(s, s.padding));
  if (s.transposed && (any_below(s, s.output_padding, 0) || !all_below(s, s.output_padding, s.stride)))
    bad("output_padding " + str(s, s.output_padding) + " must lie in [0, stride " + str(s, s.stride) + ")");
  if (s.groups < 1 || s.in % s.groups != 0 || s.out % s.groups != 0)
    bad("groups = " + std::to_string(s.groups) + " must divide both channel counts");
  sizes::nbytes(weight_shape(s), DType::float32, s.name);
}

// PyTorch's spelling of a padding mode.
const char* mode_name(PaddingMode m) {
  switch (m) {
    case PaddingMode::zeros: return "zeros";
    case PaddingMode::reflect: return "reflect";
    case PaddingMode::replicate: return "replicate";
    case PaddingMode::circular: return "circular";
  }
  return "?";
}

std::string describe_spec(const ConvSpec& s, bool has_bias) {
  std::string d = std::string(s.name) + "(" + std::to_string(s.in) + ", " + std::to_string(s.out) +
                  ", kernel_size=" + str(s, s.kernel) + ", stride=" + str(s, s.stride);
  if (any_other_than(s, s.padding, 0)) d += ", padding=" + str(s, s.padding);
  if (s.transposed && any_other_than(s, s.output_padding, 0)) d += ", output_padding=" + str(s, s.output_padding);
  if (any_other_than(s, s.dilation, 1)) d += ", dilation=" + str(s, s.dilation);
  if (s.groups != 1) d += ", groups=" + std::to_string(s.groups);
  if (!has_bias) d += ", bias=false";
  if (s.mode != PaddingMode::zeros) d.append(", padding_mode=").append(mode_name(s.mode));
  return d + ")";
}

// x, after a ShapeError unless it is [N, in, L] (one spatial dimension) or [N, in, H, W].
const Tensor& checked_input(const ConvSpec& s, const Tensor& x, const Tensor& bias) {
  core::check_defined(s.name, {&x});
  if (x.ndim() != 2 + s.rank || x.shape()[1] != s.in)
    throw ShapeError(describe_spec(s, bias.defined()) + ": expected input [N, " + std::to_string(s.in) +
                     (s.rank == 1 ? ", L]" : ", H, W]") + ", got " + core::describe(x));
  return x;
}

// Validates s, then the weight and (with `bias`) the bias, registered by
// `reg` and initialised as PyTorch does.
template <class Register>
std::pair<Tensor, Tensor> make_parameters(const ConvSpec& s, bool bias, Register reg) {
  validate(s);
  Tensor w = reg("weight", empty(weight_shape(s)));
  Tensor b = bias ? reg("bias", empty({s.out})) : Tensor();
  detail::reset_weight_and_bias(w, b);
  return {w, b};
}

// The op's options: the padding goes to F::pad instead for a padding_mode
// other than zeros.
template <class FOptions, class Options>
FOptions op_options(const Options& o) {
  const bool zeros = o.padding_mode == PaddingMode::zeros;
  return {.stride = o.stride, .padding = zeros ? o.padding : decltype(o.padding){0}, .dilation = o.dilation,
          .groups = o.groups};
}

// x padded as `s.mode` says (PyTorch's reversed padding repeated twice:
// (left, right) of the last dim first); x itself for zeros.
Tensor padded_input(const ConvSpec& s, const Tensor& x) {
  if (s.mode == PaddingMode::zeros) return x;
  std::vector<int64_t> pads;
  for (int i = s.rank - 1; i >= 0; --i) pads.insert(pads.end(), 2, s.padding[static_cast<size_t>(i)]);
  const F::PadMode mode = s.mode == PaddingMode::reflect     ? F::PadMode::reflect
                          : s.mode == PaddingMode::replicate ? F::PadMode::replicate
                                                             : F::PadMode::circular;
  return F::pad(x, pads, mode);
}

F::ConvTranspose2dOptions op_options(const ConvTranspose2dOptions& o) {
  return {.stride = o.stride, .padding = o.padding, .output_padding = o.output_padding, .dilation = o.dilation,
          .groups = o.groups};
}

}  // namespace

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, const Conv2dOptions& options)
    : in_(in_channels), out_(out_channels), kernel_(kernel_size), options_(options) {
  std::tie(weight_, bias_) = make_parameters(spec_of(in_, out_, kernel_, options_), options_.bias,
                                             [this](const char* n, Tensor t) { return register_parameter(n, t); });
}

Tensor Conv2d::forward(const Tensor& x) {
  const ConvSpec s = spec_of(in_, out_, kernel_, options_);
  return F::conv2d(padded_input(s, checked_input(s, x, bias_)), weight_, bias_,
                   op_options<F::Conv2dOptions>(options_));
}

std::string Conv2d::describe() const { return describe_spec(spec_of(in_, out_, kernel_, options_), bias_.defined()); }

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, const Conv1dOptions& options)
    : in_(in_channels), out_(out_channels), kernel_(kernel_size), options_(options) {
  std::tie(weight_, bias_) = make_parameters(spec_of(in_, out_, kernel_, options_), options_.bias,
                                             [this](const char* n, Tensor t) { return register_parameter(n, t); });
}

Tensor Conv1d::forward(const Tensor& x) {
  const ConvSpec s = spec_of(in_, out_, kernel_, options_);
  return F::conv1d(padded_input(s, checked_input(s, x, bias_)), weight_, bias_,
                   op_options<F::Conv1dOptions>(options_));
}

std::string Conv1d::describe() const { return describe_spec(spec_of(in_, out_, kernel_, options_), bias_.defined()); }

ConvTranspose2d::ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size,
                                 const ConvTranspose2dOptions& options)
    : in_(in_channels), out_(out_channels), kernel_(kernel_size), options_(options) {
  std::tie(weight_, bias_) = make_parameters(spec_of(in_, out_, kernel_, options_), options_.bias,
                                             [this](const char* n, Tensor t) { return register_parameter(n, t); });
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  const Tensor& in = checked_input(spec_of(in_, out_, kernel_, options_), x, bias_);
  return F::conv_transpose2d(in, weight_, bias_, op_options(options_));
}

std::string ConvTranspose2d::describe() const {
  return describe_spec(spec_of(in_, out_, kernel_, options_), bias_.defined());
}

}  // namespace mixgrad::nn
