// The CUDA executor against the CPU reference executor on the same plan and
// seed (one GPU): every parameter gradient after one step, the losses over 20
// steps, CUDA Graph replay == eager, and training to the data's entropy; the
// GPT-2 and the Llama family.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>

#include "engine/cpu/executor.h"
#include "engine/cuda/executor.h"
#include "engine/numerics/data.h"
#include "engine/numerics/init.h"
#include "engine/plan/planner.h"
#include "tests/gpu/gpu_test.h"

using namespace tandem;
using namespace tandem::gputest;

namespace {

// The tiny job as a Llama: RMSNorm, SwiGLU (width 176, a multiple of 8),
// 4 query heads 16 wide sharing 2 key/value heads, rotary embeddings, no
// position table, untied unless a set says otherwise.
JobSpec tinyLlama(std::vector<std::string> sets) {
  sets.insert(sets.begin(), {"model.family=llama", "model.kv_heads=2", "model.mlp_ratio=2.75",
                             "model.tied_embeddings=false"});
  return tiny(sets);
}

// Every comparison runs with the cuBLASLt epilogue fusion (engine/cuda/fusion.h)
// on and off; the unfused path stays tested.
bool g_fusion = true;

cuda::ExecutorOptions options(bool graph) {
  cuda::ExecutorOptions o;
  o.use_graph = graph;
  o.fusion = g_fusion ? cuda::kAllFusions : 0;  // every kind, including the opt-in bias gradient
  return o;
}

std::string fusionTag() { return g_fusion ? " [fusion]" : " [no fusion]"; }

void compareGradients(const std::string& label0, const JobSpec& job, double tol) {
  const std::string label = label0 + fusionTag();
  const Plan plan = buildPlan(job);
  cpu::CpuExecutor ref(plan);
  cuda::CudaExecutor gpu(plan, options(false));
  fmt::print("     {}: {}\n", label, gpu.fusion().summary());
  for (const std::string& r : gpu.fusion().refusals) fmt::print("       {}\n", r);
  if (!g_fusion)
    expectTrue(label + ": fusion off leaves every task its own kernels",
               gpu.fusion().fused_task_ids.empty() && gpu.fusion().matmul_bwd_weight_bias == 0);
  const cpu::StepResult rc = ref.computeGradients();
  const cuda::GpuStepResult rg = gpu.computeGradients();
  double worst = 0;
  std::string worst_name;
  const RankPlan& rp = plan.programs[0];
  for (const ParamInfo& p : rp.params) {
    const double e = relError(gpu.readBuffer(p.grad), ref.readBuffer(0, p.grad));
    if (e > worst || worst_name.empty()) worst = e, worst_name = p.name;
  }
  fmt::print("     {}: {} parameter gradients, worst {} ({:.3e}); loss cpu {:.6f} gpu {:.6f}\n", label,
             rp.params.size(), worst_name, worst, rc.loss, rg.loss);
  expectBelow(label + ": worst per-tensor gradient error", worst, tol);
  expectBelow(label + ": loss", std::abs(rg.loss - rc.loss) / rc.loss, tol);
  expectBelow(label + ": grad norm", std::abs(rg.grad_norm - rc.grad_norm) / rc.grad_norm, tol);
}

// FP8 (training.precision fp8, current scaling): the GPU's FP8 GEMMs
// against the CPU reference's emulated FP8 on the same plan. With the same
// inputs the two give the same codes and products within 1e-2
// (gpu_test_kernels_llama: the casts code for code, a layer's three GEMMs).
// Over a whole step the inputs differ: a cast's input differs from the
// CPU's in its last bf16 bits wherever the bf16 kernels before it round
// differently (~6e-3 between GPU and CPU in bf16), and where that changes
// the tensor's largest magnitude it changes the scale, which rounds every
// element of the tensor afresh. Such tensors are rounded independently on
// the two sides, so the gradients differ by a sizeable part of FP8's own
// effect. The bound is stated against that effect, measured in the same
// run (CPU FP8 against CPU bf16: 6-10% per tensor on these jobs): GPU FP8
// must be nearer the CPU's FP8 than the CPU's FP8 is to bf16 (ratio <= 0.9;
// measured 0.62-0.77 on one H100), and within `tol`; the losses, which
// average over every element, agree to 1e-4.
// warm: gradient computations before the compared one (each ends a step
// for the scales: delayed scaling's history then holds their amaxes).
void compareFp8Gradients(const std::string& label0, const JobSpec& job, double tol, int warm = 0) {
  const std::string label = label0 + fusionTag();
  const Plan plan = buildPlan(job);
  JobSpec bf16_job = job;
  bf16_job.training.precision = Precision::BF16;
  const Plan bf16_plan = buildPlan(bf16_job);
  cpu::CpuExecutor ref(plan), ref_bf16(bf16_plan);
  cuda::CudaExecutor gpu(plan, options(false));
  fmt::print("     {}: {}\n", label, gpu.fusion().summary());
  for (int i = 0; i < warm; ++i) ref.computeGradients(), ref_bf16.computeGradients(), gpu.computeGradients();
  const cpu::StepResult rc = ref.computeGradients();
  ref_bf16.computeGradients();
  const cuda::GpuStepResult rg = gpu.computeGradients();
  std::map<std::string, int> bf16_grad;
  for (const ParamInfo& p : bf16_plan.programs[0].params) bf16_grad[p.name] = p.grad;
  double worst = 0, fp8_effect = 0;
  std::string worst_name;
  for (const ParamInfo& p : plan.programs[0].params) {
    const std::vector<float> cpu8 = ref.readBuffer(0, p.grad);
    const double e = relError(gpu.readBuffer(p.grad), cpu8);
    if (e > worst || worst_name.empty()) worst = e, worst_name = p.name;
    fp8_effect = std::max(fp8_effect, relError(cpu8, ref_bf16.readBuffer(0, bf16_grad.at(p.name))));
  }
  fmt::print("     {}: worst GPU-vs-CPU FP8 gradient {} ({:.3e}); FP8's own effect (CPU FP8 vs bf16) {:.3e}; loss cpu "
             "{:.6f} gpu {:.6f}\n",
             label, worst_name, worst, fp8_effect, rc.loss, rg.loss);
  expectBelow(label + ": worst per-tensor gradient error", worst, tol);
  expectBelow(label + ": worst gradient error / FP8's own effect", worst / fp8_effect, 0.9);
  expectBelow(label + ": loss", std::abs(rg.loss - rc.loss) / rc.loss, 1e-4);
}

// param_tol: master weights after `steps` AdamW steps. bf16 gradients of
// near-zero entries (biases) differ in their last bits between the two
// executors, and AdamW's m/sqrt(v) turns such differences into step-sized
// ones, so bf16 weights drift further apart than the losses do.
void compareTraining(const std::string& label0, const JobSpec& job, int steps, double tol, double param_tol) {
  const std::string label = label0 + fusionTag();
  const Plan plan = buildPlan(job);
  cpu::CpuExecutor ref(plan);
  cuda::CudaExecutor graph(plan, options(true));
  cuda::CudaExecutor eager(plan, options(false));
  double worst = 0;
  bool identical = true;
  std::vector<double> g_losses;
  for (int s = 0; s < steps; ++s) {
    const double lc = ref.step().loss;
    const double lg = graph.step().loss;
    const double le = eager.step().loss;
    g_losses.push_back(lg);
    worst = std::max(worst, std::abs(lg - lc) / lc);
    identical = identical && (lg == le);
    if (s == 0 || s == steps - 1)
      fmt::print("     {} step {:>2}: loss cpu {:.6f} graph {:.6f} eager {:.6f}\n", label, s + 1, lc, lg, le);
  }
  expectBelow(label + ": worst loss deviation from CPU over " + std::to_string(steps) + " steps", worst, tol);
  expectTrue(label + ": CUDA Graph and eager losses identical over " + std::to_string(steps) + " steps", identical);
  const cuda::CudaExecutor::GraphMemsets gm = graph.graphMemsets();
  fmt::print("     {}: the graph holds {} memsets, {} of them moved to its start (merged into {})\n", label,
             gm.memsets, gm.hoisted, gm.merged_into);
  // run() queues each step before the previous one ends (two host slots, the
  // batch staged behind the copy): a race there would change the losses.
  cuda::CudaExecutor ahead(plan, options(true));
  const std::vector<cuda::GpuStepResult> ra = ahead.run(steps);
  bool same = int(ra.size()) == steps;
  for (int s = 0; same && s < steps; ++s) same = ra[size_t(s)].loss == g_losses[size_t(s)] && ra[size_t(s)].step == s;
  expectTrue(label + ": run() (steps queued ahead) and step() losses identical over " + std::to_string(steps) +
                 " steps",
             same);
  // Parameters after the steps. The key part of the qkv bias has an exact
  // zero gradient (softmax ignores a constant added to every score), so both
  // executors feed AdamW rounding noise there and its m/sqrt(v) amplifies it
  // to full-size steps: that tensor is reported, not gated.
  // With the optimizer beside the next forward the last update is pending
  // (run() applied its own).
  ref.finishOptimizer();
  graph.finishOptimizer();
  std::vector<std::pair<double, std::string>> errs;
  for (const ParamInfo& p : plan.programs[0].params)
    errs.push_back({relError(graph.readBuffer(p.master), ref.readBuffer(0, p.master)), p.name});
  std::sort(errs.rbegin(), errs.rend());
  double worst_p = 0;
  for (const auto& [e, name] : errs)
    if (name.find("qkv.bias") == std::string::npos) worst_p = std::max(worst_p, e);
  fmt::print("     {}: largest master-weight errors after {} steps: {} {:.2e}, {} {:.2e}, {} {:.2e}\n", label, steps,
             errs[0].second, errs[0].first, errs[1].second, errs[1].first, errs[2].second, errs[2].first);
  expectBelow(label + ": worst master-weight error (except qkv bias)", worst_p, param_tol);
}

// The fusion pass finds what it should on the tiny GPT (bf16, where cuBLASLt
// has every epilogue): per layer and micro-batch one matmul+gelu, one
// matmul_bwd_data+gelu_bwd, and the bias gradient of every weight GEMM that
// does not accumulate; the fused Gelu/GeluBwd tasks keep their ids.
void expectFusion() {
  if (cuda::fusionKinds(cuda::kAllFusions) != cuda::kAllFusions) return;
  // DGELU placement (fusion.h): on one compute stream the tiny job's memory
  // plan allows only the late one; with the weight-gradient stream (the
  // default), and with a vocabulary of 1024, only the early one (as GPT-2 124M).
  // The residual adds stay adds here (expectResidualFusion has the default),
  // so that each is fused with its layernorm.
  for (const auto& [label, sets0, accumulating_mbs, late] :
       std::vector<std::tuple<std::string, std::vector<std::string>, int, bool>>{
           {"tiny bf16 one stream", {"training.precision=bf16", "schedule.weight_gradient_stream=false"}, 0, true},
           {"tiny bf16 grad_accum=2 one stream",
            {"training.precision=bf16", "training.grad_accum=2", "schedule.weight_gradient_stream=false"}, 1, true},
           {"tiny bf16", {"training.precision=bf16"}, 0, false},
           {"tiny bf16 vocab 1024", {"training.precision=bf16", "model.vocab=1024"}, 0, false}}) {
    std::vector<std::string> sets = sets0;
    sets.push_back("schedule.residual_in_gemm=false");
    const Plan plan = buildPlan(tiny(sets));
    const RankPlan& rp = plan.programs[0];
    cuda::CudaExecutor gpu(plan, options(false));
    const cuda::FusionPlan& f = gpu.fusion();
    int gelu = 0, gelu_bwd = 0, weight_bias = 0, weight_bias_fresh = 0;
    for (const Task& t : rp.tasks) {
      gelu += t.op == OpKind::Gelu;
      gelu_bwd += t.op == OpKind::GeluBwd;
      weight_bias += t.op == OpKind::MatmulBwdWeight && t.attrs.has_bias;
      weight_bias_fresh += t.op == OpKind::MatmulBwdWeight && t.attrs.has_bias && !t.attrs.accumulate_params;
    }
    fmt::print("     {}: {} (tasks: {} gelu, {} gelu_bwd, {} biased weight gradients, {} not accumulating)\n", label,
               f.summary(), gelu, gelu_bwd, weight_bias, weight_bias_fresh);
    expectTrue(label + ": every gelu fused into its matmul", f.matmul_gelu == gelu && gelu > 0);
    expectTrue(label + ": every gelu_bwd fused into its matmul_bwd_data", f.matmul_bwd_data_gelu == gelu_bwd);
    expectTrue(label + ": bias gradients in the GEMM exactly where not accumulating",
               f.matmul_bwd_weight_bias == weight_bias_fresh &&
                   (accumulating_mbs == 0 || weight_bias_fresh < weight_bias));
    expectTrue(label + ": no candidate refused", f.refused == 0);
    // Each fused pair: (the task that issues nothing, the task whose GEMM does its work).
    auto opOf = [&](int id) {
      const auto it = std::find_if(rp.tasks.begin(), rp.tasks.end(), [&](const Task& t) { return t.id == id; });
      return it == rp.tasks.end() ? OpKind::Add : it->op;
    };
    int planned_add_ln = 0;
    for (const Task& t : rp.tasks) planned_add_ln += t.epilogue == Epilogue::AddLayerNorm;
    expectTrue(label + fmt::format(": every planned add+layernorm fused ({} of {})", f.add_layernorm, planned_add_ln),
               f.add_layernorm == planned_add_ln && planned_add_ln > 0);
    bool ids_ok = int(f.fused_task_ids.size()) == gelu + gelu_bwd + planned_add_ln &&
                  f.fused_into.size() == f.fused_task_ids.size();
    int early_n = 0, late_n = 0;
    for (const auto& [quiet, runs] : f.fused_into) {
      const OpKind q = opOf(quiet), r = opOf(runs);
      early_n += q == OpKind::GeluBwd;
      late_n += q == OpKind::MatmulBwdData;
      ids_ok = ids_ok && ((q == OpKind::Gelu && r == OpKind::Matmul) || (q == OpKind::LayerNorm && r == OpKind::Add) ||
                          (q == OpKind::GeluBwd && r == OpKind::MatmulBwdData) ||
                          (q == OpKind::MatmulBwdData && r == OpKind::GeluBwd));
    }
    expectTrue(label + ": fused pairs are matmul/gelu, matmul_bwd_data/gelu_bwd and add/layernorm of the plan", ids_ok);
    expectTrue(label +
                   fmt::format(": DGELU GEMMs placed {} ({} early, {} late)", late ? "late" : "early", early_n, late_n),
               late ? (late_n == gelu_bwd && early_n == 0) : (early_n == gelu_bwd && late_n == 0));
  }
}

// schedule.residual_in_gemm (the default): every residual add of the tiny
// GPT (two per layer) is planned into its projection's GEMM and cuBLASLt
// takes each one (bf16 and fp32), so no add+layernorm remains.
void expectResidualFusion() {
  if (!(cuda::fusionKinds(cuda::kAllFusions) & cuda::fusionBit(cuda::FusionKind::MatmulResidual))) return;
  for (const std::string precision : {"bf16", "fp32"}) {
    const std::string label = "tiny " + precision + " residual in the GEMM";
    const Plan plan = buildPlan(tiny({"training.precision=" + precision}));
    const RankPlan& rp = plan.programs[0];
    cuda::CudaExecutor gpu(plan, options(false));
    const cuda::FusionPlan& f = gpu.fusion();
    int planned = 0;
    for (const Task& t : rp.tasks) planned += t.epilogue == Epilogue::Residual;
    fmt::print("     {}: {} ({} planned)\n", label, f.summary(), planned);
    expectTrue(label + fmt::format(": every planned residual add in its GEMM ({} of {})", f.matmul_residual, planned),
               f.matmul_residual == planned && planned == 2 * plan.job.model.layers);
    expectTrue(label + ": no add+layernorm left", f.add_layernorm == 0);
    expectTrue(label + ": no candidate refused", f.refused == 0);
  }
}

// Sharded parameters over one rank (one shard of everything): the executor's
// sharded path (parameters and gradients in shards, out-of-place gathers
// and reduce-scatters over a communicator of one, AdamW on the shards)
// against the CPU running the same plan. Gradients are compared as the
// buckets' gradient shards, by their parameters' segments; parameters as
// the shards after the steps.
void compareShardedOneRank(const std::string& label0, const JobSpec& job, int steps, double tol, double param_tol) {
  const std::string label = label0 + fusionTag();
  const Plan plan = buildPlan(job);
  const RankPlan& rp = plan.programs[0];
  expectTrue(label + ": the plan shards the parameters over one rank",
             plan.world_size == 1 && !rp.buckets.empty() && rp.buckets.front().param_shard >= 0);
  cpu::CpuExecutor ref(plan);
  cuda::CudaExecutor graph(plan, options(true));
  cuda::CudaExecutor eager(plan, options(false));
  const cpu::StepResult rc = ref.computeGradients();
  const cuda::GpuStepResult rg = eager.computeGradients();
  auto segments = [&](int grad, const std::vector<float>& values) {
    std::vector<float> out;
    const GradBucket* bucket = bucketOfGradientShard(rp, grad);
    const ShardRange shard = shardOf(0, 1, rp.buffers.at(size_t(bucket->buffer)).elementCount());
    for (int pi : bucket->params) {
      const ShardSegment seg = segmentInShard(rp, rp.params.at(size_t(pi)), shard);
      if (seg.to > seg.from)
        out.insert(out.end(), values.begin() + seg.shard_offset, values.begin() + seg.shard_offset + (seg.to - seg.from));
    }
    return out;
  };
  double worst = 0;
  for (const GradBucket& b : rp.buckets)
    worst = std::max(worst, relError(segments(b.grad_shard, eager.readBuffer(b.grad_shard)),
                                     segments(b.grad_shard, ref.readBuffer(0, b.grad_shard))));
  fmt::print("     {}: {} buckets' gradient shards, worst {:.3e}; loss cpu {:.6f} gpu {:.6f}\n", label,
             rp.buckets.size(), worst, rc.loss, rg.loss);
  expectBelow(label + ": worst per-bucket gradient-shard error", worst, tol);
  double worst_loss = 0;
  bool identical = true;
  for (int s = 0; s < steps; ++s) {
    const double lc = ref.step().loss, lg = graph.step().loss, le = eager.step().loss;
    worst_loss = std::max(worst_loss, std::abs(lg - lc) / lc);
    identical = identical && lg == le;
    if (s == 0 || s == steps - 1)
      fmt::print("     {} step {:>2}: loss cpu {:.6f} graph {:.6f} eager {:.6f}\n", label, s + 1, lc, lg, le);
  }
  expectBelow(label + ": worst loss deviation from CPU over " + std::to_string(steps) + " steps", worst_loss, tol);
  expectTrue(label + ": CUDA Graph and eager losses identical over " + std::to_string(steps) + " steps", identical);
  // Parameters (and bf16 master weights) after the steps, all shards together
  // (the qkv bias's noise, see compareTraining, is a small part of them).
  std::vector<float> got, want;
  for (const GradBucket& b : rp.buckets)
    for (int shard : {b.param_shard, b.master_shard}) {
      if (shard < 0) continue;
      const auto g = graph.readBuffer(shard), w = ref.readBuffer(0, shard);
      got.insert(got.end(), g.begin(), g.end());
      want.insert(want.end(), w.begin(), w.end());
    }
  const double param_err = relError(got, want);
  fmt::print("     {}: parameter and master shards after {} steps, error against the CPU {:.3e}\n", label, steps,
             param_err);
  expectBelow(label + ": parameter shards after the steps", param_err, param_tol);
}

void trainToEntropy(const std::string& label, const JobSpec& job) {
  const Plan plan = buildPlan(job);
  cuda::CudaExecutor gpu(plan, options(true));
  const int steps = job.training.steps;
  double tail = 0;
  int tail_n = 0;
  double first = 0, ms = 0;
  for (int s = 0; s < steps; ++s) {
    const cuda::GpuStepResult r = gpu.step();
    if (s == 0) first = r.loss;
    if (s >= steps - steps / 10) tail += r.loss, ++tail_n;
    ms += r.ms;
  }
  const double final_loss = tail / tail_n;
  const double entropy = makeTokenSource(job)->optimalLoss();
  fmt::print("     trained {} steps ({:.2f} ms/step): loss {:.4f} -> {:.4f}, data entropy {:.4f}\n", steps,
             ms / steps, first, final_loss, entropy);
  expectBelow(label + " trains to within 0.05 nats of the entropy", final_loss - entropy, 0.05);
}

// GPT-2 124M, micro-batch 16: the shapes whose cuBLASLt algorithms zero a
// counter with a memset, so the step graph holds memsets, and they are
// merged into one per workspace-slice region (graph_memsets.h). The graph's
// losses and gradient norms must be those of eager steps, bit for bit (one
// process: both executors run the same algorithms).
void gpt2GraphMemsets() {
  const JobSpec job = loadJobFile(std::string(TANDEM_SOURCE_DIR) + "/resources/jobs/gpt2-124m-dp8.yaml",
                                  {"parallel.data_parallel=1", "training.micro_batch=16"});
  const Plan plan = buildPlan(job);
  constexpr int kSteps = 4;
  cuda::CudaExecutor::GraphMemsets gm;
  // (loss, gradient norm) per step; the executor is freed before the next.
  auto run = [&](bool graph) {
    cuda::ExecutorOptions o;
    o.use_graph = graph;
    cuda::CudaExecutor ex(plan, o);
    std::vector<std::pair<double, double>> steps;
    for (int s = 0; s < kSteps; ++s) {
      const cuda::GpuStepResult r = ex.step();
      steps.push_back({r.loss, r.grad_norm});
    }
    if (graph) gm = ex.graphMemsets();
    return steps;
  };
  const std::vector<std::pair<double, double>> graph_steps = run(true), eager_steps = run(false);
  fmt::print("     GPT-2 124M: the graph holds {} memsets, {} moved, merged into {}; step 1 loss {:.6f} norm {:.6f}\n",
             gm.memsets, gm.hoisted, gm.merged_into, graph_steps[0].first, graph_steps[0].second);
  if (gm.memsets == 0) {
    fmt::print("     (no memsets in this cuBLASLt's graph: nothing to merge)\n");
  } else {
    expectTrue("GPT-2 124M: every memset of the step graph moved to its start", gm.hoisted == gm.memsets);
    expectTrue("GPT-2 124M: the zeroing memsets merged into one per compute stream's workspace",
               gm.merged_into >= 1 && gm.merged_into <= 2);
  }
  expectTrue("GPT-2 124M: CUDA Graph and eager losses and gradient norms identical over " + std::to_string(kSteps) +
                 " steps",
             graph_steps == eager_steps);
}

// CudaExecutor::replayTasks (bench_energy_by_op): forward work replayed
// between two steps, the batch loaded again for the cross-entropy, must
// leave the next step as it was: the same loss and gradient norm as an
// executor that replayed nothing (one process: the same GEMM algorithms).
void replayLeavesTheNextStep() {
  const Plan plan = buildPlan(tiny({"training.precision=bf16", "model.hidden=128", "model.heads=2"}));
  auto second = [&](bool replay) {
    cuda::CudaExecutor ex(plan, cuda::ExecutorOptions{});
    ex.step();
    if (replay)
      ex.replayTasks(
          [](const Task& t) {
            return t.op == OpKind::Matmul || t.op == OpKind::Attention || t.op == OpKind::LoadBatch ||
                   t.op == OpKind::CrossEntropy;
          },
          3);
    const cuda::GpuStepResult r = ex.step();
    return std::make_pair(r.loss, r.grad_norm);
  };
  const auto plain = second(false), replayed = second(true);
  fmt::print("     step 2 loss {:.6f} norm {:.6f}; after a replay {:.6f} {:.6f}\n", plain.first, plain.second,
             replayed.first, replayed.second);
  expectTrue("replayTasks: forward tasks replayed between steps leave the next step's loss and norm unchanged",
             plain == replayed);
}

// The initial weights drawn on the device (CudaExecutor's default) have the
// bits of the host's (TANDEM_HOST_INIT=1): parameters, fp32 masters and the
// shards of sharded optimizers and parameters.
void deviceInitialWeightsMatchHost(const std::string& label, const JobSpec& job) {
  const Plan plan = buildPlan(job);
  const RankPlan& rp = plan.programs[0];
  setenv("TANDEM_HOST_INIT", "1", 1);
  std::vector<std::vector<float>> host;
  std::vector<int> buffers;
  {
    cuda::CudaExecutor ex(plan, cuda::ExecutorOptions{});
    for (const ParamInfo& p : rp.params)
      if (rp.buckets.at(size_t(p.bucket)).param_shard < 0)
        for (int b : {p.param, p.master})
          if (b >= 0) buffers.push_back(b);
    for (const GradBucket& bk : rp.buckets)
      for (int b : {bk.master_shard, bk.param_shard})
        if (b >= 0) buffers.push_back(b);
    for (int b : buffers) host.push_back(ex.readBuffer(b));
  }
  unsetenv("TANDEM_HOST_INIT");
  cuda::CudaExecutor ex(plan, cuda::ExecutorOptions{});
  int64_t values = 0, differ = 0;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const std::vector<float> dev = ex.readBuffer(buffers[i]);
    values += int64_t(dev.size());
    if (dev.size() != host[i].size()) {
      differ += int64_t(dev.size());
      continue;
    }
    for (size_t j = 0; j < dev.size(); ++j) differ += std::memcmp(&dev[j], &host[i][j], 4) != 0;
  }
  fmt::print("     {}: {} buffers, {} values, {} differ; set-up {:.2f} s drawing on the device\n", label,
             buffers.size(), values, differ, ex.setupTimes().initial_weights_s);
  expectTrue(label + ": initial weights drawn on the device are the host's bits", differ == 0 && values > 0);
}

