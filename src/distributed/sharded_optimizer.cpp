// ShardedOptimizer's construction and step: the agreement on the parameter
// list, the flat layout, the gradient reduction (a chunked
// reduce-scatter), the agreed found-inf flag, the clip from the shards and
// the all-gather of the updated shards.
#include "mixgrad/distributed/sharded_optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "backend/copy.hpp"
#include "backend/multi_tensor.hpp"
#include "distributed/functional_transport.hpp"
#include "distributed/sharded_state.hpp"
#include "mixgrad/autodiff/no_grad.hpp"
#include "mixgrad/distributed/collectives.hpp"
#include "mixgrad/error.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/shape_ops.hpp"

namespace mixgrad::distributed {

namespace {

constexpr const char* kWhere = "distributed::ShardedOptimizer: ";
constexpr int kDescription = 11;  // dtype, is_cuda, ndim, 8 extents

std::string describe(const int64_t* d) {
  std::ostringstream s;
  if (d[0] < 0) return "undefined";
  s << std::string(to_string(static_cast<DType>(d[0]))) << (d[1] ? " (cuda)" : "") << "[";
  for (int64_t k = 0; k < d[2]; ++k) s << (k ? ", " : "") << d[3 + k];
  return s.str() + "]";
}

// Every rank passed as many parameters, of the same dtypes, devices and
// shapes (up to 8 dimensions compared). It runs before any check of one
// rank's own list, so that every rank throws the same error or none.
void agree_parameters(const ProcessGroup& group, const std::vector<Tensor>& params) {
  const int world = group.world_size();
  const int64_t n = static_cast<int64_t>(params.size());
  const std::vector<int64_t> counts = all_gather(group, tensor<int64_t>({n}, Shape{1})).to_vector<int64_t>();
  for (int r = 1; r < world; ++r)
    if (counts[r] != counts[0])
      throw ValueError(std::string(kWhere) + "rank 0 passed " + std::to_string(counts[0]) + " parameters, rank " +
                       std::to_string(r) + " passed " + std::to_string(counts[r]));
  std::vector<int64_t> mine(static_cast<size_t>(n) * kDescription, 0);
  for (int64_t i = 0; i < n; ++i) {
    const Tensor& p = params[i];
    int64_t* d = &mine[i * kDescription];
    d[0] = -1;
    if (!p.defined()) continue;
    d[0] = static_cast<int64_t>(p.dtype()), d[1] = p.device().is_cuda(), d[2] = std::min(p.ndim(), kDescription - 3);
    for (int k = 0; k < d[2]; ++k) d[3 + k] = p.size(k);
  }
  if (n == 0) return;
  const std::vector<int64_t> all =
      all_gather(group, tensor<int64_t>(mine, Shape{n, kDescription})).to_vector<int64_t>();
  for (int r = 1; r < world; ++r)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t* a = &all[i * kDescription];
      const int64_t* b = &all[(static_cast<int64_t>(r) * n + i) * kDescription];
      if (std::equal(a, a + kDescription, b)) continue;
      const std::string what = "parameter " + std::to_string(i) + " is " + describe(a) + " on rank 0 but " +
                               describe(b) + " on rank " + std::to_string(r);
      if (a[0] != b[0]) throw DTypeError(kWhere + what);
      if (a[1] != b[1]) throw DeviceError(kWhere + what);
      throw ShapeError(kWhere + what);
    }
}

void check_options(const ShardingOptions& o) {
  if (o.stage != 1 && o.stage != 2)
    throw ValueError(std::string(kWhere) + "stage must be 1 or 2, got " + std::to_string(o.stage));
  if (o.op != "mean" && o.op != "sum") throw ValueError(std::string(kWhere) + "op must be mean or sum, got " + o.op);
  if (o.bucket_bytes <= 0)
    throw ValueError(std::string(kWhere) + "bucket_bytes must be > 0, got " + std::to_string(o.bucket_bytes));
}

void check_parameters(const std::vector<Tensor>& params) {
  if (params.empty()) throw ValueError(std::string(kWhere) + "no parameters");
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    if (!p.defined()) throw StateError(std::string(kWhere) + "parameter " + std::to_string(i) + " is undefined");
    if (p.dtype() != params[0].dtype() || p.device() != params[0].device())
      throw ValueError(std::string(kWhere) + "parameter " + std::to_string(i) + " is " +
                       std::string(to_string(p.dtype())) + " on " + to_string(p.device()) + ", parameter 0 " +
                       std::string(to_string(params[0].dtype())) + " on " + to_string(params[0].device()) +
                       ": the parameters must share one dtype and one device");
    if (!p.is_contiguous())
      throw ValueError(std::string(kWhere) + "parameter " + std::to_string(i) + " is not contiguous");
  }
}

