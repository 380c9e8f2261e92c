// Presets, generated DGX H100 clusters, GPU model figures and MIG slicing.
#include "simulator/topology/topology_presets.h"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "simulator/topology/topology_yaml.h"

namespace tandem::sim {

// Generated from resources/topologies/*.yaml by cmake/TandemEmbed.cmake.
const std::vector<std::pair<std::string_view, std::string_view>>& embeddedPresets();

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

struct ModelRow {
  const char* name;
  double bf16_flops;
  double fp32_flops;
  double fp8_flops;  // 0: no FP8 tensor cores
  double hbm_gbps;
  double memory_mib;  // as nvidia-smi reports it
  int sm_count;
  double best_gemm_fraction;  // DeviceSpec::best_gemm_fraction
};

// Dense peaks from NVIDIA's data sheets (SXM parts unless named PCIE).
//
// H100-96GB-500W: the H100 of Meta's Grand Teton hosts (torchtitan's
// published runs): 96 GB of HBM2e at 2.4 TB/s, held at a 500 W limit. Its
// makers say only that its peak lies between the H100 SXM (700 W: 989
// TFLOP/s BF16 dense, 1979 FP8, 67 FP32) and the H100 NVL (400 W: 835, 1671,
// 60); the figures here are interpolated linearly in the power limit between
// those two data sheets (500 W: a third of the way from NVL to SXM). Its
// memory as nvidia-smi would print it is the 80 GB part's figure scaled by
// 96/80.
//
// Blackwell: B200 as in DGX/HGX B200 (1000 W; 2.25 PFLOP/s BF16 dense, 4.5
// FP8, HBM3e 8 TB/s, 180 GB), GB200 and GB300 as in the NVL72 racks at the
// peaks NVIDIA's benchmarking recipes count with (2450 TFLOP/s BF16, 4900
// FP8 dense; 186 and 288 GB, 8 TB/s); 148 SMs (B200, GB200) and 160 (GB300).
// FP32 (non-tensor) peaks: 80 TFLOP/s. Memory as nvidia-smi would print it:
// the data sheets' GB less the 80 GB part's share it does not show.
//
// The best BF16 GEMM rate over the dense peak, as measured by scanning
// large shapes for the fastest (the "maximum achievable matmul FLOPS" of
// stas00/ml-engineering's accelerator tables): A100 SXM 267.9 of 312
// TFLOP/s (0.859), A100 PCIe 256.4 (0.822), H100 SXM 792.1 of 989 (0.801),
// H100/H200 SXM 794.5, B200 1745 of 2250 (0.776). Not measured there (0:
// the H100's efficiencies as they are): GB200 and GB300, whose power limits
// (1200, 1400 W) are above the B200's 1000 W, and the 500 W H100, below
// the SXM part's 700 W.
constexpr ModelRow kModels[] = {
    {"H100", 989e12, 67e12, 1979e12, 3350, 81559, 132, 0.801},
    {"H100-96GB-500W", 886e12, 62.3e12, 1774e12, 2400, 97871, 132, 0},
    {"B200", 2250e12, 80e12, 4500e12, 8000, 183501, 148, 0.776},
    {"GB200", 2450e12, 80e12, 4900e12, 8000, 189620, 148, 0},
    {"GB300", 2450e12, 80e12, 4900e12, 8000, 293601, 160, 0},
    {"H200", 989e12, 67e12, 1979e12, 4800, 143771, 132, 0.801},
    {"A100-80GB", 312e12, 19.5e12, 0, 2039, 81920, 108, 0.859},
    {"A100-40GB", 312e12, 19.5e12, 0, 1555, 40960, 108, 0.859},
    {"A100-PCIE-80GB", 312e12, 19.5e12, 0, 1935, 81920, 108, 0.822},
};

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// The generated clusters' building blocks: hosts of GPUs on one NVSwitch
// domain (8 GPUs; a rack of 72 for NVL72), one NIC per GPU on a
// rail-optimised InfiniBand fat tree (NIC k of every host on rail k).
constexpr int kHostsPerLeaf = 32;  // a 64-port switch: 32 down, 32 up
constexpr int kNicsPerPlainLeaf = 32;  // plain leaves: whole hosts' NICs on one 64-port switch

struct DgxSystem {
  const char* name;        // "dgx-h100": the cluster is "<N>xdgx-h100"
  const char* display;     // "DGX H100"
  const char* gpu;         // a kModels name
  int gpus;                // per host: its NVLink domain
  int nvlink_lanes;        // NVLink links per GPU to the NVSwitch chips
  double lane_gbps;        // one link, per direction: 25 GB/s NVLink3/4, 50 NVLink5
  double pcie_gbps;        // per direction, per GPU's switch
  double nic_gbps;         // per rail, per direction (GB/s)
  const char* fabric;      // what the description says of it
  bool roce;               // its fabric is Ethernet unless ":fabric=ib" says otherwise
};

// DGX H100 as resources/topologies/dgx-h100.yaml has it (18 NVLink4 links,
// PCIe Gen5, ConnectX-7 NDR 400 Gb/s: NVIDIA Eos); DGX H200 the same with
// H200s; DGX A100 (NVIDIA Selene): 12 NVLink3 links, PCIe Gen4,
// ConnectX-6 HDR 200 Gb/s per GPU. Meta's Grand Teton hosts: 8 H100 on
// NVLink4 through NVSwitch as in the DGX, one 400 Gb/s RDMA NIC per GPU on
// a RoCE fabric; with the H100 96 GB at 500 W of torchtitan's published
// runs, or the H100 80 GB at 700 W of the Llama 3 training clusters (Llama
// 3 paper: a three-level Clos of up to 24K GPUs, here two levels).
//
// Blackwell: DGX B200, 8 B200 on NVLink5 (18 links of 50 GB/s per
// direction: 900 GB/s), PCIe Gen5, 8 ConnectX-7 at 400 Gb/s; GB200 NVL72,
// a rack of 72 GPUs on one NVLink5 switch domain (each host here is a
// rack), one 400 Gb/s ConnectX-7 per GPU; GB300 NVL72 the same with
// ConnectX-8 at 800 Gb/s and PCIe Gen6.
constexpr DgxSystem kDgxSystems[] = {
    {"dgx-h100", "DGX H100", "H100", 8, 18, 25.0, 55.0, 50.0, "8 rails of 400 Gb/s InfiniBand (NDR)", false},
    {"dgx-h200", "DGX H200", "H200", 8, 18, 25.0, 55.0, 50.0, "8 rails of 400 Gb/s InfiniBand (NDR)", false},
    {"dgx-a100", "DGX A100", "A100-80GB", 8, 12, 25.0, 26.0, 25.0, "8 rails of 200 Gb/s InfiniBand (HDR)", false},
    {"grand-teton-500w", "Grand Teton (H100 96 GB, 500 W)", "H100-96GB-500W", 8, 18, 25.0, 55.0, 50.0,
     "8 NICs of 400 Gb/s RoCE (Ethernet)", true},
    {"grand-teton-700w", "Grand Teton (H100 80 GB, 700 W)", "H100", 8, 18, 25.0, 55.0, 50.0,
     "8 NICs of 400 Gb/s RoCE (Ethernet)", true},
    {"dgx-b200", "DGX B200", "B200", 8, 18, 50.0, 55.0, 50.0, "8 rails of 400 Gb/s InfiniBand (NDR)", false},
    {"gb200-nvl72", "GB200 NVL72 rack", "GB200", 72, 18, 50.0, 55.0, 50.0,
     "72 rails of 400 Gb/s InfiniBand (NDR)", false},
    {"gb300-nvl72", "GB300 NVL72 rack", "GB300", 72, 18, 50.0, 110.0, 100.0,
     "72 rails of 800 Gb/s InfiniBand (XDR)", false},
};

std::string displayName(const DgxSystem& d) { return d.display; }

const DgxSystem* dgxSystem(std::string_view name) {
  for (const DgxSystem& d : kDgxSystems)
    if (name == d.name) return &d;
  return nullptr;
}

}  // namespace

