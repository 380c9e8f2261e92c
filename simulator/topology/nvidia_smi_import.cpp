// `nvidia-smi topo -m` / `nvidia-smi nvlink -s` parsers and the topology
// synthesis described in nvidia_smi_import.h.
#include "simulator/topology/nvidia_smi_import.h"

#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <set>
#include <sstream>

#include "simulator/topology/topology_presets.h"
#include "simulator/topology/topology_yaml.h"

namespace tandem::sim {
namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

bool allDigits(const std::string& s, size_t from) {
  if (from >= s.size()) return false;
  for (size_t i = from; i < s.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

// "NIC Legend" maps NICk to device names such as mlx5_0; older drivers use
// those names as column headers directly.
bool isEndpointName(const std::string& s) {
  if ((s.rfind("GPU", 0) == 0 || s.rfind("NIC", 0) == 0) && allDigits(s, 3)) return true;
  if (s.rfind("mlx", 0) == 0) {
    size_t u = s.find('_');
    return u != std::string::npos && allDigits(s.substr(0, u), 3) && allDigits(s, u + 1);
  }
  return false;
}

bool isGpuName(const std::string& s) { return s.rfind("GPU", 0) == 0 && allDigits(s, 3); }

// NV# lanes, 0 for any other code.
int nvLanes(const std::string& code) {
  if (code.size() > 2 && code.rfind("NV", 0) == 0 && allDigits(code, 2)) return std::stoi(code.substr(2));
  return 0;
}

bool isKnownCode(const std::string& code) {
  static const std::set<std::string> kCodes{"X", "SYS", "SOC", "NODE", "PHB", "PXB", "PIX"};
  return kCodes.count(code) || nvLanes(code) > 0;
}

// Lines with CR stripped and terminal escape sequences (ESC [ params letter)
// removed; any other control character is an error, since a matrix with
// stray bytes cannot be trusted.
std::vector<std::string> cleanLines(const std::string& text, const std::string& source) {
  std::vector<std::string> lines;
  // A UTF-8 byte order mark, as some editors save files, is not content.
  std::istringstream in(text.rfind("\xEF\xBB\xBF", 0) == 0 ? text.substr(3) : text);
  std::string raw;
  int number = 0;
  while (std::getline(in, raw)) {
    ++number;
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();
    std::string out;
    for (size_t i = 0; i < raw.size(); ++i) {
      unsigned char c = static_cast<unsigned char>(raw[i]);
      if (c == 0x1b) {
        size_t j = i + 1;
        bool ok = j < raw.size() && raw[j] == '[';
        if (ok) {
          ++j;
          while (j < raw.size() && (std::isdigit(static_cast<unsigned char>(raw[j])) || raw[j] == ';')) ++j;
          ok = j < raw.size() && std::isalpha(static_cast<unsigned char>(raw[j]));
        }
        if (!ok)
          throw TopologyError(fmt::format("{}:{}: malformed terminal escape sequence at column {} "
                                          "(expected ESC [ digits letter, as in ESC[4m)",
                                          source, number, i + 1));
        i = j;
        continue;
      }
      if ((c < 0x20 && c != '\t') || c == 0x7f)
        throw TopologyError(
            fmt::format("{}:{}: unexpected control character 0x{:02x} at column {}", source, number, c, i + 1));
      out += raw[i];
    }
    lines.push_back(std::move(out));
  }
  return lines;
}

// Fields of a matrix line: tab separated as nvidia-smi prints them; a copy
// where tabs became spaces is split on runs of two or more spaces.
std::vector<std::string> splitFields(const std::string& line) {
  std::vector<std::string> fields;
  if (line.find('\t') != std::string::npos) {
    size_t start = 0;
    while (true) {
      size_t tab = line.find('\t', start);
      fields.push_back(trim(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start)));
      if (tab == std::string::npos) break;
      start = tab + 1;
    }
  } else {
    std::string cur;
    size_t i = 0;
    while (i < line.size()) {
      if (line[i] != ' ') {
        cur += line[i++];
        continue;
      }
      size_t j = i;
      while (j < line.size() && line[j] == ' ') ++j;
      if (j - i >= 2) {
        fields.push_back(trim(cur));
        cur.clear();
      } else {
        cur += ' ';
      }
      i = j;
    }
    fields.push_back(trim(cur));
    if (fields.size() > 1 && fields.back().empty()) fields.pop_back();
  }
  return fields;
}

bool blank(const std::string& s) { return trim(s).empty(); }

}  // namespace

int NvidiaSmiMatrix::gpuCount() const {
  int n = 0;
  for (const auto& name : names) n += isGpuName(name);
  return n;
}

NvidiaSmiMatrix parseNvidiaSmiTopo(const std::string& text, const std::string& source) {
  std::vector<std::string> lines = cleanLines(text, source);
  auto fail = [&](size_t index, const std::string& msg) -> TopologyError {
    return TopologyError(fmt::format("{}:{}: {}", source, index + 1, msg));
  };
  size_t at = 0;
  while (at < lines.size() && blank(lines[at])) ++at;
  if (at == lines.size())
    throw TopologyError(fmt::format("{}: empty file (expected `nvidia-smi topo -m` output)", source));

  NvidiaSmiMatrix m;
  // Header: an empty corner cell, endpoint columns, then attribute columns.
  std::vector<std::string> header = splitFields(lines[at]);
  while (!header.empty() && header.front().empty()) header.erase(header.begin());
  size_t col = 0;
  while (col < header.size() && isEndpointName(header[col])) m.names.push_back(header[col++]);
  for (; col < header.size(); ++col)
    if (!header[col].empty()) m.attribute_names.push_back(header[col]);
  if (m.gpuCount() == 0)
    throw fail(at, "no GPU columns in the header (expected `nvidia-smi topo -m` output: GPU0 GPU1 ...)");
  const size_t n = m.names.size();
  const size_t header_line = at;

  m.codes.assign(n, std::vector<std::string>(n));
  m.attributes.resize(n);
  std::vector<size_t> row_line(n);
  size_t row = 0;
  for (at = header_line + 1; at < lines.size(); ++at) {
    const std::string& line = lines[at];
    if (blank(line) || trim(line).rfind("Legend", 0) == 0) break;
    std::vector<std::string> f = splitFields(line);
    if (row >= n) throw fail(at, fmt::format("unexpected row '{}': the header has {} columns", f[0], n));
    if (f[0] != m.names[row])
      throw fail(at, fmt::format("row '{}' where '{}' was expected (rows follow the header's columns)", f[0],
                                 m.names[row]));
    if (f.size() < n + 1)
      throw fail(at, fmt::format("ragged row '{}': {} cells, expected {} (one per column {} .. {})", f[0],
                                 f.size() - 1, n, m.names.front(), m.names.back()));
    for (size_t c = 0; c < n; ++c) {
      const std::string& code = f[c + 1];
      if (!isKnownCode(code))
        throw fail(at, fmt::format("unknown code '{}' in row {}, column {} (legend: X, SYS, NODE, PHB, PXB, PIX, NV#)",
                                   code, m.names[row], m.names[c]));
      if ((code == "X") != (c == row))
        throw fail(at, fmt::format("row {}, column {}: 'X' (self) belongs on the diagonal only, got '{}'", m.names[row],
                                   m.names[c], code));
      m.codes[row][c] = code == "SOC" ? "SYS" : code;  // SOC: older drivers' SYS
    }
    std::vector<std::string> values;
    for (size_t k = n + 1; k < f.size(); ++k)
      if (!f[k].empty()) values.push_back(f[k]);
    if (values.size() > m.attribute_names.size())
      throw fail(at, fmt::format("ragged row '{}': {} values after the matrix, but the header names {} "
                                 "attribute columns", f[0], values.size(), m.attribute_names.size()));
    for (size_t k = 0; k < values.size(); ++k) m.attributes[row][m.attribute_names[k]] = values[k];
    row_line[row] = at;
    ++row;
  }
  if (row < n)
    throw fail(at < lines.size() ? at : lines.size() - 1,
               fmt::format("truncated matrix: {} of {} rows (row '{}' is missing)", row, n, m.names[row]));
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < i; ++j)
      if (m.codes[i][j] != m.codes[j][i])
        throw fail(row_line[i], fmt::format("matrix is not symmetric: {}-{} is '{}' but {}-{} is '{}'", m.names[i],
                                            m.names[j], m.codes[i][j], m.names[j], m.names[i], m.codes[j][i]));

