#pragma once
// A machine (or cluster) as the simulator sees it: compute devices, switches
// and directed links between them. Loaded from YAML (resources/topologies/),
// generated for clusters, or imported from `nvidia-smi topo -m`.
//
// Units: bandwidth in GB/s (1e9 bytes/s) per direction, latency in ns,
// FLOP/s as plain numbers, memory in bytes.

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::sim {

struct DeviceSpec {
  std::string name;          // "gpu0"
  std::string model;         // "H200"
  double bf16_flops = 0;     // dense peak, FLOP/s
  double fp32_flops = 0;
  double hbm_gbps = 0;       // GB/s
  int64_t memory_bytes = 0;
  int sm_count = 0;
  int host = 0;              // index into Topology::hosts
  double mig_fraction = 1.0; // < 1 for a MIG slice
};

enum class NodeKind { Gpu, NvSwitch, PcieSwitch, HostBridge, Cpu, Nic, IbLeaf, IbSpine };

struct SwitchSpec {
  std::string name;
  NodeKind kind = NodeKind::NvSwitch;
  int host = -1;  // -1 for network switches outside any host
};

enum class LinkKind { NvLink, Pcie, InfiniBand, Ethernet, Internal };

// One direction of a physical connection. Bidirectional links in YAML become
// two Link entries. Endpoints are node ids: devices first (0..D-1), then
// switches (D..D+S-1).
struct Link {
  int src = -1;
  int dst = -1;
  double gbps = 0;        // GB/s in this direction (bonded links summed)
  int64_t latency_ns = 0;
  LinkKind kind = LinkKind::NvLink;
  int lanes = 1;          // bonded links (NV18 -> 18)
};

struct HostSpec {
  std::string name;
};

struct Topology {
  std::string name;
  std::string source;  // file or preset it came from
  std::vector<HostSpec> hosts;
  std::vector<DeviceSpec> devices;
  std::vector<SwitchSpec> switches;
  std::vector<Link> links;

  int nodeCount() const { return int(devices.size() + switches.size()); }
  std::string nodeName(int node) const;
};

}  // namespace tandem::sim
