// SimResult -> trace rows. Kept apart from the engine so that the simulation
// itself never depends on how or whether results are stored.
#include "simulator/pipeline/trace_output.h"

#include <fmt/core.h>

#include <algorithm>

#include "plan_trace/plan_facts.h"
#include "plan_trace/plan_rows.h"
#include "simulator/topology/topology_yaml.h"
#include "traces/trackers/stats.h"
#include "vocabulary/version.h"

namespace tandem::sim {
namespace {

traces::ActivityKind activityKind(const Task& t) {
  switch (t.kind) {
    case TaskKind::Kernel: return traces::ActivityKind::Kernel;
    case TaskKind::Collective: return traces::ActivityKind::Collective;
    case TaskKind::SendRecv:
      return t.collective && t.collective->op == CollectiveOp::Recv ? traces::ActivityKind::Recv
                                                                     : traces::ActivityKind::Send;
    case TaskKind::Memcpy: return traces::ActivityKind::Memcpy;
    case TaskKind::Host: return traces::ActivityKind::Host;
  }
  return traces::ActivityKind::Kernel;
}

std::string jsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// Rank 0's time recomputing each layer in the simulated step: what the
// recompute decisions cost, stored beside them.
plan_trace::LayerTimes recomputeTimeByLayer(const Plan& plan, const SimResult& result) {
  plan_trace::LayerTimes out;
  if (result.ranks.empty()) return out;
  const SimRank& r0 = result.ranks.front();
  const SimRank& src = r0.represented_by < 0 ? r0 : result.ranks[size_t(r0.represented_by)];
  for (const SimActivity a : src.activities)
    if (a.phase == Phase::Recompute && a.layer >= 0) out[a.layer] += a.end_ns - a.start_ns;
  for (const RecomputeDecision& d : plan.recompute) out.try_emplace(d.layer, 0);
  return out;
}

}  // namespace

int64_t writeSimulationTrace(traces::TraceWriter& w, const Plan& plan, const Topology& topo, const SimResult& result,
                             const SimTraceOptions& options) {
  traces::RunInfo info;
  info.kind = traces::RunKind::Simulated;
  info.name = options.run_name.empty() ? plan.job.name + " (simulated)" : options.run_name;
  info.job_yaml = plan.job.yaml;
  info.job_hash = plan.job.content_hash;
  info.topology = topo.name;
  info.topology_yaml = topologyToYaml(topo);
  info.plan_format = plan.version;
  info.host = "simulated";
  info.tool_version = std::string(toolVersion());
  info.created_unix_ns = 0;  // deterministic output: no wall clock
  info.world_size = plan.world_size;
  {
    std::string devices = "[";
    for (const SimRank& r : result.ranks) {
      const DeviceSpec& d = topo.devices[size_t(r.device)];
      if (devices.size() > 1) devices += ",";
      devices += fmt::format(R"({{"rank":{},"name":"{}","model":"{}","memory_bytes":{}}})", r.rank,
                             jsonEscape(d.name), jsonEscape(d.model), d.memory_bytes);
      if (devices.size() > (1 << 20)) break;  // keep the run row small at thousands of ranks
    }
    info.devices_json = devices + "]";
  }
  const int64_t run = w.beginRun(info);
  w.setPlanFacts(plan_trace::planFacts(plan, recomputeTimeByLayer(plan, result)));
  for (const traces::StatRow& stat : options.stats) w.setStat(stat);

  const bool replicate = int(result.ranks.size()) <= options.replicate_up_to;
  int64_t left_out = 0;
  for (const SimRank& r : result.ranks) {
    const bool own = r.represented_by < 0;
    if (!own && !replicate) {
      ++left_out;
      continue;
    }
    const SimRank& src = own ? r : result.ranks[size_t(r.represented_by)];
    const RankPlan& rp = plan.programs[size_t(r.program)];
    for (const StreamInfo& s : rp.streams)
      w.addStream(traces::StreamRow{r.rank, s.id, s.kind, s.name, r.device});
    for (const SimActivity a : src.activities) {
      const Task& t = rp.tasks[size_t(a.task)];
      traces::ActivityRow row;
      row.rank = r.rank;
      row.device = r.device;
      row.stream = a.stream;
      row.start_ns = a.start_ns;
      row.end_ns = a.end_ns;
      row.kind = activityKind(t);
      // A task's trailing kernels are an activity of their own, as in a
      // real trace (SimActivity::trailing).
      row.name = a.trailing ? t.name + " [trailing]" : t.name;
      row.task_id = a.task_id;
      row.phase = a.phase;
      row.layer = a.layer;
      row.micro_batch = a.micro_batch;
      row.bytes = a.bytes;
      row.flops = a.flops;
      w.addActivity(row);
      if (t.collective && !a.trailing) {
        w.addCollective(traces::CollectiveRow{r.rank, a.task_id, std::string(toString(t.collective->op)),
                                              t.collective->group, t.collective->bytes, a.start_ns, a.end_ns});
      }
    }
    w.addStep(traces::StepRow{r.rank, 0, 0, src.end_ns});
    w.addCounter(traces::CounterRow{r.rank, "memory.peak_bytes", 0, double(r.peak_memory_bytes)});
    w.addClock(traces::ClockRow{r.rank, "sim", 0, 0, 0, 0});
    for (const traces::PlanTaskRow& row : plan_trace::planTaskRows(r.rank, rp)) w.addPlanTask(row);
  }
  if (options.link_counters) {
    for (const SimLinkUsage& u : result.links) {
      const Link& l = topo.links[size_t(u.link)];
      const std::string name = "link.util." + topo.nodeName(l.src) + "->" + topo.nodeName(l.dst);
      w.addCounter(traces::CounterRow{-1, name, 0, u.utilization});
    }
  }
  namespace stats = traces::stats;
  w.setStat(stats::kSimEvents.row(result.stats.events));
  w.setStat(stats::kSimFlows.row(result.stats.flows));
  w.setStat(stats::kSimCollectives.row(result.stats.collectives));
  w.setStat(stats::kSimSimulatedRanks.row(result.stats.simulated_ranks, result.stats.symmetry_note));
  if (left_out > 0) w.setStat(stats::kSimRanksNotWritten.row(left_out));
  w.flush();
  return run;
}

}  // namespace tandem::sim
