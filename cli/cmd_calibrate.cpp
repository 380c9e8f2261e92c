// tandem calibrate: fit the simulator's cost model from profiled runs.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "cli/calibrate_census.h"
#include "cli/calibrate_sweep.h"
#include "cli/command_registry.h"
#include "engine/spec/resources.h"
#include "simulator/calibrate/calibrate.h"
#include "simulator/calibrate/calibrate_derive.h"
#include "simulator/calibrate/calibrate_merge.h"
#include "simulator/calibrate/calibrate_overlap.h"
#include "simulator/calibrate/sweep_grid.h"
#include "simulator/cost/calibration_device.h"
#include "simulator/cost/calibration_lookup.h"
#include "simulator/cost/cost_model.h"
#include "simulator/topology/topology_presets.h"
#include "traces/store/atomic_output.h"

namespace tandem::cli {
namespace {

struct CalibrateOptions {
  std::vector<std::string> inputs;
  std::string out;
  std::string topology;  // optional: refit kernel_overlap_efficiency by simulation
  std::string multi_rank_from;  // optional: a calibration whose multi-rank keys are kept
  std::string sweep_grid;       // --sweep: measure this grid on the GPU first (calibrate_sweep.h)
  std::string derive_gpu;       // --derive: rescale --from's calibration to this GPU model
  std::string derive_from;
  std::string refit_overlap;    // --refit-overlap: this calibration with only its overlap efficiency refitted
  std::string gemm_census;      // --gemm-census: this calibration with the GEMM census added
  std::string census_grid = "full";
  double census_time_limit_s = 0;
  SweepOptions sweep;
};

std::string readWholeFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(path + ": cannot read the calibration");
  std::ostringstream text;
  text << f.rdbuf();
  return text.str();
}

// "FILE" (every real run in it) or "FILE:RUN".
sim::CalibrationInput parseInput(const std::string& arg) {
  sim::CalibrationInput in;
  in.path = arg;
  const auto colon = arg.rfind(':');
  if (colon != std::string::npos && colon + 1 < arg.size() &&
      arg.find_first_not_of("0123456789", colon + 1) == std::string::npos) {
    in.path = arg.substr(0, colon);
    in.run = std::stoll(arg.substr(colon + 1));
  }
  return in;
}

// Writes a calibration whole or not at all, after checking that it loads.
void writeCalibrationFile(const std::string& path, const std::string& yaml) {
  sim::parseCalibration(yaml, path);  // what we write must load
  traces::AtomicOutput output(path);
  {
    std::ofstream f(output.tempPath());
    f << yaml;
    if (!f) throw std::runtime_error(path + ": cannot write the calibration");
  }
  output.commit();
}

// --derive GPU --from FILE: the calibration of one GPU rescaled to another
// (calibrate_derive.h).
void runDerive(const CalibrateOptions& o) {
  if (o.derive_from.empty()) throw std::runtime_error("calibrate: --derive needs --from FILE (the measured calibration)");
  if (o.out.empty()) throw std::runtime_error("calibrate: --out FILE is required");
  if (!o.inputs.empty() || !o.sweep_grid.empty())
    throw std::runtime_error("calibrate: --derive rescales a calibration; it takes no runs and no --sweep");
  const std::string path = sim::calibrationPath(o.derive_from);
  const std::string yaml = readWholeFile(path);
  const sim::Calibration src = sim::parseCalibration(yaml, path);
  const auto from = sim::gpuModelSpec(sim::gpuModelToken(src.gpu));
  if (!from) throw std::runtime_error(path + ": its gpu '" + src.gpu + "' is not a GPU model tandem knows");
  const auto to = sim::gpuModelSpec(o.derive_gpu);
  if (!to) throw std::runtime_error("calibrate: --derive " + o.derive_gpu + ": not a GPU model tandem knows (H100, H200, A100-80GB, ...)");
  const sim::CalibrationResult r = sim::deriveCalibration(yaml, path, *from, *to, "NVIDIA " + to->model);
  writeCalibrationFile(o.out, sim::calibrationToYaml(r));
  fmt::print("calibration for the {} derived from {} ({}): {} op kinds; written to {}\n", to->model, path, src.gpu,
             r.ops.size(), o.out);
}

// The line of a top-level key in a calibration's text replaced (or put
// before the `ops:` section), the rest of the file kept as it was written.
std::string withTopLevelLine(const std::string& yaml, const std::string& key, const std::string& line) {
  std::istringstream in(yaml);
  std::string out, l;
  bool done = false;
  while (std::getline(in, l)) {
    if (!done && l.rfind(key + ":", 0) == 0) {
      out += line + "\n";
      done = true;
      continue;
    }
    if (!done && l.rfind("ops:", 0) == 0) {
      out += line + "\n";
      done = true;
    }
    out += l + "\n";
  }
  if (!done) out += line + "\n";
  return out;
}

// --refit-overlap FILE RUNS... --topology T: after a change to the replay's
// kernel sharing, kernel_overlap_efficiency chosen again by simulating the
// one-rank runs with the weight-gradient stream (a sweep keeps two of them,
// `*-beside.sqlite`), every other key of FILE kept; the GPU is not needed.
void runRefitOverlap(const CalibrateOptions& o) {
  if (o.out.empty()) throw std::runtime_error("calibrate: --out FILE is required");
  if (o.topology.empty())
    throw std::runtime_error("calibrate: --refit-overlap needs --topology (the machine the runs ran on)");
  if (o.inputs.empty())
    throw std::runtime_error("calibrate: --refit-overlap needs the one-rank runs with the weight-gradient stream");
  if (!o.sweep_grid.empty() || !o.derive_gpu.empty() || !o.multi_rank_from.empty())
    throw std::runtime_error("calibrate: --refit-overlap keeps the calibration's keys; it takes no --sweep, "
                             "--derive or --multi-rank-from");
  const std::string path = sim::calibrationPath(o.refit_overlap);
  const std::string yaml = readWholeFile(path);
  sim::CalibrationResult r;
  r.calibration = sim::parseCalibration(yaml, path);
  // Fitted under today's replay, which the key names.
  r.calibration.fixed_grid_guests = true;
  const sim::Topology topology = sim::loadTopology(resourcePath(o.topology));
  std::vector<sim::CalibrationInput> inputs;
  for (const auto& a : o.inputs) inputs.push_back(parseInput(a));
  const double before = r.calibration.kernel_overlap_efficiency.value_or(1.0);
  const auto refit = sim::refitOverlapBySimulation(r, inputs, topology);
  if (!refit)
    throw std::runtime_error("calibrate: none of the runs is a one-rank run with a second compute stream "
                             "(schedule.weight_gradient_stream) to refit the overlap efficiency from");
  std::string text = withTopLevelLine(
      yaml, "kernel_overlap_efficiency",
      fmt::format("kernel_overlap_efficiency: {:.4f}  # throughput of kernels of two compute streams side by side, "
                  "relative to one alone: the simulated step closest to the measured one over {} one-rank runs "
                  "with the stream (refitted by tandem calibrate --refit-overlap; {:.4f} before)",
                  refit->efficiency, refit->runs, before));
  // Whatever FILE's header says, this file is no longer FILE.
  text = fmt::format("# {} with kernel_overlap_efficiency refitted by `tandem calibrate --refit-overlap` over {} "
                     "one-rank runs with the stream; its header follows.\n",
                     std::filesystem::path(path).filename().string(), refit->runs) +
         text;
  text = withTopLevelLine(text, "fixed_grid_guests", sim::fixedGridGuestsLine());
  writeCalibrationFile(o.out, text);
  fmt::print("kernel overlap efficiency {:.3f} -> {:.3f} by simulation on {} ({} one-rank runs with the stream, mean "
             "step error {:.2f}%); the rest of {} kept; written to {}\n",
             before, refit->efficiency, o.topology, refit->runs, refit->mean_abs_error_pct, path, o.out);
}

// --gemm-census FILE: FILE with its `gemm_kernels:` section from a census
// of this GPU's GEMM kernels (its trace beside OUT), or from the census
// trace named as the one input; every other line of FILE kept.
void runGemmCensusInto(const CalibrateOptions& o) {
  if (o.out.empty()) throw std::runtime_error("calibrate: --out FILE is required");
  if (!o.sweep_grid.empty() || !o.derive_gpu.empty() || !o.refit_overlap.empty() || !o.multi_rank_from.empty())
    throw std::runtime_error("calibrate: --gemm-census adds to a calibration; it takes no --sweep, --derive, "
                             "--refit-overlap or --multi-rank-from");
  if (o.inputs.size() > 1)
    throw std::runtime_error("calibrate: --gemm-census reads one census trace (or measures one when none is named)");
  const std::string path = sim::calibrationPath(o.gemm_census);
  const std::string yaml = readWholeFile(path);
  const sim::Calibration cal = sim::parseCalibration(yaml, path);
  CensusOptions co;
  co.grid = o.census_grid;
  co.time_limit_s = o.census_time_limit_s;
  co.measure = o.inputs.empty();
  co.trace = co.measure ? o.out + ".gemm-census.sqlite" : o.inputs.front();
  const sim::GemmCensus census = takeGemmCensus(co);
  // A census says which kernels one GPU model gets; another's calibration must not take it.
  if (!cal.gpu.empty() && !census.gpu.empty() && cal.gpu != census.gpu)
    throw std::runtime_error(fmt::format("calibrate: the census ran on the {} ({}), the calibration {} is the {}'s",
                                         census.gpu, co.trace, path, cal.gpu));
  writeCalibrationFile(o.out, sim::withGemmKernels(yaml, gemmCensusSection(census)));
  size_t shapes = 0;
  for (const auto& [op, s] : census.kernels) shapes += s.size();
  fmt::print("GEMM census of the {}: {} shapes ({}); {} with it written to {}\n", census.gpu, shapes, co.trace, path,
             o.out);
}

void runCalibrate(CalibrateOptions o) {
  if (!o.derive_gpu.empty()) return runDerive(o);
  if (!o.refit_overlap.empty()) return runRefitOverlap(o);
  if (!o.gemm_census.empty()) return runGemmCensusInto(o);
  if (o.sweep_grid.empty() && o.inputs.empty())
    throw std::runtime_error("calibrate: name profiled runs to fit from, or --sweep GRID to measure one");
  if (o.out.empty() && !o.sweep.dry_run) throw std::runtime_error("calibrate: --out FILE is required");
  std::vector<sim::CalibrationInput> inputs;
  std::optional<sim::GemmCensus> census;
  if (!o.sweep_grid.empty()) {
    o.sweep.grid = o.sweep_grid;
    if (o.sweep.work_dir.empty()) o.sweep.work_dir = o.out + ".sweep";
    const std::vector<std::string> traces = runSweep(o.sweep);
    if (o.sweep.dry_run) return;
    for (const std::string& t : traces) inputs.push_back({t, -1, /*sweep=*/true});
    // The sweep ends with the census of the GEMM kernels (gemm_census.h).
    CensusOptions co;
    co.grid = o.census_grid;
    co.time_limit_s = o.census_time_limit_s;
    co.trace = (std::filesystem::path(o.sweep.work_dir) / "gemm-census.sqlite").string();
    co.measure = !(o.sweep.reuse && std::filesystem::exists(co.trace));
    // Minutes of points are not thrown away for it: without a census the
    // calibration reads kernels off the swept shapes, as before there was one.
    try {
      census = takeGemmCensus(co);
    } catch (const std::exception& e) {
      fmt::print(stderr,
                 "tandem calibrate: warning: the GEMM census failed ({}); the calibration is written without it "
                 "(add one later: tandem calibrate --gemm-census {} --out {})\n",
                 e.what(), o.out, o.out);
    }
  }
  for (const auto& a : o.inputs) inputs.push_back(parseInput(a));
  // The topology first: a bad name fails before the runs are read.
  std::optional<sim::Topology> topology;
  if (!o.topology.empty()) topology = sim::loadTopology(resourcePath(o.topology));
  // And the calibration to keep keys from: a bad file fails before the fit.
  const std::string base_path = o.multi_rank_from.empty() ? "" : sim::calibrationPath(o.multi_rank_from);
  const std::string base_yaml = base_path.empty() ? "" : readWholeFile(base_path);
  if (!base_path.empty()) sim::parseCalibration(base_yaml, base_path);
  sim::CalibrationResult r = sim::calibrateFromRuns(inputs);
  for (const std::string& note : r.notes) fmt::print(stderr, "tandem calibrate: note: {}\n", note);
  std::optional<sim::OverlapRefit> refit;
  if (topology) refit = sim::refitOverlapBySimulation(r, inputs, *topology);
  if (!base_path.empty()) sim::keepMultiRankKeys(r, base_yaml, o.multi_rank_from);
  std::string yaml = sim::calibrationToYaml(r);
  if (census) yaml = sim::withGemmKernels(yaml, gemmCensusSection(*census));
  writeCalibrationFile(o.out, yaml);
  fmt::print("calibrated from {} task samples of {} runs\n", r.samples, r.provenance.size());
  fmt::print("{:<20} {:>8} {:>7} {:>11} {:>12} {:>10} {:>12} {:>10}\n", "op", "samples", "shapes", "base us",
             "ns/GFLOP", "ns/MB", "median res%", "max res%");
  for (const auto& op : r.ops)
    fmt::print("{:<20} {:>8} {:>7} {:>11.2f} {:>12.1f} {:>10.2f} {:>12.2f} {:>10.2f}\n", toString(op.op), op.samples,
               op.shapes, op.base_ns / 1e3, op.ns_per_gflop, op.ns_per_mb, op.median_residual_pct, op.max_residual_pct);
  {
    // Whether the traces carried launch geometry, which decides what the
    // simulator runs beside a kernel (docs/simulator.md, kernel sharing).
    size_t shapes = 0, with_blocks = 0, with_resources = 0;
    for (const auto& [op, oc] : r.calibration.ops)
      for (const auto& [key, e] : oc.shapes) ++shapes, with_blocks += e.blocks > 0, with_resources += e.threads > 0;
    if (with_blocks > 0)
      fmt::print("kernel geometry: main-kernel thread blocks for {} of {} shapes, their registers and shared memory "
                 "per block for {}{}\n",
                 with_blocks, shapes, with_resources,
                 with_resources == 0 ? " (traces written before they were recorded)" : "");
    else
      fmt::print("kernel geometry: none in the traces (kernels side by side share the GPU without it)\n");
  }
  const bool fitted_multi_rank = r.multi_rank_source.empty();  // else kept, printed in one line below
  if (r.calibration.comm_slowdown && fitted_multi_rank)
    fmt::print("comm_slowdown {:.4f} (least squares over {} task-steps under a collective)\n",
               *r.calibration.comm_slowdown, r.comm_slowdown_samples);
  if (r.calibration.collective_start_wait && fitted_multi_rank)
    fmt::print("collectives start after {:.0f}% of the remaining time of the kernel running when they are ready "
               "(median over {})\n",
               100 * *r.calibration.collective_start_wait, r.collective_start_wait_samples);
  if (r.calibration.kernel_overlap_efficiency && !refit)
    fmt::print("kernel overlap efficiency {:.3f} (kernels of two compute streams side by side; {} steps{})\n",
               *r.calibration.kernel_overlap_efficiency, r.kernel_overlap_samples,
               r.kernel_overlap_samples ? "" : ", none measured: shared evenly");
  if (r.calibration.multi_rank_launch_ns && fitted_multi_rank)
    fmt::print("multi-rank launch gap {:.2f} us per kernel task (median over {} shapes measured on one rank and on "
               "more)\n",
               double(*r.calibration.multi_rank_launch_ns) / 1e3, r.multi_rank_launch_shapes);
  for (const auto& [rank, speed] : r.rank_speed)
    fmt::print("rank {}'s forward kernels at {:.4f} of rank 0's speed (median over {} multi-rank runs; a property "
               "of this machine: a topology's device speed, docs/topology-format.md)\n",
               rank, speed, r.rank_speed_runs);
  if (!fitted_multi_rank)
    fmt::print("multi-rank keys kept from {}: {} collective fits, comm_slowdown {}\n", r.multi_rank_source,
               r.collectives.size(),
               r.calibration.comm_slowdown ? fmt::format("{:.4f}", *r.calibration.comm_slowdown) : "none");
  for (const auto& c : fitted_multi_rank ? r.collectives : std::vector<sim::CollectiveFitReport>{}) {
    fmt::print("collective {} over {} ranks: latency {:.1f} us, {:.1f} GB/s bus bandwidth ({} samples, max residual "
               "{:.2f}%)\n",
               toString(c.op), c.ranks, double(c.latency_ns) / 1e3, c.gbps, c.samples, c.max_residual_pct);
    for (const auto& [bytes, gbps] : c.sizes)
      fmt::print("  at {:.2f} MiB: {:.1f} GB/s\n", bytes / 1048576.0, gbps);
  }
  for (const auto& b : fitted_multi_rank ? r.collective_beside : std::vector<sim::CollectiveBesideReport>{})
    fmt::print("collectives beside {}: {:.3f}x the size model ({} samples)\n", b.role, b.factor, b.samples);
  if (refit)
    fmt::print("kernel overlap efficiency {:.3f} by simulation on {} ({:.3f} from the timelines; {} one-rank runs with "
               "the stream, mean step error {:.2f}%)\n",
               refit->efficiency, o.topology, refit->from_timelines, refit->runs, refit->mean_abs_error_pct);
  else if (!o.topology.empty())
    fmt::print(
        "kernel overlap efficiency: no one-rank run with the weight-gradient stream to refit it by simulation\n");
  fmt::print("calibration written to {}\n", o.out);
}

void addCalibrateCommand(CLI::App& root) {
  auto* cmd =
      root.add_subcommand("calibrate", "Fit the simulator's cost model from profiled runs (matched to plan tasks)");
  auto o = std::make_shared<CalibrateOptions>();
  cmd->add_option("runs", o->inputs,
                  "trace files (every real run in them) or FILE:RUN for one run; with --sweep they refine the "
                  "sweep: a shape they measured takes their time");
  cmd->add_option("--out", o->out, "calibration YAML to write")->type_name("FILE");
  cmd->add_option("--sweep", o->sweep_grid,
                  "first measure the kernels of this grid of shapes on this machine's GPU (full: GPT-2 124M to "
                  "Llama 3.1 405B layers, docs/accuracy.md; smoke: three small points)")
      ->type_name("GRID")
      ->check(CLI::IsMember(sim::sweepGridNames()));
  cmd->add_option("--part", o->sweep.parts,
                  "with --sweep: only the points of this part of the grid (gpt, llama; fp8: the FP8 points and "
                  "their bf16 twins)")
      ->type_name("NAME");
  cmd->add_option("--work-dir", o->sweep.work_dir,
                  "with --sweep: where each point's trace and log go (default: OUT.sweep)")
      ->type_name("DIR");
  cmd->add_option("--steps", o->sweep.steps, "with --sweep: profiled steps per point, at least")
      ->check(CLI::Range(2, 1000));
  cmd->add_option("--warm-seconds", o->sweep.warm_seconds,
                  "with --sweep: run each point's steps for about this long, so that its kernels are timed at the "
                  "GPU's power limit as in a training run")
      ->check(CLI::Range(0.0, 600.0))
      ->capture_default_str();
  cmd->add_option("--time-limit", o->sweep.time_limit_s,
                  "with --sweep: start no point after this many seconds (fit from those that ran; --reuse adds the "
                  "rest later)")
      ->type_name("SECONDS")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--derive", o->derive_gpu,
                  "write a calibration for this GPU model derived from --from's (the H100 from the H200: times scaled "
                  "by each shape's roofline on both; docs/accuracy.md)")
      ->type_name("GPU");
  cmd->add_option("--from", o->derive_from, "with --derive: the measured calibration (a file or a shipped name)")
      ->type_name("NAME|FILE");
  cmd->add_option("--refit-overlap", o->refit_overlap,
                  "write this calibration with kernel_overlap_efficiency chosen again by simulating the runs named "
                  "(one-rank runs with the weight-gradient stream, as a sweep keeps them: *-beside.sqlite) on "
                  "--topology, every other key kept: after a change to the simulator's kernel sharing, no GPU needed")
      ->type_name("NAME|FILE");
  cmd->add_option("--gemm-census", o->gemm_census,
                  "write this calibration with the GEMM census added: which kernel (blocks, tile, cluster) the "
                  "executor gets for each GEMM of a dense grid of shapes, measured on this machine's GPU (some 6 min "
                  "on an H100; its trace beside --out), or read from the census trace named as the run; a --sweep "
                  "ends with one")
      ->type_name("NAME|FILE");
  cmd->add_option("--census-grid", o->census_grid,
                  "the GEMM census's grid (full: layer widths 512-16384 and the vocabularies at 1k-64k tokens, "
                  "docs/accuracy.md; smoke: three shapes)")
      ->check(CLI::IsMember(sim::gemmCensusGridNames()))
      ->capture_default_str();
  cmd->add_option("--census-time-limit", o->census_time_limit_s,
                  "tune no GEMM of the census after this many seconds (the census keeps those it found)")
      ->type_name("SECONDS")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--reuse", o->sweep.reuse,
                "with --sweep: keep the traces already in the work folder (the GEMM census's too)");
  cmd->add_flag("--dry-run", o->sweep.dry_run,
                "with --sweep: plan every point and print its GPU memory need and whether the executor runs it");
  cmd->add_option("--topology", o->topology,
                  "preset or topology file of the measured machine: choose kernel_overlap_efficiency by simulating "
                  "the one-rank runs with the weight-gradient stream (docs/simulator.md)")
      ->type_name("NAME|FILE");
  cmd->add_option("--multi-rank-from", o->multi_rank_from,
                  "calibration whose multi-rank keys (collectives, comm_slowdown, collective_start_wait, "
                  "collective_beside, multi_rank_launch_ns) are kept: refit on one GPU without losing what only "
                  "several measured (a file, or the name of one that comes with tandem)")
      ->type_name("NAME|FILE");
  cmd->callback([o] { runCalibrate(*o); });
  cmd->footer(
      "Examples:\n"
      "  tandem calibrate run1.sqlite run2.sqlite --out mine.yaml\n"
      "  tandem calibrate --sweep full --out h200.yaml --multi-rank-from h200x2-nv18   (on one GPU, 3-6 min)\n"
      "  tandem calibrate --sweep full --dry-run\n"
      "  tandem calibrate --derive H100 --from h200 --out h100.yaml\n"
      "  tandem calibrate --refit-overlap h100.yaml sweep/*-beside.sqlite --topology dgx-h100 --out h100.yaml\n"
      "  tandem calibrate --gemm-census h100 --out h100.yaml   (on one GPU)\n");
}

const CommandRegistration reg{"calibrate", 58, &addCalibrateCommand};

}  // namespace
}  // namespace tandem::cli