  // The legends: "NIC Legend:" lines are "  NIC0: mlx5_0".
  bool nic_legend = false;
  for (; at < lines.size(); ++at) {
    std::string t = trim(lines[at]);
    if (t == "NIC Legend:") {
      nic_legend = true;
      continue;
    }
    if (!nic_legend || t.empty()) continue;
    size_t colon = t.find(':');
    if (colon == std::string::npos) throw fail(at, fmt::format("NIC legend line '{}' is not 'NICk: name'", t));
    std::string nic = trim(t.substr(0, colon));
    if (std::find(m.names.begin(), m.names.end(), nic) == m.names.end())
      throw fail(at, fmt::format("NIC legend names '{}', which is not a matrix column", nic));
    m.nic_legend[nic] = trim(t.substr(colon + 1));
  }
  return m;
}

NvlinkStatus parseNvidiaSmiNvlink(const std::string& text, const std::string& source) {
  std::vector<std::string> lines = cleanLines(text, source);
  NvlinkStatus status;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string t = trim(lines[i]);
    if (t.empty()) continue;
    auto fail = [&](const std::string& msg) { return TopologyError(fmt::format("{}:{}: {}", source, i + 1, msg)); };
    if (t.rfind("GPU ", 0) == 0) {
      size_t colon = t.find(':');
      if (colon == std::string::npos || !allDigits(t.substr(4, colon - 4), 0))
        throw fail(fmt::format("expected 'GPU <index>: <name> (UUID: ...)', got '{}'", t));
      NvlinkStatus::Gpu gpu;
      gpu.index = std::stoi(t.substr(4, colon - 4));
      std::string name = trim(t.substr(colon + 1));
      size_t uuid = name.find(" (UUID");
      gpu.name = trim(name.substr(0, uuid));
      status.gpus.push_back(std::move(gpu));
    } else if (t.rfind("Link ", 0) == 0) {
      if (status.gpus.empty()) throw fail("a 'Link' line before any 'GPU' line");
      size_t colon = t.find(':');
      if (colon == std::string::npos) throw fail(fmt::format("expected 'Link <n>: <speed> GB/s', got '{}'", t));
      std::string value = trim(t.substr(colon + 1));
      if (value.find("inactive") != std::string::npos) continue;  // "<inactive>": not in use
      size_t used = 0;
      double gbps = 0;
      try {
        gbps = std::stod(value, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || trim(value.substr(used)) != "GB/s" || !(gbps > 0))
        throw fail(fmt::format("expected a link speed like '26.562 GB/s', got '{}'", value));
      status.gpus.back().link_gbps.push_back(gbps);
    } else {
      throw fail(fmt::format("unexpected line '{}' (expected `nvidia-smi nvlink -s` output)", t));
    }
  }
  if (status.gpus.empty())
    throw TopologyError(fmt::format("{}: no GPUs (expected `nvidia-smi nvlink -s` output)", source));
  return status;
}

