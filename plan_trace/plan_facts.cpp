#include "plan_trace/plan_facts.h"

#include <fmt/core.h>
#include <zlib.h>

#include <stdexcept>

#include "engine/memory/gpu_footprint.h"
#include "engine/plan/plan_json.h"
#include "engine/plan/planner.h"
#include "engine/spec/job.h"
#include "traces/store/trace_reader.h"
#include "vocabulary/version.h"

namespace tandem::plan_trace {
namespace {

traces::MemoryRow memoryRow(int program, const RankPlan& rp) {
  traces::MemoryRow m;
  m.program = program;
  m.first_rank = rp.ranks.empty() ? 0 : rp.ranks.front();
  m.rank_count = int(rp.ranks.size());
  m.arena_bytes = rp.memory.arena_bytes;
  m.peak_bytes = rp.memory.peak_bytes;
  m.lower_bound_bytes = rp.memory.lower_bound_bytes;
  m.activation_peak_bytes = rp.memory.activation_peak_bytes;
  m.gpu_run_bytes = gpu_footprint::runBytes(rp);
  m.by_category.assign(rp.memory.by_category.begin(), rp.memory.by_category.end());
  return m;
}

}  // namespace

std::string encodePlan(const Plan& plan) {
  const std::string json = planToJson(plan).dump();
  uLongf size = compressBound(uLong(json.size()));
  std::string out(size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(out.data()), &size, reinterpret_cast<const Bytef*>(json.data()),
                uLong(json.size()), Z_BEST_SPEED) != Z_OK)
    throw std::runtime_error("plan: zlib could not compress the plan");
  out.resize(size);
  // The inflated size first (8 bytes, little-endian), so the reader sizes its buffer once.
  std::string sized(8, '\0');
  for (int i = 0; i < 8; ++i) sized[size_t(i)] = char((uint64_t(json.size()) >> (8 * i)) & 0xFF);
  return sized + out;
}

Plan decodePlan(const std::string& blob, const std::string& where) {
  if (blob.size() < 8) throw traces::TraceError(fmt::format("{}: the stored plan is truncated", where));
  uint64_t inflated = 0;
  for (int i = 0; i < 8; ++i) inflated |= uint64_t(uint8_t(blob[size_t(i)])) << (8 * i);
  if (inflated > (uint64_t(1) << 34))
    throw traces::TraceError(fmt::format("{}: the stored plan claims {} bytes; damaged", where, inflated));
  std::string json(inflated, '\0');
  uLongf size = uLongf(inflated);
  if (uncompress(reinterpret_cast<Bytef*>(json.data()), &size, reinterpret_cast<const Bytef*>(blob.data() + 8),
                 uLong(blob.size() - 8)) != Z_OK ||
      size != inflated)
    throw traces::TraceError(fmt::format("{}: the stored plan does not decompress (damaged)", where));
  try {
    return planFromJson(nlohmann::json::parse(json));
  } catch (const nlohmann::json::exception& e) {
    throw traces::TraceError(fmt::format("{}: the stored plan is not valid JSON: {}", where, e.what()));
  } catch (const PlanFormatError& e) {
    throw traces::TraceError(fmt::format("{}: the stored plan cannot be read: {}", where, e.what()));
  }
}

traces::PlanFacts planFacts(const Plan& plan, const LayerTimes& recompute_ns) {
  traces::PlanFacts f;
  for (const RecomputeDecision& d : plan.recompute) {
    traces::RecomputeRow r;
    r.layer = d.layer;
    r.policy = std::string(toString(d.policy));
    r.bytes_kept = d.bytes_kept;
    r.bytes_saved = d.bytes_saved;
    r.extra_flops = d.extra_flops;
    if (auto it = recompute_ns.find(d.layer); it != recompute_ns.end()) r.extra_ns = it->second;
    f.recompute.push_back(std::move(r));
  }
  for (size_t p = 0; p < plan.programs.size(); ++p) f.memory.push_back(memoryRow(int(p), plan.programs[p]));
  f.plan_encoding = std::string(kPlanEncoding);
  f.plan_blob = encodePlan(plan);
  return f;
}

std::optional<Plan> storedPlan(traces::TraceReader& reader, int64_t run) {
  const traces::PlanFacts facts = reader.planFacts(run);
  if (facts.plan_blob.empty()) return std::nullopt;
  const std::string where = fmt::format("{} run {}", reader.path(), run);
  if (facts.plan_encoding != kPlanEncoding)
    throw traces::TraceError(fmt::format("{}: the stored plan is encoded as '{}', which this tandem does not read "
                                         "(it reads {})",
                                         where, facts.plan_encoding, kPlanEncoding));
  return decodePlan(facts.plan_blob, where);
}

Plan planOfRun(traces::TraceReader& reader, int64_t run, std::string* note) {
  if (std::optional<Plan> stored = storedPlan(reader, run)) return std::move(*stored);
  const traces::RunInfo info = reader.run(run);
  const std::string where = fmt::format("{} run {}", reader.path(), run);
  if (info.job_yaml.empty())
    throw traces::TraceError(fmt::format("{}: the run carries no job and no stored plan, so its tasks cannot be "
                                         "matched to a plan",
                                         where));
  if (note)
    *note = fmt::format("{}: the run stores no plan (written by {}), so its job was planned again by {}; "
                        "the tasks match only if the planner has not changed since",
                        where, info.tool_version.empty() ? "an older tandem" : info.tool_version, toolVersion());
  return buildPlan(parseJob(info.job_yaml, where));
}

}  // namespace tandem::plan_trace
