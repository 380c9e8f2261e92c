#include "simulator/calibrate/calibrate_merge.h"

#include <filesystem>
#include <sstream>
#include <stdexcept>

#include "simulator/cost/calibration_device.h"

namespace tandem::sim {

bool hasMultiRankKeys(const CalibrationResult& r) {
  const Calibration& c = r.calibration;
  return c.comm_slowdown || !c.comm_slowdown_by_op.empty() || c.multi_rank_launch_ns || c.collective_start_wait ||
         !c.collective_beside.empty() || !c.collectives.empty() || !r.collectives.empty() ||
         !r.collective_beside.empty() || !r.rank_speed.empty();
}

void keepMultiRankKeys(CalibrationResult& r, const std::string& base_yaml, const std::string& base_source) {
  if (hasMultiRankKeys(r))
    throw std::runtime_error("the runs measured multi-rank keys of their own (collectives, comm_slowdown, ...): "
                             "keeping those of " + base_source + " would drop them; calibrate from one-rank runs only");
  const Calibration base = parseCalibration(base_yaml, base_source);
  Calibration& c = r.calibration;
  // A calibration describes one kind of GPU, its kept keys included.
  if (!base.gpu.empty() && !c.gpu.empty() && gpuModelToken(base.gpu) != gpuModelToken(c.gpu))
    throw std::runtime_error("the runs ran on " + c.gpu + ", but " + base_source + " was measured on " + base.gpu +
                             ": a calibration describes one kind of GPU, so its multi-rank keys cannot be kept");
  c.comm_slowdown = base.comm_slowdown;
  c.comm_slowdown_by_op = base.comm_slowdown_by_op;
  c.multi_rank_launch_ns = base.multi_rank_launch_ns;
  c.collective_start_wait = base.collective_start_wait;
  c.collective_beside = base.collective_beside;
  c.collectives = base.collectives;
  if (!hasMultiRankKeys(r))
    throw std::runtime_error(base_source + " has no multi-rank keys to keep");
  // The YAML is written from the fit's reports: the kept entries as reports
  // without samples of their own.
  for (const auto& [role, factor] : base.collective_beside) r.collective_beside.push_back({role, factor, 0});
  for (const CollectiveCalibration& k : base.collectives) {
    CollectiveFitReport rep;
    rep.op = k.op;
    rep.ranks = k.ranks;
    rep.latency_ns = k.latency_ns;
    rep.gbps = k.gbps;
    rep.sizes = k.sizes;
    r.collectives.push_back(rep);
  }
  // Named by its file name, as the runs are (calibrate.cpp): a calibration
  // is committed and shared, the folder it was read from is this machine's.
  r.multi_rank_source = std::filesystem::path(base_source).filename().string();
  // Where the kept keys were measured: the base's own header comments.
  r.provenance.push_back("multi-rank keys kept from " + r.multi_rank_source + ", whose header reads:");
  std::istringstream in(base_yaml);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("version:", 0) == 0) break;
    if (line.rfind('#', 0) != 0) continue;
    const size_t text = line.find_first_not_of("# ");
    if (text != std::string::npos) r.provenance.push_back("  " + line.substr(text));
  }
}

}  // namespace tandem::sim