bool is_16_bit(DType d) { return d == DType::float16 || d == DType::bfloat16; }

}  // namespace

FlatRange flat_range(int64_t total, int world, int rank) {
  FlatRange r;
  r.per_rank = (total + world - 1) / world;
  r.begin = std::min(total, r.per_rank * rank);
  r.end = std::min(total, r.begin + r.per_rank);
  return r;
}

std::vector<ShardPiece> pieces_in(const std::vector<int64_t>& numels, int64_t begin, int64_t end) {
  std::vector<ShardPiece> pieces;
  int64_t offset = 0;
  for (size_t i = 0; i < numels.size(); offset += numels[i], ++i) {
    const int64_t lo = std::max(begin, offset), hi = std::min(end, offset + numels[i]);
    if (lo < hi) pieces.push_back({i, lo - offset, hi - lo, lo - begin});
  }
  return pieces;
}

ShardedOptimizer::ShardedOptimizer(ProcessGroup group, std::vector<Tensor> params, const OptimizerFactory& make,
                                   const ShardingOptions& options)
    : impl_(std::make_unique<Impl>(group)) {
  agree_parameters(group, params);
  check_options(options);
  check_parameters(params);
  Impl& m = *impl_;
  m.params = std::move(params);
  m.options = options;
  m.dtype = m.params[0].dtype();
  m.device = m.params[0].device();
  m.shard_dtype = options.master_weights && is_16_bit(m.dtype) ? DType::float32 : m.dtype;
  for (const Tensor& p : m.params) m.numels.push_back(p.numel()), m.total += p.numel();
  m.range = flat_range(m.total, m.group.world_size(), m.group.rank());
  m.pieces = pieces_in(m.numels, m.range.begin, m.range.end);
  autodiff::no_grad guard;
  for (const ShardPiece& p : m.pieces)
    m.shard.push_back(
        F::reshape(m.params[p.param].detach(), {-1}).narrow(0, p.param_offset, p.length).to(m.shard_dtype).clone());
  if (!m.shard.empty()) m.opt = make(m.shard);
}

ShardedOptimizer::~ShardedOptimizer() = default;

// Elements per rank and chunk of the reduction and the all-gather: their
// temporary buffers (W chunks) hold about options.bucket_bytes, never the
// whole flat vector.
int64_t ShardedOptimizer::Impl::chunk_elements() const {
  return std::max<int64_t>(1, options.bucket_bytes / element_size(dtype) / group.world_size());
}

void ShardedOptimizer::Impl::fill_from_grads(const Tensor& buf, int64_t begin) const {
  backend::fill(buf, 0.0);
  for (const ShardPiece& p : pieces_in(numels, begin, begin + buf.numel())) {
    const Tensor g = params[p.param].grad();
    if (g.defined())
      backend::copy(F::reshape(g, {-1}).narrow(0, p.param_offset, p.length), buf.narrow(0, p.shard_offset, p.length));
  }
}

void ShardedOptimizer::Impl::write_to_params(const Tensor& src, int64_t begin) const {
  for (const ShardPiece& p : pieces_in(numels, begin, begin + src.numel()))
    backend::copy(src.narrow(0, p.shard_offset, p.length),
                  F::reshape(params[p.param].detach(), {-1}).narrow(0, p.param_offset, p.length));
}

// Rank r owns [r * per_rank, (r + 1) * per_rank) of the flat vector padded to
// W * per_rank. Both stages reduce-scatter it, W blocks per chunk: each
// rank receives only its range, half the traffic of an all-reduce, and
// nothing else of the sum is ever used.
Tensor ShardedOptimizer::Impl::reduce_range() const {
  const int world = group.world_size();
  const int64_t chunk = chunk_elements();
  const Tensor mine = empty({range.per_rank}, dtype, device);
  const Tensor blocks = empty({world * std::min(chunk, range.per_rank)}, dtype, device);
  for (int64_t k = 0; k < range.per_rank; k += chunk) {
    const int64_t len = std::min(chunk, range.per_rank - k);
    for (int r = 0; r < world; ++r) fill_from_grads(blocks.narrow(0, r * len, len), r * range.per_rank + k);
    const Tensor sent = F::reshape(blocks.narrow(0, 0, world * len), {world, len});
    backend::copy(detail::reduce_scatter_copy(group, sent), mine.narrow(0, k, len));
  }
  return mine;
}

