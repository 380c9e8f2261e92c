// The LM head in groups of tokens (engine/passes/lm_head_chunks.h): the
// plan's shape. The CPU executor's equality checks are in test_executor.cpp.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "engine/memory/memory_fit.h"
#include "engine/plan/planner.h"
#include "test_jobs.h"

using namespace tandem;

namespace {

const Task& taskNamed(const RankPlan& rp, const std::string& name) {
  for (const Task& t : rp.tasks)
    if (t.name == name) return t;
  FAIL("no task " << name);
  throw std::logic_error("unreachable");
}

int64_t offsetInRoot(const Buffer& b) { return b.parent >= 0 ? b.parent_offset : 0; }

}  // namespace

TEST_CASE("lm_head_chunks splits each micro-batch's LM head into groups issued one after another",
          "[planner][lm_head_chunks]") {
  JobSpec job = test::microJob(4, 1, 2);  // 32 tokens per micro-batch
  job.schedule.lm_head_chunks = 4;
  const Plan plan = buildPlan(job);
  const RankPlan& rp = plan.programs[0];
  const int64_t rows = 8, vocab = job.model.vocab, hidden = job.model.hidden;
  for (int mb = 0; mb < 2; ++mb) {
    INFO("micro-batch " << mb);
    // The five tasks of a group follow one another, group after group.
    const Task& first = taskNamed(rp, fmt::format("lm_head.chunk0.fwd.mb{}", mb));
    const size_t start = size_t(&first - rp.tasks.data());
    std::vector<int> logits;
    for (int c = 0; c < 4; ++c) {
      INFO("group " << c);
      const Task* t = &rp.tasks[start + 5 * size_t(c)];
      const std::vector<std::pair<OpKind, std::string>> expected = {
          {OpKind::Matmul, "lm_head.chunk{}.fwd.mb{}"},
          {OpKind::CrossEntropy, "loss.chunk{}.fwd.mb{}"},
          {OpKind::CrossEntropyBwd, "loss.chunk{}.bwd.mb{}"},
          {OpKind::MatmulBwdData, "lm_head.chunk{}.bwd_data.mb{}"},
          {OpKind::MatmulBwdWeight, "lm_head.chunk{}.bwd_weight.mb{}"}};
      for (size_t k = 0; k < expected.size(); ++k) {
        CHECK(t[k].op == expected[k].first);
        CHECK(t[k].name == fmt::format(fmt::runtime(expected[k].second), c, mb));
        CHECK(t[k].attrs.m == rows);
      }
      // Logits of the group's own, [rows, vocab], not a view.
      const Buffer& l = rp.buffers[size_t(t[0].writes[0])];
      CHECK(l.parent < 0);
      CHECK(l.shape == std::vector<int64_t>{rows, vocab});
      logits.push_back(l.id);
      // Row views, in order, of the final layernorm's output, the targets,
      // the losses and the layernorm output's gradient.
      for (int view : {t[0].reads[0], t[1].reads[1], t[1].writes[0], t[3].writes[0]}) {
        const Buffer& v = rp.buffers[size_t(view)];
        INFO(v.name);
        CHECK(v.parent >= 0);
        CHECK(offsetInRoot(v) == c * v.bytes);
        CHECK(v.shape.front() == rows);
      }
      CHECK(rp.buffers[size_t(t[0].reads[0])].shape == std::vector<int64_t>{rows, hidden});
      // The weight gradient: its own stream, the first group of the step
      // sets it, every later contribution adds.
      CHECK(rp.streams[size_t(t[4].stream)].name == "compute.wgrad");
      CHECK(t[4].attrs.accumulate_params == (c > 0 || mb > 0));
      CHECK(t[4].writes == taskNamed(rp, fmt::format("lm_head.chunk0.bwd_weight.mb{}", mb)).writes);
    }
    std::sort(logits.begin(), logits.end());
    CHECK(std::unique(logits.begin(), logits.end()) == logits.end());
  }
  // Nothing is left of the unsplit head.
  for (const Task& t : rp.tasks) CHECK(t.name.find("lm_head.fwd") == std::string::npos);
}

