// FP8 on the CPU reference (engine/cpu/fp8_scales.h): casts with the
// scales Transformer Engine computes, FP8 GEMMs reading the values back,
// and jobs that train like their bf16 twins.
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/checkpoint/checkpoint.h"
#include "engine/cpu/executor.h"
#include "engine/cpu/fp8_scales.h"
#include "engine/numerics/bf16.h"
#include "engine/numerics/fp8.h"
#include "engine/numerics/fp8_history.h"
#include "engine/plan/planner.h"
#include "test_jobs.h"

using namespace tandem;

namespace {

JobSpec fp8Job(bool llama, Fp8Scaling scaling, RecomputePolicy recompute = RecomputePolicy::None) {
  JobSpec j = llama ? test::llamaJob(1, 2) : test::splittableJob(1, 2);
  j.training.precision = Precision::FP8;
  j.training.fp8_scaling = scaling;
  j.recompute.policy = recompute;
  return j;
}

std::vector<double> losses(const JobSpec& job, int steps) {
  cpu::CpuExecutor ex(buildPlan(job));
  std::vector<double> out;
  for (int s = 0; s < steps; ++s) out.push_back(ex.step().loss);
  return out;
}

int bufferNamed(const RankPlan& rp, const std::string& name) {
  for (const Buffer& b : rp.buffers)
    if (b.name == name) return b.id;
  FAIL("no buffer " << name);
  return -1;
}

}  // namespace

TEST_CASE("FP8 scales: current from the tensor's amax, delayed from the history of earlier steps, recompute "
          "sharing its forward's",
          "[fp8][cpu]") {
  const Plan plan = buildPlan(fp8Job(false, Fp8Scaling::Delayed));
  const RankPlan& rp = plan.programs[0];
  Task fwd, bwd;
  fwd.name = "layer0.ln1.fwd.mb1";
  fwd.phase = Phase::Forward;
  bwd.name = "layer0.mlp.gelu.bwd.mb0";
  bwd.phase = Phase::Backward;
  CHECK(fp8CastKey("layer0.ln1.recompute.mb3") == "layer0.ln1.fwd");
  CHECK(fp8CastKey(fwd.name) == "layer0.ln1.fwd");

  cpu::Fp8Scales delayed(rp, false);
  CHECK(delayed.scaleForWrite(fwd, 0, 2.0f) == 1.0f);  // no history yet
  CHECK(delayed.formatOf(0) == Fp8Format::E4M3);
  CHECK(delayed.scaleForWrite(fwd, 1, 4.0f) == 1.0f);  // still this step
  delayed.endStep();
  CHECK(delayed.scaleForWrite(fwd, 0, 0.5f) == 112.0f);  // 448 / max(2, 4)
  CHECK(delayed.scaleOf(0) == 112.0f);
  CHECK(delayed.scaleForWrite(bwd, 2, 3.0f) == 1.0f);
  CHECK(delayed.formatOf(2) == Fp8Format::E5M2);  // a gradient
  delayed.endStep();
  CHECK(delayed.scaleForWrite(bwd, 2, 1.0f) == Approx(57344.0f / 3.0f));

  cpu::Fp8Scales current(rp, true);
  CHECK(current.scaleForWrite(fwd, 0, 2.0f) == 224.0f);
  CHECK(current.scaleForWrite(fwd, 0, 0.0f) == 224.0f);  // an all-zero tensor keeps the last scale
}

// Whether a task after the buffer's last reader writes over its bytes.
bool reusedAfterLastUse(const RankPlan& rp, int buffer) {
  const Buffer& b = rp.buffers[size_t(buffer)];
  for (size_t i = size_t(b.last_use) + 1; i < rp.tasks.size(); ++i)
    for (int w : rp.tasks[i].writes) {
      const Buffer& o = rp.buffers[size_t(w)];
      if (o.offset < b.offset + b.bytes && b.offset < o.offset + o.bytes) return true;
    }
  return false;
}

