// The discrete-event replay: streams, events, collective matching, send/recv,
// determinism, deadlocks and symmetric ranks.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <set>

#include "sim_fixtures.h"
#include "simulator/replay/replay.h"

using namespace tandem;
using namespace tandem::sim;
using namespace tandem::sim::testing;

namespace {

SimOptions idealOptions(SymmetryMode mode = SymmetryMode::Off) {
  SimOptions o;
  o.nccl = NcclParams::ideal();
  o.symmetry = mode;
  return o;
}

// Every rank: compute k0 -> k1 (records event 0) -> k2; the comm stream's
// all-reduce waits on event 0 and records event 1; k3 waits on event 1.
RankPlan overlapProgram() {
  RankPlan rp = twoStreamProgram();
  rp.num_events = 2;
  rp.tasks.push_back(kernel(0, 0, 1e9, 0));
  Task k1 = kernel(1, 0, 2e9, 0);
  k1.record_event = 0;
  rp.tasks.push_back(k1);
  Task ar = collective(2, 1, CollectiveOp::AllReduce, 4'000'000, "world");
  ar.wait_events = {0};
  ar.record_event = 1;
  rp.tasks.push_back(ar);
  rp.tasks.push_back(kernel(3, 0, 4e9, 0, Phase::Backward));
  Task k4 = kernel(4, 0, 1e9, 0, Phase::Optimizer);
  k4.wait_events = {1};
  rp.tasks.push_back(k4);
  rp.memory.peak_bytes = 12345;
  return rp;
}

// By value: the list joins each record with the plan's fields on access.
// The task's (first) activity, its main kernel's for a task with trailing
// kernels.
SimActivity activityOf(const SimRank& r, int task_id) {
  for (const SimActivity a : r.activities)
    if (a.task_id == task_id && !a.trailing) return a;
  FAIL("no activity for task " << task_id);
  return r.activities.front();
}

std::vector<SimActivity> activitiesOf(const SimRank& r, int task_id) {
  std::vector<SimActivity> out;
  for (const SimActivity a : r.activities)
    if (a.task_id == task_id) out.push_back(a);
  return out;
}

// The plan simulated with compute slowed by `f` while a collective is
// resident, and without any slowdown.
std::pair<SimResult, SimResult> slowedAndPlain(const Plan& plan, const Topology& topo, double f) {
  RooflineParams params = RooflineParams::defaults();
  params.comm_slowdown = f;
  const RooflineCostModel slowed(params);
  params.comm_slowdown = 1.0;
  const RooflineCostModel plain(params);
  return {simulatePlan(plan, topo, slowed, idealOptions()), simulatePlan(plan, topo, plain, idealOptions())};
}

}  // namespace

