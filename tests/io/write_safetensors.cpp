// The C++ side of the safetensors interop test (read_with_safetensors.py)
// and the writer of the fuzz seed corpus.
//
//   write_safetensors write DIR    # DIR/tensors.safetensors, DIR/checkpoint.safetensors
//   write_safetensors check FILE   # FILE (written by Python) holds the tensors below
//   write_safetensors corpus DIR   # seed inputs for fuzz_checkpoint, valid and corrupt
//
// The values follow formulas the Python script computes on its own side:
// element i of every tensor is `value(name, i)` below.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mixgrad/mixgrad.hpp>
#include <string>
#include <vector>

namespace mg = mixgrad;

namespace {

struct Spec {
  const char* name;
  mg::DType dtype;
  mg::Shape shape;
};

// The float tensors hold (i - 3) / 4 (exact in every float dtype), the
// integer ones i * i * (-1)^i * 1000003 (past 2^31 for I64), bool i % 3 == 0,
// int8 (37 i mod 256) - 128 and uint8 53 i mod 256 (both ends of their ranges).
double value(const Spec& s, int64_t i) {
  if (s.dtype == mg::DType::bool_) return i % 3 == 0;
  if (s.dtype == mg::DType::int8) return static_cast<double>((i * 37) % 256 - 128);
  if (s.dtype == mg::DType::uint8) return static_cast<double>((i * 53) % 256);
  if (s.dtype == mg::DType::int32) return static_cast<double>((i % 2 ? -1 : 1) * i * 7);
  if (s.dtype == mg::DType::int64) return static_cast<double>((i % 2 ? -1 : 1) * i * i * int64_t{1000003});
  return static_cast<double>(i - 3) / 4.0;
}

const std::vector<Spec>& specs() {
  static const std::vector<Spec> s = {
      {"float32", mg::DType::float32, {2, 3}},  {"float16", mg::DType::float16, {5}},
      {"bfloat16", mg::DType::bfloat16, {2, 2}}, {"float64", mg::DType::float64, {3, 1, 2}},
      {"int32", mg::DType::int32, {4}},          {"int64", mg::DType::int64, {2, 3}},
      {"bool", mg::DType::bool_, {7}},           {"scalar", mg::DType::float32, {}},
      {"int8", mg::DType::int8, {3, 3}},         {"uint8", mg::DType::uint8, {2, 5}},
  };
  return s;
}

mg::Tensor make(const Spec& s) {
  std::vector<double> v(static_cast<size_t>(s.shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = value(s, static_cast<int64_t>(i));
  return mg::tensor(v, s.shape, s.dtype);
}

mg::StateDict all_tensors(bool with_bf16) {
  mg::StateDict sd;
  for (const Spec& s : specs())
    if (with_bf16 || s.dtype != mg::DType::bfloat16) sd.insert(s.name, make(s));
  return sd;
}

int write(const std::filesystem::path& dir) {
  mg::io::save_file(all_tensors(true), dir / "tensors.safetensors", {{"writer", "mixgrad"}});
  mg::manual_seed(0);
  mg::nn::Sequential net(mg::nn::Linear(4, 3), mg::nn::ReLU(), mg::nn::Linear(3, 2));
  mg::optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9});
  mg::amp::GradScaler scaler;
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());
  {
    auto rec = gm.record();
    gm.backward(mg::F::sum(net(mg::ones({2, 4}))));
  }
  opt.step();
  mg::io::save_checkpoint(dir / "checkpoint.safetensors", {.model = &net, .optimizer = &opt, .scaler = &scaler, .step = 1});
  // What Python must find there: every model parameter, as written.
  std::ofstream expected(dir / "checkpoint_expected.txt");
  expected.precision(17);
  for (const auto& [name, t] : net.state_dict()) {
    expected << "model." << name;
    for (double v : t.to(mg::DType::float64).to_vector<double>()) expected << " " << v;
    expected << "\n";
  }
  return 0;
}

int check(const std::filesystem::path& file) {
  mg::io::Metadata meta;
  const mg::StateDict sd = mg::io::load_file(file, &meta);
  int bad = 0;
  for (const Spec& s : specs()) {
    if (s.dtype == mg::DType::bfloat16) continue;  // numpy has no bfloat16
    const mg::Tensor* t = sd.find(s.name);
    if (!t || t->dtype() != s.dtype || t->shape() != s.shape) {
      std::fprintf(stderr, "check: '%s' missing or of the wrong dtype / shape\n", s.name);
      ++bad;
      continue;
    }
    const auto got = t->to(mg::DType::float64).to_vector<double>();
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != value(s, static_cast<int64_t>(i))) {
        std::fprintf(stderr, "check: '%s'[%zu] = %g, expected %g\n", s.name, i, got[i], value(s, static_cast<int64_t>(i)));
        ++bad;
      }
  }
  if (meta.count("writer") == 0 || meta.at("writer") != "python") {
    std::fprintf(stderr, "check: metadata 'writer' is not 'python'\n");
    ++bad;
  }
  return bad ? 1 : 0;
}

void put(const std::filesystem::path& p, const std::vector<std::byte>& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// Small valid files and a few broken variants: starting points for the fuzzer.
int corpus(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const auto all = mg::io::save_bytes(all_tensors(true), {{"writer", "mixgrad"}});
  put(dir / "valid_all_dtypes", all);
  mg::StateDict one;
  one.insert("w", mg::tensor({1.0, 2.0, 3.0}, {3}, mg::DType::float32));
  const auto small = mg::io::save_bytes(one);
  put(dir / "valid_one_tensor", small);
  put(dir / "valid_empty", mg::io::save_bytes(mg::StateDict{}));
  put(dir / "truncated", {all.begin(), all.begin() + static_cast<std::ptrdiff_t>(all.size() / 2)});
  auto flipped = small;
  flipped.back() ^= std::byte{4};
  put(dir / "bad_checksum", flipped);
  auto huge_header = small;
  huge_header[6] = std::byte{0x7f};
  put(dir / "huge_header_length", huge_header);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: write_safetensors write DIR | check FILE | corpus DIR\n");
    return 2;
  }
  const std::string mode = argv[1];
  try {
    if (mode == "write") return write(argv[2]);
    if (mode == "check") return check(argv[2]);
    if (mode == "corpus") return corpus(argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write_safetensors: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "write_safetensors: unknown mode '%s'\n", mode.c_str());
  return 2;
}