TEST_CASE("lm_head_chunks lowers GPT-2 124M's peak memory by reusing the logits' space", "[planner][lm_head_chunks]") {
  JobSpec job = defaultJob();
  job.parallel.data_parallel = 1;
  job.training.micro_batch = 16;
  const Plan whole = buildPlan(job);
  job.schedule.lm_head_chunks = 8;
  const Plan eight = buildPlan(job);
  const int64_t logits = int64_t(16) * job.model.seq_len * job.model.vocab * 2;  // bf16
  // At most three groups' logits are live at once (a group's are read by its
  // weight GEMM until the compute stream joins it two groups later).
  CHECK(eight.programs[0].memory.arena_bytes <= whole.programs[0].memory.arena_bytes - logits / 2);
  CHECK(eight.summary.flops_per_step == Approx(whole.summary.flops_per_step).epsilon(1e-12));
}

TEST_CASE("lm_head_chunks that do not split the tokens are refused", "[planner][lm_head_chunks]") {
  JobSpec job = test::microJob(2, 1, 1);  // 16 tokens
  job.schedule.lm_head_chunks = 4;        // groups of 4: not a multiple of 8
  CHECK_THROWS_AS(buildPlan(job), std::invalid_argument);
  // Through the job file the field is named.
  CHECK_THROWS_WITH(parseJob("model: {seq_len: 8}\ntraining: {micro_batch: 2}\nschedule: {lm_head_chunks: 4}\n",
                             "bad.yaml"),
                    Catch::Contains("bad.yaml:3: schedule.lm_head_chunks: 4 groups do not split"));
  // A valid count round-trips through the canonical YAML.
  const JobSpec ok = parseJob("schedule: {lm_head_chunks: 8}\n", "ok.yaml");
  CHECK(ok.schedule.lm_head_chunks == 8);
  CHECK(parseJob(ok.yaml, ok.source) == ok);
}

TEST_CASE("Choices that fit a memory budget include the LM head in groups", "[planner][lm_head_chunks][memory]") {
  JobSpec job = defaultJob();
  job.parallel.data_parallel = 1;
  job.training.micro_batch = 16;
  const int64_t whole = buildPlan(job).programs[0].memory.arena_bytes;
  auto none = [](const Plan&) { return int64_t(0); };
  // Between 16 groups' arena (6.84 GiB) and the whole one's (8.14): without
  // recompute only the split head keeps micro-batch 16.
  job.schedule.lm_head_chunks = 16;
  const int64_t split = buildPlan(job).programs[0].memory.arena_bytes;
  job.schedule.lm_head_chunks = 1;
  REQUIRE(split < whole);
  const std::vector<FittingChoice> fits = choicesThatFit(job, split, none);
  REQUIRE(fits.size() == 3);
  CHECK(fits[0].policy == RecomputePolicy::None);
  CHECK(fits[0].micro_batch == 16);
  CHECK(fits[0].lm_head_chunks == 16);
  CHECK(fits[0].bytes == split);
  CHECK(fits[0].text(job) == fmt::format("recompute.policy=none training.micro_batch=16 schedule.lm_head_chunks=16 "
                                         "({:.1f} GiB)",
                                         double(split) / double(1 << 30)));
  // Selective recompute fits without the split (6.54 GiB), so it is not added.
  CHECK(fits[1].policy == RecomputePolicy::Selective);
  CHECK(fits[1].micro_batch == 16);
  CHECK(fits[1].lm_head_chunks == 1);
  CHECK(fits[1].text(job).find("lm_head_chunks") == std::string::npos);
  CHECK(fits[2].policy == RecomputePolicy::Full);
  // Every choice is within the budget, with the caller's overhead counted.
  const int64_t overhead = int64_t(64) << 20;
  for (const FittingChoice& f : choicesThatFit(job, split, [&](const Plan&) { return overhead; })) {
    INFO(f.text(job));
    CHECK(f.bytes <= split);
    const JobSpec j = f.appliedTo(job);
    CHECK(j.recompute.policy == f.policy);
    CHECK(j.training.micro_batch == f.micro_batch);
    CHECK(j.schedule.lm_head_chunks == f.lm_head_chunks);
    CHECK(buildPlan(j).programs[0].memory.arena_bytes + overhead == f.bytes);
  }
  // Nothing fits a budget below the smallest plan.
  CHECK(choicesThatFit(job, 1 << 20, none).empty());
  // The job itself is never offered back, even when it fits.
  for (const FittingChoice& f : choicesThatFit(job, whole, none))
    CHECK_FALSE((f.policy == RecomputePolicy::None && f.micro_batch == 16 && f.lm_head_chunks == 1));
}