std::optional<DeviceSpec> gpuModelSpec(std::string_view model) {
  std::string want = upper(model);
  if (want.rfind("NVIDIA ", 0) == 0) want = want.substr(7);
  const ModelRow* row = nullptr;
  for (const auto& m : kModels)
    if (want == m.name) row = &m;
  if (!row) {
    // nvidia-smi spellings: "H100 80GB HBM3", "A100-SXM4-80GB", "A100-PCIE-40GB", ...
    auto has = [&](const char* part) { return want.find(part) != std::string::npos; };
    auto named = [&](const char* name) {
      for (const auto& m : kModels)
        if (std::string_view(m.name) == name) return &m;
      return static_cast<const ModelRow*>(nullptr);
    };
    if (has("H200")) row = named("H200");
    else if (has("H100")) row = named("H100");
    else if (has("A100") && has("PCIE") && has("80GB")) row = named("A100-PCIE-80GB");
    else if (has("A100") && has("40GB")) row = named("A100-40GB");
    else if (has("A100")) row = named("A100-80GB");
  }
  if (!row) return std::nullopt;
  DeviceSpec d;
  d.model = row->name;
  d.bf16_flops = row->bf16_flops;
  d.fp32_flops = row->fp32_flops;
  d.fp8_flops = row->fp8_flops;
  d.hbm_gbps = row->hbm_gbps;
  d.memory_bytes = int64_t(row->memory_mib * kMiB);
  d.sm_count = row->sm_count;
  d.best_gemm_fraction = row->best_gemm_fraction;
  return d;
}

