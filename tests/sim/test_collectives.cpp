// Collectives on ideal links reproduce the closed-form ring costs exactly;
// algorithm and protocol choices behave like NCCL's.
#include <catch2/catch.hpp>

#include "sim_fixtures.h"
#include "simulator/network/collectives.h"
#include "simulator/replay/replay.h"
#include "simulator/topology/routing.h"
#include "simulator/topology/topology_presets.h"

using namespace tandem;
using namespace tandem::sim;
using namespace tandem::sim::testing;

namespace {

// Duration of one collective of `bytes` over every rank of a ring topology,
// simulated with ideal protocol parameters.
int64_t simulateOne(int n, CollectiveOp op, int64_t bytes, double gbps, int64_t alpha_ns) {
  Topology topo = ringTopology(n, gbps, alpha_ns);
  RankPlan rp = twoStreamProgram();
  rp.tasks.push_back(collective(0, 1, op, bytes, "world"));
  Plan plan = uniformPlan(n, rp);
  SimOptions opt;
  opt.nccl = NcclParams::ideal();
  opt.symmetry = SymmetryMode::Off;
  RooflineCostModel cost;
  SimResult r = simulatePlan(plan, topo, cost, opt);
  REQUIRE(r.collectives.size() == 1);
  return r.collectives[0].end_ns - r.collectives[0].start_ns;
}

}  // namespace

TEST_CASE("ring all-reduce on ideal links: 2(n-1)/n S/B + 2(n-1) alpha exactly", "[collectives]") {
  struct Case { int n; int64_t bytes; double gbps; int64_t alpha; };
  for (Case c : {Case{4, 8'000'000, 100, 700}, Case{8, 8'000'000, 50, 1000}, Case{2, 1 << 20, 64, 500},
                 Case{16, 16'000'000, 200, 300}}) {
    const double expected = 2.0 * (c.n - 1) / c.n * double(c.bytes) / c.gbps + 2.0 * (c.n - 1) * double(c.alpha);
    INFO("n=" << c.n << " bytes=" << c.bytes << " B=" << c.gbps << " alpha=" << c.alpha);
    CHECK(simulateOne(c.n, CollectiveOp::AllReduce, c.bytes, c.gbps, c.alpha) == int64_t(expected));
  }
}

TEST_CASE("ring all-gather and reduce-scatter: (n-1)/n S/B + (n-1) alpha", "[collectives]") {
  const int n = 8;
  const int64_t S = 16'000'000, alpha = 250;
  const double B = 100;
  const int64_t expected = int64_t((n - 1) * double(S) / n / B) + (n - 1) * alpha;
  CHECK(simulateOne(n, CollectiveOp::AllGather, S, B, alpha) == expected);
  CHECK(simulateOne(n, CollectiveOp::ReduceScatter, S, B, alpha) == expected);
}

