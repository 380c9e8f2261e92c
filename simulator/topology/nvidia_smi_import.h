#pragma once
// Builds a Topology from what `nvidia-smi topo -m` (and optionally
// `nvidia-smi nvlink -s`) print on a machine.
//
// `topo -m` gives, for every pair of GPUs and NICs, the kind of path between
// them: X (self), NV# (# bonded NVLinks), PIX (at most one PCIe bridge), PXB
// (several bridges, no host bridge), PHB (through a host bridge), NODE
// (between host bridges of one NUMA node), SYS (across the socket
// interconnect). From these relations the importer synthesises a PCIe tree:
// a leaf switch per PIX group, a top switch per PXB group with several leaf
// groups, a host bridge per PHB group, a CPU per group of endpoints that are
// not SYS to each other (or share a NUMA node), and CPU-to-CPU links.
// NVLink: when a GPU's NV# counts add up to more links than the GPU has (18
// on H100/H200, 12 on A100, or as many as `nvlink -s` lists), the GPUs sit on
// an NVSwitch fabric and are joined to one nvswitch node; otherwise NV# pairs
// are direct links. gbps = lanes x per-link speed (from `nvlink -s`, else 25).
//
// All errors are TopologyError "FILE:LINE: message".

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "simulator/topology/topology.h"

namespace tandem::sim {

// The `topo -m` matrix as printed.
struct NvidiaSmiMatrix {
  std::vector<std::string> names;               // "GPU0", ..., "NIC0", ...
  std::vector<std::vector<std::string>> codes;  // codes[i][j]: "X", "NV18", "PIX", ...
  std::vector<std::string> attribute_names;     // "CPU Affinity", "NUMA Affinity", ...
  // Per row: attribute name -> value ("0-31"), only those present.
  std::vector<std::map<std::string, std::string>> attributes;
  std::map<std::string, std::string> nic_legend;  // "NIC0" -> "mlx5_0"

  int gpuCount() const;
};

// Per GPU, as `nvidia-smi nvlink -s` prints it.
struct NvlinkStatus {
  struct Gpu {
    int index = 0;
    std::string name;                 // "NVIDIA H200"
    std::vector<double> link_gbps;    // active links only, GB/s per direction
  };
  std::vector<Gpu> gpus;
};

NvidiaSmiMatrix parseNvidiaSmiTopo(const std::string& text, const std::string& source);
NvlinkStatus parseNvidiaSmiNvlink(const std::string& text, const std::string& source);

struct NvidiaSmiImportOptions {
  std::string name = "imported";  // topology name
  std::string host = "host0";
  std::string model;              // GPU model; empty: from the nvlink file
  double pcie_gbps = 0;           // per direction; 0: by model (Gen5 55, Gen4 25)
};

// `nvlink` is optional (nullptr). Throws TopologyError.
Topology importNvidiaSmi(const NvidiaSmiMatrix& matrix, const NvlinkStatus* nvlink,
                         const NvidiaSmiImportOptions& options);

// Reads the files, imports, and returns the YAML text with a header comment
// that says where it came from and what was assumed.
std::string importNvidiaSmiFilesToYaml(const std::string& topo_path, const std::string& nvlink_path,
                                       const NvidiaSmiImportOptions& options);

}  // namespace tandem::sim
