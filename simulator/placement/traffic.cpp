#include "simulator/placement/traffic.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace tandem::sim {

int familyTier(std::string_view family) {
  if (family == "tp" || family == "cp") return 0;
  if (family == "pipe" || family == "embed") return 1;
  if (family.size() > 2 && family.substr(0, 2) == "pp" &&
      std::all_of(family.begin() + 2, family.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return 1;
  if (family == "dp" || family == "shard" || family == "replica") return 2;
  return 3;
}

namespace {

// Bus bytes one member moves for a collective of `bytes` over `n` members
// (nccl-tests' convention; collectives.h).
double busBytes(CollectiveOp op, double bytes, int n) {
  if (n < 2) return 0;
  const double share = double(n - 1) / n;
  switch (op) {
    case CollectiveOp::AllReduce: return 2 * share * bytes;
    case CollectiveOp::AllGather:
    case CollectiveOp::ReduceScatter:
    case CollectiveOp::AllToAll: return share * bytes;
    case CollectiveOp::Broadcast:
    case CollectiveOp::Reduce:
    case CollectiveOp::Send: return bytes;
    case CollectiveOp::Recv: return 0;  // counted by its sender
  }
  return 0;
}

}  // namespace

std::vector<GroupTraffic> planTraffic(const Plan& plan) {
  const int world = plan.world_size;
  // Per family, the group index holding each rank (groups of one name
  // partition the ranks: process_groups.h).
  std::map<std::string, std::vector<int>, std::less<>> member_of;
  for (int g = 0; g < int(plan.groups.size()); ++g) {
    std::vector<int>& of = member_of[plan.groups[size_t(g)].name];
    if (of.empty()) of.assign(size_t(world), -1);
    for (int r : plan.groups[size_t(g)].ranks)
      if (r >= 0 && r < world) of[size_t(r)] = g;
  }
  // Per program and family, the weighted bus bytes of one rank.
  std::vector<std::map<std::string, double, std::less<>>> program_bytes(plan.programs.size());
  std::vector<int> program_of(size_t(world), -1);
  for (size_t p = 0; p < plan.programs.size(); ++p) {
    const RankPlan& prog = plan.programs[p];
    for (int r : prog.ranks)
      if (r >= 0 && r < world) program_of[size_t(r)] = int(p);
    if (prog.ranks.empty()) continue;
    const int rank = prog.ranks.front();
    for (const Task& t : prog.tasks) {
      if (!t.collective) continue;
      const CollectiveInfo& ci = *t.collective;
      auto fam = member_of.find(ci.group);
      if (fam == member_of.end() || rank < 0 || rank >= world) continue;
      const int g = fam->second[size_t(rank)];
      if (g < 0) continue;
      const int n = int(plan.groups[size_t(g)].ranks.size());
      const bool blocking = t.kind == TaskKind::SendRecv || ci.op == CollectiveOp::Send ||
                            ci.op == CollectiveOp::Recv ||
                            (t.stream >= 0 && size_t(t.stream) < prog.streams.size() &&
                             prog.streams[size_t(t.stream)].kind == StreamKind::Compute);
      program_bytes[p][ci.group] += busBytes(ci.op, double(ci.bytes), n) * (blocking ? 1.0 : kOverlappedWeight);
    }
  }
  std::vector<GroupTraffic> out;
  for (int g = 0; g < int(plan.groups.size()); ++g) {
    const ProcessGroup& group = plan.groups[size_t(g)];
    if (group.ranks.size() < 2) continue;
    double bytes = 0;
    for (int r : group.ranks) {
      if (r < 0 || r >= world || program_of[size_t(r)] < 0) continue;
      const auto& by_family = program_bytes[size_t(program_of[size_t(r)])];
      auto it = by_family.find(group.name);
      if (it != by_family.end()) bytes = std::max(bytes, it->second);
    }
    if (bytes > 0) out.push_back({g, group.name, familyTier(group.name), bytes});
  }
  return out;
}

bool cheaper(const PlacementCost& a, const PlacementCost& b) {
  constexpr double kRel = 1e-9;
  auto less = [](double x, double y) { return x < y - kRel * std::max(std::abs(x), std::abs(y)); };
  if (less(a.families_s, b.families_s)) return true;
  if (less(b.families_s, a.families_s)) return false;
  return less(a.groups_s, b.groups_s);
}

TrafficCost::TrafficCost(const Plan& plan, const Router& router, std::vector<GroupTraffic> traffic)
    : plan_(plan), router_(router), traffic_(std::move(traffic)) {
  std::map<std::string, int, std::less<>> index;
  for (const GroupTraffic& t : traffic_) {
    auto [it, inserted] = index.try_emplace(t.family, families_);
    if (inserted) ++families_;
    family_of_.push_back(it->second);
  }
}

double TrafficCost::ringGbps(std::vector<int> devices) const {
  const Topology& topo = router_.topology();
  std::sort(devices.begin(), devices.end(), [&](int a, int b) {
    const int ha = topo.nodeHost(a), hb = topo.nodeHost(b);
    return ha != hb ? ha < hb : a < b;
  });
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  const double inf = std::numeric_limits<double>::infinity();
  if (devices.size() < 2) return inf;
  // Members per host, in ring order.
  std::vector<std::vector<int>> hosts;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (i == 0 || topo.nodeHost(devices[i]) != topo.nodeHost(devices[i - 1])) hosts.emplace_back();
    hosts.back().push_back(devices[i]);
  }
  auto ring = [&](const std::vector<int>& d) {
    double g = inf;
    for (size_t i = 0; d.size() > 1 && i < d.size(); ++i) g = std::min(g, router_.bottleneckGbps(d[i], d[(i + 1) % d.size()]));
    return g;
  };
  const bool even = std::all_of(hosts.begin(), hosts.end(),
                                [&](const std::vector<int>& h) { return h.size() == hosts.front().size(); });
  if (hosts.size() == 1 || !even) return ring(devices);
  // Across hosts with as many members on each, the simulator (as NCCL)
  // reduces inside each host and crosses between hosts on every member's
  // own rail at once: the hop between hosts counts once per distinct NIC.
  double intra = inf, inter = inf;
  size_t rails = hosts.front().size();
  for (size_t h = 0; h < hosts.size(); ++h) {
    intra = std::min(intra, ring(hosts[h]));
    inter = std::min(inter, router_.bottleneckGbps(hosts[h].front(), hosts[(h + 1) % hosts.size()].front()));
    std::vector<int> nics;
    for (int d : hosts[h]) nics.push_back(router_.nicFor(d));
    std::sort(nics.begin(), nics.end());
    rails = std::min(rails, size_t(std::unique(nics.begin(), nics.end()) - nics.begin()));
  }
  return std::min(intra, double(std::max<size_t>(rails, 1)) * inter);
}

double TrafficCost::groupSeconds(const GroupTraffic& t, const std::vector<int>& rank_device) const {
  std::vector<int> devices;
  for (int r : plan_.groups[size_t(t.group)].ranks) devices.push_back(rank_device.at(size_t(r)));
  const double gbps = ringGbps(std::move(devices));
  return std::isinf(gbps) ? 0.0 : t.bytes / (gbps * 1e9);
}

PlacementCost TrafficCost::of(const std::vector<int>& rank_device) const {
  std::vector<double> worst(size_t(families_), 0);
  PlacementCost c;
  for (size_t i = 0; i < traffic_.size(); ++i) {
    const double s = groupSeconds(traffic_[i], rank_device);
    worst[size_t(family_of_[i])] = std::max(worst[size_t(family_of_[i])], s);
    c.groups_s += s;
  }
  for (double w : worst) c.families_s += w;
  return c;
}

}  // namespace tandem::sim
