#include "simulator/cost/calibration_lookup.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "engine/spec/resources.h"
#include "simulator/cost/calibration_device.h"

namespace tandem::sim {

std::string calibrationPath(const std::string& name_or_file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string path = resourcePath(name_or_file);
  if (fs::exists(path, ec)) return path;
  for (const std::string& name : {name_or_file, name_or_file + ".yaml"}) {
    const fs::path committed = fs::path(resourceDir()) / "calibration" / name;
    if (fs::is_regular_file(committed, ec)) return committed.string();
  }
  return name_or_file;
}

std::optional<std::string> shippedCalibrationFor(const Topology& topo) {
  namespace fs = std::filesystem;
  std::string model;
  for (const DeviceSpec& d : topo.devices) {
    const std::string token = gpuModelToken(d.model);
    if (token.empty() || (!model.empty() && token != model)) return std::nullopt;
    model = token;
  }
  if (model.empty()) return std::nullopt;
  std::string file;
  for (char c : model) file += char(std::tolower(static_cast<unsigned char>(c)));
  const fs::path path = fs::path(resourceDir()) / "calibration" / (file + ".yaml");
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  return path.string();
}

std::vector<std::string> committedCalibrations() {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(resourceDir()) / "calibration", ec))
    if (e.is_regular_file() && e.path().extension() == ".yaml") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// What the line naming a calibration adds for its GEMM census (the kernels
// of shapes its sweep did not time come from there).
std::string censusNote(const Calibration& c) {
  size_t shapes = 0;
  for (const auto& [op, s] : c.gemm_kernels) shapes += s.size();
  return shapes == 0 ? std::string() : ", with a GEMM census of " + std::to_string(shapes) + " shapes";
}

}  // namespace

ResolvedCalibration resolveCalibration(const std::string& setting, const Topology& topo) {
  ResolvedCalibration r;
  if (setting == kShippedCalibration) {
    if (const std::optional<std::string> shipped = shippedCalibrationFor(topo)) {
      r.calibration = loadCalibration(*shipped);
      r.used = std::filesystem::path(*shipped).filename().string() + " (shipped for the " + topo.devices.at(0).model +
               censusNote(r.calibration) + ")";
    } else {
      r.warning = "no calibration comes with tandem for the GPUs of " + topo.name + " (" +
                  (topo.devices.empty() ? std::string("none") : topo.devices[0].model) +
                  "): kernel times from the roofline defaults (docs/simulator.md); measure one with `tandem "
                  "calibrate --sweep` and pass it with --calibration";
    }
  } else if (!setting.empty() && setting != kNoCalibration) {
    const std::string path = calibrationPath(setting);
    r.calibration = loadCalibration(path);
    r.used = std::filesystem::path(path).filename().string();
    if (const std::string note = censusNote(r.calibration); !note.empty()) r.used += " (" + note.substr(2) + ")";
  }
  return r;
}

}  // namespace tandem::sim
