// Streams and events of a plan: every pair of tasks on different streams
// that touch the same bytes of the arena (the same buffer, overlapping views
// of a bucket, or two buffers the memory plan placed at the same offset at
// different times), one of them writing, is ordered by the plan's events;
// and the weight-gradient stream (job.schedule.weight_gradient_stream).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/memory/memory_plan.h"
#include "engine/plan/planner.h"
#include "test_jobs.h"

using namespace tandem;

namespace {

struct Span {
  int64_t begin = 0, end = 0;  // arena bytes
};

Span arenaSpan(const RankPlan& rp, int buffer) {
  const Buffer& b = rp.buffers[size_t(buffer)];
  const Buffer& root = b.parent >= 0 ? rp.buffers[size_t(b.parent)] : b;
  const int64_t begin = root.offset + (b.parent >= 0 ? b.parent_offset : 0);
  return {begin, begin + b.bytes};
}

// Happens-before over the plan's streams and events, by vector clocks: a
// task's clock holds, per stream, the position of the last task of that
// stream known to have finished before it starts. Tasks only wait for
// events recorded by tasks listed before them, so list order is a
// topological order.
class HappensBefore {
 public:
  explicit HappensBefore(const RankPlan& rp) : rp_(rp) {
    const size_t n = rp.tasks.size(), streams = rp.streams.size();
    position_.assign(n, 0);
    clock_.assign(n, std::vector<int>(streams, -1));
    std::vector<int> count(streams, 0), last(streams, -1), recorder(size_t(rp.num_events), -1);
    for (size_t i = 0; i < n; ++i) {
      const Task& t = rp.tasks[i];
      position_[i] = count[size_t(t.stream)]++;
      std::vector<int>& c = clock_[i];
      auto merge = [&](int done) {
        const std::vector<int>& d = clock_[size_t(done)];
        for (size_t s = 0; s < streams; ++s) c[s] = std::max(c[s], d[s]);
        c[size_t(rp.tasks[size_t(done)].stream)] = std::max(c[size_t(rp.tasks[size_t(done)].stream)],
                                                          position_[size_t(done)]);
      };
      if (last[size_t(t.stream)] >= 0) merge(last[size_t(t.stream)]);
      for (int e : t.wait_events) {
        REQUIRE(recorder.at(size_t(e)) >= 0);  // recorded by an earlier task
        merge(recorder[size_t(e)]);
      }
      last[size_t(t.stream)] = int(i);
      if (t.record_event >= 0) recorder.at(size_t(t.record_event)) = int(i);
    }
  }
  // Task a (listed before b) has finished before b starts.
  bool ordered(int a, int b) const {
    const int s = rp_.tasks[size_t(a)].stream;
    return clock_[size_t(b)][size_t(s)] >= position_[size_t(a)];
  }

 private:
  const RankPlan& rp_;
  std::vector<int> position_;
  std::vector<std::vector<int>> clock_;
};

// Unordered conflicting pairs, described (empty when the plan is sound).
std::vector<std::string> unorderedConflicts(const RankPlan& rp) {
  const HappensBefore hb(rp);
  std::vector<std::string> out;
  const size_t n = rp.tasks.size();
  for (size_t b = 0; b < n; ++b)
    for (size_t a = 0; a < b; ++a) {
      const Task& ta = rp.tasks[a];
      const Task& tb = rp.tasks[b];
      if (ta.stream == tb.stream || hb.ordered(int(a), int(b))) continue;
      auto clash = [&](const std::vector<int>& x, const std::vector<int>& y) {
        for (int i : x)
          for (int j : y) {
            const Span p = arenaSpan(rp, i), q = arenaSpan(rp, j);
            if (p.begin < q.end && q.begin < p.end) return true;
          }
        return false;
      };
      if (clash(ta.writes, tb.writes) || clash(ta.writes, tb.reads) || clash(ta.reads, tb.writes))
        out.push_back(fmt::format("{} (stream {}) and {} (stream {})", ta.name, ta.stream, tb.name, tb.stream));
    }
  return out;
}

}  // namespace

