// The simulator replays a Llama plan: RMSNorm, grouped-query attention and
// SwiGLU tasks take roofline time like the GPT-2 kernels they resemble, and
// 3D layouts replay the same with and without symmetry.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/plan/planner.h"
#include "simulator/cost/cost_model.h"
#include "simulator/replay/replay.h"
#include "simulator/topology/topology_presets.h"

using namespace tandem;
using namespace tandem::sim;

namespace {

// Llama 2 7B's shape, 4 blocks, micro-batch 1.
JobSpec smallLlama() {
  JobSpec job = parseJob(std::string(builtinJobText("llama2-7b")), "llama2-7b");
  job.model.layers = 4;
  job.training.grad_accum = 2;
  return job;
}

}  // namespace

TEST_CASE("a Llama plan replays, its kernels timed by the roofline", "[engine][llama]") {
  const Topology topo = loadTopology("dgx-h100");
  const RooflineCostModel cost;
  const Plan plan = buildPlan(smallLlama());
  const SimResult r = simulatePlan(plan, topo, cost);
  CHECK(r.step_ns > 0);
  // Every RMSNorm, SwiGLU and attention task took time.
  const RankPlan& rp = plan.programs[0];
  int seen = 0;
  for (const SimActivity& a : r.ranks[0].activities) {
    const Task& t = rp.tasks.at(size_t(a.task));
    if (t.op == OpKind::RmsNorm || t.op == OpKind::SwiGlu || t.op == OpKind::SwiGluBwd ||
        t.op == OpKind::RmsNormBwd || t.op == OpKind::Attention) {
      INFO(t.name);
      CHECK(a.end_ns > a.start_ns);
      ++seen;
    }
  }
  CHECK(seen > 0);
  // Grouped-query attention: fewer key/value heads read less, the same
  // products; the step is no longer.
  JobSpec gqa = smallLlama();
  gqa.model.kv_heads = 8;
  CHECK(simulatePlan(buildPlan(gqa), topo, cost).step_ns <= r.step_ns);
}

TEST_CASE("a 3D-parallel Llama replays the same with and without symmetry", "[engine][llama][pp][tp]") {
  JobSpec job = smallLlama();
  job.model.kv_heads = 8;
  job.parallel = ParallelSpec{};
  job.parallel.tensor_parallel = 4;
  job.parallel.sequence_parallel = true;
  job.parallel.pipeline_parallel = 2;
  job.parallel.data_parallel = 2;
  job.training.grad_accum = 4;
  const Plan plan = buildPlan(job);
  const Topology topo = loadTopology("2xdgx-h100");
  const RooflineCostModel cost;
  SimOptions all_ranks;
  all_ranks.symmetry = SymmetryMode::Off;
  const SimResult sym = simulatePlan(plan, topo, cost);
  const SimResult full = simulatePlan(plan, topo, cost, all_ranks);
  CHECK(sym.stats.symmetric);
  CHECK(sym.step_ns == full.step_ns);
}

TEST_CASE("a context-parallel Llama replays the same with and without symmetry, its attention split", "[engine][llama][cp]") {
  JobSpec job = smallLlama();
  job.model.kv_heads = 8;
  job.parallel = ParallelSpec{};
  job.parallel.context_parallel = 2;
  job.parallel.tensor_parallel = 2;
  job.parallel.sequence_parallel = true;
  job.parallel.pipeline_parallel = 2;
  job.parallel.data_parallel = 2;
  job.training.grad_accum = 4;
  const Plan plan = buildPlan(job);
  const Topology topo = loadTopology("2xdgx-h100");
  const RooflineCostModel cost;
  SimOptions all_ranks;
  all_ranks.symmetry = SymmetryMode::Off;
  const SimResult sym = simulatePlan(plan, topo, cost);
  const SimResult full = simulatePlan(plan, topo, cost, all_ranks);
  CHECK(sym.stats.symmetric);
  CHECK(sym.step_ns == full.step_ns);
  // Each rank's attention is its share of the sequence's: the causal
  // products of half the queries against the whole sequence, about half
  // of the whole attention's time (the kernels are compute-bound).
  JobSpec whole = job;
  whole.parallel.context_parallel = 1;
  const Plan whole_plan = buildPlan(whole);
  auto attentionNs = [&](const Plan& p, const SimResult& r) {
    int64_t ns = 0;
    for (const SimActivity& a : r.ranks[0].activities)
      if (p.programs[0].tasks.at(size_t(a.task)).op == OpKind::Attention) ns += a.end_ns - a.start_ns;
    return ns;
  };
  const int64_t split_ns = attentionNs(plan, full);
  const int64_t whole_ns = attentionNs(whole_plan, simulatePlan(whole_plan, topo, cost, all_ranks));
  CHECK(split_ns > 0);
  CHECK(double(split_ns) == Approx(0.5 * double(whole_ns)).epsilon(0.05));
  // The key/value gathers ran over the two ranks of each context-parallel group.
  int gathers = 0;
  for (const SimActivity& a : full.ranks[0].activities) {
    const Task& t = plan.programs[0].tasks.at(size_t(a.task));
    if (t.collective && t.collective->group == "cp") {
      CHECK(a.end_ns > a.start_ns);
      ++gathers;
    }
  }
  CHECK(gathers == 2 * job.model.layers / 2 * job.training.grad_accum);  // a gather and a scatter per stage's block
}

