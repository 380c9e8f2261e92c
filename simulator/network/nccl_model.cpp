#include "simulator/network/nccl_model.h"

#include <algorithm>
#include <cmath>

namespace tandem::sim {

std::string_view toString(Algorithm v) {
  switch (v) {
    case Algorithm::Ring: return "ring";
    case Algorithm::Tree: return "tree";
    case Algorithm::Nvls: return "nvls";
    case Algorithm::Direct: return "direct";
  }
  return "?";
}

std::string_view toString(Protocol v) {
  switch (v) {
    case Protocol::LL: return "ll";
    case Protocol::LL128: return "ll128";
    case Protocol::Simple: return "simple";
  }
  return "?";
}

std::optional<Algorithm> parseAlgorithm(std::string_view s) {
  for (Algorithm a : {Algorithm::Ring, Algorithm::Tree, Algorithm::Nvls, Algorithm::Direct})
    if (toString(a) == s) return a;
  return std::nullopt;
}

std::optional<Protocol> parseProtocol(std::string_view s) {
  for (Protocol p : {Protocol::LL, Protocol::LL128, Protocol::Simple})
    if (toString(p) == s) return p;
  return std::nullopt;
}

NcclParams NcclParams::ideal() {
  NcclParams p;
  for (ProtocolParams* q : {&p.ll, &p.ll128, &p.simple}) *q = ProtocolParams{1.0, 0, 0, INT64_MAX};
  p.op_efficiency.fill(1.0);
  p.op_latency_ns.fill(0);
  p.gain_per_doubling = 0;
  p.max_efficiency = 1.0;
  p.call_floor_ns = 0;
  p.channel_gbps = 0;  // no channel limit
  p.allow_tree = false;
  p.force_protocol = Protocol::Simple;
  return p;
}

const ProtocolParams& NcclParams::protocol(Protocol p) const {
  switch (p) {
    case Protocol::LL: return ll;
    case Protocol::LL128: return ll128;
    case Protocol::Simple: return simple;
  }
  return simple;
}

double ringBusBytes(CollectiveOp op, double bytes, int n) {
  if (n <= 1) return 0;
  const double f = double(n - 1) / n;
  switch (op) {
    case CollectiveOp::AllReduce: return 2 * f * bytes;
    case CollectiveOp::AllGather:
    case CollectiveOp::ReduceScatter: return f * bytes;
    case CollectiveOp::Broadcast:
    case CollectiveOp::Reduce: return bytes;  // pipelined chain: every link carries it all
    case CollectiveOp::AllToAll: return f * bytes;
    case CollectiveOp::Send:
    case CollectiveOp::Recv: return bytes;
  }
  return bytes;
}

int ringSteps(CollectiveOp op, int n) {
  if (n <= 1) return 0;
  switch (op) {
    case CollectiveOp::AllReduce: return 2 * (n - 1);
    case CollectiveOp::AllToAll:
    case CollectiveOp::Send:
    case CollectiveOp::Recv: return 1;
    default: return n - 1;
  }
}

namespace {

int treeDepth(int n) {
  int d = 0;
  while ((1 << d) < n) ++d;
  return d;
}

double busBytes(Algorithm a, CollectiveOp op, double bytes, int n) {
  switch (a) {
    // Two trees, half the buffer each; a node inner in one tree sends S/2 up
    // and S/2 to each of two children, and S/2 up as a leaf of the other: 2S.
    case Algorithm::Tree: return n > 2 ? 2 * bytes : bytes;
    case Algorithm::Nvls: return bytes;  // each GPU sends S to the switch and reads S back
    default: return ringBusBytes(op, bytes, n);
  }
}

int steps(Algorithm a, CollectiveOp op, int n) {
  switch (a) {
    case Algorithm::Tree: return 2 * treeDepth(n);
    case Algorithm::Nvls: return 2;
    default: return ringSteps(op, n);
  }
}

CollectiveChoice makeChoice(const NcclParams& p, Algorithm a, Protocol pr, CollectiveOp op,
                            int64_t bytes, int n) {
  const ProtocolParams& q = p.protocol(pr);
  CollectiveChoice c;
  c.algorithm = a;
  c.protocol = pr;
  const double bus = busBytes(a, op, double(bytes), n);
  double size_factor = 1.0;
  if (p.gain_per_doubling != 0 && bus > 0)
    size_factor = std::clamp(1 + p.gain_per_doubling * std::log2(bus / p.size_reference_bytes), 0.5, 1.5);
  c.efficiency = std::min(q.wire_efficiency * p.op_efficiency[size_t(op)] * size_factor, p.max_efficiency);
  c.base_latency_ns = q.base_latency_ns + p.op_latency_ns[size_t(op)];
  c.step_latency_ns = q.step_latency_ns;
  c.floor_ns = p.call_floor_ns;
  int64_t per_channel = std::max<int64_t>(1, p.bytes_per_channel);
  c.channels = int(std::clamp<int64_t>((bytes + per_channel - 1) / per_channel, 1, std::max(1, p.max_channels)));
  c.rate_cap_gbps = p.channel_gbps > 0 ? c.channels * p.channel_gbps : 0;
  return c;
}

}  // namespace

namespace {
double rateOf(const CollectiveChoice& c, double gbps) {
  return c.rate_cap_gbps > 0 ? std::min(gbps, c.rate_cap_gbps) : gbps;
}
}  // namespace

double interHostNs(const NcclParams& p, const CollectiveChoice& c, CollectiveOp op, double rail_bytes,
                   const HierarchyShape& hier) {
  const int H = hier.hosts;
  const bool tree = c.algorithm == Algorithm::Tree && op == CollectiveOp::AllReduce;
  const double bus = tree ? busBytes(Algorithm::Tree, op, rail_bytes, H) : ringBusBytes(op, rail_bytes, H);
  const int n_steps = tree ? steps(Algorithm::Tree, op, H) : ringSteps(op, H);
  const double rate = rateOf(c, hier.inter_gbps);
  return n_steps * double(c.step_latency_ns + hier.inter_hop_ns) + (rate > 0 ? bus / c.efficiency / rate : 0);
}

double predictNs(const NcclParams& p, const CollectiveChoice& c, CollectiveOp op, int64_t bytes, int n,
                 double path_gbps, int64_t hop_latency_ns, const HierarchyShape* hier) {
  auto rateOf = [&](double gbps) { return sim::rateOf(c, gbps); };
  const bool hierarchical = hier && hier->hosts > 1 && hier->per_host > 1 &&
                            (c.algorithm == Algorithm::Ring || c.algorithm == Algorithm::Tree) &&
                            (op == CollectiveOp::AllReduce || op == CollectiveOp::AllGather ||
                             op == CollectiveOp::ReduceScatter);
  double t = double(c.base_latency_ns);
  if (hierarchical) {
    const int k = hier->per_host;
    const double S = double(bytes);
    // Inside hosts: reduce-scatter and/or all-gather rings over the whole buffer.
    const int intra_parts = op == CollectiveOp::AllReduce ? 2 : 1;
    const double intra_bus = intra_parts * ringBusBytes(CollectiveOp::AllGather, S, k);
    const int intra_steps = intra_parts * ringSteps(CollectiveOp::AllGather, k);
    t += intra_steps * double(c.step_latency_ns + hier->intra_hop_ns);
    const double ri = rateOf(hier->intra_gbps);
    if (ri > 0) t += intra_bus / c.efficiency / ri;
    // Across hosts: the buffer's 1/k share per rail, by ring or tree.
    t += interHostNs(p, c, op, S / k, *hier);
  } else {
    const double wire = busBytes(c.algorithm, op, double(bytes), n) / c.efficiency;
    const double rate = rateOf(path_gbps);
    t += steps(c.algorithm, op, n) * double(c.step_latency_ns + hop_latency_ns) + (rate > 0 ? wire / rate : 0);
  }
  return std::max(t, double(c.floor_ns));
}

CollectiveChoice chooseCollective(const NcclParams& p, CollectiveOp op, int64_t bytes, int n,
                                  double path_gbps, int64_t hop_latency_ns, bool nvls_possible,
                                  const HierarchyShape* hier) {
  std::vector<Algorithm> algos;
  if (op == CollectiveOp::AllToAll || op == CollectiveOp::Send || op == CollectiveOp::Recv) {
    algos = {Algorithm::Direct};
  } else if (p.force_algorithm) {
    algos = {*p.force_algorithm};
    if (algos[0] == Algorithm::Tree && op != CollectiveOp::AllReduce) algos = {Algorithm::Ring};
    if (algos[0] == Algorithm::Nvls && (!nvls_possible || op != CollectiveOp::AllReduce))
      algos = {Algorithm::Ring};
  } else {
    algos = {Algorithm::Ring};
    const bool multi_host = hier && hier->hosts > 1;
    if (p.allow_tree && op == CollectiveOp::AllReduce && n > 2 && (!multi_host || p.inter_host_tree))
      algos.push_back(Algorithm::Tree);
    if (p.allow_nvls && nvls_possible && op == CollectiveOp::AllReduce) algos.push_back(Algorithm::Nvls);
  }
  std::vector<Protocol> protos;
  if (p.force_protocol) {
    protos = {*p.force_protocol};
  } else {
    for (Protocol pr : {Protocol::LL, Protocol::LL128, Protocol::Simple})
      if (bytes <= p.protocol(pr).max_bytes) protos.push_back(pr);
  }
  // Strict < keeps the first of equal candidates: ring before tree, LL before Simple.
  CollectiveChoice best;
  double best_ns = -1;
  for (Algorithm a : algos) {
    for (Protocol pr : protos) {
      CollectiveChoice c = makeChoice(p, a, pr, op, bytes, n);
      double t = predictNs(p, c, op, bytes, n, path_gbps, hop_latency_ns, hier);
      if (best_ns < 0 || t < best_ns) {
        best = c;
        best_ns = t;
      }
    }
  }
  return best;
}

}  // namespace tandem::sim
