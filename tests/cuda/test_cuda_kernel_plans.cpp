// Host tests of the pure plans behind the CUDA elementwise, reduction and
// matmul families (src/backend/cuda/{plan,reduce_plan,gemm_plan}.hpp). Each
// plan is executed here with a plain reference loop over the tensors' host
// memory, exactly as the kernels (or cuBLASLt, column-major) would read it,
// and the result is compared with the CPU backend's. Nothing needs a GPU.
#include <boost/test/unit_test.hpp>

#include <array>
#include <cmath>
#include <vector>

#include "backend/copy.hpp"
#include "backend/cpu/map_loop.hpp"
#include "backend/cuda/gemm_plan.hpp"
#include "backend/cuda/plan.hpp"
#include "backend/cuda/reduce_plan.hpp"
#include "backend/host_sync.hpp"
#include "backend/matmul.hpp"
#include "backend/reduction.hpp"
#include "core/view.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace plan = mixgrad::backend::cuda_plan;

namespace {

// ---- elementwise: broadcast strides ------------------------------------------

void check_broadcast(const mg::Tensor& t, const mg::Shape& iter) {
  BOOST_TEST_CONTEXT(t.shape() << " read as " << iter) {
    const mg::Shape got = plan::broadcast_byte_strides(t.shape(), t.strides(), mg::element_size(t.dtype()), iter);
    const mg::Shape want = mg::backend::cpu::detail::broadcast_byte_strides(t, iter);
    BOOST_TEST(got == want);
  }
}

// ---- reductions -------------------------------------------------------------

// Executes the plan as the kernels do: each output's split ranges folded
// separately (the first pass), then the partials combined (the second).
std::vector<double> run_plan(const plan::ReducePlan& p, const mg::Tensor& x, bool max) {
  const double* base = x.numel() > 0 ? x.data<double>() : nullptr;
  std::vector<double> out;
  for (int64_t o = 0; o < p.outputs; ++o) {
    double total = max ? -INFINITY : 0.0;
    for (int64_t s = 0; s < p.splits; ++s) {
      int64_t b = 0, e = 0;
      plan::split_range(p.count, p.splits, s, b, e);
      double part = max ? -INFINITY : 0.0;
      for (int64_t r = b; r < e; ++r) {
        const double v = base[p.kept.offset(o) + p.reduced.offset(r)];
        part = max ? std::max(part, v) : part + v;
      }
      total = max ? std::max(total, part) : total + part;
    }
    out.push_back(total);
  }
  return out;
}

std::vector<double> run_reduce_plan(const mg::Tensor& x, uint32_t axes, bool max, int64_t target_blocks) {
  return run_plan(plan::make_reduce_plan(x.shape(), x.strides(), axes, target_blocks), x, max);
}

void check_reduce(const mg::Tensor& x, uint32_t axes, int64_t target_blocks = 1024) {
  BOOST_TEST_CONTEXT("x " << x.shape() << " strides " << x.strides() << " axes " << axes) {
    int64_t outs = 1;
    for (int d = 0; d < x.ndim(); ++d)
      if (!((axes >> d) & 1u)) outs *= x.shape()[d];
    const plan::ReducePlan p = plan::make_reduce_plan(x.shape(), x.strides(), axes, target_blocks);
    BOOST_TEST(p.outputs == outs);
    BOOST_TEST(p.kept.count() == outs);
    BOOST_TEST(p.reduced.count() == p.count);
    BOOST_TEST(p.splits >= 1);
    for (bool max : {false, true}) {
      if (max && p.count == 0) continue;
      const mg::Tensor want = mg::empty({outs}, mg::DType::float64);
      mg::backend::reduce(max ? mg::backend::ReduceOp::max : mg::backend::ReduceOp::sum, x, axes, want, {});
      const std::vector<double> got = run_reduce_plan(x, axes, max, target_blocks);
      const std::vector<double> ref = want.to_vector<double>();
      BOOST_TEST_REQUIRE(got.size() == ref.size());
      for (size_t i = 0; i < got.size(); ++i)
        BOOST_TEST(std::abs(got[i] - ref[i]) <= 1e-9 * (1 + std::abs(ref[i])), "output " << i << (max ? " max" : " sum"));
    }
  }
}

// ---- matmul -----------------------------------------------------------------

// Executes the plan as cuBLASLt would, column-major, on the host memory of
// float64 operands, adding the bias per row of C (per column of out).
void run_gemm_plan(const plan::GemmPlan& p, const mg::Tensor& a, const mg::Tensor& b, const mg::Tensor& bias,
                   const mg::Tensor& out) {
  const double* pa = a.data<double>();
  const double* pb = b.data<double>();
  double* po = mg::backend::writable<double>(out);
  for (const auto& call : p.calls) {
    for (int64_t t = 0; t < p.batch; ++t) {
      const double* A = pb + call.b + t * p.stride_first;
      const double* B = pa + call.a + t * p.stride_second;
      double* C = po + call.out + t * p.stride_out;
      for (int64_t j = 0; j < p.cols; ++j)
        for (int64_t i = 0; i < p.rows; ++i) {
          double acc = 0;
          for (int64_t q = 0; q < p.depth; ++q) {
            const double av = p.first.transposed ? A[q + i * p.first.ld] : A[i + q * p.first.ld];
            const double bv = p.second.transposed ? B[j + q * p.second.ld] : B[q + j * p.second.ld];
            acc += av * bv;
          }
          if (bias.defined()) acc += bias.data<double>()[i];
          C[i + j * p.ldc] = acc;
        }
    }
  }
}

mg::Shape out_shape_of(const mg::Tensor& a, const mg::Tensor& b) {
  const int r = a.ndim();
  mg::Shape s;
  for (int d = 0; d < r - 2; ++d) s.push_back(std::max(a.shape()[d], b.shape()[d]));
  s.push_back(a.shape()[r - 2]);
  s.push_back(b.shape()[r - 1]);
  return s;
}

// The backend-level product (same rank, broadcast batch dims) through the
// plan against the CPU backend. Operands the plan cannot read are copied
// to contiguous memory and planned again, as cuda/matmul.cpp does.
void check_gemm(mg::Tensor a, mg::Tensor b, const mg::Tensor& bias = mg::Tensor(), bool expect_copy = false) {
  BOOST_TEST_CONTEXT("a " << a.shape() << " strides " << a.strides() << ", b " << b.shape() << " strides "
                          << b.strides() << (bias.defined() ? ", bias" : "")) {
    const mg::Shape os = out_shape_of(a, b);
    const mg::Tensor want = mg::empty(os, mg::DType::float64);
    mg::backend::matmul(a, b, bias, want);
    plan::GemmPlan p = plan::make_gemm_plan(a.shape(), a.strides(), b.shape(), b.strides(), os);
    BOOST_TEST((p.first.needs_copy || p.second.needs_copy) == expect_copy);
    if (p.second.needs_copy) a = a.contiguous();
    if (p.first.needs_copy) b = b.contiguous();
    p = plan::make_gemm_plan(a.shape(), a.strides(), b.shape(), b.strides(), os);
    BOOST_TEST_REQUIRE(!p.first.needs_copy);
    BOOST_TEST_REQUIRE(!p.second.needs_copy);
    // cuBLAS's rules for the leading dims.
    BOOST_TEST(p.first.ld >= std::max<int64_t>(1, p.first.transposed ? p.depth : p.rows));
    BOOST_TEST(p.second.ld >= std::max<int64_t>(1, p.second.transposed ? p.cols : p.depth));
    BOOST_TEST(p.ldc >= std::max<int64_t>(1, p.rows));
    int64_t matrices = 1;
    for (int d = 0; d < os.ndim() - 2; ++d) matrices *= os[d];
    BOOST_TEST(static_cast<int64_t>(p.calls.size()) * p.batch == matrices);
    const mg::Tensor got = mg::full(os, -12345.0, mg::DType::float64);  // every element must be written
    run_gemm_plan(p, a, b, bias, got);
    const auto g = got.to_vector<double>(), w = want.to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i)
      BOOST_TEST(std::abs(g[i] - w[i]) <= 1e-12 * (1 + std::abs(w[i])), "element " << i);
  }
}

