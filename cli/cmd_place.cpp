// tandem place JOB (--topology T | --nvidia-smi FILE [--nvlink FILE]) [--calibration C] [--out MAP.yaml] [--json]:
// which GPU each rank should run on so that the heaviest groups sit on the
// fastest links; prints the map group by group and the simulated step with
// the identity map and with the chosen one (simulator/placement/placement.h).
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/command_registry.h"
#include "cli/job_options.h"
#include "cli/number_checks.h"
#include "engine/plan/planner.h"
#include "engine/spec/resources.h"
#include "simulator/pipeline/simulate_job.h"
#include "simulator/placement/place_job.h"
#include "simulator/placement/placement_file.h"
#include "simulator/placement/traffic.h"
#include "simulator/topology/nvidia_smi_import.h"
#include "simulator/topology/routing.h"
#include "simulator/topology/topology_presets.h"
#include "simulator/topology/topology_yaml.h"
#include "traces/store/atomic_output.h"

namespace tandem::cli {
namespace {

struct PlaceOptions {
  JobOptions job;
  std::string topology;
  std::string nvidia_smi;
  std::string nvlink;
  std::string model;
  std::string calibration = "auto";
  std::string symmetry = "auto";
  std::string out;
  bool json = false;
  int rows = 8;  // groups listed per family
};

double ms(int64_t ns) { return double(ns) / 1e6; }

sim::Topology loadPlaceTopology(const PlaceOptions& o) {
  if (!o.topology.empty()) return sim::loadTopology(resourcePath(o.topology));
  sim::NvidiaSmiImportOptions import;
  import.model = o.model;
  import.name = "nvidia-smi";
  // The same path as `tandem topo import`: the YAML it would write, read back.
  return sim::parseTopologyYaml(sim::importNvidiaSmiFilesToYaml(o.nvidia_smi, o.nvlink, import), o.nvidia_smi);
}

// One process group as the report shows it.
struct GroupRow {
  const sim::GroupTraffic* traffic = nullptr;
  int index = 0;  // among its family's groups
  double identity_gbps = 0, chosen_gbps = 0;
};

std::vector<GroupRow> groupRows(const Plan& plan, const sim::Topology& topo, const std::vector<sim::GroupTraffic>& traffic,
                                const std::vector<int>& identity, const std::vector<int>& chosen) {
  const sim::Router router(topo);
  const sim::TrafficCost cost(plan, router, traffic);
  std::map<std::string, int> seen;
  std::vector<GroupRow> rows;
  for (const sim::GroupTraffic& t : traffic) {
    GroupRow row;
    row.traffic = &t;
    row.index = seen[t.family]++;
    std::vector<int> a, b;
    for (int r : plan.groups[size_t(t.group)].ranks) {
      a.push_back(identity[size_t(r)]);
      b.push_back(chosen[size_t(r)]);
    }
    row.identity_gbps = cost.ringGbps(a);
    row.chosen_gbps = cost.ringGbps(b);
    rows.push_back(row);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const GroupRow& x, const GroupRow& y) {
    return x.traffic->tier != y.traffic->tier ? x.traffic->tier < y.traffic->tier
                                              : x.traffic->family < y.traffic->family;
  });
  return rows;
}

std::string joined(const std::vector<std::string>& items, const char* sep = ",") {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : sep) + i;
  return s;
}

// A group's members in a table cell: the first few and how many more.
std::string cell(const std::vector<std::string>& items) {
  constexpr size_t kShown = 4;
  if (items.size() <= kShown + 1) return joined(items);
  return joined(std::vector<std::string>(items.begin(), items.begin() + kShown)) +
         fmt::format(",...(+{})", items.size() - kShown);
}

double gainPct(const sim::PlacementVerdict& v) {
  return v.identity_step_ns > 0 ? 100.0 * double(v.identity_step_ns - v.chosen_step_ns) / double(v.identity_step_ns)
                                : 0.0;
}

