// Tensor-parallel communication overlapped with its GEMMs
// (schedule.tp_comm_overlap): the sequence-parallel all-gathers and
// reduce-scatters beside a GEMM move to their own stream, and lowering lets
// each run beside its GEMM (no event orders the two) while everything after
// the pair still waits for both. The arithmetic is the same task for task.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "engine/cpu/executor.h"
#include "engine/plan/plan_json.h"
#include "engine/plan/planner.h"
#include "engine/spec/job.h"
#include "test_jobs.h"

using namespace tandem;

namespace {

JobSpec overlappedJob(bool llama, RecomputePolicy recompute) {
  JobSpec job = llama ? test::llamaJob(1, 2, 2, 2) : test::splittableJob(1, 2);
  job.parallel.tensor_parallel = 2;
  job.parallel.sequence_parallel = true;
  job.recompute.policy = recompute;
  job.schedule.tp_comm_overlap = true;
  return job;
}

// Whether task `later` must wait for task `earlier` to finish: a path of
// stream order and events from `earlier` to `later`.
class HappensBefore {
 public:
  explicit HappensBefore(const RankPlan& rp) : rp_(rp), previous_(rp.tasks.size(), -1), recorder_() {
    std::vector<int> last(rp.streams.size(), -1);
    for (size_t i = 0; i < rp.tasks.size(); ++i) {
      const Task& t = rp.tasks[i];
      previous_[i] = last[size_t(t.stream)];
      last[size_t(t.stream)] = int(i);
      if (t.record_event >= 0) {
        if (recorder_.size() <= size_t(t.record_event)) recorder_.resize(size_t(t.record_event) + 1, -1);
        recorder_[size_t(t.record_event)] = int(i);
      }
    }
  }
  bool operator()(int earlier, int later) const {
    std::vector<char> seen(rp_.tasks.size(), 0);
    std::vector<int> todo{later};
    while (!todo.empty()) {
      const int i = todo.back();
      todo.pop_back();
      auto visit = [&](int p) {
        if (p >= 0 && !seen[size_t(p)]) {
          seen[size_t(p)] = 1;
          todo.push_back(p);
        }
      };
      visit(previous_[size_t(i)]);
      for (int e : rp_.tasks[size_t(i)].wait_events) visit(recorder_[size_t(e)]);
    }
    return seen[size_t(earlier)] != 0;
  }

 private:
  const RankPlan& rp_;
  std::vector<int> previous_;
  std::vector<int> recorder_;
};

bool isGemm(OpKind op) { return op == OpKind::Matmul || op == OpKind::MatmulBwdData || op == OpKind::MatmulBwdWeight; }
bool reads(const Task& t, int b) { return std::find(t.reads.begin(), t.reads.end(), b) != t.reads.end(); }
bool writes(const Task& t, int b) { return std::find(t.writes.begin(), t.writes.end(), b) != t.writes.end(); }

}  // namespace

