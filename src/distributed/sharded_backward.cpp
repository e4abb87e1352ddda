// ShardedOptimizer::attach: the gradients reduce-scattered during backward,
// in GradReducer's buckets, into the shard's gradients; no_sync for
// gradient accumulation.
#include <string>

#include "backend/copy.hpp"
#include "distributed/sharded_state.hpp"
#include "mixgrad/amp_step.hpp"
#include "mixgrad/autodiff/grad_manager.hpp"
#include "mixgrad/autodiff/no_grad.hpp"
#include "mixgrad/error.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/elementwise.hpp"

namespace mixgrad::distributed {

ShardedOptimizer& ShardedOptimizer::attach(autodiff::GradManager& gm) {
  Impl& m = *impl_;
  if (m.reducer)
    throw StateError(std::string("distributed::ShardedOptimizer::attach: rank ")
                         .append(std::to_string(m.group.rank()))
                         .append(": already attached (the gradients are reduced during backward once)"));
  auto scatter = std::make_shared<detail::ShardScatter>();
  scatter->tensors = m.params;
  scatter->per_rank = m.range.per_rank;
  scatter->deliver = [&m](const std::vector<detail::FlatRun>& runs, const Tensor& values) { m.deliver(runs, values); };
  const ReducerOptions ro{.bucket_bytes = m.options.bucket_bytes,
                          .progress_thread_us = ReducerOptions{}.progress_thread_us};
  auto reducer = std::make_shared<GradReducer>(m.group, m.options.op, ro, std::move(scatter));
  reducer->follow(gm);
  for (size_t i = 0; i < m.params.size(); ++i) m.param_index.emplace(m.params[i].id(), i);
  m.had_grad.assign(m.params.size(), 0);
  m.pending.assign(m.params.size(), Tensor());
  m.amp_params = m.params;
  m.amp_params.insert(m.amp_params.end(), m.shard.begin(), m.shard.end());
  m.reducer = std::move(reducer);
  gm.attach(m.params, {[&m](const Tensor& t, const Tensor& g) { return m.on_grad(t, g); }});
  if (!m.shard.empty()) gm.attach(m.shard);  // so that the GradScaler unscales the reduced gradients
  gm.register_backward_progress_callback([&m] {
    if (m.sync) m.reducer->progress();
  });
  gm.register_after_backward_callback([&m, &gm] { m.finish_backward(gm.backward_scaling()); });
  return *this;
}

// Stage 1 leaves .grad() as backward writes it (this rank's own gradient),
// stage 2 keeps no full gradient: the bucket (or, under no_sync, `pending`)
// holds it.
Tensor ShardedOptimizer::Impl::on_grad(const Tensor& t, const Tensor& g) {
  if (!g.defined()) return g;
  const size_t i = param_index.at(t.id());
  had_grad[i] = 1;
  Tensor total = g;
  if (pending[i].defined()) {  // the micro-steps under no_sync
    autodiff::no_grad guard;
    total = F::add(pending[i], g);
    pending[i] = Tensor();
  }
  if (!sync) {
    unsynced = true;
    pending[i] = total;
  } else {
    reducer->on_grad_ready(t, total);
  }
  return options.stage == 1 ? g : Tensor();
}

// The after-backward hook: what no_sync's micro-steps left for parameters
// this backward did not reach joins the buckets, then the reducer finishes.
void ShardedOptimizer::Impl::finish_backward(const GradScaling& mark) {
  if (!sync) return;
  for (size_t i = 0; i < params.size(); ++i)
    if (pending[i].defined()) {
      reducer->on_grad_ready(params[i], pending[i]);
      pending[i] = Tensor();
    }
  reducer->finish();
  take_shard_grads(mark);
}

void ShardedOptimizer::Impl::deliver(const std::vector<detail::FlatRun>& runs, const Tensor& values) {
  if (!acc.defined()) acc = empty({range.per_rank}, dtype, device);
  int64_t at = 0;
  for (const auto& [begin, length] : runs) {
    backend::copy(values.narrow(0, at, length), acc.narrow(0, begin - range.begin, length));
    at += length;
  }
}

void ShardedOptimizer::Impl::take_shard_grads(const GradScaling& mark) {
  unsynced = false;
  if (!acc.defined()) return;
  autodiff::no_grad guard;
  for (size_t j = 0; j < pieces.size(); ++j) {
    const ShardPiece& p = pieces[j];
    Tensor g = acc.narrow(0, p.shard_offset, p.length).to(shard_dtype);
    const Tensor have = shard[j].grad();
    const GradScaling m = have.defined() ? accumulated_scaling(grad_scaling(have), mark) : mark;
    if (have.defined()) g = F::add(have, g);
    shard[j].set_grad(g);
    set_grad_scaling(g, m);
  }
  acc = Tensor();
}

GradReducer* ShardedOptimizer::reducer() const { return impl_->reducer.get(); }

ShardedOptimizer::NoSync::NoSync(ShardedOptimizer& opt) : opt_(&opt) {
  if (!opt.impl_->reducer)
    throw StateError(std::string("distributed::ShardedOptimizer::no_sync: rank ")
                         .append(std::to_string(opt.impl_->group.rank()))
                         .append(": not attached; without attach(gm) the step reduces, once, whatever .grad() holds"));
  opt.impl_->sync = false;
}

ShardedOptimizer::NoSync::~NoSync() { opt_->impl_->sync = true; }

}  // namespace mixgrad::distributed