// FP8 GEMMs (current scaling) on the tiny Llama, heads 16 wide (CUDA
// cores) and 128 wide (tensor cores), with accumulation and recompute, and
// on the tiny GPT-2 (biases: the forward's in the GEMM's epilogue, the
// gradient summed from the FP8 codes).
void fp8Checks() {
  const std::vector<std::string> fp8 = {"training.precision=fp8", "training.fp8_scaling=current"};
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  compareFp8Gradients("tiny Llama fp8", tinyLlama(fp8), 1e-1);
  compareFp8Gradients("tiny Llama fp8 grad_accum=2 recompute=full",
                      tinyLlama(with(fp8, {"training.grad_accum=2", "recompute.policy=full"})), 1e-1);
  compareFp8Gradients("tiny Llama fp8 head dim 128",
                      tinyLlama(with(fp8, {"model.hidden=256", "model.heads=2", "model.kv_heads=1",
                                           "model.mlp_ratio=2.6875"})),
                      1e-1);
  // Master weights after 20 AdamW steps: the gradients' FP8 differences
  // above, through m / sqrt(v), move weights by up to a step each (measured
  // 0.12-0.14 on one H100, against 0.01 in bf16).
  compareTraining("tiny Llama fp8", tinyLlama(fp8), 20, 2e-2, 2.5e-1);
  compareFp8Gradients("tiny GPT-2 fp8", tiny(fp8), 1e-1);
  compareFp8Gradients("tiny GPT-2 fp8 grad_accum=2", tiny(with(fp8, {"training.grad_accum=2"})), 1e-1);
  compareTraining("tiny GPT-2 fp8", tiny(fp8), 20, 2e-2, 2.5e-1);
  if (g_fusion) {  // the synthetic task's entropy (issue 54: within 0.05 nats), once
    trainToEntropy("tiny Llama fp8", tinyLlama(fp8));
    trainToEntropy("tiny GPT-2 fp8", tiny(fp8));
  }
}