TEST_CASE("an FP8 Llama replays its block GEMMs at the measured FP8 speedup (the FP8 peak without one), and needs "
          "GPUs that have one",
          "[engine][llama][fp8]") {
  JobSpec job = smallLlama();
  const Topology topo = loadTopology("dgx-h100");
  const RooflineCostModel cost;
  SimOptions all_ranks;
  all_ranks.symmetry = SymmetryMode::Off;
  const Plan bf16_plan = buildPlan(job);
  job.training.precision = Precision::FP8;
  const Plan fp8_plan = buildPlan(job);
  const SimResult bf16 = simulatePlan(bf16_plan, topo, cost, all_ranks);
  const SimResult fp8 = simulatePlan(fp8_plan, topo, cost, all_ranks);
  auto gemmNs = [](const Plan& p, const SimResult& r) {
    int64_t ns = 0;
    for (const SimActivity& a : r.ranks[0].activities) {
      const Task& t = p.programs[0].tasks.at(size_t(a.task));
      if (t.attrs.fp8 || (t.layer >= 0 && (t.op == OpKind::Matmul || t.op == OpKind::MatmulBwdData ||
                                           t.op == OpKind::MatmulBwdWeight)))
        ns += a.end_ns - a.start_ns;
    }
    return ns;
  };
  // 7B's block GEMMs are compute-bound: their bf16 time over the measured
  // speedup (about 1.65, RooflineParams::defaults).
  const double ratio = double(gemmNs(fp8_plan, fp8)) / double(gemmNs(bf16_plan, bf16));
  CHECK(ratio > 0.58);
  CHECK(ratio < 0.64);
  CHECK(fp8.step_ns < bf16.step_ns);
  // Without a measured speedup: about half the time at twice the peak.
  RooflineParams peak_only = RooflineParams::defaults();
  peak_only.fp8_gemm_speedup.clear();
  const SimResult at_peak = simulatePlan(fp8_plan, topo, RooflineCostModel(peak_only), all_ranks);
  const double peak_ratio = double(gemmNs(fp8_plan, at_peak)) / double(gemmNs(bf16_plan, bf16));
  CHECK(peak_ratio > 0.45);
  CHECK(peak_ratio < 0.55);
  // The casts took time.
  int casts = 0;
  for (const SimActivity& a : fp8.ranks[0].activities)
    if (fp8_plan.programs[0].tasks.at(size_t(a.task)).op == OpKind::CastFp8) {
      CHECK(a.end_ns > a.start_ns);
      ++casts;
    }
  CHECK(casts > 0);
  // An A100 has no FP8 tensor cores: refused, with the reason.
  CHECK_THROWS_WITH(simulatePlan(fp8_plan, loadTopology("hgx-a100"), cost),
                    Catch::Contains("has no FP8 tensor cores"));
}