TEST_CASE("Every cross-stream conflict on the arena is ordered by events", "[planner][streams]") {
  struct Case {
    std::string label;
    JobSpec job;
  };
  std::vector<Case> cases;
  for (const bool wgrad : {false, true}) {
    const std::string w = wgrad ? " wgrad stream" : "";
    auto add = [&](std::string label, JobSpec j) {
      j.schedule.weight_gradient_stream = wgrad;
      cases.push_back({label + w, j});
    };
    add("micro dp1", test::microJob(2, 1, 1));
    add("micro dp1 accum 2", test::microJob(2, 1, 2));
    add("micro dp2", test::microJob(2, 2, 3));
    JobSpec sharded = test::microJob(2, 2, 2);
    sharded.parallel.shard_optimizer = true;
    add("micro dp2 sharded", sharded);
    JobSpec full = test::microJob(2, 2, 1);
    full.recompute.policy = RecomputePolicy::Full;
    add("micro dp2 full recompute", full);
    JobSpec selective = test::microJob(2, 1, 1);
    selective.recompute.policy = RecomputePolicy::Selective;
    add("micro selective recompute", selective);
    JobSpec bf16 = test::microJob(2, 2, 1);
    bf16.training.precision = Precision::BF16;
    add("micro dp2 bf16", bf16);
    JobSpec gpt2 = defaultJob();
    gpt2.parallel.data_parallel = 2;
    gpt2.parallel.shard_optimizer = true;
    gpt2.comm.gather_embedding_gradient = true;
    gpt2.training.micro_batch = 1;
    gpt2.model.seq_len = 128;
    add("gpt2 dp2 sharded, gathered embedding", gpt2);
    add("gpt2 default", defaultJob());
    JobSpec beside = test::microJob(2, 2, 2);
    beside.schedule.optimizer_beside_forward = true;
    add("micro dp2 accum 2, optimizer beside the forward", beside);
  }
  for (const Case& c : cases) {
    const Plan plan = buildPlan(c.job);
    const RankPlan& rp = plan.programs[0];
    INFO(c.label);
    REQUIRE(checkMemoryPlan(rp).empty());
    const std::vector<std::string> bad = unorderedConflicts(rp);
    INFO((bad.empty() ? std::string("none") : bad.front()) << " (" << bad.size() << " in all)");
    CHECK(bad.empty());
  }
}

TEST_CASE("The checker finds an unordered conflict", "[planner][streams]") {
  // Drop the events of the first task that waits for another stream: what it
  // waited for is now unordered, and the checker must say so.
  JobSpec job = test::microJob(2, 1, 1);
  job.schedule.weight_gradient_stream = true;
  Plan plan = buildPlan(job);
  RankPlan& rp = plan.programs[0];
  REQUIRE(unorderedConflicts(rp).empty());
  const auto waiting = std::find_if(rp.tasks.begin(), rp.tasks.end(),
                                    [](const Task& t) { return t.stream == 0 && !t.wait_events.empty(); });
  REQUIRE(waiting != rp.tasks.end());
  waiting->wait_events.clear();
  CHECK(!unorderedConflicts(rp).empty());
}

TEST_CASE("Weight gradients on a compute stream of their own", "[planner][streams]") {
  for (const int dp : {1, 2}) {
    JobSpec job = test::microJob(2, dp, 2);
    INFO("data parallel " << dp);
    job.schedule.weight_gradient_stream = false;
    const Plan off = buildPlan(job);
    job.schedule.weight_gradient_stream = true;
    const Plan on = buildPlan(job);
    const RankPlan& a = off.programs[0];
    const RankPlan& b = on.programs[0];
    REQUIRE(a.tasks.size() == b.tasks.size());
    auto computeStreams = [](const RankPlan& rp) {
      return std::count_if(rp.streams.begin(), rp.streams.end(),
                           [](const StreamInfo& s) { return s.kind == StreamKind::Compute; });
    };
    CHECK(computeStreams(a) == 1);
    CHECK(computeStreams(b) == 2);
    const auto side = std::find_if(b.streams.begin(), b.streams.end(),
                                   [](const StreamInfo& s) { return s.name == "compute.wgrad"; });
    REQUIRE(side != b.streams.end());
    CHECK(side->kind == StreamKind::Compute);
    int moved = 0;
    int last_side = -1;
    for (size_t i = 0; i < b.tasks.size(); ++i) {
      const Task& t = b.tasks[i];
      // The same tasks in the same order, only the stream differs.
      CHECK(t.name == a.tasks[i].name);
      if (t.op == OpKind::MatmulBwdWeight) {
        INFO(t.name);
        CHECK(t.stream == side->id);
        for (int w : t.writes) {
          const Buffer& buf = b.buffers[size_t(w)];
          CHECK((buf.parent >= 0 ? b.buffers[size_t(buf.parent)] : buf).persistent);
        }
        ++moved;
        last_side = int(i);
      } else if (t.kind == TaskKind::Kernel) {
        CHECK(t.stream == 0);
      }
    }
    CHECK(moved == (job.model.layers * 4 + 1) * job.training.grad_accum);  // four per layer and the LM head's
    // Stream 0 joins the side stream before the step ends: its last task
    // comes after the last weight gradient.
    const HappensBefore hb(b);
    int last_main = -1;
    for (size_t i = 0; i < b.tasks.size(); ++i)
      if (b.tasks[i].stream == 0) last_main = int(i);
    REQUIRE(last_side >= 0);
    CHECK(last_main > last_side);
    CHECK(hb.ordered(last_side, last_main));
    // Inputs of the weight gradients stay live a little longer.
    CHECK(b.memory.arena_bytes >= a.memory.arena_bytes);
  }
}

