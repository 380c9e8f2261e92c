#pragma once
// Configuration sweeps (`tandem sweep`): every combination of the values
// given for some job fields, planned and simulated through simulateJob
// (simulate_job.h) on all cores, ranked by throughput. What a what-if user
// asks first: the best layout of a model on a cluster, not one
// configuration at a time.

#include <functional>
#include <string>
#include <vector>

#include "engine/spec/job.h"
#include "simulator/pipeline/simulate_job.h"

namespace tandem::sim {

// One --vary: a job field and its values ("parallel.tensor_parallel=1,2,4"),
// or fields that move together, joined by '+' in the key and in each value
// ("parallel.shard_optimizer+parallel.shard_parameters=false+false,true+false,true+true":
// no sharding, the optimizer's, the parameters' too).
struct SweepAxis {
  std::string key;
  std::vector<std::string> values;
};

// "KEY=V1,V2,..." -> an axis; throws std::invalid_argument naming the
// argument when it has no '=', no key, an empty value, or a value with
// another number of '+' parts than the key.
SweepAxis parseSweepAxis(const std::string& arg);

// Every combination, the last axis fastest: each a list of "KEY=VALUE",
// an axis of joined fields giving one per field.
std::vector<std::vector<std::string>> sweepCombinations(const std::vector<SweepAxis>& axes);

struct SweepRow {
  std::vector<std::string> sets;  // the combination's "KEY=VALUE"s
  bool simulated = false;
  std::string why_not;            // the one-line reason it was skipped (invalid job, plan refused, ...)
  double step_ms = 0, tokens_per_s = 0, mfu_pct = 0;
  double peak_memory_gib = 0;     // the largest rank's, as simulated
  double exposed_comm_ms = 0;     // rank 0's
  bool fits_memory = true;
  int world_size = 0;
};

struct ConfigSweepRequest {
  std::string job_yaml;                 // the job every combination overrides
  std::string job_source;               // its name in errors
  std::vector<std::string> base_sets;   // --set overrides applied before the axes'
  std::vector<SweepAxis> axes;
  // > 0: every combination on this many GPUs, its data-parallel size set to
  // gpus / (tensor x pipeline x context parallel); skipped where that does
  // not divide.
  int gpus = 0;
  // > 0: every combination trains this many sequences per step, its
  // accumulation set to global_batch / (micro_batch x data_parallel);
  // skipped where that does not divide. Without it the job's accumulation
  // stays, and layouts with more replicas train more tokens per step.
  int global_batch = 0;
  SimulateSettings settings;
  int threads = 0;                      // 0: all cores
};

// Runs every combination; the rows in combination order (rankSweepRows
// sorts them). `progress(done, total)` is called from worker threads,
// serialized, after each combination.
std::vector<SweepRow> runConfigSweep(const ConfigSweepRequest& request,
                                     const std::function<void(size_t, size_t)>& progress = {});

// A column heading for an axis: each field's last name ("micro_batch"), the
// parallel sizes as the literature writes them (TP, PP, DP, CP, SP), a
// policy by its section ("recompute"); joined fields joined by '+'. The
// full keys stay in the CSV and JSON.
std::string sweepAxisLabel(const SweepAxis& axis);

// A row's value of an axis ("4", or "true+false" for joined fields).
std::string sweepValue(const SweepRow& row, const SweepAxis& axis);

// Simulated rows that fit their GPUs first, by tokens/s (highest first),
// then those that do not fit (by tokens/s), then the skipped ones.
void rankSweepRows(std::vector<SweepRow>& rows);

std::string sweepRowsToCsv(const std::vector<SweepRow>& rows, const std::vector<SweepAxis>& axes);
std::string sweepRowsToJson(const std::vector<SweepRow>& rows, const std::vector<SweepAxis>& axes);

}  // namespace tandem::sim
