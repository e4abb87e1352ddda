// mg::cpu::capabilities(): core/simd for the instruction sets (CPUID) and the
// level mixgrad's loops use, CPUID's brand string for the model, oneDNN for
// its version and effective ISA.
#include "mixgrad/cpu.hpp"

#include <cstdio>
#include <cstring>

#include "core/simd.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#if MIXGRAD_WITH_ONEDNN
#include <dnnl.hpp>
#endif

namespace mixgrad::cpu {

namespace {

#if defined(__x86_64__) || defined(__i386__)
std::string brand_string() {
  unsigned regs[12] = {};
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000004u) return "unknown x86-64 CPU";
  for (unsigned leaf = 0; leaf < 3; ++leaf)
    __get_cpuid(0x80000002u + leaf, &regs[4 * leaf], &regs[4 * leaf + 1], &regs[4 * leaf + 2], &regs[4 * leaf + 3]);
  char text[sizeof(regs) + 1] = {};
  std::memcpy(text, regs, sizeof(regs));
  std::string s(text);
  const auto first = s.find_first_not_of(' ');
  return first == std::string::npos ? "unknown x86-64 CPU" : s.substr(first, s.find_last_not_of(' ') - first + 1);
}
#endif

// The hardware half of Capabilities, detected once (core/simd reads CPUID).
Capabilities detect_hardware() {
  Capabilities c;
#if defined(__x86_64__) || defined(__i386__)
  c.model = brand_string();
#else
  c.model = "non-x86 CPU";
#endif
  const simd::Flags& f = simd::flags();
  c.avx2 = f.avx2;
  c.fma = f.fma;
  c.f16c = f.f16c;
  c.avx512 = f.avx512;
  c.avx512_bf16 = f.avx512_bf16;
  c.avx512_fp16 = f.avx512_fp16;
  c.amx_bf16 = f.amx_bf16;
  c.amx_fp16 = f.amx_fp16;
  return c;
}

#if MIXGRAD_WITH_ONEDNN
const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

std::string onednn_description() {
  const dnnl_version_t* v = dnnl::version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) + " " +
         isa_name(dnnl::get_effective_cpu_isa());
}
#endif

}  // namespace

Capabilities capabilities() {
  static const Capabilities hardware = detect_hardware();
  Capabilities c = hardware;
  c.max_isa = std::string(simd::max_isa_name());
  c.kernels = std::string(simd::to_string(simd::level()));
  c.bf16_math = simd::bf16_math();
  c.bf16_dot_speedup = simd::bf16_dot_speedup();
  c.fp16_math = false;
#if MIXGRAD_WITH_ONEDNN
  static const std::string onednn = onednn_description();
  c.onednn = onednn;
#endif
  return c;
}

std::string describe(const Capabilities& c) {
  std::string isa;
  const std::pair<bool, const char*> flags[] = {{c.avx2, "AVX2"},
                                                {c.fma, "FMA"},
                                                {c.f16c, "F16C"},
                                                {c.avx512, "AVX-512"},
                                                {c.avx512_bf16, "AVX512-BF16"},
                                                {c.avx512_fp16, "AVX512-FP16"},
                                                {c.amx_bf16, "AMX-BF16"},
                                                {c.amx_fp16, "AMX-FP16"}};
  for (const auto& [on, name] : flags) {
    if (!on) continue;
    if (!isa.empty()) isa += ' ';
    isa += name;
  }
  if (isa.empty()) isa = "baseline x86-64";
  std::string s = c.model + " | " + isa + " | kernels " + c.kernels;
  if (!c.max_isa.empty()) s += " (MIXGRAD_MAX_CPU_ISA=" + c.max_isa + ")";
  s += c.bf16_math ? ", bfloat16 math native" : ", bfloat16 computed in float32";
  if (c.bf16_dot_speedup > 0) {
    char rate[64];
    std::snprintf(rate, sizeof(rate), " (vdpbf16ps at %.2fx the FMA rate)", c.bf16_dot_speedup);
    s += rate;
  }
  s += c.fp16_math ? ", float16 math native" : ", float16 computed in float32";
  s += " | oneDNN " + (c.onednn.empty() ? std::string("not built") : c.onednn);
  return s;
}

bool has_fast_math(DType dtype) {
  switch (dtype) {
    case DType::float32:
    case DType::float64: return true;
    case DType::bfloat16: return simd::bf16_math();
    default: return false;
  }
}

}  // namespace mixgrad::cpu
