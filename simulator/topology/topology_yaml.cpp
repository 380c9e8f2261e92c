// Topology YAML reader and writer (format: docs/topology-format.md).
#include "simulator/topology/topology_yaml.h"

#include <fmt/core.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <unistd.h>

#include "simulator/topology/topology_presets.h"

namespace tandem::sim {
namespace {

constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kBytesPerMiB = 1024.0 * 1024.0;

std::string joinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Reads one YAML document and turns every problem into "FILE:LINE: ..." errors.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const YAML::Node& at, const std::string& message) const {
    int line = at.IsDefined() ? at.Mark().line + 1 : 0;
    if (line > 0) throw TopologyError(fmt::format("{}:{}: {}", source_, line, message));
    throw TopologyError(fmt::format("{}: {}", source_, message));
  }

  // Unknown keys are errors: a typo ("bandwith") must not silently fall back
  // to a default.
  void checkKeys(const YAML::Node& map, const std::string& where,
                 const std::vector<std::string>& allowed) const {
    if (!map.IsMap()) fail(map, fmt::format("{} must be a mapping (key: value lines)", where));
    for (const auto& kv : map) {
      std::string key = kv.first.Scalar();
      bool ok = false;
      for (const auto& a : allowed) ok = ok || a == key;
      if (!ok)
        fail(kv.first, fmt::format("{}: unknown key '{}' (allowed: {})", where, key, joinNames(allowed)));
    }
  }

  std::string str(const YAML::Node& node, const std::string& field) const {
    if (!node.IsScalar()) fail(node, fmt::format("{} must be a string", field));
    return node.Scalar();
  }

  double number(const YAML::Node& node, const std::string& field) const {
    if (!node.IsScalar()) fail(node, fmt::format("{} must be a number", field));
    const std::string& text = node.Scalar();
    try {
      size_t used = 0;
      double v = std::stod(text, &used);
      if (used == text.size() && std::isfinite(v)) return v;
    } catch (const std::exception&) {
    }
    fail(node, fmt::format("{} must be a number, got '{}'", field, text));
  }

  int64_t integer(const YAML::Node& node, const std::string& field) const {
    double v = number(node, field);
    if (std::floor(v) != v || std::fabs(v) > 9.0e18)
      fail(node, fmt::format("{} must be a whole number, got '{}'", field, node.Scalar()));
    return int64_t(v);
  }

