// bench_published: the simulator against step times others published for
// clusters we do not have (resources/published/, docs/accuracy.md). Each row
// is simulated as it is set up there; one JSON line per row (predicted,
// published, error, or why it is not modelled), a table, the weak-scaling
// trends and a summary line.
//
//   bench_published [--rows DIR] [--only ID[,ID...]] [--calibration NAME|FILE]
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "engine/spec/resources.h"
#include "simulator/validation/published.h"

namespace {

using tandem::sim::PublishedOutcome;
using tandem::sim::PublishedRow;

std::string jsonText(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out + "\"";
}

std::string jsonList(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    out += jsonText(v[i]);  // appended, not "," + text: GCC 12 warns falsely (-Wrestrict) on that concatenation
  }
  return out + "]";
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void printRow(const PublishedRow& r, const PublishedOutcome& o) {
  if (o.simulated)
    fmt::print("{{\"bench\":\"published\",\"id\":{},\"gpus\":{},\"topology\":{},\"published_s\":{:.3f},"
               "\"predicted_s\":{:.3f},\"error_pct\":{:.1f},\"provenance\":{},\"approximations\":{},"
               "\"warnings\":{},\"sim_wall_s\":{:.2f}}}\n",
               jsonText(r.id), r.gpus, jsonText(r.topology), r.step_s, o.predicted_s, o.error_pct,
               jsonText(r.provenance), jsonList(r.approximations), jsonList(o.warnings), o.wall_s);
  else
    fmt::print("{{\"bench\":\"published\",\"id\":{},\"gpus\":{},\"published_s\":{:.3f},\"not_modelled\":{}}}\n",
               jsonText(r.id), r.gpus, r.step_s, jsonList(r.not_modelled));
  std::fflush(stdout);
}

// Within a series, each row against the previous: the published step ratio
// and the predicted one; the trend error is their difference in points.
void printTrends(const std::vector<PublishedRow>& rows, const std::map<std::string, PublishedOutcome>& out,
                 std::vector<double>& trend_errors) {
  std::map<std::string, std::vector<const PublishedRow*>> series;
  for (const PublishedRow& r : rows)
    if (!r.series.empty()) series[r.series].push_back(&r);
  for (auto& [name, list] : series) {
    std::stable_sort(list.begin(), list.end(), [](auto* a, auto* b) { return a->gpus < b->gpus; });
    for (size_t i = 1; i < list.size(); ++i) {
      const auto ia = out.find(list[i - 1]->id), ib = out.find(list[i]->id);
      if (ia == out.end() || ib == out.end() || !ia->second.simulated || !ib->second.simulated) continue;
      const PublishedOutcome& a = ia->second;
      const PublishedOutcome& b = ib->second;
      const double published = 100.0 * (list[i]->step_s / list[i - 1]->step_s - 1);
      const double predicted = 100.0 * (b.predicted_s / a.predicted_s - 1);
      trend_errors.push_back(std::fabs(predicted - published));
      fmt::print("{{\"bench\":\"published_trend\",\"series\":{},\"from\":{},\"to\":{},\"published_change_pct\":{:.1f},"
                 "\"predicted_change_pct\":{:.1f},\"difference_points\":{:.1f}}}\n",
                 jsonText(name), jsonText(list[i - 1]->id), jsonText(list[i]->id), published, predicted,
                 predicted - published);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string folder = tandem::resourceDir() + "/published";
  std::set<std::string> only;
  tandem::sim::SimulateSettings settings;
  // The rows ran other frameworks' kernels (Megatron-LM, NeMo with cuDNN's
  // fused attention, torchtitan): the roofline, whose efficiencies are set
  // from public figures, not the shipped profile of tandem's own executor
  // (its attention is slower than cuDNN's: with it the H100 rows came out
  // 16-26% slow; docs/accuracy.md, "The kernel sweep"). --calibration auto
  // asks for the profile.
  settings.calibration = "none";
  tandem::bench::ArgReader args("bench_published",
                                "[--rows DIR] [--only ID[,ID...]] [--calibration auto|none|NAME|FILE]", argc, argv);
  while (args.next()) {
    if (args.is("--rows")) folder = args.text();
    else if (args.is("--only")) {
      std::string list = args.text();
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        if (comma > at) only.insert(list.substr(at, comma - at));
        at = comma + 1;
      }
    } else if (args.is("--calibration")) settings.calibration = args.text();
    else args.unknown();
  }
  try {
    std::vector<PublishedRow> rows = tandem::sim::loadPublishedRows(folder);
    std::map<std::string, PublishedOutcome> out;
    for (const PublishedRow& r : rows) {
      if (!only.empty() && !only.count(r.id)) continue;
      PublishedOutcome o = tandem::sim::simulatePublished(r, settings);
      printRow(r, o);
      out[r.id] = std::move(o);
    }
    std::vector<double> trend_errors;
    printTrends(rows, out, trend_errors);
    // The reference's rows (what issue 50's targets count), then every row.
    for (const bool reference_only : {true, false}) {
      std::vector<double> errors;
      int total = 0, not_modelled = 0, within_20 = 0;
      for (const PublishedRow& r : rows) {
        const auto it = out.find(r.id);
        if (it == out.end() || (reference_only && !r.in_reference)) continue;
        ++total;
        if (!it->second.simulated) {
          ++not_modelled;
          continue;
        }
        errors.push_back(std::fabs(it->second.error_pct));
        within_20 += std::fabs(it->second.error_pct) <= 20;
      }
      fmt::print("{{\"bench\":\"published_summary\",\"scope\":\"{}\",\"rows\":{},\"simulated\":{},"
                 "\"not_modelled\":{},\"median_abs_error_pct\":{:.1f},\"max_abs_error_pct\":{:.1f},"
                 "\"within_20_pct\":{},\"misses\":{},\"trend_pairs\":{},\"trend_max_difference_points\":{:.1f}}}\n",
                 reference_only ? "reference" : "all", total, int(errors.size()), not_modelled, median(errors),
                 errors.empty() ? 0.0 : *std::max_element(errors.begin(), errors.end()), within_20,
                 total - within_20, trend_errors.size(),
                 trend_errors.empty() ? 0.0 : *std::max_element(trend_errors.begin(), trend_errors.end()));
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_published: {}\n", e.what());
    return 1;
  }
  return 0;
}
