// mixgrad/device.hpp — where a tensor's memory lives.
//
//   mg::Device d = mg::Device::cpu();
//   mg::Device g = mg::Device::cuda(0);
//   d.is_cpu(); to_string(g);   // "cuda:0"
//   mg::parse_device("cuda:1");  // the inverse, for command lines and configs
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace mixgrad {

enum class DeviceType : uint8_t { cpu, cuda };

class Device {
 public:
  constexpr Device() = default;
  static constexpr Device cpu() { return Device(DeviceType::cpu, 0); }
  static constexpr Device cuda(int index = 0) { return Device(DeviceType::cuda, index); }

  constexpr DeviceType type() const { return type_; }
  constexpr int index() const { return index_; }
  constexpr bool is_cpu() const { return type_ == DeviceType::cpu; }
  constexpr bool is_cuda() const { return type_ == DeviceType::cuda; }
  constexpr bool operator==(const Device&) const = default;

 private:
  constexpr Device(DeviceType t, int i) : type_(t), index_(i) {}
  DeviceType type_ = DeviceType::cpu;
  int index_ = 0;
};

std::string to_string(Device d);
std::ostream& operator<<(std::ostream& os, Device d);
/// "cpu", "cuda" (device 0) or "cuda:N" (N a decimal index) to a Device;
/// anything else (" cuda", "gpu", "cuda:", "cuda:-1", "cuda:0x1") throws
/// ValueError naming the string and the forms accepted. Whether the device
/// exists is not checked here.
Device parse_device(std::string_view text);

}  // namespace mixgrad