// FP8 delayed scaling: a run stopped after 3 steps and resumed from its
// snapshot (the amax histories in its rank state) gives the losses and
// gradient norms of one never stopped, bit for bit (one process, GEMM
// algorithm timing off so that both executors run the same algorithms).
void fp8DelayedResume(const std::string& label0, const JobSpec& job) {
  const std::string label = label0 + fusionTag();
  const Plan plan = buildPlan(job);
  setenv("TANDEM_GEMM_TUNING", "0", 1);
  std::vector<std::pair<double, double>> straight, resumed;
  {
    cuda::CudaExecutor ex(plan, options(true));
    for (int s = 0; s < 6; ++s) {
      const cuda::GpuStepResult r = ex.step();
      if (s >= 3) straight.push_back({r.loss, r.grad_norm});
    }
  }
  checkpoint::Snapshot snap;
  {
    cuda::CudaExecutor ex(plan, options(true));
    for (int s = 0; s < 3; ++s) ex.step();
    snap = ex.snapshot();
  }
  const std::string state = snap.rank_state.empty() ? std::string() : snap.rank_state[0];
  cuda::CudaExecutor ex(plan, options(true));
  ex.restore(snap);
  for (int s = 0; s < 3; ++s) {
    const cuda::GpuStepResult r = ex.step();
    resumed.push_back({r.loss, r.grad_norm});
  }
  unsetenv("TANDEM_GEMM_TUNING");
  fmt::print("     {}: FP8 state {} bytes; step 4 loss {:.6f} straight, {:.6f} resumed\n", label, state.size(),
             straight[0].first, resumed[0].first);
  expectTrue(label + ": the snapshot holds the amax histories", state.size() > 100);
  expectTrue(label + ": resumed after step 3, steps 4-6 as a run never stopped (bit for bit)", straight == resumed);
}

