#pragma once
// A run's performance baseline and the gate against it (`tandem baseline
// record` and `check`): what a production check compares after every
// change (step time p50 and p95, throughput, MFU, peak memory, exposed
// communication, time per op kind), for real, simulated and imported runs
// alike. Stored as JSON (docs/profiler.md, "Baselines").

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "traces/analysis/analysis.h"

namespace tandem::traces {

struct Baseline {
  std::string source;  // "FILE run N (name)", for the reader of the file
  std::string run_kind;
  int64_t steps = 0;   // step indices measured (the slowest rank's time of each)
  double p50_step_ms = 0, p95_step_ms = 0, max_step_ms = 0;
  // Per (rank, step), the means over the window (report.h's steps).
  double exposed_comm_ms = 0;
  std::map<std::string, double> op_ms;  // GPU time per op kind
  // Where the run says (a tandem run's stats, or what the caller computed
  // from its job); nothing otherwise.
  std::optional<double> tokens_per_s, mfu_pct, peak_memory_gib;
};

// The baseline of an analysed run. `tokens_per_step`, when known (from the
// run's job), gives tokens/s where the run recorded none.
Baseline baselineOf(const RunReport& report, const std::string& source, std::optional<double> tokens_per_step);

std::string baselineToJson(const Baseline& b);
// Throws std::runtime_error "FILE: ..." naming what is missing or wrong.
Baseline parseBaseline(const std::string& json_text, const std::string& file);

struct GateRow {
  std::string metric;  // "p95 step time", "tokens/s", ...
  std::string unit;    // "ms", "GiB", ...
  double baseline = 0, now = 0;
  double change_pct = 0;  // (now - baseline) / baseline
  bool regressed = false;
  bool improved = false;
};

struct OpMove {
  std::string op;
  double baseline_ms = 0, now_ms = 0;
};

struct GateResult {
  double tolerance_pct = 5;
  std::vector<GateRow> rows;   // the gated metrics
  std::vector<OpMove> ops;     // op kinds by |change|, largest first
  bool pass = true;
};

// Gates `now` against `base`: step time p50 and p95 and peak memory may not
// grow, tokens/s and MFU may not fall, by more than the tolerance; exposed
// communication may not grow by more than the tolerance of the baseline's
// p50 step (small absolute figures would swing in percent); nor may the GPU
// time of an op kind that holds at least kGatedOpShare of the baseline's
// p50 step (a kernel 7% slower regresses even where the step hides part of
// it; kinds below the share swing in percent and are reported only). The
// slowest step (max) is reported, not gated; the op kinds that moved most
// say where a regression came from.
inline constexpr double kGatedOpShare = 0.05;
GateResult checkBaseline(const Baseline& base, const Baseline& now, double tolerance_pct);

std::string gateToText(const GateResult& g, size_t top_ops = 8);
std::string gateToJson(const GateResult& g);

}  // namespace tandem::traces
