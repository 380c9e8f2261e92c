#include "cli/run_placement.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "engine/spec/parse_number.h"
#include "simulator/placement/place_job.h"
#include "simulator/placement/placement_file.h"
#include "simulator/topology/nvidia_smi_import.h"

namespace tandem::cli {
namespace {

std::string nvidiaSmi() {
  const char* env = std::getenv("TANDEM_NVIDIA_SMI");
  return env && *env ? env : "nvidia-smi";
}

// The standard output of `nvidia-smi ARGS`, or nullopt when it cannot run
// or fails.
std::optional<std::string> runNvidiaSmi(const std::string& args) {
  const std::string cmd = fmt::format("'{}' {} 2>/dev/null", nvidiaSmi(), args);
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return std::nullopt;
  std::string text;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) text.append(buf.data(), n);
  const int status = pclose(p);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || text.empty()) return std::nullopt;
  return text;
}

ResolvedPlacement autoPlacement(const Plan& plan) {
  const std::optional<std::string> topo_text = runNvidiaSmi("topo -m");
  if (!topo_text)
    throw std::runtime_error(fmt::format(
        "run: --placement auto reads `{} topo -m`, which did not run here; save that output on the machine and pass "
        "`tandem place JOB --nvidia-smi FILE --out map.yaml`'s map as --placement map.yaml",
        nvidiaSmi()));
  sim::NvidiaSmiImportOptions import;
  import.name = "this machine";
  if (const std::optional<std::string> names = runNvidiaSmi("--query-gpu=name --format=csv,noheader")) {
    std::istringstream in(*names);
    std::getline(in, import.model);
  }
  std::optional<sim::NvlinkStatus> nvlink;
  if (const std::optional<std::string> text = runNvidiaSmi("nvlink -s")) {
    try {
      nvlink = sim::parseNvidiaSmiNvlink(*text, "nvidia-smi nvlink -s");
    } catch (const sim::TopologyError&) {
      nvlink.reset();  // GPUs without NVLink print no links: the matrix alone serves
    }
    if (nvlink && nvlink->gpus.empty()) nvlink.reset();
  }
  const sim::Topology topo = sim::importNvidiaSmi(sim::parseNvidiaSmiTopo(*topo_text, "nvidia-smi topo -m"),
                                                  nvlink ? &*nvlink : nullptr, import);
  if (plan.world_size > int(topo.devices.size()))
    throw std::runtime_error(fmt::format("run: --placement auto places the world on this host, but the job has {} "
                                         "ranks and `nvidia-smi topo -m` shows {} GPUs; for several hosts pass a "
                                         "map from `tandem place --out`",
                                         plan.world_size, topo.devices.size()));
  const sim::PlaceOutcome out = sim::placeJob(plan, topo, sim::PlaceSettings{});
  const sim::PlacementVerdict& v = out.verdict;
  ResolvedPlacement r;
  r.device_of_rank = sim::localDevices(sim::placementMapOf(plan, topo, v.rank_device), plan.world_size);
  r.source = fmt::format("auto (nvidia-smi topo -m, {} x {}: simulated step {:.3f} ms with the identity, {:.3f} ms "
                         "with this map)",
                         topo.devices.size(), topo.devices.front().model, double(v.identity_step_ns) / 1e6,
                         double(v.chosen_step_ns) / 1e6);
  return r;
}

}  // namespace

ResolvedPlacement resolveRunPlacement(const std::string& what, const Plan& plan) {
  try {
    if (what == "auto") return autoPlacement(plan);
    const sim::PlacementMap map = sim::loadPlacementMap(what);
    ResolvedPlacement r;
    r.device_of_rank = sim::localDevices(map, plan.world_size);
    r.source = what;
    return r;
  } catch (const sim::PlacementError& e) {
    throw std::runtime_error(std::string("run: --placement: ") + e.what());
  } catch (const sim::TopologyError& e) {
    throw std::runtime_error(std::string("run: --placement auto: ") + e.what());
  }
}

std::string devicesText(const std::vector<int>& devices) {
  return fmt::format("{}", fmt::join(devices, ","));
}

std::vector<int> parseDevicesText(const std::string& text, int world_size) {
  std::vector<int> out;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const std::optional<long long> v = parseWholeNumber(item);
    if (!v || *v < 0 || *v > 1'000'000)
      throw std::runtime_error(fmt::format("run: --placement-devices: '{}' is not a GPU index", item));
    out.push_back(int(*v));
  }
  if (int(out.size()) != world_size)
    throw std::runtime_error(fmt::format("run: --placement-devices names {} GPUs for {} ranks", out.size(), world_size));
  return out;
}

std::string placementLine(const std::vector<int>& devices) {
  constexpr size_t kShown = 16;
  std::string s;
  for (size_t r = 0; r < devices.size() && r < kShown; ++r)
    s += fmt::format("{}rank {} -> GPU {}", r ? ", " : "", r, devices[r]);
  if (devices.size() > kShown) s += fmt::format(", ... ({} ranks)", devices.size());
  return s;
}

}  // namespace tandem::cli