// Delayed scaling (training.fp8_scaling delayed): the tiny Llama's RMSNorm
// and SwiGLU, and the tiny GPT-2's LayerNorm and GELU, write FP8 with
// scales from the amax history; gradients after two steps built a history,
// training, resume and the entropy. With heads 64 and 128 wide and
// training.fp8_attention_grad the attention's backward writes its gradient
// in FP8 too.
void fp8DelayedChecks() {
  const std::vector<std::string> fp8 = {"training.precision=fp8", "training.fp8_scaling=delayed"};
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  compareFp8Gradients("tiny Llama fp8 delayed", tinyLlama(fp8), 1e-1, 2);
  compareFp8Gradients("tiny Llama fp8 delayed grad_accum=2 recompute=full",
                      tinyLlama(with(fp8, {"training.grad_accum=2", "recompute.policy=full"})), 1e-1, 2);
  compareTraining("tiny Llama fp8 delayed", tinyLlama(fp8), 20, 2e-2, 2.5e-1);
  fp8DelayedResume("tiny Llama fp8 delayed", tinyLlama(fp8));
  if (g_fusion) trainToEntropy("tiny Llama fp8 delayed", tinyLlama(fp8));
  const std::vector<std::string> attention_fp8 = with(fp8, {"training.fp8_attention_grad=true"});
  const JobSpec heads64 = tinyLlama(with(attention_fp8, {"model.hidden=128", "model.heads=2", "model.kv_heads=1"}));
  const JobSpec heads128 = tinyLlama(
      with(attention_fp8, {"model.hidden=256", "model.heads=2", "model.kv_heads=1", "model.mlp_ratio=2.6875"}));
  compareFp8Gradients("tiny Llama fp8 delayed head dim 64 (attention writes FP8)", heads64, 1e-1, 2);
  compareFp8Gradients("tiny Llama fp8 delayed head dim 128 (attention writes FP8)", heads128, 1e-1, 2);
  fp8DelayedResume("tiny Llama fp8 delayed head dim 64 (attention writes FP8)", heads64);
  compareFp8Gradients("tiny GPT-2 fp8 delayed", tiny(fp8), 1e-1, 2);
  compareFp8Gradients("tiny GPT-2 fp8 delayed grad_accum=2", tiny(with(fp8, {"training.grad_accum=2"})), 1e-1, 2);
  compareTraining("tiny GPT-2 fp8 delayed", tiny(fp8), 20, 2e-2, 2.5e-1);
  fp8DelayedResume("tiny GPT-2 fp8 delayed", tiny(fp8));
  if (g_fusion) trainToEntropy("tiny GPT-2 fp8 delayed", tiny(fp8));
}