  bool boolean(const YAML::Node& node, const std::string& field) const {
    if (node.IsScalar()) {
      const std::string& t = node.Scalar();
      if (t == "true" || t == "yes" || t == "on") return true;
      if (t == "false" || t == "no" || t == "off") return false;
    }
    fail(node, fmt::format("{} must be true or false", field));
  }

  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

struct NodeIndex {
  std::map<std::string, int> id;          // name -> node id (devices renumbered later)
  std::map<std::string, YAML::Node> where;  // name -> its entry, for messages
};

void readDeviceFields(const Reader& r, const YAML::Node& entry, const std::string& label, DeviceSpec& d,
                      std::set<std::string>& given) {
  for (const auto& kv : entry) {
    const std::string key = kv.first.Scalar();
    const YAML::Node& v = kv.second;
    const std::string field = label + "." + key;
    if (key == "name") d.name = r.str(v, field);
    else if (key == "model") d.model = r.str(v, field);
    else if (key == "bf16_flops") d.bf16_flops = r.number(v, field);
    else if (key == "fp32_flops") d.fp32_flops = r.number(v, field);
    else if (key == "fp8_flops") d.fp8_flops = r.number(v, field);
    else if (key == "hbm_gbps") d.hbm_gbps = r.number(v, field);
    else if (key == "memory_bytes") d.memory_bytes = r.integer(v, field);
    else if (key == "memory_mib") d.memory_bytes = int64_t(std::llround(r.number(v, field) * kBytesPerMiB));
    else if (key == "memory_gib") d.memory_bytes = int64_t(std::llround(r.number(v, field) * kBytesPerGiB));
    else if (key == "sm_count") d.sm_count = int(r.integer(v, field));
    else if (key == "best_gemm_fraction") {
      d.best_gemm_fraction = r.number(v, field);
      if (!(d.best_gemm_fraction > 0 && d.best_gemm_fraction <= 1))
        r.fail(v, fmt::format("{} must be in (0, 1]", field));
    } else if (key == "mig_profile") d.mig_profile = r.str(v, field);
    else if (key == "speed") {
      d.speed = r.number(v, field);
      if (!(d.speed > 0 && d.speed <= 2)) r.fail(v, fmt::format("{} must be in (0, 2]", field));
    }
    else if (key == "mig_fraction") {
      d.mig_fraction = r.number(v, field);
      if (!(d.mig_fraction > 0 && d.mig_fraction <= 1)) r.fail(v, fmt::format("{} must be in (0, 1]", field));
    } else continue;  // host is handled by the caller
    if (key.rfind("memory_", 0) == 0) {
      if (given.count("memory"))
        r.fail(kv.first, fmt::format("{}: give only one of memory_bytes, memory_mib, memory_gib", label));
      given.insert("memory");
    } else {
      given.insert(key);
    }
  }
}

const std::vector<std::string> kDeviceKeys{"name", "model", "host", "bf16_flops", "fp32_flops", "fp8_flops", "hbm_gbps",
                                           "memory_bytes", "memory_mib", "memory_gib", "sm_count",
                                           "best_gemm_fraction", "mig_profile", "mig_fraction", "speed"};

DeviceSpec readDevice(const Reader& r, const YAML::Node& entry, const YAML::Node& defaults, size_t index) {
  const std::string label = fmt::format("devices[{}]", index);
  r.checkKeys(entry, label, kDeviceKeys);
  if (!entry["name"]) r.fail(entry, label + ": missing field 'name'");
  DeviceSpec explicit_fields;
  std::set<std::string> given_default, given_entry;
  if (defaults) readDeviceFields(r, defaults, "device_defaults", explicit_fields, given_default);
  // The entry's own memory key replaces a default one.
  DeviceSpec from_entry = explicit_fields;
  readDeviceFields(r, entry, label, from_entry, given_entry);
  std::set<std::string> given = given_entry;
  given.insert(given_default.begin(), given_default.end());

  // Start from the model's figures, then apply what the file says.
  DeviceSpec d;
  if (!from_entry.model.empty()) {
    if (auto spec = gpuModelSpec(from_entry.model)) d = *spec;
  }
  d.name = from_entry.name;
  d.model = from_entry.model;
  if (given.count("bf16_flops")) d.bf16_flops = from_entry.bf16_flops;
  if (given.count("fp32_flops")) d.fp32_flops = from_entry.fp32_flops;
  if (given.count("fp8_flops")) d.fp8_flops = from_entry.fp8_flops;
  if (given.count("hbm_gbps")) d.hbm_gbps = from_entry.hbm_gbps;
  if (given.count("memory")) d.memory_bytes = from_entry.memory_bytes;
  if (given.count("sm_count")) d.sm_count = from_entry.sm_count;
  if (given.count("best_gemm_fraction")) d.best_gemm_fraction = from_entry.best_gemm_fraction;
  d.mig_profile = from_entry.mig_profile;
  d.mig_fraction = from_entry.mig_fraction;
  d.speed = from_entry.speed;

  const std::string who = fmt::format("{} '{}'", label, d.name);
  auto require = [&](const char* key, const char* given_key, bool ok) {
    if (ok) return;
    if (!given.count(given_key))
      r.fail(entry, fmt::format("{}: missing field '{}' (model '{}' is not one of the known models {}, so give "
                                "its figures)",
                                who, key, d.model, joinNames(knownGpuModels())));
    r.fail(entry[key] ? entry[key] : entry, fmt::format("{}: field '{}' must be > 0", who, key));
  };
  require("bf16_flops", "bf16_flops", d.bf16_flops > 0);
  require("fp32_flops", "fp32_flops", d.fp32_flops > 0);
  // Optional: 0 for a GPU without FP8 tensor cores.
  if (d.fp8_flops < 0) r.fail(entry["fp8_flops"], fmt::format("{}: field 'fp8_flops' must be >= 0", who));
  require("hbm_gbps", "hbm_gbps", d.hbm_gbps > 0);
  require("memory_bytes", "memory", d.memory_bytes > 0);
  require("sm_count", "sm_count", d.sm_count > 0);
  return d;
}

LinkKind readLinkKind(const Reader& r, const YAML::Node& node, const std::string& field) {
  std::string text = r.str(node, field);
  if (auto k = parseLinkKind(text)) return *k;
  r.fail(node, fmt::format("{}: unknown link kind '{}' (allowed: nvlink, pcie, infiniband, ethernet, internal)",
                           field, text));
}

NodeKind readSwitchKind(const Reader& r, const YAML::Node& node, const std::string& field) {
  std::string text = r.str(node, field);
  auto k = parseNodeKind(text);
  if (!k || *k == NodeKind::Gpu)
    r.fail(node, fmt::format("{}: unknown switch kind '{}' (allowed: nvswitch, pcie_switch, host_bridge, cpu, nic, "
                             "ib_leaf, ib_spine, gpu_hub)",
                             field, text));
  return *k;
}

// The document's root mapping; throws on a YAML syntax error, an empty file
// or an unknown top-level key.
YAML::Node loadRoot(const Reader& r, const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw TopologyError(fmt::format("{}:{}: YAML syntax error: {}", source, e.mark.line + 1, e.msg));
  }
  if (!root || root.IsNull()) throw TopologyError(fmt::format("{}: empty topology file", source));
  r.checkKeys(root, "topology",
              {"name", "description", "hosts", "devices", "device_defaults", "switches", "links", "mig"});
  return root;
}