TEST_CASE("FP8 delayed scaling's history: the GPU's ring and the CPU's history agree, and the text round-trips",
          "[fp8][cpu]") {
  // The CPU reference's history (Fp8Scales::endStep) and the GPU's ring
  // (fp8DelayedEndStep writes step n at n % kFp8History), over more steps
  // than the history holds.
  std::vector<float> ring(kFp8History, -1.0f);
  std::deque<float> history;
  const int steps = kFp8History + 37;
  for (int n = 0; n < steps; ++n) {
    const float amax = 0.25f * float(n % 97) + 1.0f / float(n + 1);
    ring[size_t(n % kFp8History)] = amax;
    history.push_back(amax);
    if (int(history.size()) > kFp8History) history.pop_front();
    if (n == 10) CHECK(fp8HistoryFromRing(ring.data(), n + 1) == history);  // before the ring wraps
  }
  CHECK(fp8HistoryFromRing(ring.data(), steps) == history);
  CHECK(fp8HistoryFromRing(ring.data(), 0).empty());
  // Restored into a ring (as a resume loads it), read back the same.
  std::vector<float> restored(kFp8History, 0.0f);
  fp8HistoryToRing(history, restored.data());
  CHECK(fp8HistoryFromRing(restored.data(), int(history.size())) == history);
  history.push_back(1.0f);
  CHECK_THROWS_WITH(fp8HistoryToRing(history, restored.data()), Catch::Contains("more than 1024 steps"));
  // The state text keeps every bit, and rejects text it did not write.
  Fp8History state;
  state.last_scale["layer0.attn.qkv.fwd.cast_x"] = 448.0f / 3.0f;
  state.amax["layer0.attn.qkv.fwd.cast_x"] = {3.0f, 1e-30f, 0.0f};
  state.last_scale["layer0.mlp.swiglu.bwd"] = 1.0f;
  const Fp8History back = decodeFp8History(encodeFp8History(state));
  CHECK(back.last_scale == state.last_scale);
  CHECK(back.amax == state.amax);
  CHECK_THROWS_WITH(decodeFp8History("not a state\n"), Catch::Contains("not a state this version writes"));
  CHECK_THROWS_WITH(decodeFp8History("tandem fp8 scales 1\nkey\tzz\n"), Catch::Contains("not a number"));
}

TEST_CASE("an FP8 weight's transposed copy holds its E4M3 codes under its own scale (current scaling)", "[fp8][cpu]") {
  const Plan plan = buildPlan(fp8Job(false, Fp8Scaling::Current));
  const RankPlan& rp = plan.programs[0];
  // The transposed copy the data gradient's GEMM reads: its bytes outlive
  // the step (the row-major one's are reused once the forward has read it).
  const int copy = bufferNamed(rp, "layer0.attn.qkv.weight.fp8t");
  REQUIRE_FALSE(reusedAfterLastUse(rp, copy));
  int source = -1;
  for (const Task& t : rp.tasks)
    if (t.op == OpKind::CastFp8 && t.writes.size() == 2 && t.writes[1] == copy) source = t.reads[0];
  REQUIRE(source >= 0);
  REQUIRE(rp.buffers[size_t(source)].dtype == DType::BF16);
  const int64_t columns = rp.buffers[size_t(source)].shape.back(), rows = rp.buffers[size_t(copy)].shape.back();
  REQUIRE(rp.buffers[size_t(copy)].shape == std::vector<int64_t>{columns, rows});
  cpu::CpuExecutor ex(plan);
  const std::vector<std::byte> before = ex.bufferBytes(0, source);  // the weights the step's cast reads
  ex.step();
  const std::vector<std::byte> codes = ex.bufferBytes(0, copy);
  const size_t n = before.size() / 2;
  REQUIRE(codes.size() == n);
  std::vector<float> w(n);
  float amax = 0;
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, before.data() + 2 * i, 2);
    w[i] = bf16BitsToFloat(h);
    amax = std::max(amax, std::fabs(w[i]));
  }
  const float scale = fp8Scale(amax, Fp8Format::E4M3);
  size_t differ = 0, at_largest = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t want = fp8FromFloat(w[i] * scale, Fp8Format::E4M3);
    const size_t r = i / size_t(columns), c = i % size_t(columns);
    differ += uint8_t(codes[c * size_t(rows) + r]) != want;
    at_largest += (want & 0x7F) == 0x7E;
  }
  CHECK(differ == 0);
  CHECK(at_largest >= 1);  // the largest weight lands on 448
}

