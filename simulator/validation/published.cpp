#include "simulator/validation/published.h"

#include <fmt/core.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

namespace tandem::sim {
namespace {

[[noreturn]] void fail(const std::string& file, const YAML::Node& at, const std::string& field,
                       const std::string& problem) {
  const int line = at && at.Mark().line >= 0 ? at.Mark().line + 1 : 1;
  throw SpecError(fmt::format("{}:{}: {}: {}", file, line, field, problem));
}

std::string text(const std::string& file, const YAML::Node& root, const char* key, bool required) {
  const YAML::Node n = root[key];
  if (!n) {
    if (required) fail(file, root, key, "missing (a published row names it)");
    return {};
  }
  if (!n.IsScalar()) fail(file, n, key, "expected text");
  return n.as<std::string>();
}

std::vector<std::string> list(const std::string& file, const YAML::Node& root, const char* key) {
  std::vector<std::string> out;
  const YAML::Node n = root[key];
  if (!n || n.IsNull()) return out;
  if (!n.IsSequence()) fail(file, n, key, "expected a list of text");
  for (const YAML::Node& item : n) {
    if (!item.IsScalar()) fail(file, item, key, "expected a list of text");
    out.push_back(item.as<std::string>());
  }
  return out;
}

const std::set<std::string> kKeys = {"id",   "title",  "source",        "hardware",     "topology", "published", "in_reference",
                                     "series", "gpus", "approximations", "not_modelled", "job"};
const std::set<std::string> kProvenance = {"printed", "derived", "inferred", "recalled"};

void readPublished(const std::string& file, const YAML::Node& root, PublishedRow& row) {
  const YAML::Node p = root["published"];
  if (!p || !p.IsMap()) fail(file, p ? p : root, "published", "expected a mapping with step_s and provenance");
  const YAML::Node step = p["step_s"];
  try {
    if (!step) throw YAML::Exception(YAML::Mark::null_mark(), "");
    row.step_s = step.as<double>();
  } catch (const YAML::Exception&) {
    fail(file, step ? step : p, "published.step_s", "expected a step time in seconds");
  }
  if (!(row.step_s > 0)) fail(file, step, "published.step_s", "expected a step time above 0 s");
  row.provenance = text(file, p, "provenance", true);
  if (!kProvenance.count(row.provenance))
    fail(file, p["provenance"], "published.provenance", "'" + row.provenance +
                                                            "' (allowed: printed, derived, inferred, recalled)");
  row.note = text(file, p, "note", false);
}

}  // namespace

PublishedRow loadPublishedRow(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SpecError(path + ": cannot open the published row");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string content = ss.str();
  YAML::Node root;
  try {
    root = YAML::Load(content);
  } catch (const YAML::Exception& e) {
    throw SpecError(fmt::format("{}:{}: yaml: malformed YAML: {}", path, std::max(e.mark.line, 0) + 1, e.msg));
  }
  if (!root.IsMap()) fail(path, root, "row", "expected a mapping at the top level");
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (!kKeys.count(key))
      fail(path, kv.first, key, "unknown key (allowed: id, title, source, hardware, topology, published, series, "
                                "in_reference, gpus, approximations, not_modelled, job)");
  }
  PublishedRow row;
  row.file = path;
  row.id = text(path, root, "id", true);
  row.title = text(path, root, "title", true);
  row.source = text(path, root, "source", true);
  row.hardware = text(path, root, "hardware", false);
  row.topology = text(path, root, "topology", true);
  row.series = text(path, root, "series", false);
  if (const YAML::Node n = root["in_reference"]) {
    if (!n.IsScalar() || (n.Scalar() != "true" && n.Scalar() != "false"))
      fail(path, n, "in_reference", "expected true or false");
    row.in_reference = n.Scalar() == "true";
  }
  readPublished(path, root, row);
  row.approximations = list(path, root, "approximations");
  row.not_modelled = list(path, root, "not_modelled");
  JobParseOptions options;
  options.section = "job";
  JobSpec job = parseJob(content, path, {}, options);
  const int gpus = job.worldSize();
  if (const YAML::Node g = root["gpus"]; g && g.as<int>() != gpus && row.not_modelled.empty())
    fail(path, g, "gpus", fmt::format("{} GPUs published, but the job plans {} ranks", g.as<int>(), gpus));
  row.gpus = root["gpus"] ? root["gpus"].as<int>() : gpus;
  if (row.not_modelled.empty()) row.job = std::move(job);
  return row;
}

std::vector<PublishedRow> loadPublishedRows(const std::string& folder) {
  std::vector<PublishedRow> rows;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(folder, ec))
    if (e.is_regular_file() && e.path().extension() == ".yaml") rows.push_back(loadPublishedRow(e.path().string()));
  if (ec) throw SpecError(folder + ": cannot list the published rows: " + ec.message());
  // By id as the reference orders them: A2 before A10.
  auto key = [](const std::string& id) {
    size_t digits = 0;
    while (digits < id.size() && !std::isdigit(static_cast<unsigned char>(id[digits]))) ++digits;
    size_t end = digits;
    while (end < id.size() && std::isdigit(static_cast<unsigned char>(id[end]))) ++end;
    const int number = end > digits ? std::stoi(id.substr(digits, std::min<size_t>(end - digits, 9))) : -1;
    return std::make_tuple(id.substr(0, digits), number, id.substr(end));
  };
  std::sort(rows.begin(), rows.end(), [&](const PublishedRow& a, const PublishedRow& b) { return key(a.id) < key(b.id); });
  return rows;
}

PublishedOutcome simulatePublished(const PublishedRow& row, SimulateSettings settings) {
  PublishedOutcome out;
  if (!row.job) return out;
  settings.topology = row.topology;
  SimulateRequest request;
  request.job = *row.job;
  request.settings = settings;
  const auto t0 = std::chrono::steady_clock::now();
  const SimulateOutcome sim = simulateJob(request);
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.simulated = true;
  out.predicted_s = double(sim.result.step_ns) / 1e9;
  out.error_pct = 100.0 * (out.predicted_s - row.step_s) / row.step_s;
  out.warnings = sim.warnings;
  return out;
}

}  // namespace tandem::sim