// With attach, backward has reduced the gradients into the shard already:
// only which parameters have one, and the flag, are agreed here.
void ShardedOptimizer::Impl::reduce(const Tensor& extra_flag) {
  autodiff::no_grad guard;
  const bool during = reducer != nullptr;
  const size_t n = params.size();
  // Which parameters have a gradient on some rank; whether some rank has a found-inf flag.
  std::vector<int32_t> mask(n + 1, 0);
  std::vector<Tensor> flags;
  if (extra_flag.defined()) flags.push_back(extra_flag);
  const auto add_flag = [&flags](const Tensor& g) {
    const GradScaling s = grad_scaling(g);
    if (s.state == ScaleState::unscaled && s.found_inf.defined()) flags.push_back(s.found_inf);
  };
  for (size_t i = 0; i < n; ++i) {
    mask[i] = during ? had_grad[i] : params[i].grad().defined();
    if (!during) add_flag(params[i].grad());
  }
  if (during)
    for (const Tensor& s : shard) add_flag(s.grad());
  mask[n] = !flags.empty();
  const Tensor agreed_mask = tensor<int32_t>(mask, Shape{static_cast<int64_t>(n + 1)});
  all_reduce(group, agreed_mask, ReduceOp::max);
  mask = agreed_mask.to_vector<int32_t>();
  Tensor mine;
  if (!during) {
    mine = reduce_range();
    if (options.stage == 2)
      for (const Tensor& p : params) p.set_grad(Tensor());  // stage 2 keeps only the shard's gradient
    if (options.op == "mean") mine = F::div(mine, static_cast<double>(group.world_size()));
  }
  Tensor agreed;
  if (mask[n]) {
    agreed = zeros({1}, DType::float32, device);
    for (const Tensor& f : flags) agreed = F::maximum(agreed, F::reshape(f, {1}).to(DType::float32));
    agreed = agreed.contiguous();
    all_reduce(group, agreed, ReduceOp::max);
  }
  for (size_t j = 0; j < pieces.size(); ++j) {
    const ShardPiece& p = pieces[j];
    if (!mask[p.param]) {
      shard[j].set_grad(Tensor());
      continue;
    }
    // A view of `mine`, which nothing else holds, unless the shard is in another dtype.
    const Tensor g = during ? shard[j].grad() : mine.narrow(0, p.shard_offset, p.length).to(shard_dtype);
    if (agreed.defined()) set_grad_scaling(g, {.found_inf = agreed, .state = ScaleState::unscaled});
    shard[j].set_grad(g);
  }
  reduced = true;
}

// Chunk by chunk: this rank's part of the chunk, all-gathered, written into
// every rank's range of the parameters.
void ShardedOptimizer::Impl::gather() {
  autodiff::no_grad guard;
  const int world = group.world_size();
  const int64_t chunk = chunk_elements();
  const Tensor send = empty({std::min(chunk, range.per_rank)}, dtype, device);
  for (int64_t k = 0; k < range.per_rank; k += chunk) {
    const int64_t len = std::min(chunk, range.per_rank - k);
    const Tensor part = send.narrow(0, 0, len);
    backend::fill(part, 0.0);
    for (size_t j = 0; j < pieces.size(); ++j) {
      const ShardPiece& p = pieces[j];
      const int64_t lo = std::max(k, p.shard_offset), hi = std::min(k + len, p.shard_offset + p.length);
      if (lo < hi) backend::copy(shard[j].narrow(0, lo - p.shard_offset, hi - lo), part.narrow(0, lo - k, hi - lo));
    }
    const Tensor all = F::reshape(all_gather(group, part), {-1});
    for (int r = 0; r < world; ++r) write_to_params(all.narrow(0, r * len, len), r * range.per_rank + k);
  }
  for (const Tensor& p : params) p.bump_version();
}

ShardedOptimizer& ShardedOptimizer::reduce_gradients() {
  check_step({});
  impl_->reduce(Tensor());
  return *this;
}

