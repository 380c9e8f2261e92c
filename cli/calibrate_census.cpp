#include "cli/calibrate_census.h"

#include <fmt/format.h>

#include <filesystem>
#include <stdexcept>

#ifdef TANDEM_HAVE_CUDA
#include "runner/gemm_census_run.h"
#endif

namespace tandem::cli {

sim::GemmCensus takeGemmCensus(const CensusOptions& o) {
  if (o.measure) {
    const std::vector<GemmProblem> problems = sim::gemmCensusGrid(o.grid);
#ifdef TANDEM_HAVE_CUDA
    fmt::print(stderr, "GEMM census: {} shapes of grid '{}', each tuned as the executor tunes it, then profiled\n",
               problems.size(), o.grid);
    runner::GemmCensusRunOptions ro;
    ro.trace_path = o.trace;
    ro.run_name = sim::kGemmCensusRunName;
    ro.time_limit_s = o.time_limit_s;
    ro.progress = [](int done, int total, double s) {
      fmt::print(stderr, "GEMM census: {} of {} shapes tuned ({:.0f} s)\n", done, total, s);
    };
    runner::GemmCensusRunSummary r;
    try {
      r = runner::runGemmCensus(problems, ro);
    } catch (...) {
      // No half-written census left to be read as a whole one later.
      std::error_code ec;
      std::filesystem::remove(o.trace, ec);
      throw;
    }
    fmt::print(stderr,
               "GEMM census on the {}: {} shapes recorded, {} without an algorithm for their epilogue, {} left out "
               "at the time limit, in {:.0f} s; {}\n",
               r.gpu, r.recorded, r.unsupported, r.left_out, r.seconds, r.profile);
#else
    throw std::runtime_error(fmt::format(
        "calibrate: this tandem was built without the CUDA executor, so it cannot measure a GEMM census of {} "
        "shapes: run it on a GPU machine and name its trace here",
        problems.size()));
#endif
  }
  sim::GemmCensus census = sim::readGemmCensus(o.trace);
  if (census.kernels.empty())
    throw std::runtime_error(fmt::format("{}: the GEMM census recorded no kernel ({} problems)", o.trace,
                                         census.problems));
  return census;
}

std::string gemmCensusSection(const sim::GemmCensus& census) {
  size_t shapes = 0;
  for (const auto& [op, s] : census.kernels) shapes += s.size();
  return sim::gemmKernelsYaml(
      census.kernels,
      fmt::format("the executor's GEMM kernels on the {} at {} shapes of the census grid (tandem calibrate "
                  "--gemm-census; {} of {} problems recorded a kernel): geometry only, for shapes the sweep did not "
                  "time (docs/simulator.md)",
                  census.gpu.empty() ? "GPU" : census.gpu, shapes, census.problems - census.without_kernel,
                  census.problems));
}

}  // namespace tandem::cli