TEST_CASE("a measured FP8 speedup table times FP8 GEMMs from their bf16 time", "[engine][llama][fp8]") {
  JobSpec job = smallLlama();
  const Plan bf16_plan = buildPlan(job);
  job.training.precision = Precision::FP8;
  const Plan fp8_plan = buildPlan(job);
  const Calibration cal = parseCalibration(
      "fp8_gemm_speedup:\n  matmul: [[1, 1.2], [1000, 1.6]]\n  matmul_bwd_data: [[1, 1.5]]\n", "fp8.yaml");
  const RooflineCostModel measured(RooflineParams::defaults(), cal), roofline;
  const DeviceSpec h100 = loadTopology("dgx-h100").devices.at(0);
  const int64_t launch = roofline.params().launch_overhead_ns;
  int checked = 0;
  for (const Task& t : fp8_plan.programs[0].tasks) {
    if (!t.attrs.fp8) continue;
    // The bf16 plan's task of the same name.
    const Task* b = nullptr;
    for (const Task& u : bf16_plan.programs[0].tasks)
      if (u.name == t.name) b = &u;
    REQUIRE(b != nullptr);
    const double bf16_kernel = double(roofline.taskNs(*b, h100, Precision::BF16) - launch);
    const double gflop = t.flops * 1e-9;
    INFO(t.name << " " << gflop << " GFLOP");
    if (t.op == OpKind::Matmul) {
      // Interpolated in log GFLOP between 1.2 at 1 and 1.6 at 1000.
      const double s = gflop <= 1 ? 1.2 : gflop >= 1000 ? 1.6 : 1.2 + 0.4 * std::log(gflop) / std::log(1000.0);
      CHECK(double(measured.taskNs(t, h100, Precision::BF16) - launch) == Approx(bf16_kernel / s).epsilon(1e-3));
      ++checked;
    } else if (t.op == OpKind::MatmulBwdData) {
      CHECK(double(measured.taskNs(t, h100, Precision::BF16) - launch) == Approx(bf16_kernel / 1.5).epsilon(1e-3));
    } else {
      // Not in the calibration's table: the defaults' measured speedup, as
      // without a calibration.
      CHECK(measured.taskNs(t, h100, Precision::BF16) == roofline.taskNs(t, h100, Precision::BF16));
    }
  }
  CHECK(checked > 0);
  CHECK_THROWS_WITH(parseCalibration("fp8_gemm_speedup:\n  attention: [[1, 1.5]]\n", "bad.yaml"),
                    Catch::Contains("bad.yaml:2") && Catch::Contains("not a GEMM op kind"));
  CHECK_THROWS_WITH(parseCalibration("fp8_gemm_speedup:\n  matmul: [[10, 1.5], [5, 1.6]]\n", "bad.yaml"),
                    Catch::Contains("GFLOP must be ascending"));
}

TEST_CASE("an FP8 GEMM a profiled FP8 run measured keeps that time, apart from the bf16 GEMM of its shape",
          "[engine][llama][fp8]") {
  JobSpec job = smallLlama();
  const Plan bf16_plan = buildPlan(job);
  job.training.precision = Precision::FP8;
  const Plan fp8_plan = buildPlan(job);
  const Task* fp8_task = nullptr;
  for (const Task& t : fp8_plan.programs[0].tasks)
    if (t.attrs.fp8 && t.op == OpKind::Matmul) fp8_task = &t;
  REQUIRE(fp8_task != nullptr);
  const Task* bf16_task = nullptr;
  for (const Task& t : bf16_plan.programs[0].tasks)
    if (t.name == fp8_task->name) bf16_task = &t;
  REQUIRE(bf16_task != nullptr);
  const std::string fp8_key = shapeKey(*fp8_task), bf16_key = shapeKey(*bf16_task);
  CHECK(fp8_key != bf16_key);
  CHECK_THAT(fp8_key, Catch::Contains("fp8=1"));
  // A calibration with both shapes measured (as `tandem calibrate` writes
  // from a bf16 and an FP8 run): each task takes its own.
  const Calibration both = parseCalibration("ops:\n  matmul:\n    shapes:\n      \"" + bf16_key +
                                                "\": {ns: 470000}\n      \"" + fp8_key + "\": {ns: 280000}\n",
                                            "both.yaml");
  const RooflineCostModel measured(RooflineParams::defaults(), both);
  const DeviceSpec h100 = loadTopology("dgx-h100").devices.at(0);
  CHECK(measured.taskNs(*bf16_task, h100, Precision::BF16) == 470000);
  CHECK(measured.taskNs(*fp8_task, h100, Precision::BF16) == 280000);
  // Only the bf16 shape measured: the FP8 GEMM from it over the speed-up.
  const Calibration bf16_only =
      parseCalibration("ops:\n  matmul:\n    shapes:\n      \"" + bf16_key + "\": {ns: 470000}\n", "bf16.yaml");
  const RooflineCostModel from_bf16(RooflineParams::defaults(), bf16_only);
  const int64_t launch = from_bf16.params().launch_overhead_ns;
  // (Times of an H100 at this shape's 369 GFLOP: above the FP8 peak's floor.)
  const double speedup = double(470000 - launch) / double(from_bf16.taskNs(*fp8_task, h100, Precision::BF16) - launch);
  CHECK(speedup > 1.5);
  CHECK(speedup < 1.7);
}