// Host ids by name while the file is read: the hosts listed, then (when none
// are) the ones devices and switches name.
struct HostIndex {
  std::map<std::string, int> ids;
  bool listed = false;  // the file has a `hosts` section
};

// Hosts: listed, or created from the devices' host names.
void readHosts(const Reader& r, YAML::Node& root, Topology& topo, HostIndex& hosts) {
  std::map<std::string, int>& host_ids = hosts.ids;
  hosts.listed = bool(root["hosts"]);
  if (hosts.listed) {
    const YAML::Node list = root["hosts"];
    if (!list.IsSequence()) r.fail(list, "hosts must be a list");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string label = fmt::format("hosts[{}]", i);
      r.checkKeys(list[i], label, {"name"});
      if (!list[i]["name"]) r.fail(list[i], label + ": missing field 'name'");
      std::string name = r.str(list[i]["name"], label + ".name");
      if (host_ids.count(name)) r.fail(list[i], fmt::format("{}: duplicate host name '{}'", label, name));
      host_ids[name] = int(topo.hosts.size());
      topo.hosts.push_back({name});
    }
  }
}

// The id of the host a device or switch names, adding the host when the
// file lists none.
// `node` is the host field or undefined; `entry` the device or switch.
int hostId(const Reader& r, Topology& topo, HostIndex& hosts, const std::optional<YAML::Node>& maybe,
           const YAML::Node& entry, const std::string& field) {
  std::map<std::string, int>& host_ids = hosts.ids;
  if (!maybe) {
    if (topo.hosts.size() == 1) return 0;
    if (hosts.listed) r.fail(entry, fmt::format("{}: missing field (several hosts are listed)", field));
    // No hosts listed: devices without a host share "host0".
    if (!host_ids.count("host0")) {
      host_ids["host0"] = int(topo.hosts.size());
      topo.hosts.push_back({"host0"});
    }
    return host_ids["host0"];
  }
  const YAML::Node& node = *maybe;
  std::string name = r.str(node, field);
  auto it = host_ids.find(name);
  if (it != host_ids.end()) return it->second;
  if (hosts.listed) {
    std::vector<std::string> names;
    for (const auto& h : topo.hosts) names.push_back(h.name);
    r.fail(node, fmt::format("{}: unknown host '{}' (hosts: {})", field, name, joinNames(names)));
  }
  host_ids[name] = int(topo.hosts.size());
  topo.hosts.push_back({name});
  return host_ids[name];
}

// The `devices` section (with `device_defaults`): every device, its host,
// and its name in the index.
void readDevices(const Reader& r, YAML::Node& root, Topology& topo, HostIndex& hosts, NodeIndex& index) {
  const YAML::Node defaults = root["device_defaults"];
  if (defaults) {
    std::vector<std::string> keys;
    for (const auto& k : kDeviceKeys)
      if (k != "name") keys.push_back(k);
    r.checkKeys(defaults, "device_defaults", keys);
  }
  const YAML::Node devices = root["devices"];
  if (!devices) r.fail(root, "missing section 'devices'");
  if (!devices.IsSequence() || devices.size() == 0) r.fail(devices, "devices must be a non-empty list");
  for (size_t i = 0; i < devices.size(); ++i) {
    DeviceSpec d = readDevice(r, devices[i], defaults, i);
    std::optional<YAML::Node> host_node;
    if (devices[i]["host"]) host_node = devices[i]["host"];
    else if (defaults && defaults["host"]) host_node = defaults["host"];
    d.host = hostId(r, topo, hosts, host_node, devices[i], fmt::format("devices[{}].host", i));
    if (index.id.count(d.name)) r.fail(devices[i], fmt::format("devices[{}]: duplicate name '{}'", i, d.name));
    index.id[d.name] = int(topo.devices.size());
    index.where[d.name] = devices[i];
    topo.devices.push_back(std::move(d));
  }
}