TEST_CASE("broadcast is a pipelined chain: S/B + (n-1) alpha", "[collectives]") {
  CHECK(simulateOne(4, CollectiveOp::Broadcast, 1'000'000, 100, 400) == 10'000 + 3 * 400);
}

TEST_CASE("a ring's flows follow the machine order and each edge carries its share", "[collectives]") {
  Topology topo = ringTopology(4, 100, 100);
  Router router(topo);
  CollectiveBuilder b(router, NcclParams::ideal());
  CollectiveRequest req;
  req.op = CollectiveOp::AllReduce;
  req.bytes = 4000;
  req.nodes = {2, 0, 3, 1};  // group order differs from machine order
  CollectiveSchedule s = b.build(req);
  REQUIRE(s.phases.size() == 1);
  REQUIRE(s.phases[0].flows.size() == 4);
  for (const FlowSpec& f : s.phases[0].flows) {
    CHECK(f.bytes == Approx(6000.0));  // 2 (n-1)/n S
    REQUIRE(f.links.size() == 1);
    CHECK(topo.links[size_t(f.links[0])].dst == (topo.links[size_t(f.links[0])].src + 1) % 4);
  }
}

TEST_CASE("NCCL-like choice: LL for small messages, Simple for large ones", "[collectives]") {
  NcclParams p;
  p.call_floor_ns = 0;  // the floor would make every protocol equal for tiny sizes
  CollectiveChoice small = chooseCollective(p, CollectiveOp::AllReduce, 4096, 8, 450, 500, false);
  CollectiveChoice large = chooseCollective(p, CollectiveOp::AllReduce, int64_t(1) << 30, 8, 450, 500, false);
  CHECK(small.protocol == Protocol::LL);
  CHECK(large.protocol == Protocol::Simple);
  CHECK(large.channels > small.channels);
  CHECK(large.efficiency > small.efficiency);
  // Many ranks and a small message: the tree's log-depth latency wins.
  CollectiveChoice many = chooseCollective(p, CollectiveOp::AllReduce, 65536, 512, 50, 2000, false);
  CHECK(many.algorithm == Algorithm::Tree);
  // Forced choices are honoured.
  p.force_protocol = Protocol::LL128;
  p.force_algorithm = Algorithm::Ring;
  CollectiveChoice forced = chooseCollective(p, CollectiveOp::AllReduce, 65536, 512, 50, 2000, false);
  CHECK(forced.protocol == Protocol::LL128);
  CHECK(forced.algorithm == Algorithm::Ring);
}

TEST_CASE("multi-host all-reduce is hierarchical: intra, rails, intra", "[collectives]") {
  // Two hosts of two GPUs; inside a host a fast direct link, across hosts
  // GPU i of host 0 <-> GPU i of host 1 through one switch (a rail).
  Topology t;
  t.hosts = {{"h0"}, {"h1"}};
  for (int i = 0; i < 4; ++i) {
    DeviceSpec d;
    d.name = "gpu" + std::to_string(i);
    d.model = "TEST";
    d.host = i / 2;
    t.devices.push_back(d);
  }
  int sw = t.addSwitch("ib", NodeKind::IbLeaf, -1);
  t.addLink(0, 1, 400, 100, LinkKind::NvLink, 1);
  t.addLink(2, 3, 400, 100, LinkKind::NvLink, 1);
  for (int i = 0; i < 4; ++i) t.addLink(i, sw, 50, 1000, LinkKind::InfiniBand, 1);
  Router router(t);
  CollectiveBuilder b(router, NcclParams::ideal());
  CollectiveRequest req;
  req.op = CollectiveOp::AllReduce;
  req.bytes = 1 << 20;
  req.nodes = {0, 1, 2, 3};
  CollectiveSchedule s = b.build(req);
  REQUIRE(s.phases.size() == 3);
  CHECK(s.phases[0].label == "intra-reduce-scatter");
  CHECK(s.phases[1].label == "inter-all-reduce");
  CHECK(s.phases[2].label == "intra-all-gather");
  // Rails: local rank 0 of each host talks to local rank 0 of the other, S/2 each way... over the switch.
  for (const FlowSpec& f : s.phases[1].flows) CHECK(f.links.size() == 2);
  CHECK(s.phases[1].flows.size() == 4);
}

TEST_CASE("a calibrated (op, ranks) pair replaces the model", "[collectives]") {
  Topology topo = ringTopology(2, 100, 100);
  Router router(topo);
  CollectiveBuilder b(router, NcclParams{}, {CollectiveCalibration{CollectiveOp::AllReduce, 2, 12345, 10.0, {}}});
  CollectiveRequest req;
  req.op = CollectiveOp::AllReduce;
  req.bytes = 1000;
  req.nodes = {0, 1};
  CollectiveSchedule s = b.build(req);
  REQUIRE(s.phases.size() == 1);
  CHECK(s.phases[0].latency_ns == 12345);
  CHECK(s.phases[0].flows[0].rate_cap == Approx(10.0));
  CHECK(s.phases[0].flows[0].bytes == Approx(1000.0));  // bus bytes of a 2-rank all-reduce
}

TEST_CASE("cluster all-reduce: trees between rails where NCCL's tuner takes them, rings on request", "[collectives]") {
  Topology topo = makeDgxH100Cluster(4);
  Router router(topo);
  CollectiveRequest req;
  req.op = CollectiveOp::AllReduce;
  req.bytes = 64 << 10;
  for (int i = 0; i < 32; ++i) req.nodes.push_back(i);
  NcclParams rings_only;
  rings_only.inter_host_tree = false;
  CollectiveSchedule ring = CollectiveBuilder(router, rings_only).build(req);
  CHECK(ring.choice.algorithm == Algorithm::Ring);
  REQUIRE(ring.phases.size() == 3);
  CHECK(ring.phases[1].label == "inter-all-reduce");
  CHECK(ring.phases[1].flows.size() == 32);  // 8 rails, a ring of 4 hosts each
  // By default the small message takes the tree, its rails in closed form.
  CollectiveSchedule tree = CollectiveBuilder(router, NcclParams{}).build(req);
  CHECK(tree.choice.algorithm == Algorithm::Tree);
  REQUIRE(tree.phases.size() == 3);
  CHECK(tree.phases[1].label == "inter-tree-all-reduce");
  CHECK(tree.phases[1].flows.empty());
  // The tree's log-depth latency beats the ring's 2 (H-1) steps for a small message.
  CHECK(tree.phases[1].latency_ns < ring.phases[1].latency_ns);
  // Flow by flow on request: the same choice, the tree's edges moved.
  NcclParams flows;
  flows.tree_flows = true;
  CollectiveSchedule tree_flows = CollectiveBuilder(router, flows).build(req);
  CHECK(tree_flows.choice.algorithm == Algorithm::Tree);
  CHECK(!tree_flows.phases[1].flows.empty());
  // A large bucket still goes around the rings (bandwidth, not latency, decides).
  req.bytes = 256 << 20;
  CHECK(CollectiveBuilder(router, NcclParams{}).build(req).choice.algorithm == Algorithm::Ring);
}

TEST_CASE("the rails of a ring across many hosts are taken in closed form", "[collectives]") {
  // Beyond flow_hosts_limit hosts a ring's rails are not moved flow by flow:
  // the phase lasts what interHostNs predicts for them on an idle fabric.
  Topology topo = makeDgxH100Cluster(6);
  Router router(topo);
  CollectiveRequest req;
  req.op = CollectiveOp::AllReduce;
  req.bytes = 64 << 20;
  for (int i = 0; i < 48; ++i) req.nodes.push_back(i);
  NcclParams flows, closed;
  flows.inter_host_tree = closed.inter_host_tree = false;
  closed.flow_hosts_limit = 4;
  const CollectiveSchedule a = CollectiveBuilder(router, flows).build(req);
  const CollectiveSchedule b = CollectiveBuilder(router, closed).build(req);
  REQUIRE(a.phases.size() == 3);
  REQUIRE(b.phases.size() == 3);
  CHECK(a.phases[1].flows.size() == 48);  // 8 rails of 6 hosts
  CHECK(b.phases[1].flows.empty());
  // 8 MiB per rail; the ring's bus bytes, 2 (H-1)/H of it, at a rail's
  // 400 Gb/s (50 GB/s) with the choice's efficiency, plus 10 steps' latency.
  const double rate = b.choice.rate_cap_gbps > 0 ? std::min(50.0, b.choice.rate_cap_gbps) : 50.0;
  const double wire_ns = 2.0 * 5 / 6 * double(8 << 20) / b.choice.efficiency / rate;
  CHECK(double(b.phases[1].latency_ns) > wire_ns);
  CHECK(double(b.phases[1].latency_ns) < wire_ns * 1.2);
}

TEST_CASE("one builder for many collectives of a group gives what a fresh builder gives", "[collectives]") {
  // The builder keeps what it derives from a member list (ring order, host
  // groups, path figures) for later collectives of the same list; schedules
  // must not depend on what was built before.
  Topology topo = makeDgxH100Cluster(6);  // 48 GPUs
  Router router(topo);
  std::vector<std::vector<int>> groups;
  groups.push_back({});
  for (int g = 47; g >= 0; --g) groups.back().push_back(g);  // all, reversed: hierarchical
  groups.push_back({0, 9, 18, 27});                          // one per host: a flat ring
  groups.push_back({1, 2, 3, 8, 9, 10, 17});                 // uneven: flat
  for (bool inter_tree : {false, true}) {
    NcclParams params;
    params.inter_host_tree = inter_tree;
    CollectiveBuilder shared(router, params);
    for (int64_t bytes : {int64_t(6400), int64_t(1) << 20, int64_t(25) << 20, int64_t(160) << 20})
      for (CollectiveOp op : {CollectiveOp::AllReduce, CollectiveOp::AllGather, CollectiveOp::ReduceScatter,
                              CollectiveOp::Broadcast})
        for (const std::vector<int>& nodes : groups) {
          CollectiveRequest req;
          req.op = op;
          req.bytes = bytes;
          req.nodes = nodes;
          const CollectiveSchedule a = shared.build(req);
          Router fresh_router(topo);
          const CollectiveSchedule b = CollectiveBuilder(fresh_router, params).build(req);
          INFO("op " << int(op) << " bytes " << bytes << " members " << nodes.size() << " tree " << inter_tree);
          CHECK(a.choice.algorithm == b.choice.algorithm);
          CHECK(a.choice.protocol == b.choice.protocol);
          CHECK(a.choice.channels == b.choice.channels);
          CHECK(a.choice.efficiency == b.choice.efficiency);
          CHECK(a.floor_ns == b.floor_ns);
          REQUIRE(a.phases.size() == b.phases.size());
          for (size_t p = 0; p < a.phases.size(); ++p) {
            CHECK(a.phases[p].label == b.phases[p].label);
            CHECK(a.phases[p].latency_ns == b.phases[p].latency_ns);
            REQUIRE(a.phases[p].flows.size() == b.phases[p].flows.size());
            for (size_t f = 0; f < a.phases[p].flows.size(); ++f) {
              CHECK(a.phases[p].flows[f].links == b.phases[p].flows[f].links);
              CHECK(a.phases[p].flows[f].bytes == b.phases[p].flows[f].bytes);
              CHECK(a.phases[p].flows[f].rate_cap == b.phases[p].flows[f].rate_cap);
            }
          }
        }
  }
}
