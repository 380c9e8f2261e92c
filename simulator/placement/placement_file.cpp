// Placement map files (format: placement_file.h).
#include "simulator/placement/placement_file.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "simulator/topology/routing.h"

namespace tandem::sim {
namespace {

class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const YAML::Node& at, const std::string& message) const { fail(lineOf(at), message); }
  [[noreturn]] void fail(int line, const std::string& message) const {
    if (line > 0) throw PlacementError(fmt::format("{}:{}: {}", source_, line, message));
    throw PlacementError(fmt::format("{}: {}", source_, message));
  }
  static int lineOf(const YAML::Node& at) { return at.IsDefined() ? at.Mark().line + 1 : 0; }

  void checkKeys(const YAML::Node& map, const std::string& where, std::initializer_list<const char*> allowed) const {
    if (!map.IsMap()) fail(map, fmt::format("{} must be a mapping (key: value)", where));
    for (const auto& kv : map) {
      const std::string key = kv.first.Scalar();
      bool ok = false;
      std::string names;
      for (const char* a : allowed) {
        ok = ok || key == a;
        names += (names.empty() ? "" : ", ") + std::string(a);
      }
      if (!ok) fail(kv.first, fmt::format("{}: unknown key '{}' (allowed: {})", where, key, names));
    }
  }

  std::string str(const YAML::Node& node, const std::string& field) const {
    if (!node.IsDefined()) fail(0, fmt::format("missing {}", field));
    if (!node.IsScalar() || node.Scalar().empty()) fail(node, fmt::format("{} must be a name", field));
    return node.Scalar();
  }

  int whole(const YAML::Node& node, const std::string& field, int min) const {
    if (!node.IsScalar()) fail(node, fmt::format("{} must be a whole number", field));
    const std::string& text = node.Scalar();
    try {
      size_t used = 0;
      const long long v = std::stoll(text, &used);
      if (used == text.size() && v >= min && v <= 1'000'000'000) return int(v);
    } catch (const std::exception&) {
    }
    fail(node, fmt::format("{} must be a whole number of at least {}, got '{}'", field, min, text));
  }

 private:
  std::string source_;
};

PlacementEntry readEntry(const Reader& r, const YAML::Node& e, size_t index) {
  const std::string where = fmt::format("ranks[{}]", index);
  r.checkKeys(e, where, {"rank", "gpu", "host", "local"});
  for (const char* key : {"rank", "gpu", "host", "local"})
    if (!e[key]) r.fail(e, fmt::format("{}: missing '{}' (each entry: rank, gpu, host, local)", where, key));
  PlacementEntry p;
  p.line = Reader::lineOf(e);
  p.rank = r.whole(e["rank"], where + ".rank", 0);
  p.gpu = r.str(e["gpu"], where + ".gpu");
  p.host = r.str(e["host"], where + ".host");
  p.local = r.whole(e["local"], where + ".local", 0);
  return p;
}

}  // namespace

PlacementMap placementMapOf(const Plan& plan, const Topology& topo, const std::vector<int>& rank_device) {
  const Router router(topo);
  PlacementMap map;
  map.job = plan.job.name;
  map.topology = topo.name;
  map.world_size = plan.world_size;
  for (int r = 0; r < plan.world_size; ++r) {
    const int d = rank_device.at(size_t(r));
    const DeviceSpec& spec = topo.devices.at(size_t(d));
    const std::vector<int>& peers = router.devicesOfHost(spec.host);
    PlacementEntry e;
    e.rank = r;
    e.gpu = spec.name;
    e.host = topo.hosts.at(size_t(spec.host)).name;
    e.local = int(std::find(peers.begin(), peers.end(), d) - peers.begin());
    map.ranks.push_back(e);
  }
  return map;
}

std::string placementMapToYaml(const PlacementMap& map, const std::vector<std::string>& comment) {
  std::string out = "# tandem placement map: the GPU of each rank (`tandem place --out`; read by `tandem run "
                    "--placement FILE`).\n"
                    "# local: the GPU's index among its host's GPUs, the CUDA device the rank opens there.\n";
  for (const std::string& line : comment) out += "# " + line + "\n";
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "job" << YAML::Value << map.job;
  e << YAML::Key << "topology" << YAML::Value << map.topology;
  e << YAML::Key << "world_size" << YAML::Value << map.world_size;
  e << YAML::Key << "ranks" << YAML::Value << YAML::BeginSeq;
  for (const PlacementEntry& p : map.ranks) {
    e << YAML::Flow << YAML::BeginMap;
    e << YAML::Key << "rank" << YAML::Value << p.rank;
    e << YAML::Key << "gpu" << YAML::Value << p.gpu;
    e << YAML::Key << "host" << YAML::Value << p.host;
    e << YAML::Key << "local" << YAML::Value << p.local;
    e << YAML::EndMap;
  }
  e << YAML::EndSeq << YAML::EndMap;
  return out + e.c_str() + "\n";
}