// The optional `switches` section: every switch, its host, and its name in
// the index (ids after the devices').
void readSwitches(const Reader& r, YAML::Node& root, Topology& topo, HostIndex& hosts, NodeIndex& index) {
  if (const YAML::Node switches = root["switches"]) {
    if (!switches.IsSequence()) r.fail(switches, "switches must be a list");
    for (size_t i = 0; i < switches.size(); ++i) {
      const std::string label = fmt::format("switches[{}]", i);
      r.checkKeys(switches[i], label, {"name", "kind", "host"});
      if (!switches[i]["name"]) r.fail(switches[i], label + ": missing field 'name'");
      if (!switches[i]["kind"])
        r.fail(switches[i], label + ": missing field 'kind' (allowed: nvswitch, pcie_switch, host_bridge, cpu, nic, "
                                    "ib_leaf, ib_spine, gpu_hub)");
      SwitchSpec s;
      s.name = r.str(switches[i]["name"], label + ".name");
      s.kind = readSwitchKind(r, switches[i]["kind"], label + ".kind");
      s.host = switches[i]["host"] ? hostId(r, topo, hosts, switches[i]["host"], switches[i], label + ".host") : -1;
      if (index.id.count(s.name)) r.fail(switches[i], fmt::format("{}: duplicate name '{}'", label, s.name));
      index.id[s.name] = int(topo.devices.size() + topo.switches.size());
      index.where[s.name] = switches[i];
      topo.switches.push_back(std::move(s));
    }
  }
}

// A link's bandwidth per direction: its gbps, or its lane_gbps times its lanes.
double readLinkGbps(const Reader& r, const YAML::Node& e, const std::string& label, int lanes) {
  double gbps = 0;
  if (e["gbps"] && e["lane_gbps"]) r.fail(e, fmt::format("{}: give gbps or lane_gbps, not both", label));
  if (e["gbps"]) {
    gbps = r.number(e["gbps"], label + ".gbps");
    if (!(gbps > 0))
      r.fail(e["gbps"], fmt::format("{}.gbps must be > 0 (GB/s per direction), got {}", label, e["gbps"].Scalar()));
  } else if (e["lane_gbps"]) {
    double lane = r.number(e["lane_gbps"], label + ".lane_gbps");
    if (!(lane > 0))
      r.fail(e["lane_gbps"], fmt::format("{}.lane_gbps must be > 0, got {}", label, e["lane_gbps"].Scalar()));
    gbps = lane * lanes;
  } else {
    r.fail(e, fmt::format("{}: missing field 'gbps' (GB/s per direction) or 'lane_gbps'", label));
  }
  return gbps;
}

// One entry of the `links` section, added to the topology.
void readLink(const Reader& r, const YAML::Node& e, size_t i, const NodeIndex& index, Topology& topo) {
  const std::string label = fmt::format("links[{}]", i);
  r.checkKeys(e, label, {"a", "b", "gbps", "lane_gbps", "lanes", "latency_ns", "kind", "bidirectional"});
  int ends[2];
  const char* keys[2] = {"a", "b"};
  for (int k = 0; k < 2; ++k) {
    if (!e[keys[k]]) r.fail(e, fmt::format("{}: missing endpoint '{}'", label, keys[k]));
    std::string name = r.str(e[keys[k]], label + "." + keys[k]);
    auto it = index.id.find(name);
    if (it == index.id.end())
      r.fail(e[keys[k]],
             fmt::format("{}.{}: unknown endpoint '{}' (not a device or switch name)", label, keys[k], name));
    ends[k] = it->second;
  }
  if (ends[0] == ends[1]) r.fail(e, fmt::format("{}: links '{}' to itself", label, e["a"].Scalar()));
  int lanes = e["lanes"] ? int(r.integer(e["lanes"], label + ".lanes")) : 1;
  if (lanes < 1) r.fail(e["lanes"], fmt::format("{}.lanes must be >= 1", label));
  const double gbps = readLinkGbps(r, e, label, lanes);
  int64_t latency = e["latency_ns"] ? r.integer(e["latency_ns"], label + ".latency_ns") : 0;
  if (latency < 0) r.fail(e["latency_ns"], fmt::format("{}.latency_ns must be >= 0", label));
  if (!e["kind"])
    r.fail(e, fmt::format("{}: missing field 'kind' (allowed: nvlink, pcie, infiniband, ethernet, internal)", label));
  LinkKind kind = readLinkKind(r, e["kind"], label + ".kind");
  bool both = e["bidirectional"] ? r.boolean(e["bidirectional"], label + ".bidirectional") : true;
  topo.addLink(ends[0], ends[1], gbps, latency, kind, lanes, both);
}

