// The allocator registry (mixgrad/allocator.hpp), storages over external
// memory (Storage's wrapping constructor, from_blob), and the CPU cache's
// huge-page advice.
#include <boost/test/unit_test.hpp>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <sys/mman.h>

#include "mixgrad/allocator.hpp"
#include "mixgrad/mixgrad.hpp"
#include "mixgrad/storage.hpp"

namespace mg = mixgrad;

namespace {

// Serves from malloc and counts; checks that blocks come back with the size
// and device they were served with.
class CountingAllocator : public mg::Allocator {
 public:
  void* allocate(int64_t nbytes, mg::Device device) override {
    ++allocations;
    last_device = device;
    return std::aligned_alloc(64, static_cast<size_t>((std::max<int64_t>(nbytes, 1) + 63) / 64 * 64));
  }
  void release(void* p, int64_t nbytes, mg::Device device) noexcept override {
    ++releases;
    released_bytes += nbytes;
    last_device = device;
    std::free(p);
  }
  void empty_cache() override { ++empties; }
  int allocations = 0, releases = 0, empties = 0;
  int64_t released_bytes = 0;
  mg::Device last_device = mg::Device::cpu();
};

// Restores the registration of a device type when the test ends.
struct Registration {
  mg::DeviceType type;
  mg::Allocator* before;
  Registration(mg::DeviceType t, mg::Allocator* a) : type(t), before(mg::register_allocator(t, a)) {}
  ~Registration() { mg::register_allocator(type, before); }
};

}  // namespace

BOOST_AUTO_TEST_CASE(cpu_storage_comes_from_the_registered_allocator) {
  CountingAllocator counting;
  {
    Registration r(mg::DeviceType::cpu, &counting);
    BOOST_TEST(mg::registered_allocator(mg::DeviceType::cpu) == &counting);
    const mg::Tensor t = mg::full({3, 5}, 2.0);
    BOOST_TEST(counting.allocations == 1);
    BOOST_TEST(t.to_vector<float>() == std::vector<float>(15, 2.f), boost::test_tools::per_element());
    mg::empty_cache();
    BOOST_TEST(counting.empties == 1);
  }
  // Unregistered again, the tensor was freed by the allocator that served it.
  BOOST_TEST(counting.releases == 1);
  BOOST_TEST(counting.released_bytes == 15 * 4);
  BOOST_TEST(counting.last_device == mg::Device::cpu());
}

BOOST_AUTO_TEST_CASE(a_storage_goes_back_to_its_own_allocator_after_a_swap) {
  CountingAllocator first;
  mg::Tensor survivor;
  {
    Registration r(mg::DeviceType::cpu, &first);
    survivor = mg::zeros({8});
  }
  const int64_t before = mg::allocated_bytes();
  survivor = mg::Tensor();  // freed after the default allocator is back
  BOOST_TEST(first.releases == 1);
  BOOST_TEST(mg::allocated_bytes() == before);  // the CPU cache did not see it
}

BOOST_AUTO_TEST_CASE(a_device_type_without_an_allocator_is_a_device_error_naming_the_device) {
  Registration r(mg::DeviceType::cuda, nullptr);
  BOOST_CHECK_EXCEPTION(mg::Storage(16, mg::Device::cuda(1)), mg::DeviceError, [](const mg::DeviceError& e) {
    const std::string m = e.what();
    return m.find("Storage") != std::string::npos && m.find("cuda:1") != std::string::npos;
  });
  BOOST_CHECK_THROW(mg::empty({2}, mg::DType::float32, mg::Device::cuda()), mg::DeviceError);
}

BOOST_AUTO_TEST_CASE(a_device_allocator_sees_the_device_it_serves) {
  CountingAllocator fake_gpu;
  Registration r(mg::DeviceType::cuda, &fake_gpu);
  {
    mg::Storage s(100, mg::Device::cuda(3));
    BOOST_TEST(s.device() == mg::Device::cuda(3));
    BOOST_TEST(!s.is_external());
    BOOST_TEST(fake_gpu.last_device == mg::Device::cuda(3));
  }
  BOOST_TEST(fake_gpu.releases == 1);
  BOOST_TEST(fake_gpu.released_bytes == 100);
}