PlacementMap parsePlacementMap(const std::string& text, const std::string& source) {
  const Reader r(source);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    r.fail(e.mark.line + 1, "not valid YAML: " + e.msg);
  }
  if (!root.IsDefined() || root.IsNull()) r.fail(0, "empty file (expected a placement map: `tandem place --out`)");
  r.checkKeys(root, "placement map", {"job", "topology", "world_size", "ranks"});
  PlacementMap map;
  map.source = source;
  if (root["job"]) map.job = r.str(root["job"], "job");
  if (root["topology"]) map.topology = r.str(root["topology"], "topology");
  if (!root["world_size"]) r.fail(root, "missing world_size");
  map.world_size = r.whole(root["world_size"], "world_size", 1);
  const YAML::Node ranks = root["ranks"];
  if (!ranks) r.fail(root, "missing ranks (one entry per rank: {rank, gpu, host, local})");
  if (!ranks.IsSequence()) r.fail(ranks, "ranks must be a list of {rank, gpu, host, local}");
  std::vector<const PlacementEntry*> by_rank(size_t(map.world_size), nullptr);
  std::map<std::pair<std::string, int>, const PlacementEntry*> by_gpu;
  map.ranks.reserve(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) map.ranks.push_back(readEntry(r, ranks[i], i));
  for (const PlacementEntry& p : map.ranks) {
    if (p.rank >= map.world_size)
      r.fail(p.line, fmt::format("rank {} is outside the world (world_size {})", p.rank, map.world_size));
    if (const PlacementEntry* other = by_rank[size_t(p.rank)])
      r.fail(p.line, fmt::format("rank {} is placed twice (first on line {})", p.rank, other->line));
    by_rank[size_t(p.rank)] = &p;
    auto [it, inserted] = by_gpu.try_emplace({p.host, p.local}, &p);
    if (!inserted)
      r.fail(p.line, fmt::format("rank {} and rank {} (line {}) both on GPU {} of host {}", p.rank, it->second->rank,
                                 it->second->line, p.local, p.host));
  }
  for (int rank = 0; rank < map.world_size; ++rank)
    if (!by_rank[size_t(rank)])
      r.fail(ranks, fmt::format("rank {} has no GPU (the map must place every rank 0..{})", rank,
                                map.world_size - 1));
  std::sort(map.ranks.begin(), map.ranks.end(),
            [](const PlacementEntry& a, const PlacementEntry& b) { return a.rank < b.rank; });
  return map;
}

PlacementMap loadPlacementMap(const std::string& path) {
  if (std::filesystem::is_directory(path)) throw PlacementError(path + ": is a folder, not a placement map");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw PlacementError(path + ": cannot open the placement map");
  std::stringstream s;
  s << in.rdbuf();
  return parsePlacementMap(s.str(), path);
}

std::vector<int> localDevices(const PlacementMap& map, int world_size) {
  if (map.world_size != world_size)
    throw PlacementError(fmt::format("{}: the map places {} ranks but the job has {}", map.source, map.world_size,
                                     world_size));
  std::vector<int> out;
  for (const PlacementEntry& p : map.ranks) out.push_back(p.local);
  return out;
}

std::vector<int> rankDevices(const PlacementMap& map, const Topology& topo) {
  std::map<std::string, int> device;
  for (int d = 0; d < int(topo.devices.size()); ++d) device[topo.devices[size_t(d)].name] = d;
  std::vector<int> out;
  for (const PlacementEntry& p : map.ranks) {
    auto it = device.find(p.gpu);
    if (it == device.end())
      throw PlacementError(
          fmt::format("{}:{}: GPU '{}' is not in topology '{}'", map.source, p.line, p.gpu, topo.name));
    const std::string& host = topo.hosts.at(size_t(topo.devices[size_t(it->second)].host)).name;
    if (host != p.host)
      throw PlacementError(fmt::format("{}:{}: GPU '{}' is on host '{}' in topology '{}', not '{}'", map.source,
                                       p.line, p.gpu, host, topo.name, p.host));
    out.push_back(it->second);
  }
  return out;
}

}  // namespace tandem::sim