TEST_CASE("Job spec: schedule.weight_gradient_stream", "[job][streams]") {
  CHECK(parseJob("name: a\n", "a.yaml").schedule.weight_gradient_stream);
  CHECK(!parseJob("name: a\nschedule:\n  weight_gradient_stream: false\n", "a.yaml").schedule.weight_gradient_stream);
  CHECK(!parseJob("name: a\n", "a.yaml", {"schedule.weight_gradient_stream=false"}).schedule.weight_gradient_stream);
  CHECK_THROWS_WITH(parseJob("name: a\nschedule:\n  weight_gradient_stream: 3\n", "a.yaml"),
                    Catch::Contains("a.yaml:3") && Catch::Contains("schedule.weight_gradient_stream"));
  CHECK_THROWS_WITH(parseJob("name: a\nschedule:\n  streams: 2\n", "a.yaml"),
                    Catch::Contains("a.yaml:3") && Catch::Contains("weight_gradient_stream"));
}

TEST_CASE("The previous step's AdamW opens the step beside the forward", "[planner][streams][optimizer]") {
  for (const bool wgrad : {true, false}) {
    JobSpec job = test::microJob(2, 1, 1);
    job.schedule.weight_gradient_stream = wgrad;
    job.schedule.optimizer_beside_forward = true;
    INFO("weight gradient stream " << wgrad);
    const Plan plan = buildPlan(job);
    const RankPlan& rp = plan.programs[0];
    size_t updates = 0;
    while (updates < rp.tasks.size() && rp.tasks[updates].op == OpKind::AdamW) ++updates;
    REQUIRE(updates == rp.buckets.size());
    const int side = rp.tasks[0].stream;
    CHECK(side != 0);
    CHECK(rp.streams[size_t(side)].kind == StreamKind::Compute);
    CHECK(rp.streams[size_t(side)].name == (wgrad ? "compute.wgrad" : "compute.optimizer"));
    for (size_t i = 0; i < updates; ++i) {
      CHECK(rp.tasks[i].attrs.from_previous_step);
      CHECK(rp.tasks[i].stream == side);
      CHECK(rp.tasks[i].wait_events.empty());  // nothing earlier in the step to wait for
    }
    // The last bucket (the first the forward needs) is updated first.
    CHECK(rp.tasks[0].name == fmt::format("optimizer.adamw.bucket{}", rp.buckets.size() - 1));
    // No AdamW anywhere else, the gradient norm still last.
    for (size_t i = updates; i < rp.tasks.size(); ++i) CHECK(rp.tasks[i].op != OpKind::AdamW);
    CHECK(rp.tasks.back().op == OpKind::GradNorm);
    // The first forward task that reads a parameter waits for an update.
    const auto reader = std::find_if(rp.tasks.begin(), rp.tasks.end(), [&](const Task& t) {
      return t.phase == Phase::Forward && t.op == OpKind::Embedding;
    });
    REQUIRE(reader != rp.tasks.end());
    CHECK(!reader->wait_events.empty());
  }
  // Sharded optimizers keep their updates at the end.
  JobSpec sharded = test::microJob(2, 2, 1);
  sharded.parallel.shard_optimizer = true;
  sharded.schedule.optimizer_beside_forward = true;
  const Plan sharded_plan = buildPlan(sharded);
  for (const Task& t : sharded_plan.programs[0].tasks) CHECK(!t.attrs.from_previous_step);
}