// GPU_TEST_ONLY=fp8: the FP8 checks alone, with and without fusion (a
// short call on a busy GPU machine); false (run everything) otherwise.
bool fp8ChecksOnly() {
  const char* only = std::getenv("GPU_TEST_ONLY");
  if (!only || std::string(only) != "fp8") return false;
  fmt::print("GPU_TEST_ONLY=fp8: the FP8 checks only\n");
  for (const bool fusion : {true, false}) {
    g_fusion = fusion;
    fp8Checks();
    fp8DelayedChecks();
  }
  return true;
}

void initialWeightChecks() {
  deviceInitialWeightsMatchHost("tiny fp32", tiny({"training.precision=fp32"}));
  deviceInitialWeightsMatchHost("tiny bf16 Llama", tinyLlama({"training.precision=bf16"}));
  deviceInitialWeightsMatchHost("tiny bf16 ZeRO-2 (one shard)",
                                tiny({"training.precision=bf16", "parallel.shard_gradients=true"}));
  deviceInitialWeightsMatchHost("tiny bf16 ZeRO-3 (one shard)",
                                tiny({"training.precision=bf16", "parallel.shard_parameters=true"}));
  deviceInitialWeightsMatchHost(
      "GPT-2 124M bf16", loadJobFile(std::string(TANDEM_SOURCE_DIR) + "/resources/jobs/gpt2-124m-dp8.yaml",
                                     {"parallel.data_parallel=1", "training.micro_batch=4"}));
}

}  // namespace

