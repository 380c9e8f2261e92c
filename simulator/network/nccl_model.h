#pragma once
// NCCL-like choices for one collective: algorithm (ring, tree, NVLS, direct),
// protocol (LL, LL128, Simple) and channel count, plus the latency and
// bandwidth-efficiency figures that turn bus bytes into wire bytes and a
// fixed latency. Like NCCL's tuner, the choice is the one with the lowest
// predicted time for the message size and rank count.
//
// The defaults are documented in docs/simulator.md; the op efficiencies, the
// Simple latencies and the per-call floor were fitted to PyTorch+NCCL
// measurements on two H200 joined by NV18 (shared reference nccl-torch-bw).

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "engine/plan/plan.h"

namespace tandem::sim {

enum class Algorithm { Ring, Tree, Nvls, Direct };
enum class Protocol { LL, LL128, Simple };
std::string_view toString(Algorithm v);
std::string_view toString(Protocol v);
std::optional<Algorithm> parseAlgorithm(std::string_view s);
std::optional<Protocol> parseProtocol(std::string_view s);

struct ProtocolParams {
  double wire_efficiency = 1.0;  // payload / bytes on the wire (LL: 8-byte flag per 8 bytes)
  int64_t base_latency_ns = 0;   // per collective call: launch and completion sync
  int64_t step_latency_ns = 0;   // per algorithm step, added to the route's link latency
  int64_t max_bytes = INT64_MAX; // NCCL never picks the protocol above this per-rank size
};

struct NcclParams {
  // Base latencies are per call as measured end to end (launch, proxy and
  // completion), which on the reference machine hides the protocols'
  // difference in start-up cost; they differ per step.
  ProtocolParams ll{0.5, 11000, 600, 256 << 10};
  ProtocolParams ll128{120.0 / 128.0, 11000, 1000, 64 << 20};
  ProtocolParams simple{1.0, 11000, 1500, INT64_MAX};
  // Extra per-call latency of each CollectiveOp (indexed by CollectiveOp):
  // fitted, reduce-scatter calls start measurably faster than the others.
  std::array<int64_t, 8> op_latency_ns{4500, 3500, 0, 3500, 3500, 3500, 0, 0};
  // Fraction of the link bandwidth a collective's data movement reaches at the
  // reference size (copy/reduce kernels, synchronisation), per CollectiveOp.
  // Indexed by CollectiveOp.
  std::array<double, 8> op_efficiency{0.632, 0.527, 0.485, 0.60, 0.60, 0.55, 0.80, 0.80};
  // Efficiency grows by this fraction per doubling of the per-rank bytes above
  // size_reference_bytes (and shrinks below it): measured NCCL bus bandwidth
  // keeps rising up to 1 GiB. Clamped to [0.5, 1.5] times, and to max_efficiency.
  double gain_per_doubling = 0.03;
  double size_reference_bytes = double(64 << 20);
  double max_efficiency = 0.95;  // no protocol moves payload at the full link rate
  // No call completes faster than this: back-to-back calls from an eager
  // framework are bounded by host launch overhead (about 20 us in PyTorch).
  // Set 0 for CUDA-graph replays.
  int64_t call_floor_ns = 20000;
  // Channels: NCCL spreads a collective over channels (one SM each); small
  // messages use few, which limits their rate.
  int max_channels = 32;
  int64_t bytes_per_channel = 128 << 10;
  double channel_gbps = 40.0;
  bool allow_tree = true;
  bool allow_nvls = false;  // NVSwitch multicast all-reduce (NVSwitch topologies only)
  // Trees across hosts (between the rails of a hierarchical all-reduce), as
  // NCCL's tuner weighs them: log-depth latency where rings take 2 (H-1)
  // steps, which decides at hundreds of hosts.
  bool inter_host_tree = true;
  // How the across-hosts part of a hierarchical collective is simulated. The
  // rails are identical, so by default a tree's is taken in closed form
  // (interHostNs), as is a ring's beyond flow_hosts_limit hosts; below it a
  // ring's flows share the fabric with every other flow. tree_flows moves a
  // tree's flows one by one instead: on hashed (ECMP) fat trees its edges
  // collide on spine links and every collision gives flows their own finish
  // time, which at 1000+ GPUs is slow to simulate.
  bool tree_flows = false;
  int flow_hosts_limit = 128;
  std::optional<Algorithm> force_algorithm;
  std::optional<Protocol> force_protocol;

  // No protocol overhead at all: efficiency 1, no latency beyond the links,
  // no floor, no channel limit. The closed-form ring formulas hold exactly.
  static NcclParams ideal();
  const ProtocolParams& protocol(Protocol p) const;
};

struct CollectiveChoice {
  Algorithm algorithm = Algorithm::Ring;
  Protocol protocol = Protocol::Simple;
  int channels = 1;
  double efficiency = 1.0;       // payload / wire bytes, all factors together
  int64_t base_latency_ns = 0;
  int64_t step_latency_ns = 0;   // without link latency
  int64_t floor_ns = 0;
  double rate_cap_gbps = 0;      // per flow; 0 = none
};

// Per-rank bytes each rank sends in a ring or tree for `op` over `n` ranks,
// where `bytes` is the full buffer (all-reduce buffer, all-gather output,
// reduce-scatter input, broadcast buffer, all-to-all send buffer).
double ringBusBytes(CollectiveOp op, double bytes, int n);
int ringSteps(CollectiveOp op, int n);

// A group spread evenly over several hosts: collectives run inside each host
// and across hosts between ranks of the same local index (the rails).
struct HierarchyShape {
  int hosts = 1;
  int per_host = 1;
  double intra_gbps = 0, inter_gbps = 0;        // narrowest path inside a host / along a rail
  int64_t intra_hop_ns = 0, inter_hop_ns = 0;   // worst link latency of one step
};

// Picks algorithm, protocol and channels for a collective of `bytes` over `n`
// ranks whose narrowest path is `path_gbps` with `hop_latency_ns` per step.
// `nvls_possible`: every member hangs directly off NVSwitch chips.
// With `hier`, ring and tree are predicted as their hierarchical forms.
CollectiveChoice chooseCollective(const NcclParams& p, CollectiveOp op, int64_t bytes, int n,
                                  double path_gbps, int64_t hop_latency_ns, bool nvls_possible,
                                  const HierarchyShape* hier = nullptr);

// The across-hosts part of a hierarchical collective (its rail all-reduce,
// all-gather or reduce-scatter of `rail_bytes`, the buffer's 1/k share),
// without the call's base latency: steps times (protocol step + the rails'
// hop latency) plus bus bytes at the rails' rate. predictNs adds it for that
// part; the simulator uses it where it does not move the rails' flows.
double interHostNs(const NcclParams& p, const CollectiveChoice& c, CollectiveOp op, double rail_bytes,
                   const HierarchyShape& hier);

// Time the choice predicts on an otherwise idle network (ns).
double predictNs(const NcclParams& p, const CollectiveChoice& c, CollectiveOp op, int64_t bytes,
                 int n, double path_gbps, int64_t hop_latency_ns, const HierarchyShape* hier = nullptr);

}  // namespace tandem::sim