void printText(const Plan& plan, const sim::Topology& topo, const sim::PlaceOutcome& out,
               const std::vector<GroupRow>& rows, const PlaceOptions& o) {
  const sim::PlacementVerdict& v = out.verdict;
  const std::vector<int>& map = v.rank_device;
  fmt::print("placement of {} ({} ranks) on {} ({} GPUs)\n", plan.job.name, plan.world_size, topo.name,
             topo.devices.size());
  fmt::print("kernel times     {}\n", out.calibration_used);
  fmt::print("{:<10} {:<24} {:<28} {:>22} {:>10}\n", "group", "ranks", "GPUs (chosen)", "ring GB/s id -> chosen",
             "MB/step");
  std::map<std::string, int> shown, total;
  for (const GroupRow& row : rows) ++total[row.traffic->family];
  for (const GroupRow& row : rows) {
    const std::string& family = row.traffic->family;
    if (shown[family]++ >= o.rows) {
      if (shown[family] == o.rows + 1)
        fmt::print("{:<10} ... {} more {} groups (--json lists all)\n", "", total[family] - o.rows, family);
      continue;
    }
    std::vector<std::string> ranks, gpus;
    for (int r : plan.groups[size_t(row.traffic->group)].ranks) {
      ranks.push_back(std::to_string(r));
      gpus.push_back(topo.devices[size_t(map[size_t(r)])].name);
    }
    auto gbps = [](double g) { return std::isinf(g) ? std::string("-") : fmt::format("{:.6g}", g); };
    fmt::print("{:<10} {:<24} {:<28} {:>22} {:>10.1f}\n", fmt::format("{} {}", family, row.index), cell(ranks),
               cell(gpus), fmt::format("{} -> {}", gbps(row.identity_gbps), gbps(row.chosen_gbps)),
               row.traffic->bytes / 1e6);
  }
  std::vector<std::string> pairs;
  const size_t limit = 64;
  for (size_t r = 0; r < map.size() && r < limit; ++r)
    pairs.push_back(fmt::format("{}:{}", r, topo.devices[size_t(map[r])].name));
  fmt::print("rank -> GPU      {}{}\n", joined(pairs, " "),
             map.size() > limit ? fmt::format(" ... {} more (--out or --json lists all)", map.size() - limit) : "");
  fmt::print("cost             identity {:.3f} ms, proposed {:.3f} ms (bytes over the ring's narrowest hop, "
             "slowest group per family)\n",
             v.proposed.identity_cost.families_s * 1e3, v.proposed.cost.families_s * 1e3);
  if (v.proposed.identity)
    fmt::print("simulated step   identity {:.3f} ms; no better map found, the identity stays ({})\n",
               ms(v.identity_step_ns), v.simulation_note);
  else if (v.proposal_chosen)
    fmt::print("simulated step   identity {:.3f} ms, chosen {:.3f} ms: {:.1f}% faster ({:.2f}x) ({})\n",
               ms(v.identity_step_ns), ms(v.chosen_step_ns), gainPct(v),
               v.chosen_step_ns > 0 ? double(v.identity_step_ns) / double(v.chosen_step_ns) : 1.0, v.simulation_note);
  else
    fmt::print("simulated step   identity {:.3f} ms, proposal {:.3f} ms: slower, the identity stays ({})\n",
               ms(v.identity_step_ns), ms(v.proposed_step_ns), v.simulation_note);
  for (const std::string& n : v.proposed.notes) fmt::print("how              {}\n", n);
  if (!o.out.empty()) fmt::print("map written to {}\n", o.out);
}

nlohmann::json toJson(const Plan& plan, const sim::Topology& topo, const sim::PlaceOutcome& out,
                      const std::vector<GroupRow>& rows, const sim::PlacementMap& map, const PlaceOptions& o) {
  const sim::PlacementVerdict& v = out.verdict;
  nlohmann::json j;
  j["job"] = plan.job.name;
  j["topology"] = topo.name;
  j["world_size"] = plan.world_size;
  j["calibration"] = out.calibration_used;
  j["identity_step_ns"] = v.identity_step_ns;
  j["proposed_step_ns"] = v.proposed_step_ns;
  j["chosen_step_ns"] = v.chosen_step_ns;
  j["proposal_is_identity"] = v.proposed.identity;
  j["proposal_chosen"] = v.proposal_chosen;
  j["gain_pct"] = gainPct(v);
  j["cost_s"] = {{"identity", v.proposed.identity_cost.families_s}, {"proposed", v.proposed.cost.families_s}};
  j["simulation_note"] = v.simulation_note;
  j["notes"] = v.proposed.notes;
  j["warnings"] = out.warnings;
  nlohmann::json ranks = nlohmann::json::array();
  for (const sim::PlacementEntry& e : map.ranks)
    ranks.push_back({{"rank", e.rank}, {"gpu", e.gpu}, {"host", e.host}, {"local", e.local}});
  j["ranks"] = ranks;
  nlohmann::json groups = nlohmann::json::array();
  for (const GroupRow& row : rows) {
    nlohmann::json gpus = nlohmann::json::array();
    for (int r : plan.groups[size_t(row.traffic->group)].ranks)
      gpus.push_back(topo.devices[size_t(v.rank_device[size_t(r)])].name);
    auto gbps = [](double g) { return std::isinf(g) ? nlohmann::json(nullptr) : nlohmann::json(g); };
    groups.push_back({{"family", row.traffic->family},
                      {"index", row.index},
                      {"ranks", plan.groups[size_t(row.traffic->group)].ranks},
                      {"gpus", gpus},
                      {"bytes_per_step", row.traffic->bytes},
                      {"identity_ring_gbps", gbps(row.identity_gbps)},
                      {"chosen_ring_gbps", gbps(row.chosen_gbps)}});
  }
  j["groups"] = groups;
  if (!o.out.empty()) j["map"] = o.out;
  return j;
}

void writeMap(const std::string& path, const std::string& text) {
  traces::AtomicOutput output(path);
  {
    std::ofstream f(output.tempPath(), std::ios::binary);
    f << text;
    f.close();
    if (!f) throw std::runtime_error(fmt::format("place: cannot write {}", path));
  }
  output.commit();
}

