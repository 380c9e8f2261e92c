#include "traces/analysis/report_format.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "traces/analysis/kernel_names.h"
#include "traces/trackers/stats.h"

namespace tandem::traces {

namespace {

using Json = nlohmann::ordered_json;

// Three decimals keep the document stable across platforms and readable.
double r3(double v) { return std::round(v * 1000.0) / 1000.0; }

Json breakdownJson(const Breakdown& b) {
  return Json{{"span_ns", b.span_ns},
              {"busy_ns", b.busy_ns},
              {"idle_ns", b.idle_ns},
              {"compute_ns", b.compute_ns},
              {"comm_ns", b.comm_ns},
              {"memcpy_ns", b.memcpy_ns},
              {"sync_ns", b.sync_ns},
              {"overlap_ns", b.overlap_ns},
              {"overlap_pct", r3(b.overlap_pct)},
              {"exposed_comm_ns", b.exposed_comm_ns},
              {"p2p_ns", b.p2p_ns},
              {"exposed_p2p_ns", b.exposed_p2p_ns},
              {"memcpy_exclusive_ns", b.memcpy_exclusive_ns},
              {"sync_exclusive_ns", b.sync_exclusive_ns},
              {"recompute_ns", b.recompute_ns},
              {"recompute_share_pct", r3(b.recompute_share_pct)}};
}

// The run's devices in one line, from devices_json in any of the writers'
// shapes (a real run's record, the simulator's, Kineto's deviceProperties,
// Nsight Systems' GPU table): a device by its model or name, with the
// compute capability, driver and library versions where recorded; equal
// descriptions counted ("2 x NVIDIA H200 (...)"). Empty when the text is
// not a JSON array of objects with a name.
std::string devicesLine(const std::string& devices_json) {
  const Json devices = Json::parse(devices_json, nullptr, /*allow_exceptions=*/false);
  if (!devices.is_array()) return "";
  auto text = [](const Json& d, const char* key) {
    auto it = d.find(key);
    return it != d.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  std::vector<std::pair<std::string, int>> seen;  // description, count (first-seen order)
  for (const Json& d : devices) {
    if (!d.is_object()) continue;
    std::string label = text(d, "model");
    if (label.empty()) label = text(d, "name");
    if (label.empty()) continue;
    std::vector<std::string> parts;
    auto add = [&](const char* key, const char* prefix) {
      if (const std::string v = text(d, key); !v.empty()) parts.push_back(prefix + v);
    };
    add("compute_capability", "cc ");
    add("driver", "driver ");
    add("cuda_runtime", "CUDA ");
    add("cublaslt", "cuBLASLt ");
    add("nccl", "NCCL ");
    if (!parts.empty()) {
      label += " (";
      for (size_t i = 0; i < parts.size(); ++i) label += (i ? ", " : "") + parts[i];
      label += ")";
    }
    auto it = std::find_if(seen.begin(), seen.end(), [&](const auto& s) { return s.first == label; });
    if (it == seen.end())
      seen.emplace_back(label, 1);
    else
      ++it->second;
  }
  std::string out;
  for (const auto& [label, n] : seen)
    out += (out.empty() ? "" : "; ") + (n > 1 ? fmt::format("{} x ", n) : "") + label;
  return out;
}

// The profiler's per-rank power stats (profiler/power_sampler.h), as one
// line per rank: a data-parallel step runs at the pace of its slowest GPU,
// and the GPUs of one machine can differ by a few percent in clock.
std::vector<std::string> powerLines(const std::vector<StatRow>& rows) {
  struct RankPower {
    int64_t power_w = -1, energy_mj = -1, clock_mhz = -1, capped_pct = -1;
  };
  std::map<int, RankPower> ranks;
  // The profiler's per-rank stats (traces/trackers/stats.h); a name that
  // is not one of them, or a rank that is not a number, is no figure.
  auto take = [&](const StatRow& st, const stats::StatDecl& decl, int64_t RankPower::*field) {
    if (const int rank = stats::rankOf(decl, st.name); rank >= 0) ranks[rank].*field = st.value;
  };
  for (const StatRow& st : rows) {
    take(st, stats::kGpuEnergyPowerW, &RankPower::power_w);
    take(st, stats::kGpuEnergyPerStepMj, &RankPower::energy_mj);
    take(st, stats::kGpuSmClockMhzMedian, &RankPower::clock_mhz);
    take(st, stats::kGpuPowerCappedPct, &RankPower::capped_pct);
  }
  std::vector<std::string> out;
  if (ranks.empty()) return out;
  out.push_back("GPU power per rank (NVML over the steps; profiles with power sampling):");
  int fastest = -1, slowest = -1;
  for (const auto& [rank, p] : ranks) {
    auto or_dash = [](int64_t v, const std::string& text) { return v < 0 ? std::string("-") : text; };
    out.push_back(fmt::format("  rank {:>4}: {:>5} W, {:>7} J/step, SM clock median {:>5} MHz, "
                              "{:>4} of samples at the power cap",
                              rank, or_dash(p.power_w, std::to_string(p.power_w)),
                              or_dash(p.energy_mj, fmt::format("{:.2f}", double(p.energy_mj) / 1e3)),
                              or_dash(p.clock_mhz, std::to_string(p.clock_mhz)),
                              or_dash(p.capped_pct, std::to_string(p.capped_pct) + "%")));
    if (p.clock_mhz > 0) {
      if (fastest < 0 || p.clock_mhz > ranks[fastest].clock_mhz) fastest = rank;
      if (slowest < 0 || p.clock_mhz < ranks[slowest].clock_mhz) slowest = rank;
    }
  }
  if (fastest >= 0 && slowest >= 0 && fastest != slowest && ranks[fastest].clock_mhz > ranks[slowest].clock_mhz)
    out.push_back(fmt::format("  slowest clock: rank {}, {:.1f}% below rank {}", slowest,
                              100.0 * (1.0 - double(ranks[slowest].clock_mhz) / double(ranks[fastest].clock_mhz)),
                              fastest));
  // Mostly at the cap, the clock is whatever keeps the power under it: the
  // step's time is its energy over the cap, and only fewer joules make it
  // shorter (docs/gpu-executor.md, "At the power cap").
  const bool capped = std::any_of(ranks.begin(), ranks.end(), [](const auto& r) { return r.second.capped_pct >= 50; });
  if (capped)
    out.push_back("  mostly at the power cap: the step's time follows its energy (J/step above); a change pays in "
                  "joules saved, see bench_energy_by_op");
  return out;
}

Json distributionJson(const Distribution& d) {
  return Json{{"count", d.count}, {"min", d.min}, {"p50", d.p50}, {"p95", d.p95}, {"max", d.max}, {"mean", r3(d.mean)}};
}

Json statJson(const KernelStat& s) {
  Json j{{"key", s.key},         {"category", s.category}, {"count", s.count},   {"total_ns", s.total_ns},
         {"mean_ns", r3(s.mean_ns)}, {"p50_ns", s.p50_ns},    {"p95_ns", s.p95_ns}, {"flops", s.flops},
         {"bytes", s.bytes},     {"tflops", r3(s.tflops)}, {"gbps", r3(s.gbps)}};
  if (!s.symbol.empty()) j["symbol"] = s.symbol;  // by name: the recorded name behind the compact key
  return j;
}

std::string ms(int64_t ns) { return fmt::format("{:.3f}", static_cast<double>(ns) / 1e6); }

// "s1 compute.wgrad": a stream by number and name.
std::string streamLabel(int stream, const std::string& name) {
  return name.empty() ? fmt::format("s{}", stream) : fmt::format("s{} {}", stream, name);
}

std::string filledPct(int64_t filled, int64_t total) {
  return fmt::format("{:.1f}%", total > 0 ? 100.0 * double(filled) / double(total) : 0.0);
}

// Per step where steps were recorded: how long each stream waits between
// its own kernels, and how much of that the other streams fill.
std::vector<std::string> streamWaitLines(const StreamWaits& w) {
  if (w.waits == 0)
    return {"stream waits: no stream waited between its own activities" +
            std::string(w.steps > 0 ? " within the steps" : "")};
  const double per = w.steps > 0 ? double(w.steps) : 1.0;
  const std::string unit = w.steps > 0 ? " us/step" : " us";
  std::vector<std::string> out;
  out.push_back(fmt::format("stream waits{}: {} waits, {} ms{}, {} filled by other streams' work; by stream:",
                            w.steps > 0 ? " within the steps" : "", w.waits,
                            fmt::format("{:.3f}", double(w.total_ns) / 1e6),
                            w.steps > 0 ? fmt::format(", {:.1f} us per step", double(w.total_ns) / per / 1e3) : "",
                            filledPct(w.filled_ns, w.total_ns)));
  // The median step beside the mean: a real run's first step (graph
  // capture, NCCL set-up) can dominate the mean.
  for (const auto& t : w.streams)
    out.push_back(fmt::format("  {:>10}{} {:>7} filled {:>7} waits  (median step {:.1f} us)  {}",
                              fmt::format("{:.1f}", double(t.total_ns) / per / 1e3), unit,
                              filledPct(t.filled_ns, t.total_ns), t.waits, double(t.p50_step_ns) / 1e3,
                              streamLabel(t.stream, t.stream_name)));
  out.push_back(fmt::format("  by the stream's work before and after each wait ({} pairs):", w.pair_kinds));
  for (const auto& p : w.pairs)
    out.push_back(fmt::format("  {:>10}{} {:>7} filled {:>7} waits  {}: {} -> {}",
                              fmt::format("{:.1f}", double(p.total_ns) / per / 1e3), unit,
                              filledPct(p.filled_ns, p.total_ns), p.count, streamLabel(p.stream, p.stream_name),
                              p.before, p.after));
  return out;
}

}  // namespace

std::string reportToJson(const RunReport& r) {
  Json j;
  j["report_version"] = kReportJsonVersion;
  j["run"] = Json{{"id", r.run.id},
                  {"kind", std::string(toString(r.run.kind))},
                  {"name", r.run.name},
                  {"job_hash", r.run.job_hash},
                  {"world_size", r.run.world_size}};
  // The devices as recorded (a JSON array in every writer of the store).
  if (const Json devices = Json::parse(r.run.devices_json, nullptr, false); devices.is_array())
    j["run"]["devices"] = devices;
  j["activity_count"] = r.activity_count;
  {
    const WindowReport& w = r.window;
    Json outside = Json::array();
    for (const auto& [name, ns] : w.top_outside) outside.push_back(Json{{"name", name}, {"gpu_ns", ns}});
    j["window"] = Json{{"covers", w.covers},
                       {"whole_run", w.whole_run},
                       {"one_step", w.one_step},
                       {"first_step", w.first_step},
                       {"last_step", w.last_step},
                       {"before_activities", w.before_activities},
                       {"before_gpu_ns", w.before_gpu_ns},
                       {"after_activities", w.after_activities},
                       {"after_gpu_ns", w.after_gpu_ns},
                       {"top_outside", outside}};
  }
  j["total"] = breakdownJson(r.total);
  Json ranks = Json::array();
  for (const auto& rr : r.ranks) {
    ranks.push_back(Json{{"rank", rr.rank},
                         {"activities", rr.activities},
                         {"first_ns", rr.first_ns},
                         {"last_ns", rr.last_ns},
                         {"breakdown", breakdownJson(rr.breakdown)},
                         {"idle", Json{{"gaps", rr.idle.gaps},
                                       {"host_wait_ns", rr.idle.host_wait_ns},
                                       {"kernel_wait_ns", rr.idle.kernel_wait_ns},
                                       {"other_ns", rr.idle.other_ns},
                                       {"has_launch_records", rr.idle.has_launch_records}}}});
  }
  j["ranks"] = ranks;
  Json steps = Json::array();
  for (const auto& s : r.steps)
    steps.push_back(Json{{"rank", s.rank}, {"step", s.step}, {"start_ns", s.start_ns}, {"end_ns", s.end_ns},
                         {"breakdown", breakdownJson(s.breakdown)}});
  j["steps"] = steps;
  j["step_time"] = Json{{"synthesized", r.step_time.synthesized},
                        {"duration_ns", distributionJson(r.step_time.duration_ns)},
                        {"max_over_ranks_ns", distributionJson(r.step_time.max_over_ranks_ns)}};
  Json by_op = Json::array(), by_name = Json::array();
  for (const auto& s : r.by_op) by_op.push_back(statJson(s));
  for (const auto& s : r.by_name) by_name.push_back(statJson(s));
  j["kernels_by_op"] = by_op;
  j["kernels_by_name"] = by_name;
  Json host_calls = Json::array();
  for (const auto& s : r.host_calls) host_calls.push_back(statJson(s));
  j["host_calls"] = host_calls;
  Json unattributed = Json::array();
  for (const auto& [name, ns] : r.attribution.top_unattributed)
    unattributed.push_back(Json{{"name", compactName(name)}, {"symbol", name}, {"total_ns", ns}});
  j["attribution"] = Json{{"gpu_activities", r.attribution.gpu_activities},
                          {"attributed", r.attribution.attributed},
                          {"compute_kernels", r.attribution.compute_kernels},
                          {"compute_attributed", r.attribution.compute_attributed},
                          {"share_pct", r3(r.attribution.share_pct)},
                          {"unattributed_names", r.attribution.unattributed_names},
                          {"top_unattributed", unattributed}};
  const auto& cp = r.critical_path;
  Json tasks = Json::array();
  for (const auto& t : cp.tasks)
    tasks.push_back(Json{{"task_id", t.task_id}, {"name", t.name}, {"phase", t.phase}, {"stream", t.stream},
                         {"start_ns", t.start_ns}, {"end_ns", t.end_ns}, {"wait_before_ns", t.wait_before_ns}});
  Json by_phase = Json::object(), by_cat = Json::object();
  for (const auto& [k, v] : cp.by_phase_ns) by_phase[k] = v;
  for (const auto& [k, v] : cp.by_category_ns) by_cat[k] = v;
  j["critical_path"] = Json{{"available", cp.available}, {"rank", cp.rank}, {"step", cp.step},
                            {"steps_recorded", cp.steps_recorded},   {"length_ns", cp.length_ns},
                            {"busy_ns", cp.busy_ns},     {"wait_ns", cp.wait_ns}, {"task_count", cp.task_count},
                            {"by_phase_ns", by_phase},  {"by_category_ns", by_cat}, {"tasks", tasks}};
  Json gap_pairs = Json::array();
  for (const auto& p : r.idle_gaps.pairs)
    gap_pairs.push_back(Json{{"before", p.before}, {"after", p.after}, {"count", p.count}, {"total_ns", p.total_ns}});
  j["idle_gaps"] = Json{{"steps", r.idle_gaps.steps},          {"gaps", r.idle_gaps.gaps},
                        {"total_ns", r.idle_gaps.total_ns},    {"pair_kinds", r.idle_gaps.pair_kinds},
                        {"pairs", gap_pairs}};
  const StreamWaits& sw = r.stream_waits;
  Json wait_streams = Json::array(), wait_pairs = Json::array();
  for (const auto& t : sw.streams)
    wait_streams.push_back(Json{{"stream", t.stream},
                                {"name", t.stream_name},
                                {"waits", t.waits},
                                {"total_ns", t.total_ns},
                                {"filled_ns", t.filled_ns},
                                {"p50_step_ns", t.p50_step_ns},
                                {"p50_step_filled_ns", t.p50_step_filled_ns}});
  for (const auto& p : sw.pairs)
    wait_pairs.push_back(Json{{"stream", p.stream},     {"name", p.stream_name},   {"before", p.before},
                              {"after", p.after},       {"count", p.count},        {"total_ns", p.total_ns},
                              {"filled_ns", p.filled_ns}});
  j["stream_waits"] = Json{{"steps", sw.steps},         {"waits", sw.waits},           {"total_ns", sw.total_ns},
                           {"filled_ns", sw.filled_ns}, {"streams", wait_streams},     {"pair_kinds", sw.pair_kinds},
                           {"pairs", wait_pairs}};
  Json sranks = Json::array();
  for (const auto& s : r.stragglers.ranks)
    sranks.push_back(Json{{"rank", s.rank}, {"last_count", s.last_count}, {"mean_delay_ns", r3(s.mean_delay_ns)},
                          {"max_delay_ns", s.max_delay_ns}});
  j["stragglers"] = Json{{"collectives_matched", r.stragglers.collectives_matched},
                         {"straggler_rank", r.stragglers.straggler_rank},
                         {"ranks", sranks}};
  Json stats = Json::array();
  for (const auto& s : r.stats)
    stats.push_back(Json{{"name", s.name}, {"value", s.value}, {"severity", std::string(toString(s.severity))},
                         {"description", s.description}});
  j["stats"] = stats;
  return j.dump(2) + "\n";
}

std::string reportToText(const RunReport& r) {
  std::string out;
  auto line = [&](const std::string& s) { out += s + "\n"; };
  line(fmt::format("run {} ({}, \"{}\"), {} ranks, {} activities", r.run.id, toString(r.run.kind), r.run.name,
                   r.ranks.size(), r.activity_count));
  if (const std::string devices = devicesLine(r.run.devices_json); !devices.empty()) line("devices: " + devices);
  const WindowReport& w = r.window;
  if (w.whole_run) {
    line("window: " + w.covers);
  } else {
    line(fmt::format("window: {} (--whole-run for everything, --step N for one step); left out: {} GPU activities "
                     "before it ({} ms: start-up, set-up{}), {} after it ({} ms)",
                     w.covers, w.before_activities, ms(w.before_gpu_ns),
                     w.one_step ? ", earlier steps" : "", w.after_activities, ms(w.after_gpu_ns)));
    if (!w.top_outside.empty()) {
      std::string names;
      for (const auto& [name, ns] : w.top_outside)
        names += fmt::format("{}{} {} ms", names.empty() ? "" : ", ",
                             name.size() > 48 ? name.substr(0, 45) + "..." : name, ms(ns));
      line("  outside the window, longest: " + names);
    }
  }
  line("");
  line("temporal breakdown per rank (ms; HTA: idle = span - |union of all GPU activity|)");
  // Runs with point-to-point transfers (pipeline stages) show the part of
  // the exposed communication that is sends and receives: the bubble.
  const bool p2p = r.total.p2p_ns > 0;
  line(fmt::format("{:>5} {:>10} {:>10} {:>10} {:>10}{} {:>10} {:>10} {:>9} {:>10} {:>10}", "rank", "span", "compute",
                   "comm", "exposed", p2p ? fmt::format(" {:>10}", "p2p wait") : "", "memcpy", "idle", "overlap%",
                   "recompute", "idle:host"));
  auto row = [&](const std::string& label, const Breakdown& b, const std::string& host) {
    line(fmt::format("{:>5} {:>10} {:>10} {:>10} {:>10}{} {:>10} {:>10} {:>9.1f} {:>10} {:>10}", label,
                     ms(b.span_ns), ms(b.compute_ns), ms(b.comm_ns), ms(b.exposed_comm_ns),
                     p2p ? fmt::format(" {:>10}", ms(b.exposed_p2p_ns)) : "", ms(b.memcpy_ns), ms(b.idle_ns),
                     b.overlap_pct, ms(b.recompute_ns), host));
  };
  for (const auto& rr : r.ranks)
    row(std::to_string(rr.rank), rr.breakdown, rr.idle.has_launch_records ? ms(rr.idle.host_wait_ns) : "-");
  if (r.ranks.size() > 1) row("all", r.total, "");
  line("");
  const auto& st = r.step_time;
  line(fmt::format("step time{} (ms): p50 {}  p95 {}  min {}  max {}  "
                   "({} rank-steps; slowest rank per step: p50 {} p95 {})",
                   st.synthesized ? " (no step markers: whole run per rank)" : "", ms(st.duration_ns.p50),
                   ms(st.duration_ns.p95), ms(st.duration_ns.min), ms(st.duration_ns.max), st.duration_ns.count,
                   ms(st.max_over_ranks_ns.p50), ms(st.max_over_ranks_ns.p95)));
  auto table = [&](const std::string& title, const std::vector<KernelStat>& v) {
    line("");
    line(title);
    line(fmt::format("{:<40} {:>8} {:>8} {:>11} {:>10} {:>10} {:>10} {:>8} {:>8}", "", "category", "count",
                     "total ms", "mean us", "p50 us", "p95 us", "TFLOP/s", "GB/s"));
    for (const auto& s : v) {
      std::string key = s.key.size() > 40 ? s.key.substr(0, 37) + "..." : s.key;
      line(fmt::format("{:<40} {:>8} {:>8} {:>11} {:>10.2f} {:>10.2f} {:>10.2f} {:>8} {:>8}", key, s.category,
                       s.count, ms(s.total_ns), s.mean_ns / 1e3, static_cast<double>(s.p50_ns) / 1e3,
                       static_cast<double>(s.p95_ns) / 1e3, s.tflops > 0 ? fmt::format("{:.2f}", s.tflops) : "-",
                       s.gbps > 0 ? fmt::format("{:.1f}", s.gbps) : "-"));
    }
  };
  table("kernels by op", r.by_op);
  table("kernels by name (top by total time)", r.by_name);
  if (!r.host_calls.empty()) table("synchronization (the host or a stream waiting: no GPU work)", r.host_calls);
  line("");
  const auto& a = r.attribution;
  line(fmt::format("attribution: {:.1f}% of {} GPU activities carry a plan task id; compute kernels {:.1f}% ({} of {})",
                   a.share_pct, a.gpu_activities,
                   a.compute_kernels > 0 ? 100.0 * double(a.compute_attributed) / double(a.compute_kernels) : 0.0,
                   a.compute_attributed, a.compute_kernels));
  if (!a.top_unattributed.empty()) {
    line(fmt::format("  unattributed names ({}):", a.unattributed_names));
    for (const auto& [name, ns] : a.top_unattributed) line(fmt::format("    {:>10} ms  {}", ms(ns), compactName(name)));
  }
  line("");
  const auto& cp = r.critical_path;
  if (!cp.available) {
    line("critical path: not available (no activity carries a plan task id)");
  } else {
    const std::string where = cp.step >= 0 ? fmt::format("rank {}, step {}: the median of {} steps", cp.rank, cp.step,
                                                         cp.steps_recorded)
                                           : fmt::format("rank {}, whole run: no steps recorded", cp.rank);
    line(fmt::format("critical path ({}): {} ms over {} tasks, busy {} ms, waiting {} ms", where, ms(cp.length_ns),
                     cp.task_count, ms(cp.busy_ns), ms(cp.wait_ns)));
    std::string phases;
    for (const auto& [k, v] : cp.by_phase_ns) phases += fmt::format("  {} {} ms", k, ms(v));
    line("  by phase:" + phases);
    // The table shows the path's last ten tasks; --json carries more.
    const size_t shown = std::min<size_t>(cp.tasks.size(), 10);
    if (cp.task_count > static_cast<int64_t>(shown))
      line(fmt::format("    ... {} earlier tasks", cp.task_count - static_cast<int64_t>(shown)));
    for (size_t k = cp.tasks.size() - shown; k < cp.tasks.size(); ++k) {
      const auto& t = cp.tasks[k];
      line(fmt::format("    {:>8} {:>10} ms +{:>8} us wait  s{} {}", t.task_id, ms(t.end_ns - t.start_ns),
                       fmt::format("{:.1f}", static_cast<double>(t.wait_before_ns) / 1e3), t.stream, t.name));
    }
  }
  line("");
  const auto& g = r.idle_gaps;
  if (g.gaps == 0) {
    line("idle gaps: the GPU was never idle between activities" +
         std::string(g.steps > 0 ? " within the steps" : ""));
  } else {
    // Per step where steps were recorded: what one step loses, by the work
    // around each gap (launch latency after short kernels, waits on the host).
    const double per = g.steps > 0 ? double(g.steps) : 1.0;
    line(fmt::format("idle gaps{}: {} gaps, {} ms{}; by the work before and after each gap ({} pairs):",
                     g.steps > 0 ? " within the steps" : "", g.gaps, ms(g.total_ns),
                     g.steps > 0 ? fmt::format(", {:.1f} us per step", double(g.total_ns) / per / 1e3) : "",
                     g.pair_kinds));
    for (const auto& p : g.pairs)
      line(fmt::format("  {:>8} us{} {:>6} gaps  {} -> {}", fmt::format("{:.1f}", double(p.total_ns) / per / 1e3),
                       g.steps > 0 ? "/step" : "", p.count, p.before, p.after));
  }
  line("");
  for (const std::string& l : streamWaitLines(r.stream_waits)) line(l);
  line("");
  const auto& s = r.stragglers;
  if (s.collectives_matched == 0) {
    line("stragglers: no collective seen on two or more ranks");
  } else {
    line(fmt::format("stragglers: {} collectives matched across ranks; most often last: {}", s.collectives_matched,
                     s.straggler_rank >= 0 ? "rank " + std::to_string(s.straggler_rank) : "none"));
    for (const auto& sr : s.ranks)
      line(fmt::format("  rank {:>4}: last {:>6} times, mean delay {:>10.1f} us, max {:>10.1f} us", sr.rank,
                       sr.last_count, sr.mean_delay_ns / 1e3, static_cast<double>(sr.max_delay_ns) / 1e3));
  }
  if (const std::vector<std::string> power = powerLines(r.stats); !power.empty()) {
    line("");
    for (const std::string& l : power) line(l);
  }
  if (!r.stats.empty()) {
    line("");
    line("stats:");
    for (const auto& st2 : r.stats)
      line(fmt::format("  {:<40} {:>12} {:<9} {}", st2.name, st2.value, toString(st2.severity), st2.description));
  }
  return out;
}

}  // namespace tandem::traces
