#include "traces/analysis/baseline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "traces/trackers/stats.h"

namespace tandem::traces {
namespace {

double ms(double ns) { return ns / 1e6; }

std::optional<int64_t> statValue(const RunReport& r, const stats::StatDecl& decl) {
  std::optional<int64_t> v;
  const std::string name = decl.nameOf();
  for (const StatRow& s : r.stats)
    if (s.name == name) v = std::max(v.value_or(s.value), s.value);
  return v;
}

}  // namespace

Baseline baselineOf(const RunReport& report, const std::string& source, std::optional<double> tokens_per_step) {
  Baseline b;
  b.source = source;
  b.run_kind = std::string(toString(report.run.kind));
  const Distribution& d = report.step_time.max_over_ranks_ns;
  b.steps = d.count;
  b.p50_step_ms = ms(double(d.p50));
  b.p95_step_ms = ms(double(d.p95));
  b.max_step_ms = ms(double(d.max));
  const double rank_steps = std::max<double>(1.0, double(report.steps.size()));
  b.exposed_comm_ms = ms(double(report.total.exposed_comm_ns)) / rank_steps;
  for (const KernelStat& k : report.by_op) b.op_ms[k.key] = ms(double(k.total_ns)) / rank_steps;
  if (const auto t = statValue(report, stats::kTokensPerSecond); t && *t > 0) b.tokens_per_s = double(*t);
  else if (tokens_per_step && b.p50_step_ms > 0) b.tokens_per_s = *tokens_per_step / (b.p50_step_ms / 1e3);
  if (const auto m = statValue(report, stats::kMfuPpm); m && *m > 0) b.mfu_pct = double(*m) / 1e4;
  if (const auto a = statValue(report, stats::kAllocatedBytes); a && *a > 0)
    b.peak_memory_gib = double(*a) / double(int64_t(1) << 30);
  return b;
}

std::string baselineToJson(const Baseline& b) {
  nlohmann::ordered_json j;
  j["format"] = "tandem baseline 1";
  j["source"] = b.source;
  j["run_kind"] = b.run_kind;
  j["steps"] = b.steps;
  j["p50_step_ms"] = b.p50_step_ms;
  j["p95_step_ms"] = b.p95_step_ms;
  j["max_step_ms"] = b.max_step_ms;
  j["exposed_comm_ms"] = b.exposed_comm_ms;
  if (b.tokens_per_s) j["tokens_per_s"] = *b.tokens_per_s;
  if (b.mfu_pct) j["mfu_pct"] = *b.mfu_pct;
  if (b.peak_memory_gib) j["peak_memory_gib"] = *b.peak_memory_gib;
  j["op_ms"] = b.op_ms;
  return j.dump(2) + "\n";
}

Baseline parseBaseline(const std::string& json_text, const std::string& file) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error(fmt::format("{}: not JSON ({})", file, e.what()));
  }
  if (!j.is_object() || j.value("format", "") != "tandem baseline 1")
    throw std::runtime_error(file + ": not a tandem baseline (no \"format\": \"tandem baseline 1\"; write one with "
                                    "`tandem baseline record`)");
  auto number = [&](const char* key, bool required) -> std::optional<double> {
    if (!j.contains(key)) {
      if (required) throw std::runtime_error(fmt::format("{}: {} is missing", file, key));
      return std::nullopt;
    }
    if (!j[key].is_number() || !std::isfinite(j[key].get<double>()) || j[key].get<double>() < 0)
      throw std::runtime_error(fmt::format("{}: {} must be a number of at least 0", file, key));
    return j[key].get<double>();
  };
  Baseline b;
  b.source = j.value("source", "");
  b.run_kind = j.value("run_kind", "");
  b.steps = int64_t(*number("steps", true));
  b.p50_step_ms = *number("p50_step_ms", true);
  b.p95_step_ms = *number("p95_step_ms", true);
  b.max_step_ms = *number("max_step_ms", true);
  b.exposed_comm_ms = *number("exposed_comm_ms", true);
  b.tokens_per_s = number("tokens_per_s", false);
  b.mfu_pct = number("mfu_pct", false);
  b.peak_memory_gib = number("peak_memory_gib", false);
  if (j.contains("op_ms")) {
    if (!j["op_ms"].is_object()) throw std::runtime_error(file + ": op_ms must map op kinds to milliseconds");
    for (const auto& [op, v] : j["op_ms"].items()) {
      if (!v.is_number()) throw std::runtime_error(fmt::format("{}: op_ms.{} must be a number", file, op));
      b.op_ms[op] = v.get<double>();
    }
  }
  return b;
}