TEST_CASE("streams run in order, events join them, communication overlaps compute", "[engine]") {
  Topology topo = ringTopology(4, 100, 500);
  Plan plan = uniformPlan(4, overlapProgram());
  RooflineCostModel cost;
  SimResult r = simulatePlan(plan, topo, cost, idealOptions());
  REQUIRE(r.ranks.size() == 4);
  const SimRank& r0 = r.ranks[0];
  const SimActivity k1 = activityOf(r0, 1);
  const SimActivity ar = activityOf(r0, 2);
  const SimActivity k3 = activityOf(r0, 3);
  const SimActivity k4 = activityOf(r0, 4);
  CHECK(ar.start_ns == k1.end_ns);         // waits for event 0
  CHECK(k3.start_ns == k1.end_ns);         // same stream, next in order
  CHECK(k4.start_ns == std::max(k3.end_ns, ar.end_ns));
  CHECK(k4.start_ns >= ar.end_ns);         // waits for event 1
  // 4 MB ring all-reduce over 4 ranks at 100 GB/s + 6 steps of 500 ns.
  CHECK(ar.end_ns - ar.start_ns == 60'000 + 3'000);
  SimRankSummary s = summarizeRank(r, 0);
  CHECK(s.step_ns == r.step_ns);
  CHECK(s.comm_ns == 63'000);
  CHECK(s.overlap_ns + s.exposed_comm_ns == s.comm_ns);
  CHECK(s.peak_memory_bytes == 12345);
  CHECK(s.backward_ns == k3.end_ns - k3.start_ns);
}

TEST_CASE("activities carry the plan task's fields and outlive the plan", "[engine]") {
  // The engine stores only each activity's task and times; the list fills in
  // the rest from its own copy of the program's tasks, so it must still give
  // the plan's values after the Plan is gone.
  RankPlan rp = overlapProgram();
  rp.tasks[1].layer = 7;
  rp.tasks[1].micro_batch = 3;
  rp.tasks[1].bytes_read = 1000;
  rp.tasks[1].bytes_written = 24;
  SimResult r;
  {
    const Plan plan = uniformPlan(2, rp);
    r = simulatePlan(plan, ringTopology(2, 100, 500), RooflineCostModel(), idealOptions());
  }
  for (const SimRank& rank : r.ranks) {
    REQUIRE(rank.activities.size() == rp.tasks.size());
    size_t i = 0;
    for (auto it = rank.activities.begin(); it != rank.activities.end(); ++it, ++i) {
      const SimActivity a = *it;
      REQUIRE(a.task >= 0);
      REQUIRE(a.task < int(rp.tasks.size()));
      const Task& t = rp.tasks[size_t(a.task)];
      CHECK(a.task_id == t.id);
      CHECK(a.stream == t.stream);
      CHECK(a.kind == t.kind);
      CHECK(a.phase == t.phase);
      CHECK(a.layer == t.layer);
      CHECK(a.micro_batch == t.micro_batch);
      CHECK(a.flops == t.flops);
      CHECK(a.bytes == (t.collective ? t.collective->bytes : t.bytes_read + t.bytes_written));
      // Iteration, indexing and the raw records agree.
      CHECK(rank.activities[i].task == a.task);
      CHECK(rank.activities.records()[i].task == a.task);
      CHECK(rank.activities.records()[i].start_ns == a.start_ns);
      CHECK(rank.activities.endNs(rank.activities.records()[i]) == a.end_ns);
      CHECK(a.end_ns >= a.start_ns);
    }
  }
  const SimActivity k1 = activityOf(r.ranks[0], 1);
  CHECK(k1.layer == 7);
  CHECK(k1.micro_batch == 3);
  CHECK(k1.bytes == 1024);
}

TEST_CASE("activities longer than a record's duration field keep their end", "[engine]") {
  // A record holds the duration in 32 bits (up to 4.3 s); longer tasks keep
  // their end in the run's table of long activities.
  RankPlan rp = twoStreamProgram();
  rp.tasks.push_back(kernel(0, 0, 1e9, 0));
  rp.tasks.push_back(kernel(1, 0, 1e16, 0));  // about 14 s at 70% of 1e15 FLOP/s
  rp.tasks.push_back(kernel(2, 0, 1e9, 0));
  rp.tasks.push_back(kernel(3, 1, 2e16, 0));  // another stream: two long records interleaved
  const RooflineCostModel cost;
  const SimResult r = simulatePlan(uniformPlan(2, rp), ringTopology(2, 100, 500), cost, idealOptions());
  for (const SimRank& rank : r.ranks) {
    const SimActivity k0 = activityOf(rank, 0), k1 = activityOf(rank, 1), k2 = activityOf(rank, 2),
                      k3 = activityOf(rank, 3);
    CHECK(k1.end_ns - k1.start_ns > int64_t(UINT32_MAX));
    CHECK(k3.end_ns - k3.start_ns > k1.end_ns - k1.start_ns);
    CHECK(k1.start_ns == k0.end_ns);  // same stream, in order
    CHECK(k2.start_ns == k1.end_ns);
    CHECK(k2.end_ns - k2.start_ns == k0.end_ns - k0.start_ns);  // same task shape, short
    CHECK(rank.end_ns == std::max(k2.end_ns, k3.end_ns) + cost.stepOverheadNs());
  }
  CHECK(r.step_ns == r.ranks[0].end_ns);
}

TEST_CASE("the same inputs give identical results", "[engine]") {
  Topology topo = ringTopology(8, 100, 500);
  RankPlan rp = overlapProgram();
  // More collectives in flight on a second comm stream, to make contention.
  rp.streams.push_back(StreamInfo{2, StreamKind::Comm, "comm2"});
  rp.tasks.push_back(collective(5, 2, CollectiveOp::AllGather, 3'000'000, "world"));
  rp.tasks.push_back(collective(6, 2, CollectiveOp::ReduceScatter, 5'000'000, "world"));
  Plan plan = uniformPlan(8, rp);
  RooflineCostModel cost;
  SimOptions opt;  // default NCCL model: protocols, channels, floor
  opt.symmetry = SymmetryMode::Off;
  SimResult a = simulatePlan(plan, topo, cost, opt);
  SimResult b = simulatePlan(plan, topo, cost, opt);
  REQUIRE(a.ranks.size() == b.ranks.size());
  CHECK(a.step_ns == b.step_ns);
  for (size_t i = 0; i < a.ranks.size(); ++i) {
    REQUIRE(a.ranks[i].activities.size() == b.ranks[i].activities.size());
    for (size_t j = 0; j < a.ranks[i].activities.size(); ++j) {
      CHECK(a.ranks[i].activities[j].task_id == b.ranks[i].activities[j].task_id);
      CHECK(a.ranks[i].activities[j].start_ns == b.ranks[i].activities[j].start_ns);
      CHECK(a.ranks[i].activities[j].end_ns == b.ranks[i].activities[j].end_ns);
    }
  }
  REQUIRE(a.links.size() == b.links.size());
  for (size_t i = 0; i < a.links.size(); ++i) CHECK(a.links[i].bytes == b.links[i].bytes);
  CHECK(a.stats.events == b.stats.events);
}

TEST_CASE("a collective waits for its slowest member", "[engine]") {
  Topology topo = ringTopology(2, 100, 0);
  Plan plan;
  plan.world_size = 2;
  plan.groups = {ProcessGroup{"world", {0, 1}}};
  RankPlan fast = twoStreamProgram();
  fast.tasks.push_back(collective(0, 1, CollectiveOp::AllReduce, 1000, "world"));
  RankPlan slow = twoStreamProgram();
  slow.num_events = 1;
  Task k = kernel(0, 0, 1e12, 0);  // 1 ms at peak 1e15, longer at 70%
  k.record_event = 0;
  slow.tasks.push_back(k);
  Task ar = collective(1, 1, CollectiveOp::AllReduce, 1000, "world");
  ar.wait_events = {0};
  slow.tasks.push_back(ar);
  fast.ranks = {0};
  slow.ranks = {1};
  plan.programs = {fast, slow};
  RooflineCostModel cost;
  SimResult r = simulatePlan(plan, topo, cost, idealOptions(SymmetryMode::Auto));
  const SimActivity a0 = r.ranks[0].activities.at(0);
  const SimActivity a1 = activityOf(r.ranks[1], 1);
  CHECK(a0.start_ns == 0);  // rank 0 enters at once and spins
  CHECK(a1.start_ns > 1'000'000);
  CHECK(a0.end_ns == a1.end_ns);
  // The group mixes programs at the same place in each: symmetric, each
  // program's one rank its representative.
  CHECK(r.stats.symmetric);
}

TEST_CASE("send and recv match by order between the same two ranks", "[engine]") {
  Topology topo = ringTopology(2, 100, 1000);
  Plan plan;
  plan.world_size = 2;
  plan.groups = {ProcessGroup{"pp0-1", {0, 1}}};
  RankPlan sender = twoStreamProgram();
  sender.tasks.push_back(collective(0, 1, CollectiveOp::Send, 100'000, "pp0-1"));
  sender.tasks.push_back(collective(1, 1, CollectiveOp::Send, 300'000, "pp0-1"));
  RankPlan receiver = twoStreamProgram();
  receiver.num_events = 1;
  Task k = kernel(0, 0, 1e9, 0);
  k.record_event = 0;
  receiver.tasks.push_back(k);
  Task r0 = collective(1, 1, CollectiveOp::Recv, 100'000, "pp0-1");
  r0.wait_events = {0};
  receiver.tasks.push_back(r0);
  receiver.tasks.push_back(collective(2, 1, CollectiveOp::Recv, 300'000, "pp0-1"));
  sender.ranks = {0};
  receiver.ranks = {1};
  plan.programs = {sender, receiver};
  RooflineCostModel cost;
  SimResult r = simulatePlan(plan, topo, cost, idealOptions());
  const SimActivity s0 = activityOf(r.ranks[0], 0);
  const SimActivity s1 = activityOf(r.ranks[0], 1);
  const SimActivity v0 = activityOf(r.ranks[1], 1);
  const SimActivity v1 = activityOf(r.ranks[1], 2);
  CHECK(s0.end_ns == v0.end_ns);
  CHECK(s1.end_ns == v1.end_ns);
  // The first transfer starts when the receiver posts its recv: 1 us link
  // latency plus 100 kB at 100 GB/s; the second follows: 3 us + 1 us.
  CHECK(v0.end_ns - v0.start_ns == 1'000 + 1'000);
  CHECK(v1.end_ns - v0.end_ns == 1'000 + 3'000);
  CHECK(s0.start_ns == 0);
}

TEST_CASE("a mismatched send/recv size is reported", "[engine]") {
  Topology topo = ringTopology(2, 100, 1000);
  Plan plan;
  plan.world_size = 2;
  plan.groups = {ProcessGroup{"p2p", {0, 1}}};
  RankPlan a = twoStreamProgram(), b = twoStreamProgram();
  a.tasks.push_back(collective(0, 1, CollectiveOp::Send, 100, "p2p"));
  b.tasks.push_back(collective(0, 1, CollectiveOp::Recv, 200, "p2p"));
  a.ranks = {0};
  b.ranks = {1};
  plan.programs = {a, b};
  RooflineCostModel cost;
  CHECK_THROWS_WITH(simulatePlan(plan, topo, cost, idealOptions()), Catch::Contains("mismatched"));
}

TEST_CASE("deadlock on an event nobody records names rank, task, stream and event", "[engine]") {
  Topology topo = ringTopology(2, 100, 100);
  RankPlan rp = twoStreamProgram();
  rp.num_events = 1;
  Task k = kernel(7, 0, 1e9, 0);
  k.name = "layer0.mlp.fwd";
  k.wait_events = {0};
  rp.tasks.push_back(k);
  Plan plan = uniformPlan(2, rp);
  RooflineCostModel cost;
  try {
    simulatePlan(plan, topo, cost, idealOptions());
    FAIL("expected a deadlock");
  } catch (const SimulationError& e) {
    std::string m = e.what();
    CHECK_THAT(m, Catch::Contains("deadlock: rank 0"));
    CHECK_THAT(m, Catch::Contains("task 7 'layer0.mlp.fwd'"));
    CHECK_THAT(m, Catch::Contains("stream 0 (compute)"));
    CHECK_THAT(m, Catch::Contains("event 0, which no task records"));
  }
}

TEST_CASE("deadlock when a member never reaches the collective", "[engine]") {
  Topology topo = ringTopology(2, 100, 100);
  Plan plan;
  plan.world_size = 2;
  plan.groups = {ProcessGroup{"dp", {0, 1}}};
  RankPlan a = twoStreamProgram(), b = twoStreamProgram();
  a.tasks.push_back(collective(0, 1, CollectiveOp::AllReduce, 1000, "dp"));
  // Rank 1 waits for its own all-reduce to finish before it joins: a cycle.
  b.num_events = 2;
  Task k = kernel(0, 0, 1e9, 0);
  k.wait_events = {1};
  k.record_event = 0;
  b.tasks.push_back(k);
  Task ar = collective(1, 1, CollectiveOp::AllReduce, 1000, "dp");
  ar.wait_events = {0};
  ar.record_event = 1;
  b.tasks.push_back(ar);
  a.ranks = {0};
  b.ranks = {1};
  plan.programs = {a, b};
  RooflineCostModel cost;
  try {
    simulatePlan(plan, topo, cost, idealOptions());
    FAIL("expected a deadlock");
  } catch (const SimulationError& e) {
    std::string m = e.what();
    CHECK_THAT(m, Catch::Contains("deadlock: rank 0 task 0"));
    CHECK_THAT(m, Catch::Contains("all_reduce #0 of group 'dp' for rank(s) 1"));
  }
}

TEST_CASE("mismatched collectives are reported with both ranks", "[engine]") {
  Topology topo = ringTopology(2, 100, 100);
  Plan plan;
  plan.world_size = 2;
  plan.groups = {ProcessGroup{"dp", {0, 1}}};
  RankPlan a = twoStreamProgram(), b = twoStreamProgram();
  a.tasks.push_back(collective(0, 1, CollectiveOp::AllReduce, 1000, "dp"));
  b.tasks.push_back(collective(0, 1, CollectiveOp::AllGather, 1000, "dp"));
  a.ranks = {0};
  b.ranks = {1};
  plan.programs = {a, b};
  RooflineCostModel cost;
  CHECK_THROWS_WITH(simulatePlan(plan, topo, cost, idealOptions()),
                    Catch::Contains("mismatched collective #0 of group 'dp'") && Catch::Contains("rank 0") &&
                        Catch::Contains("all_gather"));
}

TEST_CASE("symmetric simulation equals the full one for identical ranks", "[engine]") {
  Topology topo = ringTopology(8, 100, 500);
  Plan plan = uniformPlan(8, overlapProgram());
  RooflineCostModel cost;
  SimResult full = simulatePlan(plan, topo, cost, idealOptions(SymmetryMode::Off));
  SimResult sym = simulatePlan(plan, topo, cost, idealOptions(SymmetryMode::On));
  CHECK(sym.stats.symmetric);
  CHECK(sym.stats.simulated_ranks == 1);
  CHECK(full.stats.simulated_ranks == 8);
  CHECK(sym.step_ns == full.step_ns);
  REQUIRE(sym.ranks[0].activities.size() == full.ranks[0].activities.size());
  for (size_t j = 0; j < sym.ranks[0].activities.size(); ++j) {
    CHECK(sym.ranks[0].activities[j].start_ns == full.ranks[0].activities[j].start_ns);
    CHECK(sym.ranks[0].activities[j].end_ns == full.ranks[0].activities[j].end_ns);
  }
  CHECK(sym.ranks[5].represented_by == 0);
  CHECK(summarizeRank(sym, 5).step_ns == summarizeRank(full, 5).step_ns);
  CHECK(sym.stats.tasks * 8 == full.stats.tasks);
}

TEST_CASE("symmetry is refused for ranks on different devices", "[engine]") {
  Topology topo = ringTopology(2, 100, 500);
  topo.devices[1].model = "OTHER";
  Plan plan = uniformPlan(2, overlapProgram());
  RooflineCostModel cost;
  CHECK_THROWS_WITH(simulatePlan(plan, topo, cost, idealOptions(SymmetryMode::On)), Catch::Contains("OTHER"));
  SimResult r = simulatePlan(plan, topo, cost, idealOptions(SymmetryMode::Auto));
  CHECK_FALSE(r.stats.symmetric);
}

TEST_CASE("compute slows while a collective runs on the same GPU", "[engine]") {
  Topology topo = ringTopology(2, 1, 0);  // slow link: the all-reduce runs long
  RankPlan rp = twoStreamProgram();
  rp.tasks.push_back(collective(0, 1, CollectiveOp::AllReduce, 10'000'000, "world"));
  rp.tasks.push_back(kernel(2, 0, 0, 0));     // a launch gap: the collective is running after it
  rp.tasks.push_back(kernel(1, 0, 7e11, 0));  // 1 ms at 70% of 1e15, plus launch
  Plan plan = uniformPlan(2, rp);
  const RooflineParams params = RooflineParams::defaults();
  const auto [a, b] = slowedAndPlain(plan, topo, 1.5);
  const SimActivity ka = activityOf(a.ranks[0], 1);
  const SimActivity kb = activityOf(b.ranks[0], 1);
  CHECK(kb.end_ns - kb.start_ns == 1'000'000 + params.launch_overhead_ns);
  CHECK(ka.end_ns - ka.start_ns == int64_t((1'000'000 + params.launch_overhead_ns) * 1.5));
}

TEST_CASE("each op kind slows by its own calibrated factor beside a collective", "[engine][calibration]") {
  // Two ranks; beside a long all-reduce the compute stream runs a matmul
  // (its own factor, 2.0) and then a layernorm (none of its own: the pooled
  // comm_slowdown, 1.25); the data-gradient matmul entry must not apply.
  const char* yaml = R"(
version: 1
comm_slowdown: 1.25
comm_slowdown_by_op:
  matmul: 2.0
  matmul_bwd_data: 3.0
)";
  const Calibration cal = parseCalibration(yaml, "cal.yaml");
  REQUIRE(cal.comm_slowdown_by_op.size() == 2);
  Topology topo = ringTopology(2, 1, 0);  // slow link: the all-reduce outlasts both kernels
  RankPlan rp = twoStreamProgram();
  rp.tasks.push_back(collective(0, 1, CollectiveOp::AllReduce, 10'000'000, "world"));
  rp.tasks.push_back(kernel(1, 0, 0, 0));     // a launch gap: the collective is running after it
  rp.tasks.push_back(kernel(2, 0, 7e11, 0));  // matmul: 1 ms at 70% of 1e15, plus launch
  Task ln = kernel(3, 0, 0, 0);
  ln.op = OpKind::LayerNorm;
  ln.bytes_read = 1'000'000'000;
  rp.tasks.push_back(ln);
  Plan plan = uniformPlan(2, rp);
  const RooflineCostModel model(RooflineParams::defaults(), cal);
  RooflineParams plain_params = RooflineParams::defaults();
  plain_params.comm_slowdown = 1.0;
  const RooflineCostModel plain(plain_params);
  const SimResult a = simulatePlan(plan, topo, model, idealOptions());
  const SimResult b = simulatePlan(plan, topo, plain, idealOptions());
  auto duration = [](const SimResult& r, int id) {
    const SimActivity x = activityOf(r.ranks[0], id);
    return double(x.end_ns - x.start_ns);
  };
  CHECK(duration(a, 2) == Approx(2.0 * duration(b, 2)).margin(1));
  CHECK(duration(a, 3) == Approx(1.25 * duration(b, 3)).margin(1));
  CHECK(activityOf(a.ranks[0], 3).end_ns < activityOf(a.ranks[0], 0).end_ns);  // both ran beside it
  CHECK_THROWS_WITH(parseCalibration("comm_slowdown_by_op:\n  matmull: 2\n", "bad.yaml"),
                    Catch::Contains("bad.yaml:2") && Catch::Contains("matmull"));
  CHECK_THROWS_WITH(parseCalibration("comm_slowdown_by_op:\n  matmul: 0.5\n", "bad.yaml"),
                    Catch::Contains("comm_slowdown_by_op.matmul") && Catch::Contains("out of range"));
}

TEST_CASE("a kernel slows only for the part of it a collective is resident", "[engine]") {
  // The kernel (1 ms at full speed) starts first; a short all-reduce starts
  // 200 us into it on the comm stream (after a 200 us kernel there) and is
  // resident T ns. The kernel progresses at 1/f meanwhile, so it ends
  // T (1 - 1/f) later than unslowed; a kernel started before the collective
  // is slowed too, and only for the overlap.
  Topology topo = ringTopology(2, 1, 0);  // 1 GB/s: the 100 KB all-reduce runs ~100 us
  RankPlan rp = twoStreamProgram();
  rp.tasks.push_back(kernel(0, 0, 7e11, 0));        // compute stream: 1 ms (+ launch)
  rp.tasks.push_back(kernel(1, 1, 1.4e11, 0));      // comm stream: 200 us (+ launch) before the collective
  rp.tasks.push_back(collective(2, 1, CollectiveOp::AllReduce, 100'000, "world"));
  Plan plan = uniformPlan(2, rp);
  const auto [a, b] = slowedAndPlain(plan, topo, 2.0);
  // One activity per task: the collective follows a kernel on its stream and
  // must not be taken for that kernel when the residency changes.
  REQUIRE(a.ranks[0].activities.size() == rp.tasks.size());
  const SimActivity k = activityOf(a.ranks[0], 0);
  const SimActivity c = activityOf(a.ranks[0], 2);
  const SimActivity kb = activityOf(b.ranks[0], 0);
  const int64_t resident = c.end_ns - c.start_ns;
  REQUIRE(c.start_ns > k.start_ns);
  REQUIRE(c.end_ns < k.end_ns);  // the collective lies inside the kernel
  // At f = 2 the kernel does half its work while the collective is resident:
  // it is stretched by exactly half that residency (rounding: 1 ns).
  CHECK(std::llabs((k.end_ns - k.start_ns) - ((kb.end_ns - kb.start_ns) + resident / 2)) <= 1);
}

TEST_CASE("a collective after a kernel on the same stream is not slowed as a kernel", "[engine]") {
  // The comm stream runs a kernel, then the all-reduce. When the all-reduce
  // arrives, the rank's running kernels are slowed; the stream's own state
  // must say "collective", not the kernel it ran before, or the collective
  // would be rescheduled as a kernel with no work left and end at once.
  Topology topo = ringTopology(2, 1, 0);  // 1 GB/s: the 100 KB all-reduce runs ~100 us
  RankPlan rp = twoStreamProgram();
  rp.tasks.push_back(kernel(0, 1, 1.4e11, 0));  // comm stream: 200 us (+ launch)
  rp.tasks.push_back(collective(1, 1, CollectiveOp::AllReduce, 100'000, "world"));
  Plan plan = uniformPlan(2, rp);
  const auto [a, b] = slowedAndPlain(plan, topo, 1.5);
  REQUIRE(a.ranks[0].activities.size() == 2);
  const SimActivity ca = activityOf(a.ranks[0], 1);
  const SimActivity cb = activityOf(b.ranks[0], 1);
  CHECK(ca.end_ns - ca.start_ns > 90'000);
  CHECK(ca.end_ns - ca.start_ns == cb.end_ns - cb.start_ns);
  CHECK(a.step_ns == b.step_ns);
}

TEST_CASE("a ready collective waits for its share of the running kernel's remaining time", "[engine]") {
  // k0 (200 us) records the event the all-reduce waits for; k1 (1 ms) starts
  // on the compute stream as k0 ends. With collective_start_wait w the
  // all-reduce starts w x k1's duration later, and its activity starts there.
  Topology topo = ringTopology(2, 1, 0);
  RankPlan rp = twoStreamProgram();
  rp.num_events = 1;
  Task k0 = kernel(0, 0, 1.4e11, 0);
  k0.record_event = 0;
  rp.tasks.push_back(k0);
  rp.tasks.push_back(kernel(1, 0, 7e11, 0));
  Task ar = collective(2, 1, CollectiveOp::AllReduce, 100'000, "world");
  ar.wait_events = {0};
  rp.tasks.push_back(ar);
  const Plan plan = uniformPlan(2, rp);
  RooflineParams params = RooflineParams::defaults();
  params.comm_slowdown = 1.0;
  Calibration wait;
  wait.collective_start_wait = 0.5;
  const SimResult waited = simulatePlan(plan, topo, RooflineCostModel(params, wait), idealOptions());
  const SimResult plain = simulatePlan(plan, topo, RooflineCostModel(params), idealOptions());
  const SimActivity k1 = activityOf(waited.ranks[0], 1);
  const SimActivity c = activityOf(waited.ranks[0], 2);
  const SimActivity c_plain = activityOf(plain.ranks[0], 2);
  CHECK(c_plain.start_ns == k1.start_ns);  // without the wait: as soon as k0 ends
  CHECK(std::llabs(c.start_ns - (k1.start_ns + (k1.end_ns - k1.start_ns) / 2)) <= 1);
  CHECK(c.end_ns - c.start_ns == c_plain.end_ns - c_plain.start_ns);
}

TEST_CASE("a collective takes the factor of the kernel role beside it the longest", "[engine]") {
  // The all-reduce (about 100 us) runs beside the 1 ms kernel "layer3.k1.mb0"
  // (role "k1"): calibrated at 1.5 it lasts 1.5 times as long; a role not
  // listed takes (other), and (none) applies when no kernel runs beside it.
  Topology topo = ringTopology(2, 1, 0);
  RankPlan rp = twoStreamProgram();
  Task k = kernel(0, 0, 7e11, 0);
  k.name = "layer3.k1.mb0";
  rp.tasks.push_back(k);
  rp.tasks.push_back(collective(1, 1, CollectiveOp::AllReduce, 100'000, "world"));
  const Plan beside = uniformPlan(2, rp);
  RankPlan alone_rp = twoStreamProgram();
  alone_rp.tasks.push_back(collective(0, 1, CollectiveOp::AllReduce, 100'000, "world"));
  const Plan alone = uniformPlan(2, alone_rp);
  RooflineParams params = RooflineParams::defaults();
  params.comm_slowdown = 1.0;
  auto duration = [&](const Plan& plan, const Calibration& cal, int task) {
    const SimActivity c =
        activityOf(simulatePlan(plan, topo, RooflineCostModel(params, cal), idealOptions()).ranks[0], task);
    return double(c.end_ns - c.start_ns);
  };
  const double base = duration(beside, {}, 1);
  Calibration cal;
  cal.collective_beside = {{"k1", 1.5}, {kUnseenKernelBeside, 1.2}, {kNoKernelBeside, 1.1}};
  CHECK(duration(beside, cal, 1) == Approx(1.5 * base).margin(2));
  Calibration other;
  other.collective_beside = {{"k9", 1.5}, {kUnseenKernelBeside, 1.2}};
  CHECK(duration(beside, other, 1) == Approx(1.2 * base).margin(2));
  CHECK(duration(alone, cal, 0) == Approx(1.1 * duration(alone, {}, 0)).margin(2));
}

TEST_CASE("a plan larger than the topology is refused", "[engine]") {
  Topology topo = ringTopology(2, 100, 100);
  Plan plan = uniformPlan(4, overlapProgram());
  RooflineCostModel cost;
  CHECK_THROWS_WITH(simulatePlan(plan, topo, cost), Catch::Contains("4 ranks") && Catch::Contains("2 devices"));
}

TEST_CASE("calibration files replace the roofline per op kind and shape", "[engine][calibration]") {
  const char* yaml = R"(
version: 1
launch_overhead_ns: 1000
ops:
  matmul:
    flops_efficiency: 0.5
    shapes:
      "m=64 n=64 k=64": {ns: 4242}
  layernorm:
    fit: {base_ns: 100, ns_per_gflop: 0, ns_per_mb: 2}
collectives:
  - {op: all_reduce, ranks: 2, latency_ns: 19000, gbps: 300}
)";
  Calibration cal = parseCalibration(yaml, "cal.yaml");
  REQUIRE(cal.collectives.size() == 1);
  RooflineCostModel model(RooflineParams::defaults(), cal);
  DeviceSpec dev;
  dev.bf16_flops = 1e15;
  dev.hbm_gbps = 1000;
  Task mm = kernel(0, 0, 1e12, 0);
  CHECK(model.taskNs(mm, dev, Precision::BF16) == 1000 + 2'000'000);  // 1e12 / (1e15 * 0.5)
  mm.attrs.m = mm.attrs.n = mm.attrs.k = 64;
  CHECK(shapeKey(mm) == "m=64 n=64 k=64");
  CHECK(model.taskNs(mm, dev, Precision::BF16) == 4242);
  Task ln = kernel(1, 0, 0, 3'000'000);
  ln.op = OpKind::LayerNorm;
  CHECK(model.taskNs(ln, dev, Precision::BF16) == 100 + 6);
  CHECK_THROWS_WITH(parseCalibration("ops:\n  matmull: {ns: 1}\n", "bad.yaml"),
                    Catch::Contains("bad.yaml:2") && Catch::Contains("matmull"));
  CHECK_THROWS_WITH(parseCalibration("ops:\n  matmul: {flops_efficiency: 2}\n", "bad.yaml"),
                    Catch::Contains("flops_efficiency") && Catch::Contains("out of range"));
  CHECK_THROWS_WITH(parseCalibration("colectives: []\n", "bad.yaml"), Catch::Contains("allowed"));
}

TEST_CASE("grouped-query attention is a shape of its own; multi-head keys are unchanged", "[engine][calibration]") {
  Task mha = kernel(0, 0, 1e9, 0);
  mha.op = OpKind::Attention;
  mha.attrs.b = 16, mha.attrs.t = 1024, mha.attrs.c = 768, mha.attrs.h = 12;
  CHECK(shapeKey(mha) == "b=16 t=1024 c=768 h=12");
  Task gqa = mha;
  gqa.attrs.kv_heads = 4;
  CHECK(shapeKey(gqa) == "b=16 t=1024 c=768 h=12 kv=4");
  // A calibration that measured the multi-head shape does not price the
  // grouped one with it.
  const char* yaml = R"(
version: 1
ops:
  attention:
    shapes:
      "b=16 t=1024 c=768 h=12": {ns: 100000}
)";
  RooflineCostModel model(RooflineParams::defaults(), parseCalibration(yaml, "cal.yaml"));
  DeviceSpec dev;
  dev.bf16_flops = 1e15;
  dev.hbm_gbps = 1000;
  CHECK(model.taskNs(mha, dev, Precision::BF16) == 100000);
  CHECK(model.taskNs(gqa, dev, Precision::BF16) != 100000);
}

TEST_CASE("a fused task costs nothing and a fused GEMM is its own shape", "[engine][calibration]") {
  const char* yaml = R"(
version: 1
ops:
  matmul:
    shapes:
      "m=64 n=64 k=64": {ns: 4242}
      "m=64 n=64 k=64 epi=gelu": {ns: 5000}
)";
  RooflineCostModel model(RooflineParams::defaults(), parseCalibration(yaml, "cal.yaml"));
  DeviceSpec dev;
  dev.bf16_flops = 1e15;
  dev.hbm_gbps = 1000;
  Task mm = kernel(0, 0, 1e12, 0);
  mm.attrs.m = mm.attrs.n = mm.attrs.k = 64;
  mm.epilogue = Epilogue::Gelu;
  mm.epilogue_partner = 1;
  CHECK(shapeKey(mm) == "m=64 n=64 k=64 epi=gelu");
  CHECK(costOpKind(mm) == OpKind::Matmul);
  // A GELU backward that launches the DGELU GEMM is costed as that GEMM.
  Task late = kernel(2, 0, 1e9, 0);
  late.op = OpKind::GeluBwd;
  late.attrs.elements = 4096;
  late.attrs.m = late.attrs.n = late.attrs.k = 64;
  late.epilogue = Epilogue::DGelu;
  CHECK(shapeKey(late) == "m=64 n=64 k=64 epi=dgelu");
  CHECK(costOpKind(late) == OpKind::MatmulBwdData);
  CHECK(model.taskNs(mm, dev, Precision::BF16) == 5000);
  Task gelu = kernel(1, 0, 1e9, 1'000'000);
  gelu.op = OpKind::Gelu;
  gelu.fused_into = 0;
  CHECK(model.taskNs(gelu, dev, Precision::BF16) == 0);
  // In a simulation the fused task takes no time: the stream goes on.
  RankPlan rp = twoStreamProgram();
  rp.tasks.push_back(mm);
  rp.tasks.push_back(gelu);
  const SimResult r = simulatePlan(uniformPlan(1, rp), ringTopology(1, 100, 100), model, idealOptions());
  const SimActivity g = activityOf(r.ranks[0], 1);
  CHECK(g.end_ns == g.start_ns);
  CHECK(r.step_ns == 5000);
}

TEST_CASE("kernels of two compute streams share the GPU", "[engine]") {
  // Stream 1 (a second compute stream, like the weight gradients'): a 0.4
  // ms kernel; stream 0: a 1 ms kernel, both ready at once (on a tie the
  // kernel launched first, the plan's earlier task, holds the GPU). A task
  // fused into another launches nothing and takes no share.
  Topology topo = ringTopology(1, 1, 0);
  RankPlan rp;
  rp.streams = {StreamInfo{0, StreamKind::Compute, "compute"}, StreamInfo{1, StreamKind::Compute, "compute.wgrad"}};
  rp.tasks.push_back(kernel(0, 1, 2.8e11, 0));
  rp.tasks.push_back(kernel(1, 0, 7e11, 0));
  Task fused = kernel(2, 1, 0, 0);
  fused.fused_into = 0;
  rp.tasks.push_back(fused);
  const Plan plan = uniformPlan(1, rp);
  RooflineParams params = RooflineParams::defaults();
  params.launch_overhead_ns = 0;
  params.comm_slowdown = 1.0;
  auto run = [&](KernelSharing mode, double efficiency) {
    RooflineParams p = params;
    p.kernel_sharing = mode;
    p.kernel_overlap_efficiency = efficiency;
    const RooflineCostModel model(p);
    const SimResult r = simulatePlan(plan, topo, model, idealOptions());
    CHECK(simulatePlan(plan, topo, model, idealOptions()).step_ns == r.step_ns);  // deterministic
    return std::pair{activityOf(r.ranks[0], 1), activityOf(r.ranks[0], 0)};
  };
  auto len = [](const SimActivity& a) { return a.end_ns - a.start_ns; };
  // Efficiency 2, fair: each runs as fast as alone.
  const auto [long_alone, short_alone] = run(KernelSharing::Fair, 2.0);
  const int64_t alone_long = len(long_alone), alone_short = len(short_alone);
  REQUIRE(alone_long > 2 * alone_short);
  CHECK(long_alone.start_ns == short_alone.start_ns);

  SECTION("fair: both at half speed while both run") {
    const auto [l, sh] = run(KernelSharing::Fair, 1.0);
    CHECK(std::llabs(len(sh) - 2 * alone_short) <= 1);
    CHECK(std::llabs(len(l) - (alone_long + alone_short)) <= 1);
  }
  SECTION("first holds: the holder keeps its speed, the other waits for it") {
    const auto [l, sh] = run(KernelSharing::FirstHolds, 1.0);
    CHECK(std::llabs(len(sh) - alone_short) <= 1);
    // Launched together, it first gets SMs when the holder ends: its record
    // starts then, as a traced kernel's does.
    CHECK(l.start_ns == sh.end_ns);
    CHECK(std::llabs(l.end_ns - (sh.end_ns + alone_long)) <= 1);  // no progress beside it, then alone
  }
  SECTION("first holds, efficiency 1.5: the other gets the extra half") {
    const auto [l, sh] = run(KernelSharing::FirstHolds, 1.5);
    CHECK(std::llabs(len(sh) - alone_short) <= 1);
    CHECK(std::llabs(len(l) - (alone_long + alone_short / 2)) <= 1);
  }
  SECTION("first holds, efficiency 2: both as alone") {
    const auto [l, sh] = run(KernelSharing::FirstHolds, 2.0);
    CHECK(std::llabs(len(l) - alone_long) <= 1);
    CHECK(std::llabs(len(sh) - alone_short) <= 1);
  }
}

// Two compute streams (like the weight gradients'): on stream 0 a 0.1 ms
// host task, then a 1 ms kernel; on stream 1 `second` (task 2), ready at
// once. No launch gaps, efficiency 1 (first holds).
struct LateKernelBeside {
  Topology topo = ringTopology(1, 1, 0);
  RankPlan rp;
  RooflineCostModel model;
  explicit LateKernelBeside(const Task& second) : model(params()) {
    rp.streams = {StreamInfo{0, StreamKind::Compute, "compute"}, StreamInfo{1, StreamKind::Compute, "compute.wgrad"}};
    Task host = kernel(0, 0, 0, 0);
    host.kind = TaskKind::Host;
    rp.tasks.push_back(host);
    rp.tasks.push_back(kernel(1, 0, 7e11, 0));
    rp.tasks.push_back(second);
  }
  static RooflineParams params() {
    RooflineParams p = RooflineParams::defaults();
    p.launch_overhead_ns = 0;
    p.host_task_ns = 100'000;
    return p;
  }
};

// Task 2 on stream 1 for LateKernelBeside: a weight gradient with a bias,
// so that it has trailing kernels (CostModel::trailingNs).
Task biasedWeightGradient() {
  Task wgrad = kernel(2, 1, 2.8e11, 0);
  wgrad.op = OpKind::MatmulBwdWeight;
  wgrad.attrs.has_bias = true;
  wgrad.attrs.m = 16384;
  wgrad.attrs.n = 3072;
  return wgrad;
}

TEST_CASE("the next oldest kernel holds the GPU when the holder ends", "[engine]") {
  // Stream 1 starts a 0.4 ms kernel at once; stream 0's 1 ms kernel starts
  // beside it at 0.1 ms and makes no progress until the 0.4 ms one ends (the
  // older kernel holds the GPU although its stream is the higher), then runs
  // alone: it ends at 1.4 ms. Its record starts when it first got SMs, as a
  // traced kernel's starts when its first block runs.
  const LateKernelBeside f(kernel(2, 1, 2.8e11, 0));
  const SimResult r = simulatePlan(uniformPlan(1, f.rp), f.topo, f.model, idealOptions());
  const SimActivity h = activityOf(r.ranks[0], 0), big = activityOf(r.ranks[0], 1), small = activityOf(r.ranks[0], 2);
  REQUIRE(h.end_ns == 100'000);
  CHECK(small.start_ns == 0);
  CHECK(small.end_ns - small.start_ns == 400'000);  // the holder: as alone
  CHECK(big.start_ns == small.end_ns);
  CHECK(big.end_ns == small.end_ns + 1'000'000);  // no progress beside it, then alone
}

TEST_CASE("a weight gradient's bias kernels take the GPU anew after its GEMM", "[engine]") {
  // Stream 1: a weight-gradient task with a bias (its GEMM, then the bias
  // kernels: CostModel::trailingNs) starts alone. Stream 0: a 1 ms kernel
  // starts 0.1 ms later, beside the GEMM, and waits for it. When the GEMM
  // is done the 1 ms kernel holds the GPU (the bias kernels were launched
  // after it), so the weight-gradient task ends only after it. The task has
  // two activities, as in a trace: its GEMM's, and its bias kernels' from
  // when they first got SMs (not from their launch).
  const LateKernelBeside f(biasedWeightGradient());
  const Topology& topo = f.topo;
  const RooflineCostModel& model = f.model;
  const Plan plan = uniformPlan(1, f.rp);
  const SimResult r = simulatePlan(plan, topo, model, idealOptions());
  const SimActivity big = activityOf(r.ranks[0], 1), w = activityOf(r.ranks[0], 2);
  const Task& wt = plan.programs[0].tasks[2];
  const int64_t total = model.taskNs(wt, topo.devices[0], plan.job.training.precision);
  const int64_t tail = model.trailingNs(wt, topo.devices[0], plan.job.training.precision);
  REQUIRE(tail > 0);
  REQUIRE(tail < total / 2);
  CHECK(w.start_ns == 0);
  CHECK(w.end_ns == total - tail);  // the GEMM alone
  CHECK(!w.trailing);
  CHECK(w.flops == wt.flops);
  CHECK(big.start_ns == total - tail);               // launched at 0.1 ms, first SMs when the GEMM ended
  CHECK(big.end_ns == (total - tail) + 1'000'000);  // waited for the GEMM, then alone
  const std::vector<SimActivity> parts = activitiesOf(r.ranks[0], 2);
  REQUIRE(parts.size() == 2);
  const SimActivity& bias = parts[1];
  CHECK(bias.trailing);
  CHECK(bias.task == w.task);
  CHECK(bias.flops == 0);
  CHECK(bias.bytes == 0);
  CHECK(bias.start_ns == big.end_ns);  // launched at the GEMM's end, first SMs after the big kernel
  CHECK(bias.end_ns == big.end_ns + tail);
  // Without a bias there is nothing trailing: the task ends with its GEMM.
  RankPlan no_bias = f.rp;
  no_bias.tasks[2].attrs.has_bias = false;
  const SimResult q = simulatePlan(uniformPlan(1, no_bias), topo, model, idealOptions());
  CHECK(activityOf(q.ranks[0], 2).end_ns == total);
  CHECK(activitiesOf(q.ranks[0], 2).size() == 1);
}

// A roofline whose kernels leave the room given per task id beside them
// (CostModel::smRoomBeside; a calibration derives it from traced blocks).
struct RoomModel : RooflineCostModel {
  std::map<int, SmRoom> room;
  std::map<int, double> spare;  // CostModel::spareSmShare
  explicit RoomModel(const RooflineParams& p) : RooflineCostModel(p) {}
  SmRoom smRoomBeside(const Task& t, const DeviceSpec&) const override {
    const auto it = room.find(t.id);
    return it == room.end() ? SmRoom::Unknown : it->second;
  }
  double spareSmShare(const Task& t, const DeviceSpec&) const override {
    const auto it = spare.find(t.id);
    return it == spare.end() ? -1 : it->second;
  }
  std::set<int> fixed_grid;  // CostModel::fixedGrid, besides the persistent GEMMs
  bool fixedGrid(const Task& t, const DeviceSpec& d) const override {
    return fixed_grid.count(t.id) > 0 || RooflineCostModel::fixedGrid(t, d);
  }
  bool fixed_grid_beside_spare = true;  // as calibrations fitted with the rule say
  bool fixedGridBesideSpareSms() const override { return fixed_grid_beside_spare; }
};

// As in "kernels of two compute streams share the GPU": a 0.4 ms kernel on
// stream 1 (task 0) and a 1 ms one on stream 0 (task 1), ready together
// (task 0, launched first, holds), first holds at the given efficiency, no
// launch gaps.
struct TwoKernelsTogether {
  Topology topo = ringTopology(1, 1, 0);
  Plan plan;
  RooflineParams params = RooflineParams::defaults();
  explicit TwoKernelsTogether(double efficiency) {
    RankPlan rp;
    rp.streams = {StreamInfo{0, StreamKind::Compute, "compute"}, StreamInfo{1, StreamKind::Compute, "compute.wgrad"}};
    rp.tasks.push_back(kernel(0, 1, 2.8e11, 0));
    rp.tasks.push_back(kernel(1, 0, 7e11, 0));
    plan = uniformPlan(1, rp);
    params.launch_overhead_ns = 0;
    params.comm_slowdown = 1.0;
    params.kernel_overlap_efficiency = efficiency;
    // Times by FLOPs alone, whatever shape a section gives a GEMM.
    params.gemm_depth_half = 0;
    params.gemm_outputs_half_per_sm = 0;
  }
};

TEST_CASE("beside a kernel with a block on every SM nothing runs, and its neighbour's record starts after it",
          "[engine]") {
  const TwoKernelsTogether f(1.5);
  const Plan& plan = f.plan;
  const Topology& topo = f.topo;
  auto run = [&](SmRoom room) {
    RoomModel model(f.params);
    model.room[0] = room;
    const SimResult r = simulatePlan(plan, topo, model, idealOptions());
    return std::pair{activityOf(r.ranks[0], 1), activityOf(r.ranks[0], 0)};
  };
  const auto [l_known, sh_known] = run(SmRoom::None);
  const int64_t short_ns = sh_known.end_ns - sh_known.start_ns;
  CHECK(sh_known.start_ns == 0);
  // No SMs until the holder ends: the long kernel's first block runs then,
  // and it takes as long as alone (1 ms) from there.
  CHECK(l_known.start_ns == sh_known.end_ns);
  CHECK(std::llabs(l_known.end_ns - (sh_known.end_ns + 1'000'000)) <= 1);
  // With room beside the holder (or none known), the long kernel starts at
  // once and gets the extra half of the GPU.
  for (SmRoom room : {SmRoom::Some, SmRoom::Unknown}) {
    const auto [l, sh] = run(room);
    CHECK(l.start_ns == 0);
    CHECK(sh.end_ns - sh.start_ns == short_ns);
    CHECK(std::llabs(l.end_ns - (1'000'000 + short_ns / 2)) <= 1);
  }
}

TEST_CASE("beside a holder that leaves a known share of the SMs, the others get that share", "[engine]") {
  // The 1 ms and 0.4 ms kernels, efficiency 1.1; the holder (the 0.4 ms one)
  // leaves 20% of the SMs: it runs at 1.1 - 0.2 = 0.9 of its speed (0.4 /
  // 0.9 ms), the other at 0.2 until it ends, then alone.
  const TwoKernelsTogether f(1.1);
  const Plan& plan = f.plan;
  const Topology& topo = f.topo;
  const std::vector<Task>& tasks = plan.programs[0].tasks;
  RoomModel model(f.params);
  const int64_t long_alone = model.taskNs(tasks[1], topo.devices[0], plan.job.training.precision);
  const int64_t short_alone = model.taskNs(tasks[0], topo.devices[0], plan.job.training.precision);
  REQUIRE(long_alone == 1'000'000);
  REQUIRE(short_alone == 400'000);
  model.room[0] = SmRoom::Some;
  model.spare[0] = 0.2;
  const SimResult r = simulatePlan(plan, topo, model, idealOptions());
  const SimActivity l = activityOf(r.ranks[0], 1), sh = activityOf(r.ranks[0], 0);
  const double holder_ns = 400'000 / 0.9;
  CHECK(std::llabs(sh.end_ns - std::llround(holder_ns)) <= 1);
  CHECK(l.start_ns == 0);  // it ran from the start, on the spare SMs
  CHECK(std::llabs(l.end_ns - std::llround(holder_ns + (1'000'000 - 0.2 * holder_ns))) <= 2);
}

TEST_CASE("a kernel of a fixed grid gains nothing on the SMs a holder leaves, but its record starts there",
          "[engine]") {
  // As above (the holder leaves 20% of the SMs), but the other kernel
  // splits its work over a fixed grid of blocks (a norm's backward of two
  // blocks per SM): the blocks that land on the spare SMs leave it as much
  // to do when the holder ends, so it ends its time alone after the holder;
  // its record starts at once. The holder, which gives nothing away, runs
  // at its own speed (min(1, 1.1)) rather than 0.9 of it.
  const TwoKernelsTogether f(1.1);
  const Plan& plan = f.plan;
  const Topology& topo = f.topo;
  RoomModel model(f.params);
  model.room[0] = SmRoom::Some;
  model.spare[0] = 0.2;
  model.fixed_grid.insert(1);
  const SimResult r = simulatePlan(plan, topo, model, idealOptions());
  const SimActivity l = activityOf(r.ranks[0], 1), sh = activityOf(r.ranks[0], 0);
  CHECK(std::llabs(sh.end_ns - 400'000) <= 1);
  CHECK(l.start_ns == 0);
  CHECK(std::llabs(l.end_ns - (400'000 + 1'000'000)) <= 2);
  // A holder sharing its spare SMs runs at 1.1 - 0.2 of its speed, the
  // other kernel at 0.2 beside it.
  const int64_t shared_holder_end = std::llround(400'000 / 0.9);
  const int64_t progressing_end = std::llround(400'000 / 0.9 * 0.8 + 1'000'000);
  SECTION("without the fixed grid it progresses there, and the holder gives up the share (the rule above)") {
    model.fixed_grid.clear();
    const SimResult free = simulatePlan(plan, topo, model, idealOptions());
    CHECK(std::llabs(activityOf(free.ranks[0], 0).end_ns - shared_holder_end) <= 1);
    CHECK(std::llabs(activityOf(free.ranks[0], 1).end_ns - progressing_end) <= 2);
  }
  SECTION("under a calibration fitted without the rule, only a holder's last round counts") {
    model.fixed_grid_beside_spare = false;
    const SimResult older = simulatePlan(plan, topo, model, idealOptions());
    CHECK(std::llabs(activityOf(older.ranks[0], 0).end_ns - shared_holder_end) <= 1);
    CHECK(std::llabs(activityOf(older.ranks[0], 1).end_ns - progressing_end) <= 2);
  }
}

TEST_CASE("trailing kernels run beside a holder that leaves room", "[engine]") {
  // LateKernelBeside at efficiency 1.5: the weight gradient's GEMM runs from
  // 0, the 1 ms kernel beside it from 0.1 ms gets half speed; when the GEMM
  // ends the 1 ms kernel holds the GPU and the bias kernels are launched.
  const LateKernelBeside f(biasedWeightGradient());
  RooflineParams p = LateKernelBeside::params();
  p.kernel_overlap_efficiency = 1.5;
  const Plan plan = uniformPlan(1, f.rp);
  auto run = [&](SmRoom room) {
    RoomModel model(p);
    model.room[1] = room;
    return simulatePlan(plan, f.topo, model, idealOptions());
  };
  const RoomModel plain(p);
  const Task& wt = plan.programs[0].tasks[2];
  const int64_t total = plain.taskNs(wt, f.topo.devices[0], plan.job.training.precision);
  const int64_t tail = plain.trailingNs(wt, f.topo.devices[0], plan.job.training.precision);
  REQUIRE(tail > 0);
  const int64_t gemm_end = total - tail;
  {
    // Unknown room (no calibrated geometry): the bias kernels wait for the holder.
    const SimResult r = run(SmRoom::Unknown);
    const SimActivity big = activityOf(r.ranks[0], 1);
    const std::vector<SimActivity> parts = activitiesOf(r.ranks[0], 2);
    REQUIRE(parts.size() == 2);
    CHECK(parts[0].end_ns == gemm_end);
    CHECK(parts[1].start_ns == big.end_ns);
    CHECK(parts[1].end_ns == big.end_ns + tail);
  }
  {
    // Room beside it and no share of whole SMs (a memory-bound holder): they
    // start at the GEMM's end, and the two of small blocks share the GPU,
    // each at 1.5 / 2 of its speed (the 1 ms kernel ends after them).
    const SimResult r = run(SmRoom::Some);
    const SimActivity big = activityOf(r.ranks[0], 1);
    const std::vector<SimActivity> parts = activitiesOf(r.ranks[0], 2);
    REQUIRE(parts.size() == 2);
    CHECK(parts[1].start_ns == gemm_end);
    CHECK(std::llabs(parts[1].end_ns - (gemm_end + tail * 4 / 3)) <= 1);
    CHECK(big.end_ns > parts[1].end_ns);
  }
}

// RoomModel whose tasks also have a last round of tiles (CostModel::lastRound).
struct LastRoundModel : RoomModel {
  std::map<int, LastRound> rounds;
  explicit LastRoundModel(const RooflineParams& p) : RoomModel(p) {}
  LastRound lastRound(const Task& t, const DeviceSpec&) const override {
    const auto it = rounds.find(t.id);
    return it == rounds.end() ? LastRound{} : it->second;
  }
  bool hasLastRounds() const override { return !rounds.empty(); }
};

TEST_CASE("the holder's last round of tiles leaves its spare SMs to the kernel beside", "[engine]") {
  // TwoKernelsTogether at efficiency 1: the 0.4 ms holder has a block on
  // every SM, and its last quarter is a round that leaves half of them.
  const TwoKernelsTogether f(1.0);
  auto run = [&](const Plan& plan) {
    LastRoundModel model(f.params);
    model.room[0] = SmRoom::None;
    model.rounds[0] = LastRound{0.5f, 0.25f};
    const SimResult r = simulatePlan(plan, f.topo, model, idealOptions());
    return std::pair{activityOf(r.ranks[0], 1), activityOf(r.ranks[0], 0)};
  };
  SECTION("a kernel of small blocks starts there and runs on them") {
    const auto [l, sh] = run(f.plan);
    CHECK(sh.start_ns == 0);
    CHECK(std::llabs(sh.end_ns - 400'000) <= 1);  // the holder keeps its speed
    CHECK(std::llabs(l.start_ns - 300'000) <= 1);
    // 0.1 ms at half speed, then the 0.95 ms left alone.
    CHECK(std::llabs(l.end_ns - 1'350'000) <= 2);
  }
  SECTION("a persistent GEMM's record starts there, its end is the holder's end plus its time alone") {
    Plan plan = f.plan;
    Task& gemm = plan.programs[0].tasks[1];
    gemm.attrs.m = 8192, gemm.attrs.n = 2048, gemm.attrs.k = 8192;
    const auto [l, sh] = run(plan);
    CHECK(std::llabs(l.start_ns - 300'000) <= 1);
    CHECK(std::llabs(l.end_ns - 1'400'000) <= 2);
  }
  SECTION("without a last round it waits for the holder's end") {
    Plan plan = f.plan;
    LastRoundModel model(f.params);
    model.room[0] = SmRoom::None;
    const SimResult r = simulatePlan(plan, f.topo, model, idealOptions());
    CHECK(activityOf(r.ranks[0], 1).start_ns == activityOf(r.ranks[0], 0).end_ns);
  }
}

TEST_CASE("kernels of small blocks share the GPU whichever came first", "[engine]") {
  // TwoKernelsTogether at efficiency 1, both kernels with room beside them
  // and no share of whole SMs (memory-bound kinds): they run together at
  // half speed, the 0.4 ms one ends at 0.8 ms, the 1 ms one at 1.4 ms.
  const TwoKernelsTogether f(1.0);
  RoomModel model(f.params);
  model.room[0] = SmRoom::Some;
  model.room[1] = SmRoom::Some;
  const SimResult r = simulatePlan(f.plan, f.topo, model, idealOptions());
  const SimActivity l = activityOf(r.ranks[0], 1), sh = activityOf(r.ranks[0], 0);
  CHECK(l.start_ns == 0);
  CHECK(std::llabs(sh.end_ns - 800'000) <= 1);
  CHECK(std::llabs(l.end_ns - 1'400'000) <= 2);
  // A holder of whole SMs (a GEMM leaving 20% of them) keeps the first-holds rule.
  model.spare[0] = 0.2;
  const SimResult g = simulatePlan(f.plan, f.topo, model, idealOptions());
  CHECK(std::llabs(activityOf(g.ranks[0], 0).end_ns - 500'000) <= 1);  // 0.4 ms at 1 - 0.2
}

TEST_CASE("calibration files carry the kernel overlap efficiency", "[engine][calibration]") {
  const Calibration c = parseCalibration("version: 1\nkernel_overlap_efficiency: 1.25\n", "k.yaml");
  REQUIRE(c.kernel_overlap_efficiency.has_value());
  CHECK(*c.kernel_overlap_efficiency == Approx(1.25));
  CHECK(RooflineCostModel(RooflineParams::defaults(), c).kernelOverlapEfficiency() == Approx(1.25));
  CHECK(RooflineCostModel().kernelOverlapEfficiency() == 1.0);
  CHECK_THROWS_WITH(parseCalibration("version: 1\nkernel_overlap_efficiency: 3\n", "k.yaml"),
                    Catch::Contains("k.yaml:2") && Catch::Contains("kernel_overlap_efficiency"));
}

TEST_CASE("a collective ready beside a shared GPU waits for the kernel beside the holder to end", "[engine]") {
  // Stream 2 (a second compute stream) holds the GPU with a 1 ms kernel from
  // 0 (launched first: task 0); on stream 0, k0 (0.1 ms alone) and then k1 (0.6 ms alone) run beside
  // it at half speed (efficiency 1.5), k0 ending at 0.2 ms with the event
  // the all-reduce waits for. k1 has done 0.4 ms of its work when the holder
  // ends at 1 ms and ends alone at 1.2 ms; at half speed it would end at
  // 1.4 ms. With collective_start_wait 1 the all-reduce starts as k1 ends.
  Topology topo = ringTopology(2, 1, 0);
  RankPlan rp;
  rp.streams = {StreamInfo{0, StreamKind::Compute, "compute"}, StreamInfo{1, StreamKind::Comm, "comm"},
                StreamInfo{2, StreamKind::Compute, "compute.wgrad"}};
  rp.num_events = 1;
  rp.tasks.push_back(kernel(0, 2, 7e11, 0));
  Task k0 = kernel(1, 0, 7e10, 0);
  k0.record_event = 0;
  rp.tasks.push_back(k0);
  rp.tasks.push_back(kernel(2, 0, 4.2e11, 0));
  Task ar = collective(3, 1, CollectiveOp::AllReduce, 100'000, "world");
  ar.wait_events = {0};
  rp.tasks.push_back(ar);
  const Plan plan = uniformPlan(2, rp);
  RooflineParams params = RooflineParams::defaults();
  params.launch_overhead_ns = 0;
  params.comm_slowdown = 1.0;
  params.kernel_sharing = KernelSharing::FirstHolds;
  params.kernel_overlap_efficiency = 1.5;
  Calibration wait;
  wait.collective_start_wait = 1.0;
  const SimResult r = simulatePlan(plan, topo, RooflineCostModel(params, wait), idealOptions());
  const SimActivity a0 = activityOf(r.ranks[0], 1), a1 = activityOf(r.ranks[0], 2), held = activityOf(r.ranks[0], 0);
  const SimActivity c = activityOf(r.ranks[0], 3);
  REQUIRE(held.start_ns == 0);
  REQUIRE(std::llabs(held.end_ns - 1'000'000) <= 1);
  REQUIRE(std::llabs(a0.end_ns - 200'000) <= 1);
  REQUIRE(std::llabs(a1.end_ns - 1'200'000) <= 2);
  CHECK(std::llabs(c.start_ns - a1.end_ns) <= 2);
}

TEST_CASE("a slower device: its kernels take 1 / speed as long, the other rank waits at the collective", "[engine]") {
  // overlapProgram on two ranks: k0, k1 (records event 0) on the compute
  // stream, the all-reduce after k1, then k3 and k4. Rank 1's GPU at half
  // speed: its kernels take twice as long, and rank 0's all-reduce ends
  // with rank 1's, so rank 0's collective activity lasts longer.
  const Plan plan = uniformPlan(2, overlapProgram());
  RooflineParams params = RooflineParams::defaults();
  params.comm_slowdown = 1.0;
  const RooflineCostModel cost(params);
  Topology topo = ringTopology(2, 100, 500);
  const SimResult even = simulatePlan(plan, topo, cost, idealOptions());
  topo.devices[1].speed = 0.5;
  CHECK_THROWS_WITH(simulatePlan(plan, topo, cost, idealOptions(SymmetryMode::On)), Catch::Contains("speed 0.5"));
  const SimResult slow = simulatePlan(plan, topo, cost, idealOptions(SymmetryMode::Auto));
  CHECK_FALSE(slow.stats.symmetric);
  auto len = [](const SimActivity& a) { return a.end_ns - a.start_ns; };
  for (int task : {0, 1, 3}) {
    CHECK(len(activityOf(slow.ranks[0], task)) == len(activityOf(even.ranks[0], task)));
    CHECK(std::llabs(len(activityOf(slow.ranks[1], task)) - 2 * len(activityOf(even.ranks[1], task))) <= 1);
  }
  // The all-reduce ends together on both ranks, after rank 1's slower k1.
  CHECK(activityOf(slow.ranks[0], 2).end_ns == activityOf(slow.ranks[1], 2).end_ns);
  CHECK(activityOf(slow.ranks[0], 2).end_ns >= activityOf(slow.ranks[1], 1).end_ns);
  CHECK(len(activityOf(slow.ranks[0], 2)) > len(activityOf(even.ranks[0], 2)));
  CHECK(slow.step_ns > even.step_ns);
}