// The optional `links` section.
void readLinks(const Reader& r, YAML::Node& root, const NodeIndex& index, Topology& topo) {
  const YAML::Node links = root["links"];
  if (links) {
    if (!links.IsSequence()) r.fail(links, "links must be a list");
    for (size_t i = 0; i < links.size(); ++i) readLink(r, links[i], i, index, topo);
  }
}

// Fails, at its entry, on a device that cannot reach some other device
// (findUnreachableDevices).
void checkReachable(const Reader& r, const Topology& topo, NodeIndex& index) {
  auto [a, b] = findUnreachableDevices(topo);
  if (a >= 0)
    r.fail(index.where[topo.devices[size_t(a)].name],
           fmt::format("device '{}' cannot reach device '{}': every GPU must reach every other GPU through links "
                       "and switches (traffic never passes through a GPU)",
                       topo.devices[size_t(a)].name, topo.devices[size_t(b)].name));
}

// The optional `mig` section: the topology with the profile applied to the
// GPUs named (all when none are).
void readMig(const Reader& r, YAML::Node& root, NodeIndex& index, Topology& topo) {
  if (const YAML::Node mig = root["mig"]) {
    r.checkKeys(mig, "mig", {"profile", "gpus"});
    if (!mig["profile"]) r.fail(mig, "mig: missing field 'profile' (e.g. 3g.40gb)");
    std::string profile = r.str(mig["profile"], "mig.profile");
    std::vector<std::string> gpus;
    if (const YAML::Node list = mig["gpus"]) {
      if (!list.IsSequence()) r.fail(list, "mig.gpus must be a list of device names");
      for (size_t i = 0; i < list.size(); ++i) {
        std::string g = r.str(list[i], fmt::format("mig.gpus[{}]", i));
        if (!index.id.count(g) || !topo.isDevice(index.id[g]))
          r.fail(list[i], fmt::format("mig.gpus[{}]: unknown device '{}'", i, g));
        gpus.push_back(g);
      }
    }
    try {
      topo = applyMig(topo, profile, gpus);
    } catch (const TopologyError& e) {
      r.fail(mig["profile"], e.what());
    }
  }
}

}  // namespace

Topology parseTopologyYaml(const std::string& text, const std::string& source) {
  Reader r(source);
  YAML::Node root = loadRoot(r, text, source);

  Topology topo;
  topo.source = source;
  topo.name = root["name"] ? r.str(root["name"], "name")
                           : std::filesystem::path(source).stem().string();
  if (root["description"]) topo.description = r.str(root["description"], "description");

  HostIndex hosts;
  readHosts(r, root, topo, hosts);
  NodeIndex index;
  readDevices(r, root, topo, hosts, index);
  readSwitches(r, root, topo, hosts, index);
  readLinks(r, root, index, topo);

  checkReachable(r, topo, index);
  validateTopology(topo);

  readMig(r, root, index, topo);
  return topo;
}