mg::Tensor u(mg::Shape s) { return mg::uniform(s, -1.0, 1.0, mg::DType::float64); }
mg::Tensor t01(const mg::Tensor& x) { return mg::F::transpose(x, x.ndim() - 2, x.ndim() - 1); }

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_kernel_plans)

BOOST_AUTO_TEST_CASE(broadcast_strides_match_the_cpu_engine) {
  check_broadcast(mg::zeros({4}), {3, 4});
  check_broadcast(mg::zeros({3, 1}), {3, 4});
  check_broadcast(mg::zeros({1, 4}, mg::DType::float16), {2, 3, 4});
  check_broadcast(t01(mg::zeros({4, 3})), {2, 3, 4});
  check_broadcast(mg::scalar(1.0), {2, 2});
  check_broadcast(mg::zeros({2, 3, 4}, mg::DType::int64), {2, 3, 4});
}

BOOST_AUTO_TEST_CASE(reduce_plan_folds_like_the_cpu) {
  const mg::Tensor x = u({2, 3, 4});
  for (uint32_t axes = 0; axes < 8; ++axes) check_reduce(x, axes);
  const mg::Tensor nchw = u({3, 4, 5, 6});
  check_reduce(nchw, 0b1101);                            // per channel (batch norm, bias)
  check_reduce(nchw, 0b1000);                            // the last axis
  check_reduce(nchw, 0b0001);                            // the leading axis
  check_reduce(mg::F::permute(nchw, {2, 0, 3, 1}), 0b0101);  // permuted view
  check_reduce(nchw.narrow(3, 1, 4), 0b1010);            // a gap between runs
  check_reduce(mg::F::broadcast_to(u({4, 1}), {4, 6}), 0b10);  // stride-0 operand
  check_reduce(mg::scalar(2.5, mg::DType::float64), 0);  // 0-d
  check_reduce(u({3, 0}), 0b10);                         // empty reduction: the identity
  check_reduce(u({5, 1, 7}), 0b010);                     // extent-1 dims only
}

