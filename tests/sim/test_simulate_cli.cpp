// `tandem simulate` end to end: GPT-2 124M data parallel 2 on h200x2-nv18 and
// data parallel 8 on dgx-h200 write traces that `tandem report` reads; bad
// input fails with one line and leaves no file.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace {

std::string tandemBin() {
  if (const char* env = std::getenv("TANDEM_BIN")) return env;
  return std::string(TANDEM_BINARY_DIR) + "/cli/tandem";
}

struct Output {
  int status = -1;
  std::string text;
};

Output run(const std::string& args) {
  Output out;
  const std::string cmd = tandemBin() + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.text.append(buf.data(), n);
  const int rc = pclose(p);
  out.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

std::string tempPath(const std::string& name) {
  const std::string path = std::string(TANDEM_BINARY_DIR) + "/" + name;
  std::filesystem::remove(path);
  return path;
}

}  // namespace

TEST_CASE("tandem simulate writes traces that tandem report reads", "[cli]") {
  REQUIRE(std::filesystem::exists(tandemBin()));
  struct Case { std::string args; int ranks; };
  for (const Case& c : {Case{"default --set parallel.data_parallel=2 --topology h200x2-nv18", 2},
                        Case{"default --topology dgx-h200", 8}}) {
    INFO(c.args);
    const std::string db = tempPath("cli_simulate_" + std::to_string(c.ranks) + ".sqlite");
    Output sim = run("simulate " + c.args + " --out " + db + " --json");
    REQUIRE(sim.status == 0);
    auto j = nlohmann::json::parse(sim.text);
    CHECK(j.at("world_size").get<int>() == c.ranks);
    CHECK(j.at("ranks").size() == size_t(c.ranks));
    const int64_t step_ns = j.at("step_ns").get<int64_t>();
    CHECK(step_ns > 0);
    for (const auto& r : j.at("ranks")) {
      CHECK(r.at("overlap_ns").get<int64_t>() + r.at("exposed_comm_ns").get<int64_t>() ==
            r.at("comm_ns").get<int64_t>());
      CHECK(r.at("peak_memory_bytes").get<int64_t>() > 0);
    }
    Output rep = run("report " + db + " --json");
    REQUIRE(rep.status == 0);
    auto rj = nlohmann::json::parse(rep.text);
    CHECK(rj.dump().find("simulated") != std::string::npos);
    CHECK(rj.dump().find(std::to_string(step_ns)) != std::string::npos);
  }
}

TEST_CASE("tandem simulate fails with one clear line and no output file", "[cli]") {
  REQUIRE(std::filesystem::exists(tandemBin()));
  const std::string db = tempPath("cli_simulate_bad.sqlite");
  Output unknown = run("simulate default --topology no-such-machine --out " + db);
  CHECK(unknown.status != 0);
  CHECK_THAT(unknown.text, Catch::Contains("no-such-machine"));
  CHECK(std::count(unknown.text.begin(), unknown.text.end(), '\n') == 1);
  Output small = run("simulate default --topology h200x2-nv18 --out " + db);
  CHECK(small.status != 0);
  CHECK_THAT(small.text, Catch::Contains("8 ranks") && Catch::Contains("2 devices"));
  Output bad_sym = run("simulate default --topology dgx-h200 --symmetric maybe");
  CHECK(bad_sym.status != 0);
  CHECK_THAT(bad_sym.text, Catch::Contains("allowed: auto, on, off"));
  CHECK_FALSE(std::filesystem::exists(db));
}
