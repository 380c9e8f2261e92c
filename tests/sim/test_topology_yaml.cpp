// Topology YAML: loading, errors with file:line, and round trips.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "simulator/topology/topology.h"
#include "simulator/topology/topology_yaml.h"

using namespace tandem::sim;

namespace {

const char* kSmall = R"(name: small
description: two GPUs and a switch
hosts:
  - name: h0
devices:
  - {name: g0, model: H100, host: h0}
  - {name: g1, model: H100, host: h0, sm_count: 100, fp8_flops: 1.5e15, best_gemm_fraction: 0.75}
switches:
  - {name: sw, kind: pcie_switch, host: h0}
links:
  - {a: g0, b: sw, kind: pcie, gbps: 25, latency_ns: 500}
  - {a: g1, b: sw, kind: pcie, lane_gbps: 2, lanes: 16, latency_ns: 400}
)";

// The message of the TopologyError that parsing `text` throws ("" if none).
std::string errorOf(const std::string& text, const std::string& source = "bad.yaml") {
  try {
    parseTopologyYaml(text, source);
  } catch (const TopologyError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a small topology loads with model defaults and overrides", "[topology]") {
  Topology t = parseTopologyYaml(kSmall, "small.yaml");
  REQUIRE(t.name == "small");
  REQUIRE(t.devices.size() == 2);
  REQUIRE(t.switches.size() == 1);
  REQUIRE(t.links.size() == 4);  // two bidirectional links
  CHECK(t.devices[0].bf16_flops == Approx(989e12));
  CHECK(t.devices[0].fp8_flops == Approx(1979e12));  // the model's
  CHECK(t.devices[1].fp8_flops == Approx(1.5e15));   // the file's
  CHECK(t.devices[0].sm_count == 132);
  CHECK(t.devices[1].sm_count == 100);
  CHECK(t.devices[0].best_gemm_fraction == Approx(0.801));  // the model's
  CHECK(t.devices[1].best_gemm_fraction == Approx(0.75));   // the file's
  CHECK_THAT(errorOf(std::string(kSmall).replace(std::string(kSmall).find("0.75"), 4, "1.5")),
             Catch::Contains("best_gemm_fraction must be in (0, 1]"));
  CHECK(t.nodeName(2) == "sw");
  CHECK(t.nodeKind(2) == NodeKind::PcieSwitch);
  CHECK(t.findNode("g1") == 1);
  CHECK(t.findNode("nope") == -1);
  // lane_gbps x lanes.
  CHECK(t.links[2].gbps == Approx(32.0));
  CHECK(t.links[2].lanes == 16);
  CHECK(t.links[3].src == 2);
  CHECK(t.links[3].dst == 1);
}

TEST_CASE("memory keys convert units", "[topology]") {
  std::string text = R"(devices:
  - {name: a, model: H200, memory_mib: 1024}
  - {name: b, model: H200, memory_gib: 2}
links:
  - {a: a, b: b, kind: nvlink, gbps: 10}
)";
  Topology t = parseTopologyYaml(text, "m.yaml");
  CHECK(t.devices[0].memory_bytes == 1024LL * 1024 * 1024);
  CHECK(t.devices[1].memory_bytes == 2LL * 1024 * 1024 * 1024);
  CHECK(t.hosts.size() == 1);  // created implicitly
  CHECK(t.name == "m");        // from the file name
}