void ShardedOptimizer::check_step(const AmpStep&) const {
  const Impl& m = *impl_;
  const std::string rank = std::string("rank ").append(std::to_string(m.group.rank())).append(": ");
  if (m.unsynced)
    throw StateError(std::string(kWhere) + "step: " + rank +
                     "the last backward ran under no_sync(), so its gradients were never reduced; run the last "
                     "micro-batch's backward outside no_sync()");
  const bool during = m.reducer != nullptr;
  const std::vector<Tensor>& ts = during ? m.shard : m.params;
  for (size_t i = 0; i < ts.size(); ++i) {
    const GradScaling s = grad_scaling(ts[i].grad());
    if (s.state == ScaleState::scaled || s.state == ScaleState::mixed)
      throw StateError(std::string(kWhere) + "step: " + rank + "the gradient of " +
                       (during ? "shard piece " : "parameter ") + std::to_string(i) + " is " + to_string(s.state) +
                       ": unscale it first (scaler.unscale, or scaler.backward's default)");
  }
}

ShardedOptimizer& ShardedOptimizer::step(const AmpStep& amp) {
  Impl& m = *impl_;
  if (!m.reduced) {
    check_step(amp);
    m.reduce(amp.found_inf);
  }
  if (m.opt) m.opt->step();
  m.gather();
  for (const Tensor& s : m.shard) s.set_grad(Tensor());
  std::fill(m.had_grad.begin(), m.had_grad.end(), 0);
  m.reduced = false;
  return *this;
}

Tensor ShardedOptimizer::clip_grad_norm(double max_norm, double norm_type) {
  if (!std::isfinite(max_norm) || max_norm < 0.0)
    throw ValueError(std::string(kWhere) + "clip_grad_norm: max_norm must be finite and >= 0");
  if (!(norm_type > 0.0)) throw ValueError(std::string(kWhere) + "clip_grad_norm: norm_type must be > 0");
  Impl& m = *impl_;
  if (!m.reduced) reduce_gradients();
  autodiff::no_grad guard;
  std::vector<Tensor> grads;
  for (const Tensor& s : m.shard)
    if (s.grad().defined()) grads.push_back(s.grad());
  const bool inf = std::isinf(norm_type);
  Tensor local =
      grads.empty() ? zeros({1}, DType::float64, m.device) : F::reshape(backend::grad_norm(grads, norm_type), {1});
  if (!inf) local = F::pow(local, norm_type);
  local = local.contiguous();
  all_reduce(m.group, local, inf ? ReduceOp::max : ReduceOp::sum);
  const Tensor norm = F::reshape(inf ? local : F::pow(local, 1.0 / norm_type), Shape{}).contiguous();
  backend::clip_by_norm(grads, norm, max_norm);
  return norm;
}

ShardedOptimizer& ShardedOptimizer::clear_grad() {
  for (const Tensor& p : impl_->params) p.set_grad(Tensor());
  for (const Tensor& s : impl_->shard) s.set_grad(Tensor());
  impl_->reduced = false;
  impl_->unsynced = false;
  impl_->acc = Tensor();
  std::fill(impl_->had_grad.begin(), impl_->had_grad.end(), 0);
  std::fill(impl_->pending.begin(), impl_->pending.end(), Tensor());
  return *this;
}

const std::vector<Tensor>& ShardedOptimizer::parameters() const {
  return impl_->reducer ? impl_->amp_params : impl_->params;
}

optim::Optimizer& ShardedOptimizer::shard_optimizer() {
  if (!impl_->opt) throw StateError(std::string(kWhere) + "this rank's range is empty: it holds no optimizer");
  return *impl_->opt;
}

const std::vector<Tensor>& ShardedOptimizer::shard() const { return impl_->shard; }

std::pair<int64_t, int64_t> ShardedOptimizer::range() const { return {impl_->range.begin, impl_->range.end}; }

int64_t ShardedOptimizer::state_bytes() const {
  const Impl& m = *impl_;
  int64_t bytes = 0;
  if (m.opt)
    for (const auto& [key, t] : m.opt->state_dict())
      if (key.rfind("state.", 0) == 0) bytes += t.numel() * element_size(t.dtype());
  if (m.shard_dtype != m.dtype)
    for (const Tensor& s : m.shard) bytes += s.numel() * element_size(s.dtype());
  return bytes;
}

}  // namespace mixgrad::distributed
