#include "simulator/cost/calibration_device.h"

#include <fmt/core.h>

#include <cctype>
#include <set>

namespace tandem::sim {

std::string gpuModelToken(std::string_view name) {
  std::string up;
  for (char c : name) up += char(std::toupper(static_cast<unsigned char>(c)));
  constexpr std::string_view kVendor = "NVIDIA ";
  if (up.compare(0, kVendor.size(), kVendor) == 0) up.erase(0, kVendor.size());
  const size_t first = up.find_first_not_of(' ');
  if (first == std::string::npos) return "";
  const size_t end = up.find_first_of(" -", first);
  return up.substr(first, end == std::string::npos ? std::string::npos : end - first);
}

std::optional<std::string> calibrationGpuMismatch(const Calibration& cal, const Topology& topo) {
  if (cal.gpu.empty()) return std::nullopt;
  // A run with GPUs of two names records them joined by " + " (calibrate.cpp).
  std::set<std::string> measured;
  for (size_t from = 0;;) {
    const size_t plus = cal.gpu.find(" + ", from);
    const std::string token = gpuModelToken(cal.gpu.substr(from, plus == std::string::npos ? plus : plus - from));
    if (!token.empty()) measured.insert(token);
    if (plus == std::string::npos) break;
    from = plus + 3;
  }
  std::set<std::string> models;
  for (const DeviceSpec& d : topo.devices)
    if (const std::string token = gpuModelToken(d.model); !token.empty()) models.insert(token);
  if (measured.empty() || models.empty()) return std::nullopt;
  for (const std::string& m : models)
    if (measured.count(m)) return std::nullopt;
  std::string theirs;
  for (const std::string& m : models) theirs += (theirs.empty() ? "" : ", ") + m;
  return fmt::format(
      "calibration {} was measured on {}, but the topology {} has {} GPUs: its measured kernel times replace "
      "that GPU's figures (calibrate from runs on the topology's GPU, or simulate without --calibration)",
      cal.source, cal.gpu, topo.name, theirs);
}

}  // namespace tandem::sim
