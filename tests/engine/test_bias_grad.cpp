// Bias gradients summed by the backward that already touches their input
// (engine/passes/bias_grad.h): which tasks write them, and what stays put.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "engine/plan/planner.h"
#include "test_jobs.h"

using namespace tandem;

namespace {

const Task* taskNamed(const RankPlan& rp, const std::string& name) {
  const auto it = std::find_if(rp.tasks.begin(), rp.tasks.end(), [&](const Task& t) { return t.name == name; });
  return it == rp.tasks.end() ? nullptr : &*it;
}

const std::string& bufferName(const RankPlan& rp, int b) { return rp.buffers.at(size_t(b)).name; }

}  // namespace

TEST_CASE("Bias gradients move to the layernorm and attention backward", "[planner][bias_grad]") {
  for (const int accum : {1, 2}) {
    JobSpec job = test::microJob(2, 1, accum);
    INFO("grad_accum " << accum);
    job.schedule.fuse_bias_gradients = false;
    const Plan off = buildPlan(job);
    job.schedule.fuse_bias_gradients = true;
    const Plan on = buildPlan(job);
    const RankPlan& a = off.programs[0];
    const RankPlan& b = on.programs[0];
    REQUIRE(a.tasks.size() == b.tasks.size());
    for (const Task& t : a.tasks) CHECK(!t.attrs.bias_grad);
    for (int mb = 0; mb < accum; ++mb)
      for (int layer = 0; layer < job.model.layers; ++layer) {
        auto name = [&](const std::string& what) { return fmt::format("layer{}.{}.mb{}", layer, what, mb); };
        // (bias holder, the matmul whose bias it is)
        const std::pair<std::string, std::string> moves[] = {{"ln2.bwd", "mlp.proj.bwd_weight"},
                                                             {"ln1.bwd", "attn.proj.bwd_weight"},
                                                             {"attn.core.bwd", "attn.qkv.bwd_weight"}};
        for (const auto& [holder, matmul] : moves) {
          INFO(name(holder) << " <- " << name(matmul));
          const Task* w_off = taskNamed(a, name(matmul));
          const Task* w_on = taskNamed(b, name(matmul));
          const Task* h = taskNamed(b, name(holder));
          REQUIRE((w_off && w_on && h));
          REQUIRE(w_off->writes.size() == 2);
          CHECK(w_off->attrs.has_bias);
          // The weight GEMM writes dW alone; the holder writes the same bias
          // gradient buffer last, with the GEMM's accumulate flag.
          CHECK(!w_on->attrs.has_bias);
          REQUIRE(w_on->writes.size() == 1);
          CHECK(bufferName(b, w_on->writes[0]) == bufferName(a, w_off->writes[0]));
          CHECK(h->attrs.bias_grad);
          CHECK(bufferName(b, h->writes.back()) == bufferName(a, w_off->writes[1]));
          CHECK(h->attrs.accumulate_params == w_off->attrs.accumulate_params);
          CHECK(h->attrs.accumulate_params == (mb > 0));
        }
        // The MLP's first layer keeps its own: its output gradient comes out
        // of a GEMM (the DGELU epilogue), which no kernel of ours sums.
        const Task* fc = taskNamed(b, name("mlp.fc.bwd_weight"));
        REQUIRE(fc);
        CHECK(fc->attrs.has_bias);
        CHECK(fc->writes.size() == 2);
      }
    // The cost facts follow the work: the step's FLOPs do not change.
    double flops_off = 0, flops_on = 0;
    for (const Task& t : a.tasks) flops_off += t.flops;
    for (const Task& t : b.tasks) flops_on += t.flops;
    CHECK(flops_on == Approx(flops_off).epsilon(1e-12));
  }
}

TEST_CASE("GPT-2 124M sums 36 bias gradients inside other kernels, none by default", "[planner][bias_grad]") {
  // The plan is a named object: a range-for over a member of a temporary would
  // read freed memory (the temporary dies before the loop body runs).
  const Plan plain = buildPlan(defaultJob());
  for (const Task& t : plain.programs[0].tasks) CHECK(!t.attrs.bias_grad);
  JobSpec job = defaultJob();
  job.schedule.fuse_bias_gradients = true;
  const Plan plan = buildPlan(job);
  const RankPlan& rp = plan.programs[0];
  int holders = 0, gemms_with_bias = 0;
  for (const Task& t : rp.tasks) {
    holders += t.attrs.bias_grad;
    gemms_with_bias += t.op == OpKind::MatmulBwdWeight && t.attrs.has_bias;
  }
  CHECK(holders == 3 * defaultJob().model.layers);
  CHECK(gemms_with_bias == defaultJob().model.layers);  // mlp.fc
}
