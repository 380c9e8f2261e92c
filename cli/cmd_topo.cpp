// tandem topo list | show NAME|FILE | import --nvidia-smi FILE [--nvlink FILE] --out FILE
// Presets, a summary of one topology (devices, switches, links and the
// bottleneck bandwidth between GPUs) and the nvidia-smi importer.
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "cli/command_registry.h"
#include "cli/number_checks.h"
#include "simulator/topology/nvidia_smi_import.h"
#include "simulator/topology/routing.h"
#include "simulator/topology/topology_presets.h"
#include "simulator/topology/topology_yaml.h"

namespace tandem::cli {
namespace {

using sim::Topology;
using nlohmann::json;

// Up to this many devices `show` prints the full pair matrix; beyond it, the
// routes from the first device grouped by bandwidth (N routes, not N^2).
constexpr size_t kMatrixLimit = 16;

void listPresetsCommand(bool as_json) {
  auto presets = sim::listPresets();
  if (as_json) {
    json out = json::array();
    for (const auto& p : presets) out.push_back({{"name", p.name}, {"description", p.description}});
    fmt::print("{}\n", out.dump(2));
    return;
  }
  size_t width = 0;
  for (const auto& p : presets) width = std::max(width, p.name.size());
  for (const auto& p : presets) fmt::print("{:<{}}  {}\n", p.name, width, p.description);
  fmt::print("\nAppend :mig=<profile> (e.g. dgx-h100:mig=3g.40gb) to cut every GPU into MIG slices; to a "
             "generated cluster :fabric=roce (Ethernet, ECMP routes) or :fabric=ib, :oversubscription=S (1/S of the spines) or "
             ":rails=off (plain leaves of 4 hosts), e.g. 64xdgx-h100:fabric=roce:oversubscription=2; any other "
             "argument is read as a topology file.\n");
}

struct PairInfo {
  int a, b;
  double gbps;
  int hops;
  int64_t latency_ns;
};

struct DeviceGroup {
  const sim::DeviceSpec* first;
  int count;
};

std::vector<DeviceGroup> groupDevices(const Topology& t) {
  std::vector<DeviceGroup> groups;
  for (const auto& d : t.devices) {
    auto key = [](const sim::DeviceSpec& x) {
      return std::tie(x.model, x.mig_profile, x.bf16_flops, x.fp32_flops, x.fp8_flops, x.hbm_gbps, x.memory_bytes, x.sm_count,
                      x.speed);
    };
    auto it = std::find_if(groups.begin(), groups.end(), [&](const DeviceGroup& g) { return key(*g.first) == key(d); });
    if (it == groups.end()) groups.push_back({&d, 1});
    else ++it->count;
  }
  return groups;
}

struct LinkClass {
  int connections = 0;
  double min_gbps = 0, max_gbps = 0;
};

// Links per kind, counting a connection once however many directions it has.
std::map<std::string, LinkClass> classifyLinks(const Topology& t) {
  std::map<std::string, LinkClass> out;
  std::set<std::tuple<int, int, int>> seen;
  for (const auto& l : t.links) {
    auto key = std::make_tuple(std::min(l.src, l.dst), std::max(l.src, l.dst), int(l.kind));
    if (!seen.insert(key).second) continue;
    LinkClass& c = out[std::string(sim::toString(l.kind))];
    c.min_gbps = c.connections == 0 ? l.gbps : std::min(c.min_gbps, l.gbps);
    c.max_gbps = c.connections == 0 ? l.gbps : std::max(c.max_gbps, l.gbps);
    ++c.connections;
  }
  return out;
}

std::vector<PairInfo> pairRoutes(const Topology& t, const sim::Router& r) {
  std::vector<PairInfo> pairs;
  const int n = int(t.devices.size());
  const bool matrix = size_t(n) <= kMatrixLimit;
  for (int a = 0; a < (matrix ? n : 1); ++a)
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      pairs.push_back({a, b, r.bottleneckGbps(a, b), int(r.route(a, b).size()), r.routeLatencyNs(a, b)});
    }
  return pairs;
}

std::string gbpsText(double v) { return fmt::format("{:.6g}", v); }

void showCommand(const std::string& what, bool as_json) {
  Topology t = sim::loadTopology(what);
  sim::Router router(t);
  auto groups = groupDevices(t);
  auto links = classifyLinks(t);
  std::map<std::string, int> switch_kinds;
  for (const auto& s : t.switches) ++switch_kinds[std::string(sim::toString(s.kind))];
  auto pairs = pairRoutes(t, router);
  const bool matrix = t.devices.size() <= kMatrixLimit;

  if (as_json) {
    json out{{"name", t.name}, {"source", t.source}, {"description", t.description}};
    out["hosts"] = t.hosts.size();
    json devices = json::array();
    for (const auto& d : t.devices)
      devices.push_back({{"name", d.name},
                         {"model", d.model},
                         {"host", t.hosts[size_t(d.host)].name},
                         {"bf16_flops", d.bf16_flops},
                         {"fp32_flops", d.fp32_flops},
                         {"fp8_flops", d.fp8_flops},
                         {"hbm_gbps", d.hbm_gbps},
                         {"memory_bytes", d.memory_bytes},
                         {"sm_count", d.sm_count},
                         {"mig_profile", d.mig_profile},
                         {"speed", d.speed}});
    out["devices"] = devices;
    out["switches"] = switch_kinds;
    json lj = json::object();
    for (const auto& [kind, c] : links)
      lj[kind] = {{"connections", c.connections}, {"min_gbps", c.min_gbps}, {"max_gbps", c.max_gbps}};
    out["links"] = lj;
    out["pairs_scope"] = matrix ? "all" : "from_first_device";
    json pj = json::array();
    for (const auto& p : pairs)
      pj.push_back({{"a", t.devices[size_t(p.a)].name},
                    {"b", t.devices[size_t(p.b)].name},
                    {"bottleneck_gbps", p.gbps},
                    {"hops", p.hops},
                    {"latency_ns", p.latency_ns}});
    out["pairs"] = pj;
    fmt::print("{}\n", out.dump(2));
    return;
  }

  fmt::print("topology {} ({})\n", t.name, t.source);
  if (!t.description.empty()) fmt::print("  {}\n", t.description);
  fmt::print("hosts {}, devices {}, switches {}, links {} (directed)\n", t.hosts.size(), t.devices.size(),
             t.switches.size(), t.links.size());
  fmt::print("devices:\n");
  for (const auto& g : groups) {
    const auto& d = *g.first;
    fmt::print("  {:>5} x {:<14} bf16 {:7.1f} TFLOP/s  fp32 {:6.1f} TFLOP/s  {}HBM {:6.0f} GB/s  {:6.1f} GiB  {} SMs{}\n",
               g.count, d.model.empty() ? "?" : d.model, d.bf16_flops / 1e12, d.fp32_flops / 1e12,
               d.fp8_flops > 0 ? fmt::format("fp8 {:7.1f} TFLOP/s  ", d.fp8_flops / 1e12) : std::string(), d.hbm_gbps,
               double(d.memory_bytes) / (1024.0 * 1024 * 1024), d.sm_count,
               (d.mig_profile.empty() ? "" : "  (MIG " + d.mig_profile + ")") +
                   (d.speed == 1.0 ? "" : fmt::format("  (speed {})", d.speed)));
  }
  fmt::print("switches:");
  for (const auto& [kind, n] : switch_kinds) fmt::print(" {} {}", kind, n);
  fmt::print("{}\nlinks (GB/s per direction):\n", switch_kinds.empty() ? " none" : "");
  for (const auto& [kind, c] : links) {
    std::string range = c.min_gbps == c.max_gbps ? gbpsText(c.min_gbps)
                                                 : gbpsText(c.min_gbps) + " to " + gbpsText(c.max_gbps);
    fmt::print("  {:<11} {:>6} connections  {}\n", kind, c.connections, range);
  }

  if (matrix) {
    fmt::print("bottleneck GB/s per direction between devices (row -> column):\n");
    size_t w = 6;
    for (const auto& d : t.devices) w = std::max(w, d.name.size() + 1);
    fmt::print("{:<{}}", "", w);
    for (const auto& d : t.devices) fmt::print("{:>{}}", d.name, w);
    fmt::print("\n");
    size_t k = 0;
    for (size_t a = 0; a < t.devices.size(); ++a) {
      fmt::print("{:<{}}", t.devices[a].name, w);
      for (size_t b = 0; b < t.devices.size(); ++b) {
        if (a == b) {
          fmt::print("{:>{}}", "-", w);
          continue;
        }
        fmt::print("{:>{}}", gbpsText(pairs[k++].gbps), w);
      }
      fmt::print("\n");
    }
    return;
  }
  // Large clusters: classes of destinations seen from the first device.
  std::map<std::tuple<double, int, int64_t>, int> classes;
  for (const auto& p : pairs) ++classes[{-p.gbps, p.hops, p.latency_ns}];
  fmt::print("routes from {} to the other {} devices, by bottleneck:\n", t.devices[0].name, t.devices.size() - 1);
  for (const auto& [key, n] : classes)
    fmt::print("  {:>6} devices  {:>8} GB/s  {} hops  {} ns\n", n, gbpsText(-std::get<0>(key)), std::get<1>(key),
               std::get<2>(key));
}

struct ImportOptions {
  std::string topo_file;
  std::string nvlink_file;
  std::string out;
  sim::NvidiaSmiImportOptions import;
  bool json = false;
};

void importCommand(const ImportOptions& o) {
  std::string yaml = sim::importNvidiaSmiFilesToYaml(o.topo_file, o.nvlink_file, o.import);
  Topology t = sim::parseTopologyYaml(yaml, o.out);
  sim::writeFileAtomically(o.out, yaml);
  int nvlinks = 0;
  for (const auto& l : t.links) nvlinks += l.kind == sim::LinkKind::NvLink;
  if (o.json) {
    fmt::print("{}\n", json{{"out", o.out},
                            {"devices", t.devices.size()},
                            {"switches", t.switches.size()},
                            {"links", t.links.size()},
                            {"nvlink_links", nvlinks},
                            {"model", t.devices[0].model}}
                           .dump(2));
    return;
  }
  fmt::print("wrote {}: {} x {}, {} switches, {} directed links ({} NVLink)\n", o.out, t.devices.size(),
             t.devices[0].model, t.switches.size(), t.links.size(), nvlinks);
}

void addTopoCommand(CLI::App& root) {
  CLI::App* topo = root.add_subcommand("topo", "List, show and import machine topologies (GPUs, switches, links)");
  topo->require_subcommand(1);

  auto list_json = std::make_shared<bool>(false);
  CLI::App* list = topo->add_subcommand("list", "List the built-in topologies with a one-line description");
  list->add_flag("--json", *list_json, "print a JSON array");
  list->callback([list_json] { listPresetsCommand(*list_json); });

  auto show_name = std::make_shared<std::string>();
  auto show_json = std::make_shared<bool>(false);
  CLI::App* show = topo->add_subcommand(
      "show", "Summarise a topology: devices, switches, links and the bottleneck bandwidth between GPUs");
  show->add_option("TOPOLOGY", *show_name, "preset name (see `tandem topo list`, optionally :mig=PROFILE) or YAML file")
      ->required();
  show->add_flag("--json", *show_json, "print a JSON document");
  show->callback([show_name, show_json] { showCommand(*show_name, *show_json); });

  auto o = std::make_shared<ImportOptions>();
  CLI::App* imp = topo->add_subcommand(
      "import", "Build a topology YAML from `nvidia-smi topo -m` (and optionally `nvidia-smi nvlink -s`) output");
  imp->add_option("--nvidia-smi", o->topo_file, "file with the output of `nvidia-smi topo -m`")->required();
  imp->add_option("--nvlink", o->nvlink_file,
                  "file with the output of `nvidia-smi nvlink -s` (link speeds, GPU names)");
  imp->add_option("--out", o->out, "topology YAML to write")->required();
  imp->add_option("--model", o->import.model,
                  "GPU model when no --nvlink file names it (H100, H200, A100-80GB, A100-40GB, A100-PCIE-80GB)");
  imp->add_option("--name", o->import.name, "topology name")->capture_default_str();
  imp->add_option("--pcie-gbps", o->import.pcie_gbps,
                  "PCIe GB/s per direction (default: 55 for H100/H200, 25 otherwise)")
      ->check(numberAboveZero());
  imp->add_flag("--json", o->json, "print a JSON summary");
  imp->callback([o] { importCommand(*o); });
}

const CommandRegistration registration{"topo", 45, &addTopoCommand};

}  // namespace
}  // namespace tandem::cli