std::vector<std::string> knownGpuModels() {
  std::vector<std::string> out;
  for (const auto& m : kModels) out.push_back(m.name);
  return out;
}

std::vector<std::string> fixedPresetNames() {
  std::vector<std::string> out;
  for (const auto& [name, text] : embeddedPresets()) out.emplace_back(name);
  return out;
}

std::optional<std::string_view> presetYaml(std::string_view name) {
  for (const auto& [preset, text] : embeddedPresets())
    if (preset == name) return text;
  return std::nullopt;
}

std::vector<PresetInfo> listPresets() {
  std::vector<PresetInfo> out;
  for (const auto& [name, text] : embeddedPresets()) {
    Topology t = parseTopologyYaml(std::string(text), std::string(name));
    out.push_back({std::string(name), t.description});
  }
  for (const DgxSystem& d : kDgxSystems)
    out.push_back({fmt::format("<N>x{}", d.name),
                   fmt::format("N {} hosts, {}, non-blocking rail-optimised two-level fat tree (e.g. 4x{})",
                               displayName(d), d.fabric, d.name)});
  return out;
}

namespace {

// N hosts of `sys`: per host the NVSwitch, PCIe and CPU links of the
// dgx-h100 preset with the system's figures, names prefixed by the host.
// Returns each GPU's NIC.
std::vector<int> addDgxHosts(Topology& t, const DgxSystem& sys, int hosts) {
  const DeviceSpec gpu = *gpuModelSpec(sys.gpu);
  for (int h = 0; h < hosts; ++h) {
    t.hosts.push_back({fmt::format("node{}", h)});
    for (int g = 0; g < sys.gpus; ++g) {
      DeviceSpec d = gpu;
      d.name = fmt::format("node{}.gpu{}", h, g);
      d.host = h;
      t.devices.push_back(std::move(d));
    }
  }
  std::vector<int> nic_of(size_t(hosts) * size_t(sys.gpus));
  for (int h = 0; h < hosts; ++h) {
    const std::string p = fmt::format("node{}.", h);
    int nvs = t.addSwitch(p + "nvswitch", NodeKind::NvSwitch, h);
    // A CPU socket per 4 GPUs (a DGX's two; an NVL72 rack's 18 trays).
    std::vector<int> cpu;
    for (int c = 0; c < (sys.gpus + 3) / 4; ++c) cpu.push_back(t.addSwitch(fmt::format("{}cpu{}", p, c), NodeKind::Cpu, h));
    for (int g = 0; g < sys.gpus; ++g) {
      int gpu_node = h * sys.gpus + g;
      int pcie = t.addSwitch(fmt::format("{}pcie{}", p, g), NodeKind::PcieSwitch, h);
      int nic = t.addSwitch(fmt::format("{}nic{}", p, g), NodeKind::Nic, h);
      nic_of[size_t(gpu_node)] = nic;
      t.addLink(gpu_node, nvs, sys.nvlink_lanes * sys.lane_gbps, 250, LinkKind::NvLink, sys.nvlink_lanes);
      t.addLink(gpu_node, pcie, sys.pcie_gbps, 250, LinkKind::Pcie, 1);
      t.addLink(nic, pcie, sys.pcie_gbps, 250, LinkKind::Pcie, 1);
      t.addLink(pcie, cpu[size_t(g / 4)], sys.pcie_gbps, 250, LinkKind::Pcie, 1);
    }
    for (size_t c = 1; c < cpu.size(); ++c) t.addLink(cpu[c - 1], cpu[c], 60, 300, LinkKind::Internal, 1);
  }
  return nic_of;
}

// Rail-optimised fat tree: rail r of every host goes to the leaves of rail
// r, kHostsPerLeaf hosts per leaf. Every leaf has one uplink to every spine
// and as many spines as hosts per leaf, so uplink = downlink bandwidth
// (non-blocking). Spines have one port per leaf: beyond 32 hosts that is
// more than a 64-port switch has, where a real cluster would use director
// switches or a third level; the bandwidth is the same.
//
// FabricOptions change it: Ethernet links (RoCE), 1/s of the spines
// (oversubscription s), or plain leaves holding whole hosts (every NIC of 4
// hosts of 8 GPUs on one 64-port leaf) instead of one rail each. `rails`:
// NICs per host.
void addFatTree(Topology& t, const std::vector<int>& nic_of, int hosts, int rails, double nic_gbps,
                const FabricOptions& f) {
  const LinkKind kind = f.roce.value_or(false) ? LinkKind::Ethernet : LinkKind::InfiniBand;
  // Down ports of a leaf: kHostsPerLeaf NICs (one rail of 32 hosts), or
  // every rail of as many whole hosts as 32 ports hold.
  const int hosts_per_leaf = f.rail_optimised ? kHostsPerLeaf : kNicsPerPlainLeaf / rails;
  const int down = std::min(hosts, hosts_per_leaf) * (f.rail_optimised ? 1 : rails);
  const int spine_count = std::max(1, down / f.oversubscription);
  std::vector<int> spines;
  for (int s = 0; s < spine_count; ++s)
    spines.push_back(t.addSwitch(fmt::format("spine{}", s), NodeKind::IbSpine, -1));
  const int leaf_groups = (hosts + hosts_per_leaf - 1) / hosts_per_leaf;
  for (int r = 0; r < (f.rail_optimised ? rails : 1); ++r)
    for (int k = 0; k < leaf_groups; ++k) {
      const int leaf = t.addSwitch(f.rail_optimised ? fmt::format("leaf.rail{}.{}", r, k) : fmt::format("leaf{}", k),
                                   NodeKind::IbLeaf, -1);
      for (int h = k * hosts_per_leaf; h < std::min(hosts, (k + 1) * hosts_per_leaf); ++h)
        for (int rail = 0; rail < rails; ++rail)
          if (!f.rail_optimised || rail == r)
            t.addLink(nic_of[size_t(h * rails + rail)], leaf, nic_gbps, 600, kind, 1);
      for (int spine : spines) t.addLink(leaf, spine, nic_gbps, 600, kind, 1);
    }
}

}  // namespace