int main() {
  requireGpus(1);
  try {
    if (cuda::fusionKinds(cuda::kAllFusions) != cuda::kAllFusions)
      fmt::print("note: TANDEM_FUSION in the environment limits the fusions: the fused runs fuse less\n");
    if (fp8ChecksOnly()) return finish();
    expectFusion();
    expectResidualFusion();
    initialWeightChecks();
    for (const bool fusion : {true, false}) {
      g_fusion = fusion;
      compareGradients("tiny fp32", tiny({"training.precision=fp32"}), 1e-4);
      compareGradients("tiny bf16", tiny({"training.precision=bf16"}), 1e-2);
      compareGradients("tiny bf16 one stream",
                       tiny({"training.precision=bf16", "schedule.weight_gradient_stream=false"}), 1e-2);
      compareGradients("tiny fp32 grad_accum=2", tiny({"training.precision=fp32", "training.grad_accum=2"}), 1e-4);
      compareGradients("tiny bf16 grad_accum=2", tiny({"training.precision=bf16", "training.grad_accum=2"}), 1e-2);
      compareGradients("tiny fp32 vocab 1024", tiny({"training.precision=fp32", "model.vocab=1024"}), 1e-4);
      compareGradients("tiny bf16 vocab 1024", tiny({"training.precision=bf16", "model.vocab=1024"}), 1e-2);
      compareGradients("tiny bf16 recompute=full", tiny({"training.precision=bf16", "recompute.policy=full"}), 1e-2);
      // Head dimension 64: the tensor-core attention (wgmma on sm_90a).
      compareGradients("tiny bf16 head dim 64",
                       tiny({"training.precision=bf16", "model.hidden=128", "model.heads=2"}), 1e-2);
      compareGradients("tiny bf16 head dim 64 grad_accum=2",
                       tiny({"training.precision=bf16", "model.hidden=128", "model.heads=2", "training.grad_accum=2"}),
                       1e-2);
      compareGradients("tiny bf16 recompute=selective",
                       tiny({"training.precision=bf16", "recompute.policy=selective"}), 1e-2);
      // Bias gradients summed by the layernorm and attention backward
      // (engine/passes/bias_grad.h): the vector layernorm and the CUDA-core
      // attention (head dim 16), the tensor-core attention (head dim 64).
      compareGradients("tiny bf16 bias gradients fused",
                       tiny({"training.precision=bf16", "schedule.fuse_bias_gradients=true"}), 1e-2);
      compareGradients("tiny fp32 bias gradients fused grad_accum=2",
                       tiny({"training.precision=fp32", "schedule.fuse_bias_gradients=true", "training.grad_accum=2"}),
                       1e-4);
      compareGradients("tiny bf16 head dim 64 bias gradients fused",
                       tiny({"training.precision=bf16", "model.hidden=128", "model.heads=2",
                             "schedule.fuse_bias_gradients=true"}),
                       1e-2);
      // The residual adds as adds (schedule.residual_in_gemm=false; the
      // default runs them as the projection GEMMs' C operand): each fused
      // with the layernorm after it. fp32 and bf16, with gradient
      // accumulation and full recompute.
      compareGradients("tiny bf16 add+layernorm",
                       tiny({"training.precision=bf16", "schedule.residual_in_gemm=false"}), 1e-2);
      compareGradients("tiny fp32 add+layernorm grad_accum=2",
                       tiny({"training.precision=fp32", "schedule.residual_in_gemm=false", "training.grad_accum=2"}),
                       1e-4);
      compareGradients("tiny bf16 add+layernorm recompute=full",
                       tiny({"training.precision=bf16", "schedule.residual_in_gemm=false", "recompute.policy=full"}),
                       1e-2);
      // The LM head in groups of tokens (engine/passes/lm_head_chunks.h):
      // row views, per-group logits, the weight gradient summed over groups.
      compareGradients("tiny bf16 lm_head_chunks=4", tiny({"training.precision=bf16", "schedule.lm_head_chunks=4"}),
                       1e-2);
      compareGradients("tiny fp32 lm_head_chunks=4 vocab 1024 grad_accum=2",
                       tiny({"training.precision=fp32", "schedule.lm_head_chunks=4", "model.vocab=1024",
                             "training.grad_accum=2"}),
                       1e-4);
      compareGradients("tiny fp32 seq 100 (ragged tiles)",
                       tiny({"training.precision=fp32", "model.seq_len=100", "training.micro_batch=4"}), 1e-4);
      // Sharded parameters (ZeRO-3) over one rank.
      compareShardedOneRank("tiny fp32 parameters sharded", tiny({"training.precision=fp32", "parallel.shard_parameters=true"}),
                            20, 1e-4, 1e-4);
      compareShardedOneRank("tiny bf16 parameters sharded grad_accum=2 reduced every micro-batch",
                            tiny({"training.precision=bf16", "parallel.shard_parameters=true", "training.grad_accum=2",
                                  "comm.reduce_every_micro_batch=true"}),
                            20, 1e-2, 5e-2);
      compareTraining("tiny fp32", tiny({"training.precision=fp32"}), 20, 1e-4, 1e-4);
      compareTraining("tiny bf16", tiny({"training.precision=bf16"}), 20, 1e-2, 5e-2);
      compareTraining("tiny bf16 vocab 1024", tiny({"training.precision=bf16", "model.vocab=1024"}), 20, 1e-2, 5e-2);
      compareTraining("tiny bf16 head dim 64",
                      tiny({"training.precision=bf16", "model.hidden=128", "model.heads=2"}), 20, 1e-2, 5e-2);
      compareTraining("tiny bf16 add+layernorm",
                      tiny({"training.precision=bf16", "schedule.residual_in_gemm=false"}), 20, 1e-2, 5e-2);
      compareTraining("tiny fp32 lm_head_chunks=4", tiny({"training.precision=fp32", "schedule.lm_head_chunks=4"}), 20,
                      1e-4, 1e-4);
      // The Llama family: RMSNorm, SwiGLU, grouped-query attention with
      // rotary embeddings (head width 16 on the CUDA-core attention, 64 on
      // the tensor cores in bf16), the embedding without positions.
      compareGradients("tiny Llama fp32", tinyLlama({"training.precision=fp32"}), 1e-4);
      compareGradients("tiny Llama bf16", tinyLlama({"training.precision=bf16"}), 1e-2);
      compareGradients("tiny Llama fp32 one key/value head grad_accum=2 tied",
                       tinyLlama({"training.precision=fp32", "model.kv_heads=1", "training.grad_accum=2",
                                  "model.tied_embeddings=true"}),
                       1e-4);
      compareGradients("tiny Llama bf16 head dim 64",
                       tinyLlama({"training.precision=bf16", "model.hidden=128", "model.heads=2", "model.kv_heads=1",
                                  "model.mlp_ratio=2.6875"}),
                       1e-2);
      // Heads 128 wide (Llama 2 and 3's width): the tensor cores' wgmma
      // kernels with two-atom tiles; GPT-2's attention with its bias
      // gradient summed in the kernels, and a grouped Llama.
      compareGradients("tiny bf16 head dim 128 bias gradients fused",
                       tiny({"training.precision=bf16", "model.hidden=256", "model.heads=2",
                             "schedule.fuse_bias_gradients=true"}),
                       1e-2);
      compareGradients("tiny Llama bf16 head dim 128 seq 130 (ragged tiles)",
                       tinyLlama({"training.precision=bf16", "model.hidden=256", "model.heads=2", "model.kv_heads=1",
                                  "model.mlp_ratio=2.6875", "model.seq_len=130", "training.micro_batch=4"}),
                       1e-2);
      compareGradients("tiny Llama bf16 recompute=selective", tinyLlama({"training.precision=bf16",
                                                                         "recompute.policy=selective"}),
                       1e-2);
      compareGradients("tiny Llama fp32 recompute=full residual adds",
                       tinyLlama({"training.precision=fp32", "recompute.policy=full",
                                  "schedule.residual_in_gemm=false"}),
                       1e-4);
      compareShardedOneRank("tiny Llama bf16 parameters sharded",
                            tinyLlama({"training.precision=bf16", "parallel.shard_parameters=true"}), 20, 1e-2, 5e-2);
      compareTraining("tiny Llama fp32", tinyLlama({"training.precision=fp32"}), 20, 1e-4, 1e-4);
      compareTraining("tiny Llama bf16", tinyLlama({"training.precision=bf16"}), 20, 1e-2, 5e-2);
      fp8Checks();
      fp8DelayedChecks();
      compareTraining("tiny Llama bf16 head dim 64",
                      tinyLlama({"training.precision=bf16", "model.hidden=128", "model.heads=2", "model.kv_heads=1",
                                 "model.mlp_ratio=2.6875"}),
                      20, 1e-2, 5e-2);
      // At the tiny job's peak rate (1e-2) this 256-wide Llama is unstable
      // on the CPU reference alone: fp32 and bf16 end 20 steps at losses
      // 1.4735 and 1.3891. At 3e-3 they agree (1.3387, 1.3391), so a
      // difference here is the GPU's.
      compareTraining("tiny Llama bf16 head dim 128 lr 3e-3",
                      tinyLlama({"training.precision=bf16", "model.hidden=256", "model.heads=2", "model.kv_heads=1",
                                 "model.mlp_ratio=2.6875", "training.lr=3e-3"}),
                      20, 1e-2, 5e-2);
      compareTraining("tiny bf16 head dim 128 lr 3e-3",
                      tiny({"training.precision=bf16", "model.hidden=256", "model.heads=2", "training.lr=3e-3"}), 20,
                      1e-2, 5e-2);
      // AdamW at the start of the next step, beside the forward.
      compareTraining("tiny bf16 optimizer beside forward",
                      tiny({"training.precision=bf16", "schedule.optimizer_beside_forward=true"}), 20, 1e-2, 5e-2);
      compareTraining("tiny fp32 optimizer beside forward grad_accum=2",
                      tiny({"training.precision=fp32", "schedule.optimizer_beside_forward=true",
                            "training.grad_accum=2"}),
                      20, 1e-4, 1e-4);
    }
    g_fusion = true;
    replayLeavesTheNextStep();
    trainToEntropy("tiny bf16", tiny({"training.precision=bf16"}));
    trainToEntropy("tiny Llama bf16", tinyLlama({"training.precision=bf16"}));
    gpt2GraphMemsets();
  } catch (const std::exception& e) {
    fmt::print("FAIL exception: {}\n", e.what());
    ++failures();
  }
  return finish();
}
