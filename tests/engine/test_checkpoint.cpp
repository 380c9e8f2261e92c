// Checkpoints on the CPU reference (engine/checkpoint/checkpoint.h): a run
// stopped after k steps and resumed from what it wrote gives the same
// losses, bit for bit, as one never stopped; a damaged, truncated or
// interrupted checkpoint, another job or another layout are named.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/consistency.h"
#include "engine/cpu/executor.h"
#include "engine/plan/planner.h"
#include "tests/engine/test_jobs.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {

fs::path freshDir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / fmt::format("tandem-ckpt-{}-{}", ::getpid(), name);
  fs::remove_all(d);
  return d;
}

// Losses and gradient norms of steps k+1..n: run straight, and stopped at k,
// written, read back into a fresh executor, run on.
void checkResumeIsExact(const JobSpec& job, int k, int n, const std::string& what) {
  INFO(what);
  const Plan plan = buildPlan(job);
  cpu::CpuExecutor straight(plan);
  std::vector<cpu::StepResult> want;
  for (int s = 0; s < n; ++s) want.push_back(straight.step());

  const fs::path dir = freshDir(what);
  {
    cpu::CpuExecutor first(plan);
    for (int s = 0; s < k; ++s) first.step();
    checkpoint::AsyncWriter writer(dir, plan, 0, "test");
    writer.submit(first.snapshot());
    writer.wait();
  }
  const auto latest = checkpoint::latestCheckpoint(dir);
  REQUIRE(latest);
  cpu::CpuExecutor resumed(plan);
  resumed.restore(checkpoint::readCheckpoint(*latest, plan));
  CHECK(resumed.stepsDone() == k);
  for (int s = k; s < n; ++s) {
    const cpu::StepResult r = resumed.step();
    CHECK(r.loss == want[size_t(s)].loss);
    CHECK(r.grad_norm == want[size_t(s)].grad_norm);
    CHECK(r.lr == want[size_t(s)].lr);
  }
  fs::remove_all(dir);
}

}  // namespace

TEST_CASE("resuming from a checkpoint gives the losses of a run never stopped, bit for bit", "[checkpoint]") {
  checkResumeIsExact(test::microJob(2, 1, 1), 2, 5, "gpt fp32");
  JobSpec bf16 = test::microJob(2, 1, 2);
  bf16.training.precision = Precision::BF16;
  checkResumeIsExact(bf16, 3, 5, "gpt bf16 accum 2");
  JobSpec zero1 = test::microJob(2, 2, 1);
  zero1.training.precision = Precision::BF16;
  zero1.parallel.shard_optimizer = true;
  checkResumeIsExact(zero1, 2, 4, "dp 2 zero-1");
  JobSpec zero3 = test::microJob(2, 2, 1);
  zero3.parallel.shard_parameters = true;
  checkResumeIsExact(zero3, 2, 4, "dp 2 zero-3");
  checkResumeIsExact(test::llamaJob(1, 1), 2, 4, "llama gqa");
  JobSpec beside = test::microJob(2, 1, 1);
  beside.schedule.optimizer_beside_forward = true;  // the last step's AdamW pending at the checkpoint
  checkResumeIsExact(beside, 2, 4, "adamw beside the forward");
}

TEST_CASE("checkpoints: interrupted ones skipped, damaged ones named, the newest K kept", "[checkpoint][errors]") {
  const JobSpec job = test::microJob(2, 1, 1);
  const Plan plan = buildPlan(job);
  const fs::path dir = freshDir("faults");
  cpu::CpuExecutor ex(plan);
  for (int s = 1; s <= 4; ++s) {
    ex.step();
    checkpoint::writeCheckpoint(dir, plan, ex.snapshot(), /*keep=*/2, "test");
  }
  // Only the newest two are kept.
  CHECK_FALSE(fs::exists(dir / "step-00000002"));
  REQUIRE(fs::exists(dir / "step-00000003" / "manifest.json"));
  CHECK(checkpoint::latestCheckpoint(dir) == dir / "step-00000004");
  // A write cut before its manifest: skipped for the one before.
  fs::remove(dir / "step-00000004" / "manifest.json");
  CHECK(checkpoint::latestCheckpoint(dir) == dir / "step-00000003");
  CHECK_THROWS_WITH(checkpoint::readCheckpoint(dir / "step-00000004", plan),
                    Catch::Contains("no manifest") && Catch::Contains("step-00000004"));
  // A flipped byte and a cut file: each named with what is wrong.
  const fs::path file = dir / "step-00000003" / "rank0-layer1.bin";
  REQUIRE(fs::exists(file));
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::string flipped = bytes;
  flipped[flipped.size() / 2] = char(flipped[flipped.size() / 2] ^ 0x10);
  std::ofstream(file, std::ios::binary | std::ios::trunc) << flipped;
  CHECK_THROWS_WITH(checkpoint::readCheckpoint(dir / "step-00000003", plan),
                    Catch::Contains("rank0-layer1.bin: checksum mismatch"));
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 8);
  CHECK_THROWS_WITH(checkpoint::readCheckpoint(dir / "step-00000003", plan),
                    Catch::Contains("rank0-layer1.bin") && Catch::Contains("truncated"));
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  CHECK_NOTHROW(checkpoint::readCheckpoint(dir / "step-00000003", plan));

  // Another layout is refused with the reason; another job too.
  JobSpec two = test::microJob(2, 2, 1);
  CHECK_THROWS_WITH(checkpoint::readCheckpoint(dir / "step-00000003", buildPlan(two)),
                    Catch::Contains("resharding a checkpoint is not done") && Catch::Contains("\"data_parallel\":2"));
  JobSpec other = test::microJob(2, 1, 1);
  other.model.hidden = 32;
  CHECK_THROWS_WITH(checkpoint::readCheckpoint(dir / "step-00000003", buildPlan(other)),
                    Catch::Contains("written by another job"));
  fs::remove_all(dir);
}

TEST_CASE("replica check: data-parallel ranks agree bit for bit; one flipped bit is named", "[checkpoint][replicas]") {
  JobSpec job = test::microJob(2, 2, 1);
  job.training.precision = Precision::BF16;
  const Plan plan = buildPlan(job);
  cpu::CpuExecutor ex(plan);
  const checkpoint::BufferReader read = [&ex](int rank, int buffer) { return ex.bufferBytes(rank, buffer); };
  REQUIRE_FALSE(checkpoint::replicatedBuffers(plan, 0).empty());
  for (int s = 0; s < 3; ++s) {
    ex.step();
    CHECK_FALSE(checkpoint::checkReplicas(plan, read));
  }
  const std::vector<int> ids = checkpoint::replicatedBuffers(plan, 1);
  ex.flipBit(1, ids[2], 5);
  const auto m = checkpoint::checkReplicas(plan, read);
  REQUIRE(m);
  CHECK(m->rank == 1);
  CHECK(m->reference_rank == 0);
  CHECK(m->tensor == plan.forRank(1).buffers[size_t(ids[2])].name);
  CHECK_THAT(m->line, Catch::Contains("rank 1's " + m->tensor) && Catch::Contains("group 'dp'"));
  // With the parameters sharded no two ranks hold the same bytes: nothing to compare.
  JobSpec sharded = job;
  sharded.parallel.shard_parameters = true;
  CHECK(checkpoint::replicatedBuffers(buildPlan(sharded), 0).empty());
}
