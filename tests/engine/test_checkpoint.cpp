// Checkpoints on the CPU reference (engine/checkpoint/checkpoint.h): a run
// stopped after k steps and resumed from what it wrote gives the same
// losses, bit for bit, as one never stopped; a damaged, truncated or
// interrupted checkpoint, another job or another layout are named.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/consistency.h"
#include "engine/checkpoint/crc32c.h"
#include "engine/numerics/init.h"
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
    checkpoint::Snapshot snap = first.snapshot();
    const int64_t bytes = checkpoint::snapshotBytes(snap);
    CHECK(bytes > 0);
    writer.submit(std::move(snap));
    writer.wait();
    // What the write cost is accounted: one write of the snapshot's bytes.
    const checkpoint::WriteCost cost = writer.cost();
    CHECK(cost.writes == 1);
    CHECK(cost.bytes == bytes);
    CHECK(cost.write_s > 0);
    CHECK(cost.gbPerSecond() > 0);
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

namespace {

// Steps k+1..n of `before` run straight, against `before` stopped at k,
// written, and resumed as `after` (another data-parallel layout, the same
// global batch): the checkpoint resharded on reading (reshard.h).
void checkReshardedResume(const JobSpec& before, const JobSpec& after, int k, int n, double tolerance,
                          const std::string& what) {
  INFO(what);
  const Plan plan = buildPlan(before), next = buildPlan(after);
  cpu::CpuExecutor straight(plan);
  std::vector<cpu::StepResult> want;
  for (int s = 0; s < n; ++s) want.push_back(straight.step());
  const fs::path dir = freshDir("reshard-" + what);
  {
    cpu::CpuExecutor first(plan);
    for (int s = 0; s < k; ++s) first.step();
    checkpoint::AsyncWriter writer(dir, plan, 0, "test");
    writer.submit(first.snapshot());
    writer.wait();
  }
  cpu::CpuExecutor resumed(next);
  resumed.restore(checkpoint::readCheckpoint(*checkpoint::latestCheckpoint(dir), next));
  CHECK(resumed.stepsDone() == k);
  for (int s = k; s < n; ++s) {
    const cpu::StepResult r = resumed.step();
    INFO("step " << s << ": " << r.loss << " against " << want[size_t(s)].loss);
    if (tolerance == 0) {
      CHECK(r.loss == want[size_t(s)].loss);
    } else {
      CHECK(r.loss == Approx(want[size_t(s)].loss).epsilon(tolerance));
      CHECK(r.grad_norm == Approx(want[size_t(s)].grad_norm).epsilon(100 * tolerance));
    }
  }
  fs::remove_all(dir);
}

JobSpec withPrecision(JobSpec job, Precision p) {
  job.training.precision = p;
  return job;
}

}  // namespace

