// The op table (src/core/op_table.def): names, the autocast policy per
// device type, the low-precision dtype that follows the inputs' device,
// concat and stack reading their entries, and docs/amp.md's policy table
// kept equal to the table.
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "hooks/op_hooks.hpp"
#include "core/op_table.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace amp = mixgrad::amp;
using amp::CastPolicy;
using mg::DeviceType;
using mg::DType;
using mg::OpKind;

namespace {

// Puts the global low-precision setting back as it was, set or not.
struct LowDTypeGuard {
  bool was_set = amp::low_prec_dtype.is_set();
  DType value = amp::low_prec_dtype.load();
  ~LowDTypeGuard() {
    if (was_set)
      amp::low_prec_dtype = value;
    else
      amp::low_prec_dtype.reset();
    amp::enabled = false;
  }
};

mg::Tensor input(mg::Shape s, DType dtype = DType::float32) { return mg::uniform(s, -1, 1, dtype); }

}  // namespace

BOOST_AUTO_TEST_SUITE(op_table)

BOOST_AUTO_TEST_CASE(names_round_trip) {
  BOOST_TEST(mg::op_name(OpKind::conv2d) == "conv2d");
  BOOST_TEST(mg::op_name(OpKind::binary_cross_entropy_with_logits) == "binary_cross_entropy_with_logits");
  for (size_t i = 0; i < mg::kOpCount; ++i) {
    const auto op = static_cast<OpKind>(i);
    BOOST_TEST((mg::op_from_name(mg::op_name(op)) == op), mg::op_name(op));
  }
  BOOST_TEST(!mg::op_from_name("conv4d").has_value());
}

BOOST_AUTO_TEST_CASE(policy_differs_per_device_type_as_in_pytorch) {
  // The same on both: PyTorch's lists name these ops.
  BOOST_TEST((amp::cast_policy(OpKind::matmul, DeviceType::cpu) == CastPolicy::low));
  BOOST_TEST((amp::cast_policy(OpKind::matmul, DeviceType::cuda) == CastPolicy::low));
  BOOST_TEST((amp::cast_policy(OpKind::softmax, DeviceType::cuda) == CastPolicy::high));
  BOOST_TEST((amp::cast_policy(OpKind::concat, DeviceType::cuda) == CastPolicy::promote));
  // float32 on the CPU by mixgrad's choice; PyTorch's CUDA lists leave them.
  for (OpKind op : {OpKind::sqrt, OpKind::mean, OpKind::var}) {
    BOOST_TEST((amp::cast_policy(op, DeviceType::cpu) == CastPolicy::high), mg::op_name(op));
    BOOST_TEST((amp::cast_policy(op, DeviceType::cuda) == CastPolicy::keep), mg::op_name(op));
  }
  BOOST_TEST((amp::cast_policy(OpKind::div, DeviceType::cpu) == CastPolicy::high));
  BOOST_TEST((amp::cast_policy(OpKind::div, DeviceType::cuda) == CastPolicy::promote));
}

// ---- the low-precision dtype follows the device until chosen -------------

// Upstream: PyTorch test_autocast.py TestTorchAutocast.test_autocast_fast_dtype.
BOOST_AUTO_TEST_CASE(unset_low_dtype_is_bfloat16_on_cpu_and_float16_on_cuda) {
  LowDTypeGuard guard;
  amp::low_prec_dtype.reset();
  BOOST_TEST(!amp::low_prec_dtype.is_set());
  BOOST_TEST(amp::low_prec_dtype.load() == DType::bfloat16);
  amp::autocast scope;
  BOOST_TEST(amp::current_state().low_prec_dtype_by_device);
  BOOST_TEST(amp::autocast_dtype() == DType::bfloat16);
  BOOST_TEST(amp::autocast_dtype(DeviceType::cpu) == DType::bfloat16);
  BOOST_TEST(amp::autocast_dtype(DeviceType::cuda) == DType::float16);
  BOOST_TEST(mg::F::matmul(input({2, 3}), input({3, 4})).dtype() == DType::bfloat16);
}