Topology makeDgxCluster(std::string_view system, int hosts, const FabricOptions& fabric) {
  const DgxSystem* sys = dgxSystem(system);
  if (!sys) throw TopologyError(fmt::format("no DGX system named '{}'", system));
  if (hosts < 1 || hosts > 4096)
    throw TopologyError(fmt::format("cluster size {} is out of range: 1 to 4096 hosts", hosts));
  Topology t;
  t.name = fmt::format("{}x{}", hosts, sys->name);
  t.source = "generated";
  // The system's own fabric unless the options name the other one.
  FabricOptions resolved = fabric;
  resolved.roce = fabric.roce.value_or(sys->roce);
  const bool roce = *resolved.roce;
  const std::string links =
      roce == sys->roce ? std::string(sys->fabric)
      : roce            ? fmt::format("{} NICs of {:g} Gb/s RoCE (Ethernet)", sys->gpus, sys->nic_gbps * 8)
                        : fmt::format("{} rails of {:g} Gb/s InfiniBand", sys->gpus, sys->nic_gbps * 8);
  t.description = fmt::format("{} x {} ({} GPUs), NVSwitch inside, {}, two-level fat tree", hosts,
                              displayName(*sys), hosts * sys->gpus, links);
  if (!fabric.rail_optimised && sys->gpus > kNicsPerPlainLeaf)
    throw TopologyError(fmt::format("':rails=off' puts whole hosts on a leaf of {} ports; a {} has {} NICs",
                                    kNicsPerPlainLeaf, displayName(*sys), sys->gpus));
  const std::vector<int> nic_of = addDgxHosts(t, *sys, hosts);
  if (fabric.oversubscription < 1 || kHostsPerLeaf % fabric.oversubscription != 0)
    throw TopologyError(fmt::format("oversubscription {} does not divide a leaf's {} uplinks (allowed: 1, 2, 4, 8, "
                                    "16, 32)",
                                    fabric.oversubscription, kHostsPerLeaf));
  addFatTree(t, nic_of, hosts, sys->gpus, sys->nic_gbps, resolved);
  if (roce || roce != sys->roce || fabric.oversubscription > 1 || !fabric.rail_optimised) {
    t.description += fmt::format(" ({}{}{})", roce ? "ECMP routes" : "D-mod-K routes",
                                 fabric.rail_optimised ? ", rail-optimised" : ", plain leaves of 4 hosts",
                                 fabric.oversubscription > 1 ? fmt::format(", {}:1 oversubscribed",
                                                                           fabric.oversubscription)
                                                             : std::string());
    t.name += fmt::format("{}{}{}", roce == sys->roce ? "" : roce ? ":fabric=roce" : ":fabric=ib",
                          fabric.oversubscription > 1 ? fmt::format(":oversubscription={}", fabric.oversubscription)
                                                      : std::string(),
                          fabric.rail_optimised ? "" : ":rails=off");
  }
  return t;
}