TEST_CASE("a checkpoint resumes under another data-parallel layout: the losses of a run never stopped",
          "[checkpoint][reshard]") {
  // Data parallel 2 -> 1 and 1 -> 2 with the global batch kept (the
  // micro-batch doubled or halved), sharded or not: the same samples, the
  // gradient averaged in another order (fp32 within 1e-5, bf16 within its
  // rounding).
  for (Precision p : {Precision::FP32, Precision::BF16}) {
    const double tol = p == Precision::FP32 ? 1e-5 : 2e-3;
    JobSpec dp2 = withPrecision(test::microJob(2, 2, 1), p), dp1 = withPrecision(test::microJob(4, 1, 1), p);
    dp2.parallel.shard_optimizer = true;
    checkReshardedResume(dp2, dp1, 2, 4, tol, fmt::format("{} dp 2 zero-1 -> dp 1", toString(p)));
    JobSpec dp2z3 = dp2;
    dp2z3.parallel.shard_optimizer = false;
    dp2z3.parallel.shard_parameters = true;
    checkReshardedResume(dp1, dp2z3, 2, 4, tol, fmt::format("{} dp 1 -> dp 2 zero-3", toString(p)));
    // Data parallel 2 -> 1 with the accumulation doubled instead.
    checkReshardedResume(dp2, withPrecision(test::microJob(2, 1, 2), p), 2, 4, tol,
                         fmt::format("{} dp 2 -> dp 1 accumulation 2", toString(p)));
  }
  // The same replicas, another sharding (ZeRO-1 -> 3 -> 2): the same sums in
  // the same order, bit for bit.
  JobSpec z1 = withPrecision(test::microJob(2, 2, 1), Precision::BF16);
  z1.parallel.shard_optimizer = true;
  JobSpec z3 = z1, z2 = z1;
  z3.parallel.shard_parameters = true;
  z2.parallel.shard_gradients = true;
  checkReshardedResume(z1, z3, 2, 4, 0, "bf16 dp 2 zero-1 -> zero-3");
  checkReshardedResume(z3, z2, 2, 4, 0, "bf16 dp 2 zero-3 -> zero-2");
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

  // A checkpoint of the earlier format (each file's FNV-1a instead of its
  // CRC-32C) still loads, and its damage is still found.
  {
    const fs::path manifest = dir / "step-00000003" / "manifest.json";
    std::ifstream in(manifest);
    nlohmann::ordered_json m = nlohmann::ordered_json::parse(in);
    in.close();
    int converted = 0;
    for (auto& f : m.at("files")) {
      std::ifstream data(dir / "step-00000003" / f.at("path").get<std::string>(), std::ios::binary);
      const std::string content((std::istreambuf_iterator<char>(data)), std::istreambuf_iterator<char>());
      f.erase("crc32c");
      f["fnv1a64"] = fmt::format("{:016x}", fnv1a64(content.data(), content.size()));
      ++converted;
    }
    REQUIRE(converted > 0);
    std::ofstream(manifest, std::ios::trunc) << m.dump();
    CHECK_NOTHROW(checkpoint::readCheckpoint(dir / "step-00000003", plan));
    std::ofstream(file, std::ios::binary | std::ios::trunc) << flipped;
    CHECK_THROWS_WITH(checkpoint::readCheckpoint(dir / "step-00000003", plan),
                      Catch::Contains("rank0-layer1.bin: checksum mismatch"));
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  }

  // The gradients are not saved (dead between steps); a checkpoint that
  // holds them (as written before) still loads, one short of a buffer is
  // refused naming it.
  {
    checkpoint::Snapshot s = ex.snapshot();
    const RankPlan& program = plan.forRank(0);
    for (const checkpoint::BufferBytes& b : s.ranks[0])
      CHECK(program.buffers[size_t(b.buffer)].category != TensorCategory::Gradient);
    checkpoint::Snapshot with_gradients = s;
    int gradients = 0;
    for (const Buffer& b : program.buffers)
      if (b.persistent && b.parent < 0 && b.bytes > 0 && b.category == TensorCategory::Gradient) {
        with_gradients.ranks[0].push_back({b.id, ex.bufferBytes(0, b.id)});
        ++gradients;
      }
    REQUIRE(gradients > 0);
    const fs::path older = checkpoint::writeCheckpoint(freshDir("older"), plan, with_gradients, 0, "test");
    cpu::CpuExecutor resumed(plan);
    CHECK_NOTHROW(resumed.restore(checkpoint::readCheckpoint(older, plan)));
    checkpoint::Snapshot short_one = s;
    const std::string dropped = program.buffers[size_t(short_one.ranks[0].back().buffer)].name;
    short_one.ranks[0].pop_back();
    const fs::path cut = checkpoint::writeCheckpoint(freshDir("short"), plan, short_one, 0, "test");
    CHECK_THROWS_WITH(checkpoint::readCheckpoint(cut, plan),
                      Catch::Contains("1 of the") && Catch::Contains("missing (first: " + dropped + ")"));
    fs::remove_all(older.parent_path());
    fs::remove_all(cut.parent_path());
  }

  // A layout that cannot be resharded is refused with the reason (another
  // global batch; tensor parallelism); another job too.
  JobSpec two = test::microJob(2, 2, 1);
  CHECK_THROWS_WITH(checkpoint::readCheckpoint(dir / "step-00000003", buildPlan(two)),
                    Catch::Contains("resharding refused: the global batch changed") &&
                        Catch::Contains("\"data_parallel\":2"));
  JobSpec sliced = test::microJob(2, 1, 1);
  sliced.parallel.tensor_parallel = 2;
  CHECK_THROWS_WITH(checkpoint::readCheckpoint(dir / "step-00000003", buildPlan(sliced)),
                    Catch::Contains("resharding refused: tensor, pipeline or context parallelism changed"));
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
  // The master weights and moments are compared too unless the optimizer
  // is sharded; a flip in a master weight outlives the next step (the bf16
  // parameters are rewritten from it) and is named after it.
  const auto categoryOf = [&](int id) { return plan.forRank(0).buffers[size_t(id)].category; };
  CHECK(std::any_of(ids.begin(), ids.end(), [&](int id) { return categoryOf(id) == TensorCategory::MasterWeight; }));
  // The reduced gradients too (the three steps above compared them equal).
  CHECK(std::any_of(ids.begin(), ids.end(), [&](int id) { return categoryOf(id) == TensorCategory::Gradient; }));
  JobSpec zero1 = job;
  zero1.parallel.shard_optimizer = true;
  const Plan zero1_plan = buildPlan(zero1);
  for (int id : checkpoint::replicatedBuffers(zero1_plan, 0))
    CHECK(zero1_plan.forRank(0).buffers[size_t(id)].category == TensorCategory::Parameter);
  {
    cpu::CpuExecutor again(plan);
    again.step();
    const checkpoint::FlipTarget target = checkpoint::flipTarget(plan, 1);
    REQUIRE(target.buffer >= 0);
    CHECK(categoryOf(target.buffer) == TensorCategory::MasterWeight);
    again.flipBit(1, target.buffer, target.bit);
    again.step();
    const auto after = checkpoint::checkReplicas(
        plan, [&again](int rank, int buffer) { return again.bufferBytes(rank, buffer); });
    REQUIRE(after);
    CHECK(after->rank == 1);
  }
  // With the parameters sharded no two ranks hold the same bytes: nothing to compare.
  JobSpec sharded = job;
  sharded.parallel.shard_parameters = true;
  CHECK(checkpoint::replicatedBuffers(buildPlan(sharded), 0).empty());
}