BOOST_AUTO_TEST_CASE(assigned_low_dtype_applies_on_every_device) {
  LowDTypeGuard guard;
  amp::low_prec_dtype = DType::float16;
  BOOST_TEST(amp::low_prec_dtype.is_set());
  {
    amp::autocast scope;
    BOOST_TEST(!amp::current_state().low_prec_dtype_by_device);
    BOOST_TEST(amp::autocast_dtype(DeviceType::cpu) == DType::float16);
    BOOST_TEST(amp::autocast_dtype(DeviceType::cuda) == DType::float16);
    BOOST_TEST(mg::F::matmul(input({2, 3}), input({3, 4})).dtype() == DType::float16);
  }
  // Assigning bfloat16, the CPU's default, is a choice too: CUDA gets it.
  amp::low_prec_dtype = DType::bfloat16;
  amp::autocast scope;
  BOOST_TEST(amp::autocast_dtype(DeviceType::cuda) == DType::bfloat16);
  // A scope keeps the dtypes it was opened with.
  amp::low_prec_dtype.reset();
  BOOST_TEST(amp::autocast_dtype(DeviceType::cuda) == DType::bfloat16);
}

BOOST_AUTO_TEST_CASE(scope_dtype_wins_over_device_default) {
  LowDTypeGuard guard;
  amp::low_prec_dtype.reset();
  {
    amp::autocast scope(true, DType::bfloat16);
    BOOST_TEST(amp::autocast_dtype(DeviceType::cuda) == DType::bfloat16);
    BOOST_TEST(!scope.config().low_prec_dtype_by_device);
  }
  amp::enabled = true;  // no scope: the global defaults, following the device
  BOOST_TEST(amp::current_state().low_prec_dtype_by_device);
  BOOST_TEST(amp::autocast_dtype(DeviceType::cuda) == DType::float16);
  BOOST_TEST(mg::F::conv2d(input({1, 2, 4, 4}), input({3, 2, 3, 3})).dtype() == DType::bfloat16);
}

// ---- concat and stack read their entries -----------------------------------

// Upstream: PyTorch test_autocast.py TestAutocastCPU.test_autocast_torch_need_autocast_promote.
BOOST_AUTO_TEST_CASE(concat_and_stack_promote_under_autocast) {
  amp::autocast scope(true, DType::bfloat16);
  const auto h = input({2, 3}, DType::float16), f = input({2, 3}), b = input({2, 3}, DType::bfloat16);
  BOOST_TEST(mg::F::concat({h, f}, 0).dtype() == DType::float32);
  BOOST_TEST(mg::F::stack({h, f}, 0).dtype() == DType::float32);
  BOOST_TEST(mg::F::concat({b, h}, 1).dtype() == DType::float32);
  BOOST_TEST(mg::F::concat({b, b}, 1).dtype() == DType::bfloat16);
  // keep: views run in their input's dtype.
  BOOST_TEST(mg::F::reshape(b, {6}).dtype() == DType::bfloat16);
  BOOST_TEST(mg::F::transpose(h, 0, 1).dtype() == DType::float16);
  BOOST_TEST(mg::F::unsqueeze(f, 0).dtype() == DType::float32);
}

// Promotion is also concat's own rule, so only a changed entry shows that
// concat and stack consult the table (each its own entry).
BOOST_AUTO_TEST_CASE(concat_and_stack_follow_a_changed_entry) {
  const auto f = input({2, 3}), b = input({2, 3}, DType::bfloat16);
  amp::autocast scope(true, DType::bfloat16);
  {
    amp::detail::PolicyOverride low(OpKind::concat, CastPolicy::low);
    BOOST_TEST(mg::F::concat({f, f}, 0).dtype() == DType::bfloat16);
    BOOST_TEST(mg::F::stack({f, f}, 0).dtype() == DType::float32);  // stack's entry is its own
  }
  {
    amp::detail::PolicyOverride high(OpKind::stack, CastPolicy::high);
    BOOST_TEST(mg::F::stack({b, b}, 0).dtype() == DType::float32);
    BOOST_TEST(mg::F::concat({b, b}, 0).dtype() == DType::bfloat16);
  }
  {
    amp::detail::PolicyOverride keep(OpKind::matmul, CastPolicy::keep);
    BOOST_TEST(mg::F::matmul(f, mg::F::transpose(f, 0, 1)).dtype() == DType::float32);
  }
  BOOST_TEST(mg::F::stack({f, f}, 0).dtype() == DType::float32);  // overrides end with their scope
  BOOST_TEST(mg::F::matmul(f, mg::F::transpose(f, 0, 1)).dtype() == DType::bfloat16);
}