Topology loadTopologyFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TopologyError(fmt::format("{}: cannot open topology file", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parseTopologyYaml(buffer.str(), path);
}

namespace {

std::string num(double v) { return fmt::format("{}", v); }

std::string quoted(const std::string& s) {
  // Plain scalars are fine for our names; quote anything YAML might misread.
  bool plain = !s.empty();
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '/'))
      plain = false;
  if (plain && !std::isdigit(static_cast<unsigned char>(s[0])) && s != "true" && s != "false" && s != "yes" &&
      s != "no" && s != "null" && s != "on" && s != "off")
    return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string topologyToYaml(const Topology& topo) {
  std::string out;
  out += fmt::format("# Topology '{}' (format: docs/topology-format.md).\n", topo.name);
  out += "# Bandwidth in GB/s (1e9 bytes/s) per direction, latency in ns, FLOP/s dense peak.\n";
  out += fmt::format("name: {}\n", quoted(topo.name));
  if (!topo.description.empty()) out += fmt::format("description: {}\n", quoted(topo.description));
  out += "hosts:\n";
  for (const auto& h : topo.hosts) out += fmt::format("  - name: {}\n", quoted(h.name));
  out += "devices:\n";
  for (const auto& d : topo.devices) {
    out += fmt::format("  - name: {}\n", quoted(d.name));
    if (!d.model.empty()) out += fmt::format("    model: {}\n", quoted(d.model));
    out += fmt::format("    host: {}\n", quoted(topo.hosts.at(size_t(d.host)).name));
    out += fmt::format("    bf16_flops: {}\n", num(d.bf16_flops));
    out += fmt::format("    fp32_flops: {}\n", num(d.fp32_flops));
    if (d.fp8_flops > 0) out += fmt::format("    fp8_flops: {}\n", num(d.fp8_flops));
    out += fmt::format("    hbm_gbps: {}\n", num(d.hbm_gbps));
    out += fmt::format("    memory_bytes: {}  # {:.1f} GiB\n", d.memory_bytes, double(d.memory_bytes) / kBytesPerGiB);
    out += fmt::format("    sm_count: {}\n", d.sm_count);
    if (d.best_gemm_fraction > 0) out += fmt::format("    best_gemm_fraction: {}\n", num(d.best_gemm_fraction));
    if (!d.mig_profile.empty() || d.mig_fraction != 1.0)
      out += fmt::format("    mig_profile: {}\n    mig_fraction: {}\n", quoted(d.mig_profile), num(d.mig_fraction));
    if (d.speed != 1.0) out += fmt::format("    speed: {}\n", num(d.speed));
  }
  if (!topo.switches.empty()) {
    out += "switches:\n";
    for (const auto& s : topo.switches) {
      out += fmt::format("  - {{name: {}, kind: {}", quoted(s.name), toString(s.kind));
      if (s.host >= 0) out += fmt::format(", host: {}", quoted(topo.hosts.at(size_t(s.host)).name));
      out += "}\n";
    }
  }
  // Pair each link with its mirror so bidirectional connections are one entry.
  std::vector<bool> used(topo.links.size(), false);
  std::map<std::pair<int, int>, std::vector<size_t>> by_ends;
  for (size_t i = 0; i < topo.links.size(); ++i) by_ends[{topo.links[i].src, topo.links[i].dst}].push_back(i);
  if (!topo.links.empty()) out += "links:\n";
  for (size_t i = 0; i < topo.links.size(); ++i) {
    if (used[i]) continue;
    used[i] = true;
    const Link& l = topo.links[i];
    bool both = false;
    for (size_t j : by_ends[{l.dst, l.src}]) {
      const Link& m = topo.links[j];
      if (!used[j] && m.gbps == l.gbps && m.latency_ns == l.latency_ns && m.kind == l.kind && m.lanes == l.lanes) {
        used[j] = true;
        both = true;
        break;
      }
    }
    out += fmt::format("  - {{a: {}, b: {}, kind: {}", quoted(topo.nodeName(l.src)), quoted(topo.nodeName(l.dst)),
                       toString(l.kind));
    // Bonded NVLinks read best per lane (18 x 26.562), when that is exact.
    const double lane = l.gbps / l.lanes;
    if (l.kind == LinkKind::NvLink && l.lanes > 1 && lane * l.lanes == l.gbps)
      out += fmt::format(", lanes: {}, lane_gbps: {}", l.lanes, num(lane));
    else if (l.lanes != 1)
      out += fmt::format(", gbps: {}, lanes: {}", num(l.gbps), l.lanes);
    else
      out += fmt::format(", gbps: {}", num(l.gbps));
    out += fmt::format(", latency_ns: {}", l.latency_ns);
    if (!both) out += ", bidirectional: false";
    out += "}\n";
  }
  return out;
}

void writeFileAtomically(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  fs::path tmp = dir / fmt::format(".{}.tmp{}", target.filename().string(), ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw TopologyError(fmt::format("{}: cannot write (folder missing or not writable)", path));
    out << text;
    out.flush();
    if (!out) {
      out.close();
      std::error_code ec;
      fs::remove(tmp, ec);
      throw TopologyError(fmt::format("{}: write failed", path));
    }
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw TopologyError(fmt::format("{}: cannot rename temporary file into place", path));
  }
}

void saveTopologyFile(const Topology& topo, const std::string& path) {
  writeFileAtomically(path, topologyToYaml(topo));
}

}  // namespace tandem::sim
