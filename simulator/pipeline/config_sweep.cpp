#include "simulator/pipeline/config_sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

namespace tandem::sim {
namespace {

std::string trimmed(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t") - a + 1);
}

// "a+b" -> {"a", "b"}: the fields (or values) of an axis that move together.
std::vector<std::string> splitPlus(const std::string& s) {
  std::vector<std::string> out;
  size_t from = 0;
  while (true) {
    const size_t plus = s.find('+', from);
    out.push_back(trimmed(s.substr(from, plus == std::string::npos ? std::string::npos : plus - from)));
    if (plus == std::string::npos) return out;
    from = plus + 1;
  }
}

// One combination: planned and simulated; skipped with its reason when the
// job, its plan or the topology refuses it.
SweepRow simulateCombination(const ConfigSweepRequest& r, const std::vector<std::string>& sets) {
  SweepRow row;
  row.sets = sets;
  try {
    std::vector<std::string> all = r.base_sets;
    all.insert(all.end(), sets.begin(), sets.end());
    SimulateRequest request;
    request.job = parseJob(r.job_yaml, r.job_source, all);
    // The fields the sweep derives from the combination's own: parsed once
    // more with them when there are any.
    const size_t given = all.size();
    int data_parallel = request.job.parallel.data_parallel;
    if (r.gpus > 0) {
      // The layout fills the GPUs asked for: what is left to data parallelism.
      const ParallelSpec& p = request.job.parallel;
      const int per_replica = p.tensor_parallel * p.pipeline_parallel * p.context_parallel;
      if (r.gpus % per_replica != 0)
        throw std::invalid_argument(fmt::format("{} GPUs do not hold whole replicas of {} (tensor x pipeline x "
                                                "context parallel)",
                                                r.gpus, per_replica));
      data_parallel = r.gpus / per_replica;
      all.push_back(fmt::format("parallel.data_parallel={}", data_parallel));
    }
    if (r.global_batch > 0) {
      const int per_pass = request.job.training.micro_batch * data_parallel;
      if (r.global_batch % per_pass != 0)
        throw std::invalid_argument(fmt::format("a global batch of {} sequences is not a whole number of micro-batch "
                                                "x data parallel = {}",
                                                r.global_batch, per_pass));
      all.push_back(fmt::format("training.grad_accum={}", r.global_batch / per_pass));
    }
    if (all.size() > given) request.job = parseJob(r.job_yaml, r.job_source, all);
    request.settings = r.settings;
    request.suggest_fitting_choices = false;
    request.describe_kernel_times = false;
    const SimulateOutcome out = simulateJob(request);
    row.simulated = true;
    row.world_size = out.plan.world_size;
    row.step_ms = double(out.result.step_ns) / 1e6;
    const double tokens = double(out.plan.job.tokensPerStep());
    row.tokens_per_s = out.result.step_ns > 0 ? tokens / (double(out.result.step_ns) * 1e-9) : 0;
    double peak = 0;
    for (const auto& rank : out.result.ranks) peak += out.topology.devices[size_t(rank.device)].bf16_flops;
    if (peak > 0 && out.result.step_ns > 0)
      row.mfu_pct = 100.0 * out.plan.summary.model_flops_per_token * row.tokens_per_s / peak;
    for (const SimRankSummary& s : out.ranks)
      row.peak_memory_gib = std::max(row.peak_memory_gib, double(s.peak_memory_bytes) / double(int64_t(1) << 30));
    if (!out.ranks.empty()) row.exposed_comm_ms = double(out.ranks.front().exposed_comm_ns) / 1e6;
    row.fits_memory = out.fits_memory;
  } catch (const std::exception& e) {
    row.simulated = false;
    row.why_not = e.what();
    // One line: the first of the message's.
    if (const size_t nl = row.why_not.find('\n'); nl != std::string::npos) row.why_not.resize(nl);
  }
  return row;
}

std::string csvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// The value of `key` in a combination.
std::string valueOfField(const std::vector<std::string>& sets, const std::string& key) {
  for (const std::string& s : sets)
    if (s.compare(0, key.size() + 1, key + "=") == 0) return s.substr(key.size() + 1);
  return "";
}

// The value of an axis (joined fields' values joined by '+') in a combination.
std::string valueOf(const std::vector<std::string>& sets, const std::string& key) {
  std::string v;
  for (const std::string& k : splitPlus(key)) v += (v.empty() ? "" : "+") + valueOfField(sets, k);
  return v;
}

}  // namespace

std::string sweepValue(const SweepRow& row, const SweepAxis& axis) { return valueOf(row.sets, axis.key); }

std::string sweepAxisLabel(const SweepAxis& axis) {
  static const std::pair<const char*, const char*> kShort[] = {
      {"parallel.tensor_parallel", "TP"},   {"parallel.pipeline_parallel", "PP"},
      {"parallel.data_parallel", "DP"},     {"parallel.context_parallel", "CP"},
      {"parallel.sequence_parallel", "SP"}, {"parallel.pipeline_chunks", "chunks"},
  };
  std::string label;
  for (const std::string& field : splitPlus(axis.key)) {
    std::string name;
    for (const auto& [key, abbreviation] : kShort)
      if (field == key) name = abbreviation;
    if (name.empty()) {
      const size_t dot = field.rfind('.');
      name = dot == std::string::npos ? field : field.substr(dot + 1);
      // "recompute.policy": the section says what the policy is of.
      if (name == "policy" && dot != std::string::npos) {
        const std::string section = field.substr(0, dot);
        name = section.substr(section.rfind('.') == std::string::npos ? 0 : section.rfind('.') + 1);
      }
    }
    if (!label.empty()) label += "+";
    label += name;
  }
  return label;
}

SweepAxis parseSweepAxis(const std::string& arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || trimmed(arg.substr(0, eq)).empty())
    throw std::invalid_argument("--vary takes KEY=V1,V2,... (e.g. parallel.tensor_parallel=1,2,4), not '" + arg + "'");
  SweepAxis a;
  a.key = trimmed(arg.substr(0, eq));
  const std::string list = arg.substr(eq + 1);
  size_t from = 0;
  while (true) {
    const size_t comma = list.find(',', from);
    const std::string v = trimmed(list.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
    if (v.empty()) throw std::invalid_argument("--vary " + arg + ": an empty value in the list");
    if (splitPlus(v).size() != splitPlus(a.key).size())
      throw std::invalid_argument(fmt::format("--vary {}: value '{}' has {} '+' parts where the key has {}", arg, v,
                                              splitPlus(v).size(), splitPlus(a.key).size()));
    a.values.push_back(v);
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  return a;
}

std::vector<std::vector<std::string>> sweepCombinations(const std::vector<SweepAxis>& axes) {
  std::vector<std::vector<std::string>> out{{}};
  for (const SweepAxis& a : axes) {
    const std::vector<std::string> keys = splitPlus(a.key);
    std::vector<std::vector<std::string>> next;
    for (const auto& prefix : out)
      for (const std::string& v : a.values) {
        next.push_back(prefix);
        const std::vector<std::string> parts = splitPlus(v);
        for (size_t i = 0; i < keys.size() && i < parts.size(); ++i) next.back().push_back(keys[i] + "=" + parts[i]);
      }
    out = std::move(next);
  }
  return out;
}

std::vector<SweepRow> runConfigSweep(const ConfigSweepRequest& request,
                                     const std::function<void(size_t, size_t)>& progress) {
  const std::vector<std::vector<std::string>> combos = sweepCombinations(request.axes);
  std::vector<SweepRow> rows(combos.size());
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t threads = std::min<size_t>(request.threads > 0 ? size_t(request.threads) : hw, combos.size());
  std::atomic<size_t> next{0};
  size_t done = 0;
  std::mutex m;
  auto work = [&] {
    for (size_t i = next++; i < combos.size(); i = next++) {
      rows[i] = simulateCombination(request, combos[i]);
      std::lock_guard<std::mutex> lock(m);
      ++done;
      if (progress) progress(done, combos.size());
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return rows;
}

void rankSweepRows(std::vector<SweepRow>& rows) {
  // What a user can run comes first: a layout that does not fit its GPUs is
  // no answer however fast it simulates.
  auto group = [](const SweepRow& r) { return !r.simulated ? 2 : r.fits_memory ? 0 : 1; };
  std::stable_sort(rows.begin(), rows.end(), [&](const SweepRow& a, const SweepRow& b) {
    if (group(a) != group(b)) return group(a) < group(b);
    return a.tokens_per_s > b.tokens_per_s;
  });
}

std::string sweepRowsToCsv(const std::vector<SweepRow>& rows, const std::vector<SweepAxis>& axes) {
  std::string s;
  for (const SweepAxis& a : axes) s += csvField(a.key) + ",";
  s += "simulated,step_ms,tokens_per_s,mfu_pct,peak_memory_gib,fits_memory,exposed_comm_ms,world_size,why_not\n";
  for (const SweepRow& r : rows) {
    for (const SweepAxis& a : axes) s += csvField(valueOf(r.sets, a.key)) + ",";
    s += fmt::format("{},{:.4f},{:.1f},{:.2f},{:.3f},{},{:.4f},{},{}\n", r.simulated ? "true" : "false", r.step_ms,
                     r.tokens_per_s, r.mfu_pct, r.peak_memory_gib, r.fits_memory ? "true" : "false",
                     r.exposed_comm_ms, r.world_size, csvField(r.why_not));
  }
  return s;
}

std::string sweepRowsToJson(const std::vector<SweepRow>& rows, const std::vector<SweepAxis>& axes) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const SweepRow& r : rows) {
    nlohmann::ordered_json o;
    nlohmann::ordered_json values;
    for (const SweepAxis& a : axes) values[a.key] = valueOf(r.sets, a.key);
    o["values"] = values;
    o["simulated"] = r.simulated;
    if (r.simulated) {
      o["step_ms"] = r.step_ms;
      o["tokens_per_s"] = r.tokens_per_s;
      o["mfu_pct"] = r.mfu_pct;
      o["peak_memory_gib"] = r.peak_memory_gib;
      o["fits_memory"] = r.fits_memory;
      o["exposed_comm_ms"] = r.exposed_comm_ms;
      o["world_size"] = r.world_size;
    } else {
      o["why_not"] = r.why_not;
    }
    j.push_back(o);
  }
  return j.dump(2);
}

}  // namespace tandem::sim