BOOST_AUTO_TEST_CASE(concat_cast_by_autocast_keeps_float32_gradients) {
  auto f = input({2, 3});
  mg::autodiff::GradManager gm;
  gm.attach(f);
  {
    auto rec = gm.record();
    amp::autocast scope(true, DType::bfloat16);
    amp::detail::PolicyOverride low(OpKind::concat, CastPolicy::low);
    auto y = mg::F::concat({f, f}, 0);
    BOOST_TEST(y.dtype() == DType::bfloat16);
    gm.backward(mg::F::sum(y));
  }
  BOOST_TEST_REQUIRE(f.grad().defined());
  BOOST_TEST(f.grad().dtype() == DType::float32);
  for (double g : f.grad().to_vector<double>()) BOOST_TEST(g == 2.0);
}

// ---- docs/amp.md's table equals the op table --------------------------------

namespace {

std::string read_amp_md() {
  std::vector<std::string> paths{"docs/amp.md", "../docs/amp.md"};
  if (const char* root = std::getenv("MIXGRAD_SOURCE_ROOT")) paths.insert(paths.begin(), std::string(root) + "/docs/amp.md");
  for (const auto& p : paths) {
    std::ifstream in(p);
    if (in) {
      std::stringstream s;
      s << in.rdbuf();
      return s.str();
    }
  }
  return {};
}

// The `backticked` words of one markdown table cell.
std::set<std::string> ops_named(const std::string& cell) {
  std::set<std::string> out;
  for (size_t at = cell.find('`'); at != std::string::npos; at = cell.find('`', at)) {
    const size_t end = cell.find('`', at + 1);
    if (end == std::string::npos) break;
    out.insert(cell.substr(at + 1, end - at - 1));
    at = end + 1;
  }
  return out;
}

std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> out;
  std::stringstream s(row);
  std::string cell;
  std::getline(s, cell, '|');  // before the first bar
  while (std::getline(s, cell, '|')) out.push_back(cell);
  return out;
}

}  // namespace

// The table in docs/amp.md, "| policy | CPU | CUDA | ... |", names in its
// low / float32 / widest rows exactly the ops with that policy on each
// device, and in its unchanged row only ops that keep.
BOOST_AUTO_TEST_CASE(amp_md_policy_table_matches_the_op_table) {
  const std::string md = read_amp_md();
  BOOST_TEST_REQUIRE(!md.empty(), "docs/amp.md not found (set MIXGRAD_SOURCE_ROOT)");
  const std::map<std::string, CastPolicy> rows{{"low precision", CastPolicy::low},
                                               {"float32", CastPolicy::high},
                                               {"widest input", CastPolicy::promote},
                                               {"unchanged", CastPolicy::keep}};
  std::set<std::string> seen_rows;
  std::stringstream lines(md);
  for (std::string line; std::getline(lines, line);) {
    const auto c = cells(line);
    if (c.size() < 4) continue;
    std::string label = c[0];
    label.erase(0, label.find_first_not_of(' '));
    label.erase(label.find_last_not_of(' ') + 1);
    const auto row = rows.find(label);
    if (row == rows.end()) continue;
    seen_rows.insert(label);
    for (auto [column, device] : {std::pair{1, DeviceType::cpu}, std::pair{2, DeviceType::cuda}}) {
      BOOST_TEST_CONTEXT("docs/amp.md row '" << label << "', " << (device == DeviceType::cpu ? "CPU" : "CUDA")) {
        const auto named = ops_named(c[column]);
        for (const auto& name : named) {
          const auto op = mg::op_from_name(name);
          BOOST_TEST(op.has_value(), "`" << name << "` is not an op of the table");
          if (op) BOOST_TEST((amp::cast_policy(*op, device) == row->second), name << " has another policy");
        }
        if (row->second == CastPolicy::keep) continue;  // "everything else": examples only
        for (size_t i = 0; i < mg::kOpCount; ++i) {
          const auto op = static_cast<OpKind>(i);
          if (amp::cast_policy(op, device) == row->second)
            BOOST_TEST(named.count(std::string(mg::op_name(op))) == 1u, mg::op_name(op) << " is missing from the row");
        }
      }
    }
  }
  BOOST_TEST(seen_rows.size() == rows.size(), "docs/amp.md lacks some of the four policy rows");
}

BOOST_AUTO_TEST_SUITE_END()