TEST_CASE("topology errors name file, line and field", "[topology][errors]") {
  SECTION("missing endpoint") {
    std::string text = std::string(kSmall) + "  - {a: g0, kind: pcie, gbps: 3}\n";
    std::string e = errorOf(text);
    CHECK(e.find("bad.yaml:13:") == 0);
    CHECK(e.find("missing endpoint 'b'") != std::string::npos);
  }
  SECTION("unknown endpoint name") {
    std::string text = std::string(kSmall) + "  - {a: g0, b: gpu9, kind: pcie, gbps: 3}\n";
    std::string e = errorOf(text);
    CHECK(e.find("bad.yaml:13:") == 0);
    CHECK(e.find("unknown endpoint 'gpu9'") != std::string::npos);
  }
  SECTION("negative and zero bandwidth") {
    std::string e = errorOf(std::string(kSmall) + "  - {a: g0, b: g1, kind: nvlink, gbps: -5}\n");
    CHECK(e.find("bad.yaml:13:") == 0);
    CHECK(e.find("gbps must be > 0") != std::string::npos);
    e = errorOf(std::string(kSmall) + "  - {a: g0, b: g1, kind: nvlink, lane_gbps: 0, lanes: 4}\n");
    CHECK(e.find("lane_gbps must be > 0") != std::string::npos);
  }
  SECTION("a negative FP8 peak") {
    std::string text = std::string(kSmall).replace(std::string(kSmall).find("fp8_flops: 1.5e15"), 17, "fp8_flops: -1");
    std::string e = errorOf(text);
    CHECK(e.find("bad.yaml:7:") == 0);
    CHECK(e.find("field 'fp8_flops' must be >= 0") != std::string::npos);
  }
  SECTION("unknown key lists the allowed ones") {
    std::string text = std::string(kSmall) + "  - {a: g0, b: g1, kind: nvlink, bandwith: 5}\n";
    std::string e = errorOf(text);
    CHECK(e.find("bad.yaml:13:") == 0);
    CHECK(e.find("unknown key 'bandwith'") != std::string::npos);
    CHECK(e.find("allowed: a, b, gbps") != std::string::npos);
    e = errorOf("nmae: x\n" + std::string(kSmall));
    CHECK(e.find("bad.yaml:1:") == 0);
    CHECK(e.find("unknown key 'nmae'") != std::string::npos);
  }
  SECTION("duplicate names") {
    std::string text = R"(devices:
  - {name: g0, model: H100}
  - {name: g0, model: H100}
)";
    std::string e = errorOf(text);
    CHECK(e.find("bad.yaml:3:") == 0);
    CHECK(e.find("duplicate name 'g0'") != std::string::npos);
    std::string sw = std::string(kSmall).replace(std::string(kSmall).find("name: sw"), 8, "name: g1");
    CHECK(errorOf(sw).find("duplicate name 'g1'") != std::string::npos);
  }
  SECTION("wrong types") {
    std::string e = errorOf(std::string(kSmall) + "  - {a: g0, b: g1, kind: nvlink, gbps: fast}\n");
    CHECK(e.find("bad.yaml:13:") == 0);
    CHECK(e.find("gbps must be a number, got 'fast'") != std::string::npos);
    e = errorOf(std::string(kSmall) + "  - {a: g0, b: g1, kind: nvlink, gbps: 1, lanes: 1.5}\n");
    CHECK(e.find("lanes must be a whole number") != std::string::npos);
    e = errorOf(std::string(kSmall) + "  - {a: g0, b: g1, kind: nvlink, gbps: 1, bidirectional: maybe}\n");
    CHECK(e.find("bidirectional must be true or false") != std::string::npos);
    e = errorOf("devices: {name: g0}\n");
    CHECK(e.find("bad.yaml:1:") == 0);
    CHECK(e.find("devices must be a non-empty list") != std::string::npos);
  }
  SECTION("unknown kinds list the allowed values") {
    std::string e = errorOf(std::string(kSmall) + "  - {a: g0, b: g1, kind: carrier_pigeon, gbps: 1}\n");
    CHECK(e.find("unknown link kind 'carrier_pigeon'") != std::string::npos);
    CHECK(e.find("nvlink, pcie, infiniband, ethernet") != std::string::npos);
    std::string text = std::string(kSmall);
    text.replace(text.find("kind: pcie_switch"), 17, "kind: hub");
    e = errorOf(text);
    CHECK(e.find("bad.yaml:9:") == 0);
    CHECK(e.find("unknown switch kind 'hub'") != std::string::npos);
  }
  SECTION("disconnected GPU") {
    std::string text = R"(devices:
  - {name: g0, model: H100}
  - {name: g1, model: H100}
  - {name: g2, model: H100}
switches:
  - {name: sw, kind: nvswitch}
links:
  - {a: g0, b: sw, kind: nvlink, gbps: 100}
  - {a: g1, b: sw, kind: nvlink, gbps: 100}
)";
    std::string e = errorOf(text);
    CHECK(e.find("bad.yaml:") == 0);
    CHECK(e.find("cannot reach") != std::string::npos);
    CHECK(e.find("g2") != std::string::npos);
  }
  SECTION("GPUs only joined through another GPU are disconnected") {
    std::string text = R"(devices:
  - {name: g0, model: H100}
  - {name: g1, model: H100}
  - {name: g2, model: H100}
links:
  - {a: g0, b: g1, kind: nvlink, gbps: 100}
  - {a: g1, b: g2, kind: nvlink, gbps: 100}
)";
    std::string e = errorOf(text);
    CHECK(e.find("bad.yaml:2:") == 0);
    CHECK(e.find("'g0' cannot reach device 'g2'") != std::string::npos);
  }
  SECTION("one-way link leaves the reverse direction unreachable") {
    std::string text = R"(devices:
  - {name: g0, model: H100}
  - {name: g1, model: H100}
links:
  - {a: g0, b: g1, kind: nvlink, gbps: 100, bidirectional: false}
)";
    CHECK(errorOf(text).find("'g1' cannot reach device 'g0'") != std::string::npos);
  }
  SECTION("unknown model without figures") {
    std::string e = errorOf("devices:\n  - {name: g0, model: TPUv9}\n");
    CHECK(e.find("bad.yaml:2:") == 0);
    CHECK(e.find("missing field 'bf16_flops'") != std::string::npos);
    CHECK(e.find("H100") != std::string::npos);
  }
  SECTION("YAML syntax errors carry the line") {
    std::string e = errorOf("name: x\ndevices:\n  - {name: g0, model: H100\n");
    CHECK(e.find("bad.yaml:") == 0);
    CHECK(e.find("YAML syntax error") != std::string::npos);
  }
  SECTION("unknown host when hosts are listed") {
    std::string text = std::string(kSmall);
    text.replace(text.find("host: h0, sm_count"), 8, "host: h9");
    std::string e = errorOf(text);
    CHECK(e.find("bad.yaml:7:") == 0);
    CHECK(e.find("unknown host 'h9'") != std::string::npos);
  }
}