void runPlace(const PlaceOptions& o) {
  const JobSpec job = o.job.load();
  const Plan plan = buildPlan(job);
  const sim::Topology topo = loadPlaceTopology(o);
  sim::PlaceSettings settings;
  settings.calibration = o.calibration;
  try {
    settings.symmetry = sim::parseSymmetrySetting(o.symmetry);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(std::string("place: ") + e.what());
  }
  const sim::PlaceOutcome out = sim::placeJob(plan, topo, settings, [&](const std::string& w) {
    fmt::print(stderr, "tandem place: warning: {}\n", w);
  });
  const sim::PlacementVerdict& v = out.verdict;
  const std::vector<sim::GroupTraffic> traffic = sim::planTraffic(plan);  // the rows point into it
  const std::vector<GroupRow> rows =
      groupRows(plan, topo, traffic, sim::identityPlacement(plan, topo), v.rank_device);
  const sim::PlacementMap map = sim::placementMapOf(plan, topo, v.rank_device);
  if (!o.out.empty()) {
    std::vector<std::string> comment{
        fmt::format("{} on {}: simulated step {:.3f} ms with the identity, {:.3f} ms with this map ({}).", plan.job.name,
                    topo.name, ms(v.identity_step_ns), ms(v.chosen_step_ns),
                    v.proposal_chosen ? "the proposal" : "the identity: nothing simulated faster")};
    writeMap(o.out, sim::placementMapToYaml(map, comment));
  }
  if (o.json)
    fmt::print("{}\n", toJson(plan, topo, out, rows, map, o).dump(2));
  else
    printText(plan, topo, out, rows, o);
}

void addPlaceCommand(CLI::App& root) {
  auto o = std::make_shared<PlaceOptions>();
  CLI::App* cmd = root.add_subcommand(
      "place", "Map ranks to GPUs so the heaviest groups (tensor parallel, then pipeline neighbours, then data "
               "parallel) sit on the fastest links; prints the map and the simulated step with the identity map and "
               "with the chosen one");
  o->job.addTo(*cmd, true);
  CLI::Option* topology = cmd->add_option(
      "--topology", o->topology, "preset (pcie4-nvbridge, dgx-h100, <N>xdgx-h100, ...) or topology YAML file");
  CLI::Option* smi = cmd->add_option("--nvidia-smi", o->nvidia_smi,
                                     "file with the output of `nvidia-smi topo -m` (imported as `tandem topo import` "
                                     "does)");
  topology->excludes(smi);
  smi->excludes(topology);
  cmd->add_option("--nvlink", o->nvlink, "with --nvidia-smi: file with the output of `nvidia-smi nvlink -s`")
      ->needs(smi);
  cmd->add_option("--model", o->model,
                  "with --nvidia-smi and no --nvlink: the GPU model (H100, H200, A100-80GB, A100-PCIE-80GB, ...)")
      ->needs(smi);
  cmd->add_option("--calibration", o->calibration,
                  "kernel times for the two simulations: auto (the profile shipped for the topology's GPU, else the "
                  "roofline defaults), none, a calibration name or file")
      ->type_name("auto|none|NAME|FILE")
      ->capture_default_str();
  cmd->add_option("--symmetric", o->symmetry,
                  "above 256 ranks, simulate one representative per program: auto, on, off (up to 256 ranks every rank "
                  "is simulated)")
      ->capture_default_str();
  cmd->add_option("--out", o->out, "write the chosen map here (YAML; `tandem run --placement MAP.yaml` reads it)")
      ->type_name("MAP.yaml");
  cmd->add_flag("--json", o->json, "print a JSON document instead of tables");
  cmd->add_option("--rows", o->rows, "groups listed per family in the text table")
      ->capture_default_str()
      ->check(wholeNumberAtLeast(0));
  cmd->footer(
      "Example: 4 PCIe A100s with NVLink bridges between GPU 0-2 and 1-3, tensor parallel 2 x data parallel 2:\n"
      "  tandem place default --set parallel.tensor_parallel=2 --set parallel.data_parallel=2 \\\n"
      "      --topology pcie4-nvbridge --out map.yaml\n"
      "The same machine from its own nvidia-smi:\n"
      "  nvidia-smi topo -m > topo.txt\n"
      "  tandem place default --set parallel.tensor_parallel=2 --set parallel.data_parallel=2 \\\n"
      "      --nvidia-smi topo.txt --model A100-PCIE-80GB --out map.yaml\n"
      "Then `tandem run JOB --placement map.yaml` (or --placement auto) gives each rank its GPU. "
      "See docs/simulator.md, \"Placement\".");
  cmd->callback([o] {
    if (o->topology.empty() && o->nvidia_smi.empty())
      throw std::runtime_error("place: say which machine: --topology NAME|FILE or --nvidia-smi FILE");
    runPlace(*o);
  });
}

const CommandRegistration registration{"place", 43, &addPlaceCommand};

}  // namespace
}  // namespace tandem::cli
