#pragma once
// A machine (or cluster) as the simulator sees it: compute devices, switches
// and directed links between them. Loaded from YAML (resources/topologies/),
// generated for clusters, or imported from `nvidia-smi topo -m`.
//
// Units: bandwidth in GB/s (1e9 bytes/s) per direction, latency in ns,
// FLOP/s as plain numbers, memory in bytes.
//
// Node ids: devices first (0..D-1), then switches (D..D+S-1). Link indices
// are positions in Topology::links; routes (simulator/topology/routing.h) are lists of
// them.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::sim {

// Any problem with a topology: a bad file, an unknown preset, a disconnected
// GPU. The message names the file, line and field where there is one.
class TopologyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct DeviceSpec {
  std::string name;          // "gpu0"
  std::string model;         // "H200"
  double bf16_flops = 0;     // dense peak, FLOP/s
  double fp32_flops = 0;
  double fp8_flops = 0;      // dense FP8 tensor-core peak; 0: none (A100), FP8 GEMMs cannot be simulated
  double hbm_gbps = 0;       // GB/s
  int64_t memory_bytes = 0;
  int sm_count = 0;
  // The fastest large BF16 GEMM's rate over bf16_flops (measured; 0:
  // unknown). The roofline's GEMM efficiencies are the H100's; another GPU's
  // scale by its fraction over the H100's (RooflineCostModel).
  double best_gemm_fraction = 0;
  int host = 0;              // index into Topology::hosts
  double mig_fraction = 1.0; // < 1 for a MIG slice
  std::string mig_profile;   // "3g.40gb" for a MIG slice, empty otherwise
  // Kernels on it take 1 / speed as long as the model's figures or the
  // calibration say: a GPU held at a lower clock than its peers (what-if
  // studies of a straggler; measured: 5% between the two H200s of one
  // machine, docs/benchmarks.md).
  double speed = 1.0;
};

// GpuHub: the crossbar of one physical GPU that its MIG slices share; the
// GPU's external links attach to it (see topology_presets.h, applyMig).
enum class NodeKind { Gpu, NvSwitch, PcieSwitch, HostBridge, Cpu, Nic, IbLeaf, IbSpine, GpuHub };

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
  std::string source;       // file or preset it came from
  std::string description;  // one line, shown by `tandem topo list`
  std::vector<HostSpec> hosts;
  std::vector<DeviceSpec> devices;
  std::vector<SwitchSpec> switches;
  std::vector<Link> links;

  int nodeCount() const { return int(devices.size() + switches.size()); }
  std::string nodeName(int node) const;
  bool isDevice(int node) const { return node >= 0 && node < int(devices.size()); }
  NodeKind nodeKind(int node) const;
  // Host index of a node; -1 for switches outside any host.
  int nodeHost(int node) const;
  // Node id of a device or switch by name; -1 when there is none. Linear scan:
  // callers that look up many names build their own map.
  int findNode(std::string_view name) const;

  // Adds both directions of a connection (or one when bidirectional is false).
  void addLink(int a, int b, double gbps, int64_t latency_ns, LinkKind kind, int lanes,
               bool bidirectional = true);
  int addSwitch(std::string switch_name, NodeKind kind, int host);
};

std::string_view toString(NodeKind v);
std::string_view toString(LinkKind v);
std::optional<NodeKind> parseNodeKind(std::string_view s);  // "nvswitch", "ib_leaf", ...
std::optional<LinkKind> parseLinkKind(std::string_view s);  // "nvlink", "pcie", ...

// A pair of devices (ids) where the first cannot reach the second without
// transiting a device, or {-1, -1} when every device reaches every other.
std::pair<int, int> findUnreachableDevices(const Topology& topo);

// Throws TopologyError when a device cannot reach every other device through
// links (routing never passes through a device, only through switches), when a
// link has a bad endpoint or a bandwidth that is not positive.
void validateTopology(const Topology& topo);

}  // namespace tandem::sim