TEST_CASE("YAML round trip keeps every field", "[topology]") {
  Topology a = parseTopologyYaml(kSmall, "small.yaml");
  a.links.push_back({0, 1, 7.5, 123, LinkKind::Ethernet, 2});  // one-way extra link
  std::string text = topologyToYaml(a);
  Topology b = parseTopologyYaml(text, "again.yaml");
  REQUIRE(b.devices.size() == a.devices.size());
  REQUIRE(b.switches.size() == a.switches.size());
  REQUIRE(b.links.size() == a.links.size());
  CHECK(b.name == a.name);
  CHECK(b.description == a.description);
  for (size_t i = 0; i < a.devices.size(); ++i) {
    CHECK(b.devices[i].name == a.devices[i].name);
    CHECK(b.devices[i].bf16_flops == a.devices[i].bf16_flops);
    CHECK(b.devices[i].fp8_flops == a.devices[i].fp8_flops);
    CHECK(b.devices[i].memory_bytes == a.devices[i].memory_bytes);
    CHECK(b.devices[i].sm_count == a.devices[i].sm_count);
    CHECK(b.devices[i].best_gemm_fraction == a.devices[i].best_gemm_fraction);
    CHECK(b.devices[i].host == a.devices[i].host);
  }
  for (size_t i = 0; i < a.links.size(); ++i) {
    CHECK(b.links[i].src == a.links[i].src);
    CHECK(b.links[i].dst == a.links[i].dst);
    CHECK(b.links[i].gbps == a.links[i].gbps);
    CHECK(b.links[i].latency_ns == a.links[i].latency_ns);
    CHECK(b.links[i].kind == a.links[i].kind);
    CHECK(b.links[i].lanes == a.links[i].lanes);
  }
  CHECK(text.find("bidirectional: false") != std::string::npos);
}

