#pragma once
// Built-in topologies, GPU model figures and MIG slicing.
//
// loadTopology("dgx-h100") resolves, in order:
//   1. a fixed preset name (h200x2-nv18, dgx-h100, dgx-h200, pcie-4gpu,
//      hgx-a100, pcie4-nvbridge), whose YAML text is compiled into the binary
//      and identical to resources/topologies/<name>.yaml;
//   2. a generated cluster "<N>xdgx-h100", "<N>xdgx-h200" or "<N>xdgx-a100"
//      (also with "×");
//   3. a file path.
// Any of them may end in ":mig=<profile>" ("dgx-h100:mig=3g.40gb") to cut
// every GPU into MIG slices.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "simulator/topology/topology.h"

namespace tandem::sim {

struct PresetInfo {
  std::string name;
  std::string description;
};

// Fixed presets plus one entry describing the generated cluster syntax.
std::vector<PresetInfo> listPresets();

// The embedded YAML text of a fixed preset, or nullopt.
std::optional<std::string_view> presetYaml(std::string_view name);

// Names of the fixed presets, in listing order.
std::vector<std::string> fixedPresetNames();

// See the header comment. Throws TopologyError naming the allowed presets
// when `name_or_file` is neither a preset nor a readable file.
Topology loadTopology(const std::string& name_or_file);

// N DGX hosts of 8 GPUs joined by a rail-optimised, non-blocking two-level
// InfiniBand fat tree, one NIC per GPU: "dgx-h100" and "dgx-h200" (NVLink4,
// 8 rails of 400 Gb/s: NVIDIA Eos), "dgx-a100" (NVLink3 300 GB/s per GPU, 8
// rails of 200 Gb/s HDR: NVIDIA Selene); "grand-teton-500w" and
// "grand-teton-700w" (Meta's hosts of 8 H100, NVLink4, one 400 Gb/s NIC per
// GPU on RoCE: the 96 GB part at 500 W where torchtitan's published runs
// ran, the 80 GB part at 700 W of the Llama 3 clusters); "dgx-b200",
// "gb200-nvl72", "gb300-nvl72" (Blackwell; an NVL72 host is a rack of 72
// GPUs on one NVLink domain). 1 <= hosts <= 4096.
//
// The fabric can be another (FabricOptions; in a preset name as options
// after a colon: "128xdgx-h100:fabric=roce:oversubscription=2:rails=off"):
// RoCE (Ethernet links: each pair of GPUs hashed onto a spine, ECMP,
// where InfiniBand routes by destination), oversubscribed (1/s of the
// spines: leaves with s times more bandwidth down than up), and a plain
// fat tree (every NIC of a host on one leaf, 4 hosts per 64-port leaf)
// instead of rail-optimised leaves.
struct FabricOptions {
  std::optional<bool> roce;  // unset: the system's own (InfiniBand for DGX, RoCE for Grand Teton)
  int oversubscription = 1;  // >= 1, dividing the leaf's 32 uplinks
  bool rail_optimised = true;
};
Topology makeDgxCluster(std::string_view system, int hosts, const FabricOptions& fabric = {});
Topology makeDgxH100Cluster(int hosts);

// Figures of a known GPU model ("H100", "H200", "A100-80GB", ...; names as
// nvidia-smi prints them, "NVIDIA H200", are accepted too). Name and host of
// the result are empty/0.
std::optional<DeviceSpec> gpuModelSpec(std::string_view model);
std::vector<std::string> knownGpuModels();

// A MIG profile "<g>g.<m>gb": g compute slices of 7, memory in GB.
struct MigProfile {
  std::string name;
  int compute_slices = 0;   // of 7
  int memory_eighths = 0;   // of 8 (1, 2, 4 or 8)
  int instances = 0;        // how many fit on one GPU
};
// Throws TopologyError for a malformed profile or one that does not fit.
MigProfile parseMigProfile(std::string_view profile, const DeviceSpec& gpu);

// Replaces each GPU named in `gpus` (all when empty) by the slices of
// `profile`. Slices are named "<gpu>.mig<k>"; they share a GpuHub switch
// "<gpu>.hub" that takes over the GPU's links, and reach it by internal links
// of the slice's share of HBM bandwidth. Each slice keeps its fraction of
// SMs, FLOP/s, memory and HBM bandwidth.
Topology applyMig(const Topology& topo, std::string_view profile,
                  const std::vector<std::string>& gpus = {});

}  // namespace tandem::sim
