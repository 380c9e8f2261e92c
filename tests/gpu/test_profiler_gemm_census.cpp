// The GEMM census on the GPU (runner/gemm_census_run.h): the smoke grid's
// three problems tuned and run through the executor's GEMM path under the
// profiler, and the trace read back as a calibration's census
// (simulator/calibrate/gemm_census.h): every problem a kernel with thread
// blocks, a block's resources and a tile, under its own shape key.
#include <unistd.h>

#include <filesystem>

#include "runner/gemm_census_run.h"
#include "simulator/calibrate/gemm_census.h"
#include "tests/gpu/gpu_test.h"

using namespace tandem;
using namespace tandem::gputest;

int main() {
  requireGpus(1);
  const std::string path =
      (std::filesystem::temp_directory_path() / fmt::format("tandem_gemm_census_{}.sqlite", getpid())).string();
  const std::vector<GemmProblem> problems = sim::gemmCensusGrid("smoke");
  runner::GemmCensusRunOptions o;
  o.trace_path = path;
  o.run_name = sim::kGemmCensusRunName;
  const runner::GemmCensusRunSummary run = runner::runGemmCensus(problems, o);
  fmt::print("census: {} recorded, {} unsupported, {:.1f} s on the {}; {}\n", run.recorded, run.unsupported,
             run.seconds, run.gpu, run.profile);
  expectTrue("every smoke problem ran in the profiled step", run.recorded == int(problems.size()));

  const sim::GemmCensus census = sim::readGemmCensus(path);
  expectTrue("the trace holds every problem as a task", census.problems == int(problems.size()));
  expectTrue("every task's kernel was recorded", census.without_kernel == 0);
  expectTrue("the census names the GPU it ran on", census.gpu == run.gpu);
  for (const GemmProblem& p : problems) {
    const auto op = census.kernels.find(p.op);
    const bool found = op != census.kernels.end() && op->second.count(p.name);
    expectTrue(fmt::format("{} '{}' has a kernel", toString(p.op), p.name), found);
    if (!found) continue;
    const sim::CostEntry& e = op->second.at(p.name);
    fmt::print("  blocks {}, threads {}, regs {}, smem {}, cluster {}, tile {}\n", e.blocks, e.threads, e.registers,
               e.shared_bytes, e.cluster, e.tile ? fmt::format("{}x{}", e.tile->m, e.tile->n) : "none");
    expectTrue("  with thread blocks and their resources", e.blocks > 0 && e.threads > 0 && e.cluster >= 1);
    expectTrue("  and a GEMM tile read off its kernel's name", e.tile.has_value());
  }
  std::filesystem::remove(path);
  return finish();
}