TEST_CASE("saving writes atomically and replaces the old file", "[topology]") {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(TANDEM_BINARY_DIR) / "test_topology_yaml";
  fs::create_directories(dir);
  fs::path file = dir / "saved.yaml";
  Topology a = parseTopologyYaml(kSmall, "small.yaml");
  saveTopologyFile(a, file.string());
  Topology b = loadTopologyFile(file.string());
  CHECK(b.devices.size() == 2);
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir))
    entries += e.path().filename().string().find(".tmp") == std::string::npos;
  CHECK(entries == 1);
  CHECK_THROWS_AS(saveTopologyFile(a, (dir / "missing-folder" / "x.yaml").string()), TopologyError);
  CHECK_FALSE(fs::exists(dir / "missing-folder"));
  CHECK_THROWS_WITH(loadTopologyFile((dir / "absent.yaml").string()), Catch::Contains("cannot open"));
}

TEST_CASE("device_defaults and hosts sections are checked too", "[topology][errors]") {
  std::string e = errorOf("device_defaults: {model: H100, colour: red}\ndevices:\n  - {name: g0}\n");
  CHECK(e.find("bad.yaml:1:") == 0);
  CHECK(e.find("device_defaults: unknown key 'colour'") != std::string::npos);
  e = errorOf("hosts:\n  - name: a\n  - name: a\ndevices:\n  - {name: g0, model: H100, host: a}\n");
  CHECK(e.find("bad.yaml:3:") == 0);
  CHECK(e.find("duplicate host name 'a'") != std::string::npos);
  e = errorOf("hosts:\n  - name: a\n  - name: b\ndevices:\n  - {name: g0, model: H100}\n");
  CHECK(e.find("bad.yaml:5:") == 0);
  CHECK(e.find("devices[0].host: missing field") != std::string::npos);
  e = errorOf("devices:\n  - {name: g0, model: H100, memory_gib: 80, memory_mib: 1}\n");
  CHECK(e.find("only one of memory_bytes, memory_mib, memory_gib") != std::string::npos);
  e = errorOf("devices:\n  - {name: g0, model: H100, mig_fraction: 1.5}\n");
  CHECK(e.find("mig_fraction must be in (0, 1]") != std::string::npos);
  // Defaults apply to every device and an entry overrides them.
  Topology t = parseTopologyYaml("device_defaults: {model: H200, sm_count: 100}\ndevices:\n  - {name: a}\n"
                                 "  - {name: b, sm_count: 50}\nlinks:\n  - {a: a, b: b, kind: nvlink, gbps: 1}\n",
                                 "d.yaml");
  CHECK(t.devices[0].sm_count == 100);
  CHECK(t.devices[1].sm_count == 50);
  CHECK(t.devices[1].hbm_gbps == 4800);
}

TEST_CASE("a device's speed: read, range-checked, written back", "[topology]") {
  Topology t = parseTopologyYaml("device_defaults: {model: H200}\ndevices:\n  - {name: a}\n  - {name: b, speed: 0.95}\n"
                                 "links:\n  - {a: a, b: b, kind: nvlink, gbps: 450}\n",
                                 "s.yaml");
  CHECK(t.devices[0].speed == 1.0);
  CHECK(t.devices[1].speed == Approx(0.95));
  const std::string text = topologyToYaml(t);
  CHECK(text.find("speed: 0.95") != std::string::npos);
  CHECK(text.find("speed: 1") == std::string::npos);  // the default is not written
  CHECK(parseTopologyYaml(text, "again.yaml").devices[1].speed == Approx(0.95));
  std::string e = errorOf("devices:\n  - {name: g0, model: H100, speed: 0}\n");
  CHECK(e.find("bad.yaml:2:") == 0);
  CHECK(e.find("devices[0].speed must be in (0, 2]") != std::string::npos);
  e = errorOf("devices:\n  - {name: g0, model: H100, speed: fast}\n");
  CHECK(e.find("bad.yaml:2:") == 0);
}