GateResult checkBaseline(const Baseline& base, const Baseline& now, double tolerance_pct) {
  GateResult g;
  g.tolerance_pct = tolerance_pct;
  const double t = tolerance_pct / 100.0;
  // higher_is_worse: step times and memory; else throughput and MFU.
  auto gate = [&](const std::string& metric, const std::string& unit, double b, double n, bool higher_is_worse) {
    GateRow r{metric, unit, b, n, b > 0 ? 100.0 * (n - b) / b : 0.0, false, false};
    const double worse = higher_is_worse ? n - b : b - n;
    r.regressed = b > 0 && worse > t * b;
    r.improved = b > 0 && -worse > t * b;
    g.pass = g.pass && !r.regressed;
    g.rows.push_back(r);
  };
  gate("p50 step time", "ms", base.p50_step_ms, now.p50_step_ms, true);
  gate("p95 step time", "ms", base.p95_step_ms, now.p95_step_ms, true);
  if (base.tokens_per_s && now.tokens_per_s) gate("tokens/s", "", *base.tokens_per_s, *now.tokens_per_s, false);
  if (base.mfu_pct && now.mfu_pct) gate("MFU", "%", *base.mfu_pct, *now.mfu_pct, false);
  if (base.peak_memory_gib && now.peak_memory_gib)
    gate("peak memory", "GiB", *base.peak_memory_gib, *now.peak_memory_gib, true);
  {
    // Exposed communication against the step it adds to.
    GateRow r{"exposed communication", "ms", base.exposed_comm_ms, now.exposed_comm_ms,
              base.exposed_comm_ms > 0 ? 100.0 * (now.exposed_comm_ms - base.exposed_comm_ms) / base.exposed_comm_ms
                                       : 0.0,
              false, false};
    const double allowed = t * base.p50_step_ms;
    r.regressed = now.exposed_comm_ms - base.exposed_comm_ms > allowed;
    r.improved = base.exposed_comm_ms - now.exposed_comm_ms > allowed;
    g.pass = g.pass && !r.regressed;
    g.rows.push_back(r);
  }
  // The op kinds large enough to gate (each kind's GPU time per rank and
  // step), largest first.
  std::vector<std::pair<std::string, double>> large;
  for (const auto& [op, ms] : base.op_ms)
    if (ms >= kGatedOpShare * base.p50_step_ms) large.emplace_back(op, ms);
  std::stable_sort(large.begin(), large.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [op, ms] : large) {
    const auto it = now.op_ms.find(op);
    gate(op + " time", "ms", ms, it == now.op_ms.end() ? 0.0 : it->second, true);
  }
  // Reported, not gated.
  g.rows.push_back({"slowest step", "ms", base.max_step_ms, now.max_step_ms,
                    base.max_step_ms > 0 ? 100.0 * (now.max_step_ms - base.max_step_ms) / base.max_step_ms : 0.0,
                    false, false});
  std::map<std::string, OpMove> ops;
  for (const auto& [op, v] : base.op_ms) ops[op] = {op, v, 0};
  for (const auto& [op, v] : now.op_ms) {
    auto [it, fresh] = ops.try_emplace(op, OpMove{op, 0, v});
    if (!fresh) it->second.now_ms = v;
  }
  for (auto& [op, m] : ops) g.ops.push_back(m);
  std::stable_sort(g.ops.begin(), g.ops.end(), [](const OpMove& a, const OpMove& b) {
    return std::fabs(a.now_ms - a.baseline_ms) > std::fabs(b.now_ms - b.baseline_ms);
  });
  return g;
}

std::string gateToText(const GateResult& g, size_t top_ops) {
  std::string s = fmt::format("{:<24} {:>14} {:>14} {:>9}  {}\n", "metric", "baseline", "now", "change", "verdict");
  for (const GateRow& r : g.rows) {
    const bool gated = r.metric != "slowest step";
    const std::string verdict = !gated ? "(not gated)" : r.regressed ? "REGRESSED" : r.improved ? "better" : "ok";
    s += fmt::format("{:<24} {:>11.3f} {:<2} {:>11.3f} {:<2} {:>+8.2f}%  {}\n", r.metric, r.baseline, r.unit, r.now,
                     r.unit, r.change_pct, verdict);
  }
  if (!g.ops.empty()) {
    s += "\nop kinds that moved most (GPU ms per rank and step):\n";
    for (size_t i = 0; i < g.ops.size() && i < top_ops; ++i) {
      const OpMove& m = g.ops[i];
      s += fmt::format("  {:<22} {:>10.3f} -> {:>10.3f}  ({:+.3f} ms)\n", m.op, m.baseline_ms, m.now_ms,
                       m.now_ms - m.baseline_ms);
    }
  }
  s += g.pass ? fmt::format("\nPASS: nothing regressed by more than {:g}%\n", g.tolerance_pct)
              : fmt::format("\nFAIL: regressed by more than {:g}%:", g.tolerance_pct);
  if (!g.pass) {
    for (const GateRow& r : g.rows)
      if (r.regressed) s += fmt::format(" {} ({:+.2f}%)", r.metric, r.change_pct);
    s += "\n";
  }
  return s;
}

std::string gateToJson(const GateResult& g) {
  nlohmann::ordered_json j;
  j["pass"] = g.pass;
  j["tolerance_pct"] = g.tolerance_pct;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const GateRow& r : g.rows)
    rows.push_back({{"metric", r.metric},
                    {"unit", r.unit},
                    {"baseline", r.baseline},
                    {"now", r.now},
                    {"change_pct", r.change_pct},
                    {"gated", r.metric != "slowest step"},
                    {"regressed", r.regressed},
                    {"improved", r.improved}});
  j["metrics"] = rows;
  nlohmann::ordered_json ops = nlohmann::ordered_json::array();
  for (const OpMove& m : g.ops) ops.push_back({{"op", m.op}, {"baseline_ms", m.baseline_ms}, {"now_ms", m.now_ms}});
  j["op_kinds"] = ops;
  return j.dump(2);
}

}  // namespace tandem::traces