TEST_CASE("a norm or activation writing FP8 is keyed apart from its bf16 twin and timed from it",
          "[engine][llama][fp8]") {
  JobSpec job = smallLlama();
  const Plan bf16_plan = buildPlan(job);
  job.training.precision = Precision::FP8;
  job.training.fp8_scaling = Fp8Scaling::Delayed;
  const Plan fp8_plan = buildPlan(job);
  const RankPlan& rp = fp8_plan.programs[0];
  // fp8_out marks exactly the non-cast tasks whose first output is FP8.
  const Task* writer = nullptr;
  for (const Task& t : rp.tasks) {
    const bool writes_fp8 = !t.writes.empty() && rp.buffers.at(size_t(t.writes[0])).dtype == DType::F8;
    INFO(t.name);
    CHECK(t.attrs.fp8_out == (writes_fp8 && t.op != OpKind::CastFp8 && t.op != OpKind::AllGather));
    if (t.attrs.fp8_out && t.op == OpKind::SwiGluBwd) writer = &t;
  }
  REQUIRE(writer != nullptr);
  const Task* twin = nullptr;
  for (const Task& t : bf16_plan.programs[0].tasks)
    if (t.name == writer->name) twin = &t;
  REQUIRE(twin != nullptr);
  const std::string key = shapeKey(*writer), twin_key = shapeKey(*twin);
  CHECK_THAT(key, Catch::Contains("fp8out=2"));  // both layouts: a backward GEMM reads it K-major
  CHECK_FALSE(twin_key.find("fp8out") != std::string::npos);
  const DeviceSpec h100 = loadTopology("dgx-h100").devices.at(0);
  auto timed = [&](const std::string& extra) {
    return RooflineCostModel(RooflineParams::defaults(),
                             parseCalibration("ops:\n  swiglu_bwd:\n    shapes:\n      \"" + twin_key +
                                                  "\": {ns: 100000}\n" + extra,
                                              "writer.yaml"));
  };
  const int64_t launch = RooflineCostModel().params().launch_overhead_ns;
  // Only the twin measured: its time, or its kernel's times the slowdown.
  CHECK(timed("").taskNs(*writer, h100, Precision::BF16) == 100000);
  const int64_t slowed = timed("fp8_writer_slowdown: {swiglu_bwd: 1.25}\n").taskNs(*writer, h100, Precision::BF16);
  CHECK(slowed == launch + int64_t(std::ceil((100000 - launch) * 1.25)));
  // A kind without a slowdown of its own keeps the twin's time.
  CHECK(timed("fp8_writer_slowdown: {swiglu: 2}\n").taskNs(*writer, h100, Precision::BF16) == 100000);
  // The FP8 shape measured itself (a profiled FP8 run): that time.
  const RooflineCostModel measured(
      RooflineParams::defaults(),
      parseCalibration("fp8_writer_slowdown: {swiglu_bwd: 1.25}\nops:\n  swiglu_bwd:\n    shapes:\n      \"" +
                           twin_key + "\": {ns: 100000}\n      \"" + key + "\": {ns: 90000}\n",
                       "writer.yaml"));
  CHECK(measured.taskNs(*writer, h100, Precision::BF16) == 90000);
  CHECK(measured.taskNs(*twin, h100, Precision::BF16) == 100000);
  CHECK_THROWS_WITH(parseCalibration("fp8_writer_slowdown: {swiglu_bwd: 0}\n", "bad.yaml"),
                    Catch::Contains("bad.yaml:1") && Catch::Contains("fp8_writer_slowdown.swiglu_bwd"));
  CHECK_THROWS_WITH(parseCalibration("fp8_writer_slowdown: {nonsense: 1.2}\n", "bad.yaml"),
                    Catch::Contains("not an op kind"));
}