BOOST_AUTO_TEST_CASE(reduce_plan_splits_large_reductions_and_covers_each_element_once) {
  const mg::Tensor big = u({100'000});
  const plan::ReducePlan all = plan::make_reduce_plan(big.shape(), big.strides(), 1u);
  BOOST_TEST(all.outputs == 1);
  BOOST_TEST(all.splits > 1);
  BOOST_TEST(all.splits <= plan::kMaxSplits);
  check_reduce(big, 1u);
  check_reduce(u({3, 20'000}), 0b10, 7);  // several outputs, each split
  check_reduce(u({20'000, 3}), 0b01, 7);  // strided elements, split
  // Many outputs: one block each, no split.
  BOOST_TEST(plan::make_reduce_plan({4096, 64}, {64, 1}, 0b10).splits == 1);
  BOOST_TEST(!plan::make_reduce_plan({4096, 64}, {64, 1}, 0b10).per_thread);  // rows: a block each
  // Many contiguous columns: a thread each (coalesced), executed like any plan.
  BOOST_TEST(plan::make_reduce_plan({64, 4096}, {4096, 1}, 0b01).per_thread);
  BOOST_TEST(!plan::make_reduce_plan({64, 100}, {100, 1}, 0b01).per_thread);  // too few columns
  BOOST_TEST(plan::make_channel_plan(8, 2048, 1).per_thread);                  // a linear layer's bias gradient
  check_reduce(u({6, 1500}), 0b01);
  check_reduce(u({3, 4, 1100}), 0b011);
  // Many rows: each column's rows split over several threads, combined after.
  const plan::ReducePlan tall = plan::make_reduce_plan({4096, 2048}, {2048, 1}, 0b01);
  BOOST_TEST(tall.per_thread);
  BOOST_TEST(tall.splits == 32);  // 65536 threads
  check_reduce(u({700, 1030}), 0b01);
  BOOST_TEST(plan::make_reduce_plan({700, 1030}, {1030, 1}, 0b01).splits > 1);
  // Split ranges tile [0, count) in order.
  for (int64_t count : {0, 1, 7, 4096, 100'001})
    for (int64_t splits : {1, 3, 64}) {
      int64_t next = 0;
      for (int64_t s = 0; s < splits; ++s) {
        int64_t b = 0, e = 0;
        plan::split_range(count, splits, s, b, e);
        BOOST_TEST(b == next);
        BOOST_TEST(e >= b);
        next = e;
      }
      BOOST_TEST(next == count);
    }
}

BOOST_AUTO_TEST_CASE(channel_plan_sums_like_the_cpu_bias_gradient) {
  for (auto [outer, channels, inner] : {std::array<int64_t, 3>{8, 5, 1}, {4, 3, 6}, {1, 7, 9}, {300, 2, 40}, {2, 1, 3}}) {
    BOOST_TEST_CONTEXT("[" << outer << ", " << channels << ", " << inner << "]") {
      const mg::Tensor x = u({outer, channels, inner});
      const mg::Tensor want = mg::empty({channels}, mg::DType::float64);
      mg::backend::sum_channels(x, outer, channels, inner, want);
      for (int64_t target : {int64_t{1024}, int64_t{4}}) {
        const std::vector<double> got = run_plan(plan::make_channel_plan(outer, channels, inner, target), x, false);
        const auto ref = want.to_vector<double>();
        BOOST_TEST_REQUIRE(got.size() == ref.size());
        for (size_t i = 0; i < got.size(); ++i) BOOST_TEST(std::abs(got[i] - ref[i]) <= 1e-9 * (1 + std::abs(ref[i])));
      }
    }
  }
  BOOST_TEST(plan::make_channel_plan(300, 2, 40).splits > 1);  // few channels, many elements: split
}

// The backend calls F::matmul and F::linear make for the op registry's shape
// families (tests/ops/cases_linalg.cpp), at the backend's level: same rank,
// 1-d operands as [1, k] / [k, 1], batch dims padded with extent 1.
BOOST_AUTO_TEST_CASE(gemm_plan_matches_the_cpu_for_every_registry_shape_family) {
  check_gemm(u({3, 4}), u({4, 5}));                                   // matmul_2d
  check_gemm(u({1, 5}), u({5, 1}));                                   // matmul_vec_vec
  check_gemm(t01(u({4, 3})), t01(u({5, 4})));                         // matmul_transposed_views
  check_gemm(u({3, 64}), u({64, 2}));                                 // matmul_long_k
  check_gemm(u({2, 3, 4}), u({2, 4, 2}));                             // matmul_batched
  check_gemm(u({2, 1, 3, 4}), u({1, 3, 4, 2}));                       // matmul_batch_broadcast
  check_gemm(u({6, 4}), u({4, 5}));                                   // batched_times_2d, rows folded
  check_gemm(u({2, 3, 4}), u({1, 4, 5}));                             // batched_times_2d, unfolded
  check_gemm(u({1, 3, 4}), u({2, 4, 5}));                             // matmul_2d_times_batched
  check_gemm(u({1, 1, 4}), u({2, 4, 3}));                             // matmul_vec_mat
  check_gemm(u({2, 3, 4}), u({1, 4, 1}));                             // matmul_mat_vec
  check_gemm(mg::F::broadcast_to(u({1, 3, 4}), {2, 3, 4}), u({2, 4, 2}));  // broadcast_view_operand
  check_gemm(mg::F::permute(u({3, 2, 4}), {1, 0, 2}), u({2, 4, 3}));  // matmul_permuted_batch
  const mg::Tensor w = u({2, 4}), bias = u({2});
  check_gemm(u({3, 4}), t01(w), bias);                                // linear
  check_gemm(u({3, 4}), t01(w));                                      // linear_no_bias
  check_gemm(u({6, 4}), t01(w), bias);                                // linear_batched_input, rows folded
  check_gemm(u({1, 4}), t01(w), bias);                                // linear_vector_input
  check_gemm(t01(u({4, 3})), t01(w), bias);                           // linear_transposed_input
  check_gemm(u({3, 2}), w);                                           // linear backward: dx = g w
  check_gemm(t01(u({3, 2})), u({3, 4}));                              // linear backward: dw = g^T x
  check_gemm(t01(u({2, 3, 4})), u({2, 3, 5}));                        // batched backward: a^T g
}

BOOST_AUTO_TEST_CASE(gemm_plan_handles_batches_one_stride_cannot_express) {
  // b broadcast over the outer batch dim only: two calls of three matrices.
  const plan::GemmPlan p = plan::make_gemm_plan({2, 3, 4, 5}, {60, 20, 5, 1}, {1, 3, 5, 6}, {90, 30, 6, 1},
                                                {2, 3, 4, 6});
  BOOST_TEST(p.calls.size() == 2u);
  BOOST_TEST(p.batch == 3);
  check_gemm(u({2, 3, 4, 5}), u({1, 3, 5, 6}));
  // Every batch dim mergeable: one call.
  const plan::GemmPlan q = plan::make_gemm_plan({2, 3, 4, 5}, {60, 20, 5, 1}, {2, 3, 5, 6}, {90, 30, 6, 1},
                                                {2, 3, 4, 6});
  BOOST_TEST(q.calls.size() == 1u);
  BOOST_TEST(q.batch == 6);
  // Broadcast everywhere on b: stride 0, one call.
  const plan::GemmPlan r = plan::make_gemm_plan({2, 3, 4, 5}, {60, 20, 5, 1}, {1, 1, 5, 6}, {30, 30, 6, 1},
                                                {2, 3, 4, 6});
  BOOST_TEST(r.calls.size() == 1u);
  BOOST_TEST(r.stride_first == 0);
  check_gemm(u({2, 3, 4, 5}), u({1, 1, 5, 6}));
  check_gemm(u({2, 1, 4, 5}), u({1, 3, 5, 6}));
}

BOOST_AUTO_TEST_CASE(gemm_plan_copies_operands_without_a_unit_stride) {
  // [2, 3, 4] with matrix strides (8, 2): neither is 1.
  const mg::Tensor odd = mg::F::permute(u({3, 4, 2}), {2, 0, 1});
  BOOST_TEST(odd.strides()[1] != 1);
  BOOST_TEST(odd.strides()[2] != 1);
  check_gemm(odd, u({2, 4, 5}), mg::Tensor(), /*expect_copy=*/true);
  check_gemm(u({2, 5, 3}), odd, mg::Tensor(), /*expect_copy=*/true);
}

BOOST_AUTO_TEST_CASE(gemm_plan_of_degenerate_extents_keeps_leading_dims_valid) {
  check_gemm(u({1, 1}), u({1, 1}));
  check_gemm(u({4, 1}), u({1, 3}));   // k = 1
  check_gemm(t01(u({1, 4})), u({1, 3}));
  check_gemm(u({1, 4}), t01(u({1, 4})));
  const plan::GemmPlan e = plan::make_gemm_plan({0, 3}, {3, 1}, {3, 2}, {2, 1}, {0, 2});
  BOOST_TEST(e.calls.empty());  // nothing to compute
}

// Host work never counts as a host synchronisation; the backend's count is
// process-wide and moves only forward.
BOOST_AUTO_TEST_CASE(host_work_leaves_the_host_sync_count_alone) {
  const int64_t before = mg::backend::host_sync_count();
  const mg::Tensor x = u({64, 32});
  const mg::Tensor y = mg::F::sum(mg::F::matmul(x, mg::F::transpose(x, 0, 1)));
  BOOST_TEST(std::isfinite(y.to_vector<double>()[0]));
  BOOST_TEST(mg::backend::host_sync_count() == before);
  mg::backend::note_host_sync("test");
  BOOST_TEST(mg::backend::host_sync_count() == before + 1);
}

BOOST_AUTO_TEST_SUITE_END()