Topology makeDgxH100Cluster(int hosts) { return makeDgxCluster("dgx-h100", hosts); }

MigProfile parseMigProfile(std::string_view profile, const DeviceSpec& gpu) {
  // "<g>g.<m>gb", e.g. 1g.10gb, 3g.40gb, 7g.141gb.
  auto bad = [&](const std::string& why) {
    return TopologyError(fmt::format("MIG profile '{}' {} (expected <g>g.<m>gb with g in 1, 2, 3, 4, 7, e.g. "
                                     "1g.10gb, 3g.40gb)",
                                     profile, why));
  };
  std::string p(profile);
  size_t g_pos = p.find("g.");
  if (g_pos == std::string::npos || g_pos == 0 || p.size() < g_pos + 5 || p.substr(p.size() - 2) != "gb")
    throw bad("is malformed");
  int g = 0;
  double m = 0;
  try {
    size_t used = 0;
    g = std::stoi(p.substr(0, g_pos), &used);
    if (used != g_pos) throw bad("is malformed");
    std::string mem = p.substr(g_pos + 2, p.size() - g_pos - 4);
    m = std::stod(mem, &used);
    if (used != mem.size()) throw bad("is malformed");
  } catch (const TopologyError&) {
    throw;
  } catch (const std::exception&) {
    throw bad("is malformed");
  }
  static const std::map<int, int> kInstances{{1, 7}, {2, 3}, {3, 2}, {4, 1}, {7, 1}};
  if (!kInstances.count(g)) throw bad(fmt::format("has {} compute slices", g));
  if (gpu.memory_bytes <= 0) throw bad("applies to a GPU without memory size");
  // Memory comes in eighths of the GPU; profile names round them to GB.
  double eighth_gib = double(gpu.memory_bytes) / (1024.0 * 1024.0 * 1024.0) / 8.0;
  double want = m / eighth_gib;
  int eighths = 0;
  for (int e : {1, 2, 4, 8})
    if (std::fabs(want - e) <= 0.15 * e) eighths = e;
  if (eighths == 0)
    throw bad(fmt::format("does not fit a {} of {:.0f} GiB (memory slices are 1/8, 2/8, 4/8 or 8/8 of it)",
                          gpu.model.empty() ? "GPU" : gpu.model, eighth_gib * 8));
  MigProfile out;
  out.name = p;
  out.compute_slices = g;
  out.memory_eighths = eighths;
  out.instances = (g == 1 && eighths == 2) ? 4 : kInstances.at(g);
  if (out.instances * eighths > 8 || (g == 7 && eighths != 8) || (g >= 3 && g <= 4 && eighths != 4) ||
      (g == 2 && eighths != 2))
    throw bad("is not a profile NVIDIA offers");
  return out;
}

