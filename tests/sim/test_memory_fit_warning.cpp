// A simulated plan larger than its GPUs' memory, counted as `tandem run`
// counts it (simulator/replay/memory_fit_warning.h).
#include <catch2/catch.hpp>

#include "engine/memory/gpu_footprint.h"
#include "engine/plan/planner.h"
#include "simulator/cost/cost_model.h"
#include "simulator/replay/memory_fit_warning.h"
#include "simulator/topology/topology_presets.h"

using namespace tandem;

namespace {

Plan gpt2Large(int micro_batch) {
  JobSpec job = loadJobFile(std::string(TANDEM_SOURCE_DIR) + "/resources/jobs/gpt2-1.5b.yaml", {});
  job.training.micro_batch = micro_batch;
  return buildPlan(job);
}

sim::SimResult simulate(const Plan& plan, const sim::Topology& topo) {
  return sim::simulatePlan(plan, topo, sim::RooflineCostModel());
}

}  // namespace

TEST_CASE("A plan larger than the topology's GPUs is named with what a run needs and what fits",
          "[simulate][memory]") {
  // GPT-2 1.5B at micro-batch 64 plans about 127 GiB per rank: it fits an
  // H200 (141 GB) and not an H100 (80 GB).
  const Plan plan = gpt2Large(64);
  const sim::Topology h100 = sim::loadTopology("dgx-h100");
  const sim::Topology h200 = sim::loadTopology("dgx-h200");
  const int64_t needed = gpu_footprint::runBytes(plan.programs.at(0));
  REQUIRE(needed > h100.devices.at(0).memory_bytes);
  REQUIRE(needed < h200.devices.at(0).memory_bytes);

  CHECK_FALSE(sim::memoryFitWarning(plan, h200, simulate(plan, h200)));
  const sim::SimResult on_h100 = simulate(plan, h100);
  const auto s = sim::memoryShortfall(plan, h100, on_h100);
  REQUIRE(s);
  CHECK(s->rank == 0);
  CHECK(s->device_model == "H100");
  CHECK(s->needed_bytes == needed);
  CHECK(s->arena_bytes == plan.programs[0].memory.arena_bytes);
  CHECK(s->needed_bytes == s->arena_bytes + s->executor_bytes + gpu_footprint::kRunReserveBytes);
  CHECK(s->shortBytes() == needed - h100.devices[0].memory_bytes);

  const auto w = sim::memoryFitWarning(plan, h100, on_h100);
  REQUIRE(w);
  CHECK_THAT(w->line, Catch::StartsWith("rank 0 needs 127.55 GiB on its H100 (arena 126.96 + executor 0.10 + "
                                        "reserve 0.50 GiB) but the GPU has 79.65 GiB: short by 47.91 GiB, so a "
                                        "real run would refuse this plan; choices that fit: "));
  // Each choice is a plan that fits the device as a run counts it.
  CHECK_THAT(w->line, Catch::Contains("recompute.policy=none training.micro_batch=16 training.grad_accum=8 (63.6 GiB)"));
  CHECK_THAT(w->line, Catch::Contains("recompute.policy=full training.micro_batch=64 (45.0 GiB)"));
  CHECK(w->stat.name == "sim.memory_short_mib");
  CHECK(w->stat.severity == traces::Severity::Warning);
  CHECK(w->stat.value == (s->shortBytes() + (1 << 20) - 1) / (1 << 20));
  CHECK(w->stat.description == w->line);
}

TEST_CASE("A MIG slice's memory is the one a plan must fit; a device without a size says nothing",
          "[simulate][memory]") {
  JobSpec job = defaultJob();
  job.parallel.data_parallel = 1;
  job.training.micro_batch = 32;
  const Plan plan = buildPlan(job);
  const sim::Topology slices = sim::loadTopology("dgx-h100:mig=1g.10gb");
  const auto w = sim::memoryFitWarning(plan, slices, simulate(plan, slices));
  REQUIRE(w);
  CHECK_THAT(w->line, Catch::Contains("on its H100 MIG 1g.10gb ("));
  // Micro-batch 16 plans 8.14 GiB (8.71 with the executor and reserve):
  // the whole H100 holds it, a 10 GB slice too.
  job.training.micro_batch = 16;
  const Plan fits = buildPlan(job);
  CHECK_FALSE(sim::memoryFitWarning(fits, slices, simulate(fits, slices)));
  // A topology file that gives no memory size: nothing to compare with.
  sim::Topology unsized = slices;
  for (sim::DeviceSpec& d : unsized.devices) d.memory_bytes = 0;
  CHECK_FALSE(sim::memoryFitWarning(plan, unsized, simulate(plan, unsized)));
}