TEST_CASE("a checkpoint written by a process per rank: each its part, rank 0 the manifest once every part is there",
          "[checkpoint]") {
  JobSpec job = test::microJob(2, 2, 1);
  job.parallel.shard_optimizer = true;
  const Plan plan = buildPlan(job);
  cpu::CpuExecutor exec(plan);
  exec.step();
  exec.step();
  const checkpoint::Snapshot snap = exec.snapshot();
  const fs::path dir = freshDir("parts");
  // A stale part of rank 1 from an interrupted write of the same step.
  checkpoint::writeRankPart(dir, plan, snap.step, 1, snap.ranks[1], "an earlier attempt");
  {
    checkpoint::AsyncWriter rank0(dir, plan, 0, "test"), rank1(dir, plan, 0, "test");
    rank0.writeRankPartOnly(0, "this attempt", 10);
    rank1.writeRankPartOnly(1, "this attempt", 10);
    rank0.submit(snap);  // waits for rank 1's part of this attempt
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK_FALSE(checkpoint::latestCheckpoint(dir));  // no manifest yet
    rank1.submit(snap);
    rank1.wait();
    rank0.wait();
  }
  const auto latest = checkpoint::latestCheckpoint(dir);
  REQUIRE(latest);
  CHECK_FALSE(fs::exists(*latest / "rank0.part.json"));  // the parts gave way to the manifest
  cpu::CpuExecutor resumed(plan);
  resumed.restore(checkpoint::readCheckpoint(*latest, plan));
  cpu::CpuExecutor straight(plan);
  for (int s = 0; s < 2; ++s) straight.step();
  CHECK(resumed.step().loss == straight.step().loss);
  // A part that never comes: one line naming the rank.
  const fs::path lonely = freshDir("parts-lonely");
  checkpoint::writeRankPart(lonely, plan, 5, 0, snap.ranks[0], "t");
  CHECK_THROWS_WITH(checkpoint::completeCheckpoint(lonely, plan, 5, false, 0, "test", "t", 0.1),
                    Catch::Contains("rank 1's part of the checkpoint did not appear within"));
  fs::remove_all(dir);
  fs::remove_all(lonely);
}

TEST_CASE("CRC-32C: the standard check values, the table and the instruction agree, pieces continue", "[checkpoint]") {
  const char* digits = "123456789";
  CHECK(checkpoint::crc32c(0, digits, 9) == 0xE3069283u);  // the check value of CRC-32C (RFC 3720)
  CHECK(checkpoint::crc32cPortable(0, digits, 9) == 0xE3069283u);
  CHECK(checkpoint::crc32c(0, digits, 0) == 0u);
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xFF);
  CHECK(checkpoint::crc32c(0, zeros.data(), zeros.size()) == 0x8A9136AAu);  // RFC 3720 B.4
  CHECK(checkpoint::crc32c(0, ones.data(), ones.size()) == 0x62A8AB43u);
  // Odd lengths and offsets, split anywhere: one value.
  std::vector<unsigned char> data(1000);
  uint32_t x = 12345;
  for (auto& b : data) b = (x = x * 1103515245u + 12345u) >> 24;
  for (size_t n : {1, 7, 8, 9, 63, 64, 65, 999, 1000}) {
    const uint32_t whole = checkpoint::crc32c(0, data.data(), n);
    CHECK(whole == checkpoint::crc32cPortable(0, data.data(), n));
    for (size_t cut : {size_t(0), n / 3, n / 2, n})
      CHECK(checkpoint::crc32c(checkpoint::crc32c(0, data.data(), cut), data.data() + cut, n - cut) == whole);
  }
}