Topology applyMig(const Topology& topo, std::string_view profile, const std::vector<std::string>& gpus) {
  std::set<std::string> wanted(gpus.begin(), gpus.end());
  for (const auto& g : wanted)
    if (topo.findNode(g) < 0 || !topo.isDevice(topo.findNode(g)))
      throw TopologyError(fmt::format("MIG: unknown device '{}'", g));
  Topology out;
  out.name = fmt::format("{}:mig={}", topo.name, profile);
  out.source = topo.source;
  out.description = topo.description.empty() ? std::string() : fmt::format("{} (MIG {})", topo.description, profile);
  out.hosts = topo.hosts;

  // New node ids: devices (slices or untouched GPUs), old switches, hubs.
  struct Hub {
    std::string name;
    int host;
    std::vector<int> slices;
    double slice_gbps;
  };
  std::vector<Hub> hubs;
  std::vector<int> old_device_to_hub(topo.devices.size(), -1);
  std::vector<int> old_device_to_new(topo.devices.size(), -1);
  for (size_t i = 0; i < topo.devices.size(); ++i) {
    const DeviceSpec& d = topo.devices[i];
    if (!wanted.empty() && !wanted.count(d.name)) {
      old_device_to_new[i] = int(out.devices.size());
      out.devices.push_back(d);
      continue;
    }
    if (!d.mig_profile.empty())
      throw TopologyError(fmt::format("MIG: device '{}' is already a MIG slice", d.name));
    MigProfile mp = parseMigProfile(profile, d);
    const double compute = mp.compute_slices / 7.0;
    const double memory = mp.memory_eighths / 8.0;
    Hub hub{d.name + ".hub", d.host, {}, d.hbm_gbps * memory};
    for (int k = 0; k < mp.instances; ++k) {
      DeviceSpec s = d;
      s.name = fmt::format("{}.mig{}", d.name, k);
      s.bf16_flops = d.bf16_flops * compute;
      s.fp32_flops = d.fp32_flops * compute;
      s.fp8_flops = d.fp8_flops * compute;
      s.sm_count = std::max(1, int(d.sm_count * compute));
      s.memory_bytes = int64_t(double(d.memory_bytes) * memory);
      s.hbm_gbps = d.hbm_gbps * memory;
      s.mig_fraction = compute;
      s.mig_profile = mp.name;
      hub.slices.push_back(int(out.devices.size()));
      out.devices.push_back(std::move(s));
    }
    old_device_to_hub[i] = int(hubs.size());
    hubs.push_back(std::move(hub));
  }
  const int new_devices = int(out.devices.size());
  out.switches = topo.switches;
  std::vector<int> hub_node(hubs.size());
  for (size_t h = 0; h < hubs.size(); ++h) hub_node[h] = out.addSwitch(hubs[h].name, NodeKind::GpuHub, hubs[h].host);

  auto remap = [&](int node) {
    if (topo.isDevice(node)) {
      int hub = old_device_to_hub[size_t(node)];
      return hub >= 0 ? hub_node[size_t(hub)] : old_device_to_new[size_t(node)];
    }
    return new_devices + (node - int(topo.devices.size()));
  };
  for (const Link& l : topo.links) {
    Link m = l;
    m.src = remap(l.src);
    m.dst = remap(l.dst);
    out.links.push_back(m);
  }
  for (size_t h = 0; h < hubs.size(); ++h)
    for (int s : hubs[h].slices) out.addLink(s, hub_node[h], hubs[h].slice_gbps, 100, LinkKind::Internal, 1);
  validateTopology(out);
  return out;
}

