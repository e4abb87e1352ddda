// The state a misuse must not touch, and a snapshot of it to compare.
//
// Fixture builds a small trained setup: an MLP whose parameters hold
// gradients, an Adam optimizer with state after three steps, a GradScaler
// whose scale has grown, a GradManager with the parameters attached, a
// BatchNorm2d with updated running statistics, and the input tensors the
// misuse rows use. snapshot() records all of it (values bitwise, versions,
// gradients, optimizer and scaler state dicts, global settings) as a map from
// a description to a string, so two snapshots compare with == and a
// difference names what changed.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "mixgrad/mixgrad.hpp"

namespace misuse {

namespace mg = mixgrad;

struct Fixture {
  mg::nn::Sequential net{mg::nn::Linear(4, 3), mg::nn::ReLU(), mg::nn::Linear(3, 2)};
  mg::nn::BatchNorm2d bn{2};
  mg::autodiff::GradManager gm;
  std::unique_ptr<mg::optim::Adam> opt;
  mg::amp::GradScaler scaler{mg::amp::GradScalerOptions{.init_scale = 1024.0, .growth_interval = 2}};

  mg::Tensor x;       // float32[2, 4], the net's input
  mg::Tensor labels;  // int64[2], classes of the net's two outputs
  mg::Tensor a;       // float32[2, 3]
  mg::Tensor b;       // float32[4, 5]
  mg::Tensor ints;    // int32[2, 3]
  mg::Tensor img;     // float32[2, 2, 3, 3]

  Fixture() {
    mg::manual_seed(11);
    x = mg::normal({2, 4});
    labels = mg::tensor<int64_t>({0, 1}, {2});
    a = mg::normal({2, 3});
    b = mg::normal({4, 5});
    ints = mg::tensor<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
    img = mg::normal({2, 2, 3, 3});
    bn.train();
    (void)bn(img);  // moves the running statistics away from their initial values
    gm.attach(net.parameters());
    opt = std::make_unique<mg::optim::Adam>(net.parameters(), mg::optim::AdamOptions{.lr = 0.01});
    for (int i = 0; i < 3; ++i) {
      opt->clear_grad();
      {
        auto rec = gm.record();
        scaler.backward(gm, mg::F::cross_entropy(net(x), labels));
      }
      scaler.step(*opt);
    }
    // Leave gradients in place for the snapshot: this step's, unscaled.
    opt->clear_grad();
    auto rec = gm.record();
    scaler.backward(gm, mg::F::cross_entropy(net(x), labels));
  }
};

inline std::string bytes_of(const mg::Tensor& t) {
  if (!t.defined()) return "undefined";
  const mg::Tensor c = t.to(mg::Device::cpu()).contiguous();
  std::string out = to_string(c.shape()) + " " + std::string(mg::to_string(c.dtype())) + " ";
  const size_t n = static_cast<size_t>(c.numel()) * mg::element_size(c.dtype());
  out.append(static_cast<const char*>(c.raw_data()), n);
  return out;
}

using Snapshot = std::map<std::string, std::string>;

inline void add_tensor(Snapshot& s, const std::string& name, const mg::Tensor& t) {
  s[name + ".value"] = bytes_of(t);
  s[name + ".version"] = t.defined() ? std::to_string(t.version()) : "-";
  s[name + ".grad"] = t.defined() ? bytes_of(t.grad()) : "-";
  if (!t.defined() || !t.grad().defined()) return;
  const mg::GradScaling m = mg::grad_scaling(t.grad());
  s[name + ".grad.scaling"] = std::string(mg::to_string(m.state)) + " " +
                              std::to_string(reinterpret_cast<uintptr_t>(m.scaled_by)) + " " +
                              std::to_string(m.epoch) + " " + (m.found_inf.defined() ? bytes_of(m.found_inf) : "-");
}

inline Snapshot snapshot(Fixture& f) {
  Snapshot s;
  for (const auto& [name, t] : f.net.named_parameters()) add_tensor(s, "net." + name, t);
  for (const auto& [name, t] : f.bn.named_parameters()) add_tensor(s, "bn." + name, t);
  for (const auto& [name, t] : f.bn.named_buffers()) add_tensor(s, "bn." + name, t);
  add_tensor(s, "x", f.x);
  add_tensor(s, "labels", f.labels);
  add_tensor(s, "a", f.a);
  add_tensor(s, "b", f.b);
  add_tensor(s, "ints", f.ints);
  add_tensor(s, "img", f.img);
  s["net.training"] = f.net.is_training() ? "1" : "0";
  s["bn.training"] = f.bn.is_training() ? "1" : "0";
  for (const auto& [key, t] : f.opt->state_dict()) s["opt." + key] = bytes_of(t);
  s["opt.lr"] = std::to_string(f.opt->lr());
  for (size_t i = 0; i < f.opt->parameters().size(); ++i)
    s["opt.step_count." + std::to_string(i)] = std::to_string(f.opt->step_count(i));
  std::ostringstream scale;
  scale.precision(17);
  scale << f.scaler.scale_factor() << " tracker " << f.scaler.growth_tracker() << " found "
        << f.scaler.found_non_finite();
  s["scaler"] = scale.str();
  for (const auto& [key, t] : f.scaler.state_dict()) s["scaler." + key] = bytes_of(t);
  s["gm.recording"] = f.gm.is_recording() ? "1" : "0";
  std::string attached;
  for (const auto& t : f.gm.attached_tensors()) attached += std::to_string(t.id()) + " ";
  s["gm.attached"] = attached;
  const auto st = mg::amp::current_state();
  s["amp.state"] = std::to_string(st.enabled) + " " + std::string(mg::to_string(st.low_prec_dtype)) + " " +
                   std::string(mg::to_string(st.high_prec_dtype));
  s["amp.globals"] = std::to_string(static_cast<bool>(mg::amp::enabled)) + " " +
                     std::string(mg::to_string(mg::amp::low_prec_dtype.load())) + " " +
                     std::string(mg::to_string(mg::amp::high_prec_dtype.load()));
  s["threads"] = std::to_string(mg::num_threads());
  return s;
}

/// The keys whose values differ (or exist in only one snapshot).
inline std::string differences(const Snapshot& before, const Snapshot& after) {
  std::string out;
  for (const auto& [k, v] : before) {
    auto it = after.find(k);
    if (it == after.end() || it->second != v) out += k + " ";
  }
  for (const auto& [k, v] : after)
    if (!before.contains(k)) out += k + " ";
  return out;
}

}  // namespace misuse