namespace {

// Union-find over matrix endpoints.
struct Groups {
  std::vector<int> parent;
  explicit Groups(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int x) { return parent[size_t(x)] == x ? x : parent[size_t(x)] = find(parent[size_t(x)]); }
  void join(int a, int b) { parent[size_t(find(a))] = find(b); }
  // Members of each group, groups ordered by their smallest member.
  std::vector<std::vector<int>> list(const std::vector<int>& members) {
    std::vector<std::vector<int>> out;
    std::map<int, size_t> slot;
    for (int m : members) {
      int r = find(m);
      if (!slot.count(r)) {
        slot[r] = out.size();
        out.emplace_back();
      }
      out[slot[r]].push_back(m);
    }
    return out;
  }
};

std::string nodeNameFor(const std::string& column) {
  std::string out;
  for (char c : column) out += char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

Topology importNvidiaSmi(const NvidiaSmiMatrix& m, const NvlinkStatus* nvlink, const NvidiaSmiImportOptions& options) {
  const int n = int(m.names.size());
  std::vector<int> gpus, nics;
  for (int i = 0; i < n; ++i) (isGpuName(m.names[size_t(i)]) ? gpus : nics).push_back(i);
  if (gpus.empty()) throw TopologyError("nvidia-smi import: the matrix has no GPUs");

  std::string model = options.model;
  if (model.empty() && nvlink) model = nvlink->gpus.front().name;
  if (model.empty())
    throw TopologyError(fmt::format("nvidia-smi import: cannot tell the GPU model; pass --model (known: {}) or the "
                                    "`nvidia-smi nvlink -s` output, which names the GPUs",
                                    fmt::join(knownGpuModels(), ", ")));
  std::optional<DeviceSpec> spec = gpuModelSpec(model);
  if (!spec)
    throw TopologyError(fmt::format("nvidia-smi import: unknown GPU model '{}' (known: {}); pass --model", model,
                                    fmt::join(knownGpuModels(), ", ")));
  if (nvlink && nvlink->gpus.size() != gpus.size())
    throw TopologyError(fmt::format("nvidia-smi import: the nvlink status lists {} GPUs but the matrix has {}",
                                    nvlink->gpus.size(), gpus.size()));
  const bool hopper = spec->model == "H100" || spec->model == "H200";
  const double pcie_gbps = options.pcie_gbps > 0 ? options.pcie_gbps : (hopper ? 55.0 : 25.0);
  const int default_links = hopper ? 18 : (spec->model.rfind("A100", 0) == 0 ? 12 : 0);

  Topology t;
  t.name = options.name;
  t.description = fmt::format("imported from nvidia-smi: {} x {}", gpus.size(), spec->model);
  t.hosts.push_back({options.host});
  std::vector<int> node_of(size_t(n), -1);
  for (size_t g = 0; g < gpus.size(); ++g) {
    DeviceSpec d = *spec;
    d.name = nodeNameFor(m.names[size_t(gpus[g])]);
    d.host = 0;
    node_of[size_t(gpus[g])] = int(t.devices.size());
    t.devices.push_back(std::move(d));
  }
  for (int i : nics) node_of[size_t(i)] = t.addSwitch(nodeNameFor(m.names[size_t(i)]), NodeKind::Nic, 0);

  // NVLink: direct pairs, or one NVSwitch when a GPU's NV# add up to more
  // links than it has.
  std::vector<double> lane_gbps(gpus.size(), 25.0);
  std::vector<int> links_per_gpu(gpus.size(), default_links);
  std::vector<int> lane_sum(gpus.size(), 0), lane_max(gpus.size(), 0);
  for (size_t a = 0; a < gpus.size(); ++a) {
    if (nvlink) {
      const auto& speeds = nvlink->gpus[a].link_gbps;
      links_per_gpu[a] = int(speeds.size());
      if (!speeds.empty()) lane_gbps[a] = *std::min_element(speeds.begin(), speeds.end());
    }
    for (size_t b = 0; b < gpus.size(); ++b) {
      int lanes = nvLanes(m.codes[size_t(gpus[a])][size_t(gpus[b])]);
      lane_sum[a] += lanes;
      lane_max[a] = std::max(lane_max[a], lanes);
    }
    if (links_per_gpu[a] == 0) links_per_gpu[a] = lane_max[a];
  }
  bool nvswitch = false;
  for (size_t a = 0; a < gpus.size(); ++a) nvswitch = nvswitch || lane_sum[a] > links_per_gpu[a];
  if (nvswitch) {
    int sw = t.addSwitch("nvswitch", NodeKind::NvSwitch, 0);
    for (size_t a = 0; a < gpus.size(); ++a) {
      int lanes = std::min(links_per_gpu[a], std::max(lane_max[a], 1));
      if (lane_max[a] == 0) continue;
      t.addLink(int(a), sw, lanes * lane_gbps[a], 250, LinkKind::NvLink, lanes);
    }
  } else {
    for (size_t a = 0; a < gpus.size(); ++a)
      for (size_t b = a + 1; b < gpus.size(); ++b) {
        int lanes = nvLanes(m.codes[size_t(gpus[a])][size_t(gpus[b])]);
        if (lanes > 0)
          t.addLink(int(a), int(b), lanes * std::min(lane_gbps[a], lane_gbps[b]), 500, LinkKind::NvLink, lanes);
      }
  }

  // PCIe: nested groups by relation, widest first.
  auto rel = [&](int a, int b) { return m.codes[size_t(a)][size_t(b)]; };
  const size_t count = static_cast<size_t>(n);
  Groups socket(count), bridge(count), pxb(count), pix(count);
  std::vector<int> all(count);
  std::iota(all.begin(), all.end(), 0);
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) {
      const std::string r = rel(a, b);
      if (r == "NODE" || r == "PHB" || r == "PXB" || r == "PIX") socket.join(a, b);
      if (r == "PHB" || r == "PXB" || r == "PIX") bridge.join(a, b);
      if (r == "PXB" || r == "PIX") pxb.join(a, b);
      if (r == "PIX") pix.join(a, b);
      // NV# hides the PCIe relation; the NUMA node still tells the socket.
      auto numa_a = m.attributes[size_t(a)].find("NUMA Affinity");
      auto numa_b = m.attributes[size_t(b)].find("NUMA Affinity");
      if (numa_a != m.attributes[size_t(a)].end() && numa_b != m.attributes[size_t(b)].end() &&
          numa_a->second == numa_b->second && numa_a->second != "N/A")
        socket.join(a, b);
    }
  int pcie_count = 0, bridge_count = 0;
  std::vector<int> cpus;
  for (const auto& sock : socket.list(all)) {
    int cpu = t.addSwitch(fmt::format("cpu{}", cpus.size()), NodeKind::Cpu, 0);
    for (int other : cpus) t.addLink(other, cpu, 60, 300, LinkKind::Internal, 1);
    cpus.push_back(cpu);
    for (const auto& hb : bridge.list(sock)) {
      if (hb.size() == 1) {
        t.addLink(node_of[size_t(hb[0])], cpu, pcie_gbps, 250, LinkKind::Pcie, 16);
        continue;
      }
      int hb_node = t.addSwitch(fmt::format("hostbridge{}", bridge_count++), NodeKind::HostBridge, 0);
      t.addLink(hb_node, cpu, pcie_gbps, 250, LinkKind::Pcie, 16);
      for (const auto& tree : pxb.list(hb)) {
        auto leaves = pix.list(tree);
        int parent = hb_node;
        if (leaves.size() > 1) {
          parent = t.addSwitch(fmt::format("pcie{}", pcie_count++), NodeKind::PcieSwitch, 0);
          t.addLink(parent, hb_node, pcie_gbps, 250, LinkKind::Pcie, 16);
        }
        for (const auto& leaf : leaves) {
          int attach = parent;
          if (leaf.size() > 1 || leaves.size() > 1) {
            attach = t.addSwitch(fmt::format("pcie{}", pcie_count++), NodeKind::PcieSwitch, 0);
            t.addLink(attach, parent, pcie_gbps, 250, LinkKind::Pcie, 16);
          }
          for (int e : leaf) t.addLink(node_of[size_t(e)], attach, pcie_gbps, 250, LinkKind::Pcie, 16);
        }
      }
    }
  }
  validateTopology(t);
  return t;
}

namespace {

std::string readText(const std::string& path, const char* what) {
  // A folder opens as a stream that reads nothing ("empty file").
  if (std::filesystem::is_directory(path))
    throw TopologyError(fmt::format("{}: is a folder, not a file of {}", path, what));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TopologyError(fmt::format("{}: cannot open {}", path, what));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

std::string importNvidiaSmiFilesToYaml(const std::string& topo_path, const std::string& nvlink_path,
                                       const NvidiaSmiImportOptions& options) {
  NvidiaSmiMatrix m = parseNvidiaSmiTopo(readText(topo_path, "`nvidia-smi topo -m` output"), topo_path);
  std::optional<NvlinkStatus> nvlink;
  if (!nvlink_path.empty())
    nvlink = parseNvidiaSmiNvlink(readText(nvlink_path, "`nvidia-smi nvlink -s` output"), nvlink_path);
  Topology t = importNvidiaSmi(m, nvlink ? &*nvlink : nullptr, options);

  std::string head = fmt::format("# Imported from `nvidia-smi topo -m` ({})", topo_path);
  if (nvlink) head += fmt::format(" and `nvidia-smi nvlink -s` ({})", nvlink_path);
  head += ".\n";
  head += fmt::format("# GPU model {}: figures from the built-in table. NVLink speed per link: {}.\n",
                      t.devices[0].model, nvlink ? "from nvlink -s" : "assumed 25 GB/s");
  head += "# PCIe switches, host bridges and CPUs are synthesised from PIX/PXB/PHB/NODE/SYS; PCIe bandwidth\n"
          "# and all latencies are assumptions by GPU generation: edit them if you know better.\n";
  for (size_t i = 0; i < m.names.size(); ++i) {
    if (m.attributes[i].empty() && !m.nic_legend.count(m.names[i])) continue;
    head += fmt::format("#   {}:", m.names[i]);
    if (m.nic_legend.count(m.names[i])) head += " " + m.nic_legend.at(m.names[i]);
    for (const auto& [key, value] : m.attributes[i]) head += fmt::format(" {}={}", key, value);
    head += "\n";
  }
  std::string yaml = head + topologyToYaml(t);
  parseTopologyYaml(yaml, "imported topology");  // the output must load back
  return yaml;
}

}  // namespace tandem::sim