TEST_CASE("overlapped tensor-parallel collectives run beside their GEMMs and before what follows", "[planner][tp][overlap]") {
  for (bool llama : {false, true})
    for (RecomputePolicy recompute : {RecomputePolicy::None, RecomputePolicy::Full}) {
      const JobSpec job = overlappedJob(llama, recompute);
      INFO((llama ? "llama" : "gpt-2") << " recompute " << toString(recompute));
      const Plan plan = buildPlan(job);
      const RankPlan& rp = plan.programs[0];
      const HappensBefore before(rp);
      int gathers = 0, scatters = 0;
      for (size_t i = 0; i < rp.tasks.size(); ++i) {
        const Task& c = rp.tasks[i];
        if (!c.attrs.overlapped) continue;
        INFO(c.name);
        REQUIRE(c.collective);
        CHECK(c.collective->group == "tp");
        CHECK(rp.streams[size_t(c.stream)].name == "comm.tp");
        if (c.op == OpKind::AllGather) {
          ++gathers;
          // Its first reader is a GEMM that does not wait for it...
          size_t reader = i + 1;
          while (reader < rp.tasks.size() && !reads(rp.tasks[reader], c.writes[0])) ++reader;
          REQUIRE(reader < rp.tasks.size());
          CHECK(isGemm(rp.tasks[reader].op));
          CHECK_FALSE(before(int(i), int(reader)));
          // ...and the next task on the GEMM's stream does.
          size_t next = reader + 1;
          while (next < rp.tasks.size() && rp.tasks[next].stream != rp.tasks[reader].stream) ++next;
          REQUIRE(next < rp.tasks.size());
          CHECK(before(int(i), int(next)));
        } else {
          REQUIRE(c.op == OpKind::ReduceScatter);
          ++scatters;
          // It starts with the GEMM that writes its input, not after it,
          // and after the GEMM's inputs are written.
          size_t writer = i;
          while (writer-- > 0 && !writes(rp.tasks[writer], c.reads[0])) {
          }
          REQUIRE(writer < i);
          CHECK(isGemm(rp.tasks[writer].op));
          CHECK_FALSE(before(int(writer), int(i)));
          for (int in : rp.tasks[writer].reads) CHECK(reads(c, in));
          // Whatever reads the scattered rows waits for it.
          for (size_t j = i + 1; j < rp.tasks.size(); ++j)
            if (reads(rp.tasks[j], c.writes[0])) {
              CHECK(before(int(i), int(j)));
              break;
            }
        }
      }
      // Per block and micro-batch in the forward: the gathers before the
      // attention's and the MLP's input GEMMs and the scatters after their
      // output GEMMs; the same again, transposed, in the backward.
      const int per_pass = 2 * job.model.layers * job.training.grad_accum;
      CHECK(gathers >= 2 * per_pass);
      CHECK(scatters >= 2 * per_pass);
      CHECK(planFromJson(planToJson(plan)) == plan);
      // Without the setting every gather is waited for by its first reader.
      JobSpec plain_job = job;
      plain_job.schedule.tp_comm_overlap = false;
      const Plan plain = buildPlan(plain_job);
      const RankPlan& pp = plain.programs[0];
      const HappensBefore plain_before(pp);
      for (size_t i = 0; i < pp.tasks.size(); ++i) {
        const Task& c = pp.tasks[i];
        if (c.op != OpKind::AllGather || !c.collective || c.collective->group != "tp") continue;
        for (size_t j = i + 1; j < pp.tasks.size(); ++j)
          if (reads(pp.tasks[j], c.writes[0])) {
            INFO(c.name << " before " << pp.tasks[j].name);
            CHECK(plain_before(int(i), int(j)));
            break;
          }
      }
    }
}

TEST_CASE("overlapping tensor-parallel communication leaves the arithmetic as it was", "[executor][tp][overlap]") {
  for (bool llama : {false, true}) {
    JobSpec overlapped = overlappedJob(llama, RecomputePolicy::Selective);
    overlapped.training.precision = Precision::BF16;
    JobSpec plain = overlapped;
    plain.schedule.tp_comm_overlap = false;
    INFO((llama ? "llama" : "gpt-2"));
    cpu::CpuExecutor a(buildPlan(plain));
    cpu::CpuExecutor b(buildPlan(overlapped));
    for (int step = 0; step < 3; ++step) {
      const cpu::StepResult ra = a.step(), rb = b.step();
      CHECK(rb.loss == ra.loss);
      CHECK(rb.grad_norm == ra.grad_norm);
    }
  }
}

TEST_CASE("tensor-parallel overlap is planned only where there is something to overlap", "[planner][tp][overlap]") {
  // Without tensor parallelism the setting changes nothing.
  JobSpec one = test::splittableJob(2, 1);
  one.schedule.tp_comm_overlap = true;
  JobSpec plain = one;
  plain.schedule.tp_comm_overlap = false;
  const Plan a = buildPlan(one), b = buildPlan(plain);
  CHECK(a.programs[0].tasks.size() == b.programs[0].tasks.size());
  CHECK(std::none_of(a.programs[0].tasks.begin(), a.programs[0].tasks.end(),
                     [](const Task& t) { return t.attrs.overlapped; }));
  // With it, each group collective left in place neighbours no GEMM (the
  // loss statistics' gathers, the embedding's scatter, the norms' sums).
  for (bool llama : {false, true}) {
    const Plan plan = buildPlan(overlappedJob(llama, RecomputePolicy::None));
    const RankPlan& rp = plan.programs[0];
    int kept = 0;
    for (size_t i = 0; i < rp.tasks.size(); ++i) {
      const Task& c = rp.tasks[i];
      if (!c.collective || c.collective->group != "tp" || c.attrs.overlapped) continue;
      INFO(c.name);
      ++kept;
      if (c.op == OpKind::AllGather && c.writes[0] != c.reads[0]) {
        for (size_t j = i + 1; j < rp.tasks.size(); ++j)
          if (reads(rp.tasks[j], c.writes[0])) {
            CHECK_FALSE(isGemm(rp.tasks[j].op));
            break;
          }
      } else if (c.op == OpKind::ReduceScatter) {
        for (size_t j = i; j-- > 0;)
          if (writes(rp.tasks[j], c.reads[0])) {
            CHECK_FALSE(isGemm(rp.tasks[j].op));
            break;
          }
      }
    }
    CHECK(kept > 0);
  }
}