TEST_CASE("receives posted ahead of their data do not slow the kernels beside them", "[engine][llama][pp]") {
  // Llama 2 70B as shipped (4 stages of 2 interleaved chunks, 64
  // micro-batches) against one chunk per stage: the first stage runs the
  // same kernels; the other chunks' receives, posted early, wait beside
  // them. Compute is slowed while data moves, not while a receive waits
  // (with the slowdown from posting, the interleaved stage's kernels took
  // 7% longer).
  const JobSpec job = parseJob(std::string(builtinJobText("llama2-70b")), "llama2-70b");
  JobSpec one_chunk = job;
  one_chunk.parallel.pipeline_chunks = 1;
  const Topology topo = loadTopology("8xdgx-h100");
  const RooflineCostModel cost;
  const SimRankSummary chunked = summarizeRank(simulatePlan(buildPlan(job), topo, cost), 0);
  const SimRankSummary plain = summarizeRank(simulatePlan(buildPlan(one_chunk), topo, cost), 0);
  INFO("stage 0 compute " << plain.compute_ns << " ns with one chunk, " << chunked.compute_ns << " ns with two");
  CHECK(std::abs(double(chunked.compute_ns) / double(plain.compute_ns) - 1.0) < 0.01);
  // And the chunks shorten the step and the wait at the transfers.
  CHECK(chunked.step_ns < plain.step_ns);
  CHECK(chunked.exposed_p2p_ns < plain.exposed_p2p_ns);
}

TEST_CASE("tensor-parallel communication pipelined with its GEMMs shortens the step by at most what it hid",
          "[engine][llama][tp][overlap]") {
  JobSpec job = smallLlama();
  job.model.kv_heads = 8;
  job.parallel = ParallelSpec{};
  job.parallel.tensor_parallel = 8;
  job.parallel.sequence_parallel = true;
  JobSpec overlapped_job = job;
  overlapped_job.schedule.tp_comm_overlap = true;
  const Plan plain = buildPlan(job), overlapped = buildPlan(overlapped_job);
  const Topology topo = loadTopology("dgx-h100");
  const RooflineCostModel cost;
  const SimResult a = simulatePlan(plain, topo, cost), b = simulatePlan(overlapped, topo, cost);
  // Task index -> its main activity on rank 0.
  auto byTask = [](const Plan& p, const SimResult& r) {
    std::vector<SimActivity> out(p.programs[0].tasks.size());
    for (const SimActivity& act : r.ranks[0].activities)
      if (act.task >= 0 && size_t(act.task) < out.size() && out[size_t(act.task)].end_ns == 0) out[size_t(act.task)] = act;
    return out;
  };
  const std::vector<SimActivity> plain_acts = byTask(plain, a), acts = byTask(overlapped, b);
  const std::vector<Task>& tasks = overlapped.programs[0].tasks;
  REQUIRE(tasks.size() == plain.programs[0].tasks.size());
  int64_t hideable_ns = 0;
  int gathers = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& c = tasks[i];
    if (!c.attrs.overlapped) continue;
    INFO(c.name);
    REQUIRE(plain.programs[0].tasks[i].name == c.name);
    hideable_ns += plain_acts[i].end_ns - plain_acts[i].start_ns;
    if (c.op != OpKind::AllGather) continue;
    ++gathers;
    size_t gemm = i + 1;
    while (std::find(tasks[gemm].reads.begin(), tasks[gemm].reads.end(), c.writes[0]) == tasks[gemm].reads.end()) ++gemm;
    // The GEMM runs while the rows arrive; the gather ends no sooner than
    // one chunk of the GEMM after its transfers (the pipeline's last chunk).
    CHECK(acts[gemm].start_ns < acts[i].end_ns);
    const int64_t gemm_ns = acts[gemm].end_ns - acts[gemm].start_ns;
    CHECK(acts[i].end_ns - acts[i].start_ns >= gemm_ns / 8 / 2);  // the GEMM ran slowed beside it
    // What comes after the GEMM on its stream (if anything: a recomputed
    // gather's weight-gradient GEMM may be its stream's last) waits for the gather.
    size_t next = gemm + 1;
    while (next < tasks.size() && tasks[next].stream != tasks[gemm].stream) ++next;
    if (next < tasks.size()) CHECK(acts[next].start_ns >= acts[i].end_ns);
  }
  CHECK(gathers >= 2 * job.model.layers * job.training.grad_accum);
  INFO("plain " << a.step_ns << " ns, overlapped " << b.step_ns << " ns, hideable " << hideable_ns << " ns");
  CHECK(b.step_ns < a.step_ns);
  CHECK(a.step_ns - b.step_ns <= hideable_ns);
}