BOOST_AUTO_TEST_CASE(external_storage_runs_its_deleter_once_when_the_last_tensor_dies) {
  std::vector<float> values = {1, 2, 3, 4, 5, 6};
  int deleted = 0;
  void* seen = nullptr;
  mg::Tensor view;
  {
    const mg::Tensor t = mg::from_blob(values.data(), {2, 3}, mg::DType::float32, mg::Device::cpu(),
                                       [&](void* p) { ++deleted, seen = p; });
    BOOST_TEST(t.raw_data() == static_cast<void*>(values.data()));  // no copy
    BOOST_TEST(t.impl()->storage->is_external());
    values[4] = 50;  // shared memory: the tensor sees the write
    BOOST_TEST(t.to_vector<float>() == std::vector<float>({1, 2, 3, 4, 50, 6}), boost::test_tools::per_element());
    view = t.narrow(1, 1, 2);
  }
  BOOST_TEST(deleted == 0);  // the view keeps the storage alive
  BOOST_TEST(view.to_vector<float>() == std::vector<float>({2, 3, 50, 6}), boost::test_tools::per_element());
  view = mg::Tensor();
  BOOST_TEST(deleted == 1);
  BOOST_TEST(seen == static_cast<void*>(values.data()));
}

BOOST_AUTO_TEST_CASE(external_storage_without_a_deleter_leaves_the_memory_alone) {
  std::vector<int32_t> values = {7, 8, 9};
  const int64_t before = mg::allocated_bytes();
  {
    const mg::Tensor t = mg::from_blob(values.data(), {3}, mg::DType::int32);
    const mg::Tensor doubled = mg::F::mul(t, t);
    BOOST_TEST(doubled.to_vector<int32_t>() == std::vector<int32_t>({49, 64, 81}), boost::test_tools::per_element());
  }
  BOOST_TEST(values[2] == 9);
  BOOST_TEST(mg::allocated_bytes() == before);
}

BOOST_AUTO_TEST_CASE(external_storage_rejects_bad_arguments_without_taking_ownership) {
  int deleted = 0;
  auto deleter = [&](void*) { ++deleted; };
  BOOST_CHECK_THROW(mg::Storage(nullptr, 8, mg::Device::cpu(), deleter), mg::ValueError);
  float x = 0;
  BOOST_CHECK_THROW(mg::Storage(&x, -4, mg::Device::cpu(), deleter), mg::ShapeError);
  BOOST_CHECK_THROW(mg::from_blob(&x, {-1}, mg::DType::float32, mg::Device::cpu(), deleter), mg::ShapeError);
  BOOST_TEST(deleted == 0);
  BOOST_CHECK_NO_THROW(mg::from_blob(nullptr, {0, 3}, mg::DType::float32));  // empty: no memory needed
}

namespace {

// The VmFlags line of /proc/self/smaps for the mapping holding `p`, or ""
// where there is none.
std::string vm_flags_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR, &lo, &hi) == 2 && line.find(' ') > line.find('-')) {
      inside = lo <= addr && addr < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

// Whether this process can see huge-page advice at all: a kernel without
// THP, no smaps, or a sandbox that ignores madvise shows none for a block
// advised here directly, and the allocator's advice is then unobservable.
bool huge_page_advice_is_visible() {
  constexpr size_t kBlock = size_t{4} << 20;
  void* p = nullptr;
  if (posix_memalign(&p, size_t{2} << 20, kBlock) != 0) return false;
  const bool visible = madvise(p, kBlock, MADV_HUGEPAGE) == 0 && vm_flags_of(p).find(" hg") != std::string::npos;
  std::free(p);
  return visible;
}

}  // namespace

// A block first requested for 2 MiB or more starts on a 2 MiB boundary and
// carries the kernel's huge-page advice over the pages that request fills
// (storage.cpp).
BOOST_AUTO_TEST_CASE(large_cpu_blocks_start_on_a_huge_page_boundary_with_huge_page_advice) {
  const char* env = std::getenv("MIXGRAD_HUGE_PAGES");
  if (env != nullptr && std::string(env) == "0") return;  // turned off for this process
  const mg::Tensor t = mg::zeros({5 << 20}, mg::DType::uint8);  // every request of its class is over 4 MiB
  const auto addr = reinterpret_cast<uintptr_t>(t.raw_data());
  BOOST_TEST(addr % (uintptr_t{2} << 20) == 0u);
  if (!huge_page_advice_is_visible()) {
    BOOST_TEST_MESSAGE("huge-page advice is not visible in /proc/self/smaps here: only the alignment is checked");
    return;
  }
  const std::string flags = vm_flags_of(t.raw_data());
  BOOST_TEST_INFO("smaps: " << flags);
  BOOST_TEST(flags.find(" hg") != std::string::npos);
}