namespace {

// A preset's options after its name: ":mig=PROFILE" for any topology,
// ":fabric=ib|roce", ":oversubscription=S" and ":rails=on|off" for the
// generated clusters. A file name keeps its colons when it has no such
// option.
struct PresetOptions {
  std::string base;
  std::string mig;
  FabricOptions fabric;
  bool fabric_given = false;
};

PresetOptions splitPresetOptions(const std::string& name) {
  PresetOptions o;
  o.base = name;
  static const char* kKeys[] = {"mig", "fabric", "oversubscription", "rails"};
  while (true) {
    const size_t colon = o.base.rfind(':');
    if (colon == std::string::npos) return o;
    const std::string option = o.base.substr(colon + 1);
    const size_t eq = option.find('=');
    const std::string key = option.substr(0, eq);
    if (eq == std::string::npos || std::none_of(std::begin(kKeys), std::end(kKeys), [&](const char* k) { return key == k; }))
      return o;
    const std::string value = option.substr(eq + 1);
    auto bad = [&](const std::string& allowed) {
      return TopologyError(fmt::format("'{}': ':{}={}' (allowed: {})", name, key, value, allowed));
    };
    if (key == "mig") {
      if (value.empty()) throw TopologyError(fmt::format("'{}': empty MIG profile after ':mig='", name));
      o.mig = value;
    } else if (key == "fabric") {
      if (value != "ib" && value != "roce") throw bad("ib, roce");
      o.fabric.roce = value == "roce";
      o.fabric_given = true;
    } else if (key == "oversubscription") {
      const bool digits = !value.empty() && value.size() <= 3 &&
                          std::all_of(value.begin(), value.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
      if (!digits || std::stoi(value) < 1) throw bad("1, 2, 4, 8, 16, 32");
      o.fabric.oversubscription = std::stoi(value);
      o.fabric_given = true;
    } else {
      if (value != "on" && value != "off") throw bad("on, off");
      o.fabric.rail_optimised = value == "on";
      o.fabric_given = true;
    }
    o.base = o.base.substr(0, colon);
  }
}

}  // namespace

Topology loadTopology(const std::string& name_or_file) {
  const PresetOptions options = splitPresetOptions(name_or_file);
  const std::string& base = options.base;
  const std::string& mig = options.mig;

  Topology topo;
  std::string clusters;
  for (const DgxSystem& d : kDgxSystems) clusters += fmt::format("{}<N>x{}", clusters.empty() ? "" : ", ", d.name);
  const std::string fabric_only_clusters =
      fmt::format("'{}': fabric options (:fabric, :oversubscription, :rails) apply to the generated clusters {} only",
                  name_or_file, clusters);
  if (auto text = presetYaml(base)) {
    if (options.fabric_given) throw TopologyError(fabric_only_clusters);
    topo = parseTopologyYaml(std::string(*text), base);
    topo.source = "preset " + base;
  } else {
    // "<N>xdgx-h100" or "<N>×dgx-h100" (U+00D7), and the other DGX systems.
    std::string rest;
    size_t digits = 0;
    while (digits < base.size() && std::isdigit(static_cast<unsigned char>(base[digits]))) ++digits;
    if (digits > 0) {
      if (base.compare(digits, 1, "x") == 0) rest = base.substr(digits + 1);
      else if (base.compare(digits, 2, "\xC3\x97") == 0) rest = base.substr(digits + 2);
    }
    if (!rest.empty() && dgxSystem(rest)) {
      // More digits than an int holds are out of range all the same; say
      // what was written rather than a wrapped or placeholder count.
      const std::string count = base.substr(0, digits);
      if (digits > 6)
        throw TopologyError(fmt::format("cluster size {} is out of range: 1 to 4096 hosts", count));
      topo = makeDgxCluster(rest, std::stoi(count), options.fabric);
    } else if (options.fabric_given) {
      throw TopologyError(fabric_only_clusters);
    } else if (std::filesystem::is_regular_file(base)) {
      topo = loadTopologyFile(base);
    } else {
      std::string names;
      for (const auto& n : fixedPresetNames()) names += n + ", ";
      throw TopologyError(fmt::format(
          "'{}' is neither a preset ({}<N>xdgx-h100, <N>xdgx-h200, <N>xdgx-a100) nor a topology file", base, names));
    }
  }
  if (!mig.empty()) topo = applyMig(topo, mig);
  return topo;
}

}  // namespace tandem::sim