TEST_CASE("FP8 jobs on the CPU reference train like their bf16 twins; recompute gives the same losses",
          "[fp8][cpu]") {
  for (bool llama : {false, true}) {
    JobSpec bf16 = fp8Job(llama, Fp8Scaling::Delayed);
    bf16.training.precision = Precision::BF16;
    const std::vector<double> want = losses(bf16, 12);
    for (Fp8Scaling scaling : {Fp8Scaling::Delayed, Fp8Scaling::Current}) {
      INFO((llama ? "llama" : "gpt-2") << (scaling == Fp8Scaling::Current ? ", current scaling" : ", delayed"));
      const std::vector<double> got = losses(fp8Job(llama, scaling), 12);
      bool any_differs = false;
      for (size_t s = 0; s < got.size(); ++s) {
        INFO("step " << s << ": bf16 " << want[s] << ", fp8 " << got[s]);
        CHECK(std::isfinite(got[s]));
        CHECK(std::abs(got[s] - want[s]) <= 0.02 * want[s]);
        any_differs = any_differs || got[s] != want[s];
      }
      CHECK(any_differs);  // the FP8 casts really round
      CHECK(got.back() < got.front());
      // Full recompute reruns the casts with the forward's scales: the
      // same values, the same losses.
      CHECK(losses(fp8Job(llama, scaling, RecomputePolicy::Full), 12) == got);
    }
  }
}

TEST_CASE("FP8 on the CPU reference: what it does not run yet is refused with the reason", "[fp8][cpu]") {
  JobSpec sp = fp8Job(false, Fp8Scaling::Delayed);
  sp.parallel.data_parallel = 1;
  sp.parallel.tensor_parallel = 2;
  sp.parallel.sequence_parallel = true;
  CHECK_THROWS_WITH(cpu::CpuExecutor(buildPlan(sp)), Catch::Contains("the CPU reference does not run FP8 collectives"));
}

TEST_CASE("an FP8 job with delayed scaling resumes bit for bit: its amax histories are in the checkpoint",
          "[fp8][cpu][checkpoint]") {
  namespace fs = std::filesystem;
  for (Fp8Scaling scaling : {Fp8Scaling::Delayed, Fp8Scaling::Current}) {
    INFO((scaling == Fp8Scaling::Current ? "current" : "delayed") << " scaling");
    JobSpec job = fp8Job(true, scaling);
    job.parallel.data_parallel = 2;
    const Plan plan = buildPlan(job);
    cpu::CpuExecutor straight(plan);
    std::vector<double> want;
    for (int s = 0; s < 8; ++s) want.push_back(straight.step().loss);
    const fs::path dir = fs::temp_directory_path() / fmt::format("tandem-fp8-ckpt-{}-{}", ::getpid(), int(scaling));
    fs::remove_all(dir);
    {
      cpu::CpuExecutor first(plan);
      for (int s = 0; s < 4; ++s) first.step();
      checkpoint::writeCheckpoint(dir, plan, first.snapshot(), 0, "test");
    }
    const fs::path saved = *checkpoint::latestCheckpoint(dir);
    CHECK(fs::exists(saved / "rank0.state") == (scaling == Fp8Scaling::Delayed));
    cpu::CpuExecutor resumed(plan);
    resumed.restore(checkpoint::readCheckpoint(saved, plan));
    for (int s = 4; s < 8; ++s) CHECK(resumed.step().loss == want[size_t(s)]);
    if (scaling == Fp8Scaling::Delayed) {
      // Without the histories the scales differ: the check above can fail.
      checkpoint::Snapshot no_state = checkpoint::readCheckpoint(saved, plan);
      no_state.rank_state.clear();
      cpu::CpuExecutor bare(plan);
      CHECK_THROWS_WITH(bare.restore(no_state), Catch::Contains("no FP8 scale state"));
      // A damaged state file is named.
      {
        std::fstream f(saved / "rank1.state", std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(3);
        f.put('#');
      }
      CHECK_THROWS_WITH(checkpoint::readCheckpoint(saved, plan),
                        Catch::Contains("rank1.state") && Catch::Contains("checksum"));
      // Another data-parallel layout: refused (the histories are per rank).
      JobSpec one = job;
      one.parallel.data_parallel = 1;
      one.training.grad_accum = job.training.grad_accum * 2;
      cpu::CpuExecutor fresh(plan);
      for (int s = 0; s < 2; ++s) fresh.step();
      const fs::path dir2 = dir.string() + "-reshard";
      fs::remove_all(dir2);
      checkpoint::writeCheckpoint(dir2, plan, fresh.snapshot(), 0, "test");
      CHECK_THROWS_WITH(checkpoint::readCheckpoint(*checkpoint::latestCheckpoint(dir2), buildPlan(one)),
                        Catch::Contains("amax histories"));
      fs::remove_all(dir2);
    }
    fs::remove_all(dir);
  }
}
