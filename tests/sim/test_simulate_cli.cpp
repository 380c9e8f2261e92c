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

// The whole text of a file the test wrote.
std::string fileText(const std::string& path) {
  std::string text;
  FILE* f = std::fopen(path.c_str(), "r");
  REQUIRE(f != nullptr);
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) text.append(buf.data(), n);
  std::fclose(f);
  return text;
}

// A file of the build folder holding `text` (a calibration, say); its path.
std::string textFile(const std::string& name, const std::string& text) {
  const std::string path = tempPath(name);
  FILE* f = std::fopen(path.c_str(), "w");
  REQUIRE(f != nullptr);
  std::fputs(text.c_str(), f);
  std::fclose(f);
  return path;
}

// A small one-GPU job simulated under the calibration `hardware` (the
// machine the runs "ran" on), once on one compute stream and once with the
// weight-gradient stream: the two trace files.
std::pair<std::string, std::string> streamRuns(const std::string& prefix, const std::string& hardware) {
  const std::string hw = textFile(prefix + "_hw.yaml", hardware);
  const std::string job =
      "default --set parallel.data_parallel=1 --set model.layers=4 --set model.hidden=512 --set model.heads=8 "
      "--set model.seq_len=512 --set training.micro_batch=8 --topology h200x2-nv18 --calibration " + hw;
  const std::string alone = tempPath(prefix + "_alone.sqlite"), shared = tempPath(prefix + "_shared.sqlite");
  REQUIRE(run("simulate " + job + " --set schedule.weight_gradient_stream=false --out " + alone).status == 0);
  REQUIRE(run("simulate " + job + " --out " + shared).status == 0);
  return {alone, shared};
}

}  // namespace

TEST_CASE("tandem simulate writes traces that tandem report reads", "[cli]") {
  REQUIRE(std::filesystem::exists(tandemBin()));
  struct Case { std::string args; int ranks; };
  for (const Case& c : {Case{"default --set parallel.data_parallel=2 --topology h200x2-nv18", 2},
                        Case{"default --topology dgx-h200", 8}}) {
    INFO(c.args);
    const std::string db = tempPath("cli_simulate_" + std::to_string(c.ranks) + ".sqlite");
    Output sim = run("simulate " + c.args + " --calibration none --out " + db + " --json");
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

TEST_CASE("tandem simulate --kernel-sharing picks how kernels side by side divide the GPU", "[cli]") {
  REQUIRE(std::filesystem::exists(tandemBin()));
  // One GPU with the weight-gradient stream, kernels side by side at 1.3
  // times the throughput of one: the two models line the same work up
  // differently, so their steps differ; each is deterministic, and the
  // flag overrides what a calibration file says.
  const std::string plain = textFile("cli_sharing.yaml", "version: 1\nkernel_overlap_efficiency: 1.3\n");
  const std::string says_fair =
      textFile("cli_sharing_fair.yaml", "version: 1\nkernel_overlap_efficiency: 1.3\nkernel_sharing: fair\n");
  const std::string job = "default --set parallel.data_parallel=1 --set model.layers=4 --topology h200x2-nv18 --json";
  auto stepOf = [&](const std::string& extra) {
    const Output out = run("simulate " + job + extra);
    INFO(out.text);
    REQUIRE(out.status == 0);
    return nlohmann::json::parse(out.text).at("step_ns").get<int64_t>();
  };
  const int64_t first = stepOf(" --calibration " + plain + " --kernel-sharing first_holds");
  const int64_t fair = stepOf(" --calibration " + plain + " --kernel-sharing fair");
  CHECK(stepOf(" --calibration " + plain) == first);  // the default
  CHECK(fair != first);
  CHECK(stepOf(" --calibration " + says_fair) == fair);
  CHECK(stepOf(" --calibration " + says_fair + " --kernel-sharing first_holds") == first);
  // A value it does not know: a clear error naming the allowed ones, no file.
  const std::string out = tempPath("cli_sharing_bad.sqlite");
  const Output bad = run("simulate " + job + " --kernel-sharing even --out " + out);
  CHECK(bad.status != 0);
  CHECK(bad.text.find("first_holds") != std::string::npos);
  CHECK(!std::filesystem::exists(out));
}

TEST_CASE("tandem calibrate --topology refits the kernel overlap efficiency by simulation", "[cli]") {
  REQUIRE(std::filesystem::exists(tandemBin()));
  // The "hardware": kernels of two compute streams side by side at 1.3
  // times the throughput of one. One run on one compute stream, one with
  // the weight-gradient stream, of a small one-GPU job.
  const auto [alone, shared] = streamRuns("cli_overlap", "version: 1\nkernel_overlap_efficiency: 1.3\n");
  const std::string cal = tempPath("cli_overlap_cal.yaml");
  const Output ok = run("calibrate " + alone + ":1 " + shared + ":1 --out " + cal + " --topology h200x2-nv18");
  INFO(ok.text);
  REQUIRE(ok.status == 0);
  const std::string key = "kernel overlap efficiency ";
  const size_t at = ok.text.find(key);
  REQUIRE(at != std::string::npos);
  CHECK(std::stod(ok.text.substr(at + key.size(), 6)) == Approx(1.3).margin(0.02));
  CHECK(ok.text.find("by simulation on h200x2-nv18") != std::string::npos);
  // Simulated traces carry no launch geometry, and the output says so.
  CHECK(ok.text.find("kernel geometry: none in the traces") != std::string::npos);
  CHECK(std::filesystem::exists(cal));
  // A topology that does not exist: one line, exit 1, no file.
  const std::string bad = tempPath("cli_overlap_bad.yaml");
  const Output err = run("calibrate " + alone + ":1 " + shared + ":1 --out " + bad + " --topology no-such-machine");
  CHECK(err.status == 1);
  CHECK(err.text.find("no-such-machine") != std::string::npos);
  CHECK(!std::filesystem::exists(bad));
}

TEST_CASE("tandem calibrate --refit-overlap chooses the efficiency again and keeps every other line", "[cli]") {
  REQUIRE(std::filesystem::exists(tandemBin()));
  // The "hardware" as above, under today's replay (fixed_grid_guests); the
  // calibration to refit says 0.9 and carries a comment and another key.
  const auto [alone, shared] = streamRuns(
      "cli_refit", "version: 1\nkernel_overlap_efficiency: 1.3\nfixed_grid_guests: true\nlaunch_overhead_ns: 0\n");
  const std::string start = textFile(
      "cli_refit_start.yaml", "# my profile\nversion: 1\nkernel_overlap_efficiency: 0.9\nlaunch_overhead_ns: 0\n");
  const std::string cal = tempPath("cli_refit_cal.yaml");
  const Output ok =
      run("calibrate --refit-overlap " + start + " " + shared + ":1 --topology h200x2-nv18 --out " + cal);
  INFO(ok.text);
  REQUIRE(ok.status == 0);
  CHECK(ok.text.find("kernel overlap efficiency 0.900 -> 1.30") != std::string::npos);
  const std::string yaml = fileText(cal);
  CHECK(yaml.rfind("# cli_refit_start.yaml with kernel_overlap_efficiency refitted", 0) == 0);
  CHECK(yaml.find("\n# my profile\nversion: 1\nkernel_overlap_efficiency: 1.3") != std::string::npos);
  CHECK(yaml.find("launch_overhead_ns: 0\n") != std::string::npos);
  CHECK(yaml.find("fixed_grid_guests: true") != std::string::npos);
  CHECK(yaml.find("0.9000 before") != std::string::npos);
  // Runs without a second compute stream, no topology, or a sweep besides:
  // one line, exit 1, no file.
  const std::string bad = tempPath("cli_refit_bad.yaml");
  const Output none = run("calibrate --refit-overlap " + start + " " + alone + ":1 --topology h200x2-nv18 --out " + bad);
  CHECK(none.status == 1);
  CHECK(none.text.find("second compute stream") != std::string::npos);
  const Output no_topo = run("calibrate --refit-overlap " + start + " " + shared + ":1 --out " + bad);
  CHECK(no_topo.status == 1);
  CHECK(no_topo.text.find("needs --topology") != std::string::npos);
  const Output both =
      run("calibrate --refit-overlap " + start + " " + shared + ":1 --topology h200x2-nv18 --sweep smoke --out " + bad);
  CHECK(both.status == 1);
  CHECK(both.text.find("takes no --sweep") != std::string::npos);
  CHECK(!std::filesystem::exists(bad));
}

TEST_CASE("tandem calibrate --multi-rank-from keeps another calibration's multi-rank keys", "[cli]") {
  REQUIRE(std::filesystem::exists(tandemBin()));
  const std::string job =
      "default --set model.layers=2 --set model.hidden=256 --set model.heads=4 --set model.seq_len=256 "
      "--set training.micro_batch=4 --topology h200x2-nv18";
  const std::string one = tempPath("cli_keep_one_rank.sqlite"), two = tempPath("cli_keep_two_ranks.sqlite");
  REQUIRE(run("simulate " + job + " --set parallel.data_parallel=1 --out " + one).status == 0);
  REQUIRE(run("simulate " + job + " --set parallel.data_parallel=2 --out " + two).status == 0);
  const std::string base = std::string(TANDEM_SOURCE_DIR) + "/resources/calibration/h200x2-nv18.yaml";

  // One-rank runs: the compute keys fitted, the collectives kept.
  const std::string cal = tempPath("cli_keep_cal.yaml");
  const Output ok = run("calibrate " + one + ":1 --out " + cal + " --multi-rank-from " + base);
  INFO(ok.text);
  REQUIRE(ok.status == 0);
  CHECK(ok.text.find("multi-rank keys kept from") != std::string::npos);
  const std::string yaml = fileText(cal);
  CHECK(yaml.find("collectives:") != std::string::npos);
  CHECK(yaml.find("comm_slowdown: ") != std::string::npos);
  // Named by its file name, not the folder it was read from.
  CHECK(yaml.find("# kept from h200x2-nv18.yaml") != std::string::npos);
  CHECK(yaml.find(TANDEM_SOURCE_DIR) == std::string::npos);
  CHECK(yaml.find("whose header reads:") != std::string::npos);
  // ... and the result simulates a two-GPU job.
  const Output sim = run("simulate " + job + " --set parallel.data_parallel=2 --calibration " + cal);
  INFO(sim.text);
  CHECK(sim.status == 0);

  // A base without multi-rank keys, and runs with multi-rank keys of their
  // own: one line, exit 1, no file.
  const std::string plain = textFile("cli_keep_plain.yaml", "version: 1\nlaunch_overhead_ns: 500\n");
  const std::string bad = tempPath("cli_keep_bad.yaml");
  const Output none = run("calibrate " + one + ":1 --out " + bad + " --multi-rank-from " + plain);
  CHECK(none.status == 1);
  CHECK(none.text.find("no multi-rank keys") != std::string::npos);
  CHECK(!std::filesystem::exists(bad));
  const Output own = run("calibrate " + two + ":1 --out " + bad + " --multi-rank-from " + base);
  CHECK(own.status == 1);
  CHECK(own.text.find("multi-rank keys of their own") != std::string::npos);
  CHECK(!std::filesystem::exists(bad));
  // A base that is not a calibration: its file and line, before any fit.
  const Output broken = run("calibrate " + one + ":1 --out " + bad + " --multi-rank-from " + one);
  CHECK(broken.status == 1);
  CHECK(!std::filesystem::exists(bad));
}

TEST_CASE("tandem simulate warns when the calibration was measured on another GPU", "[cli]") {
  REQUIRE(std::filesystem::exists(tandemBin()));
  const std::string path =
      textFile("cli_gpu_h200.yaml", "version: 1\ngpu: \"NVIDIA H200\"\nlaunch_overhead_ns: 2000\n");
  const std::string job = "simulate default --set parallel.data_parallel=1 --set model.layers=2 --calibration " + path;
  const Output other = run(job + " --topology dgx-h100");
  INFO(other.text);
  CHECK(other.status == 0);  // a what-if may want it: it still runs
  CHECK(other.text.find("tandem simulate: warning: calibration " + path +
                        " was measured on NVIDIA H200, but the topology dgx-h100 has H100 GPUs") != std::string::npos);
  CHECK(other.text.find("step time") != std::string::npos);
  const Output same = run(job + " --topology h200x2-nv18");
  CHECK(same.status == 0);
  CHECK(same.text.find("warning") == std::string::npos);
  // --json keeps it (the warning line comes first on stderr, merged here).
  const Output js = run(job + " --topology dgx-h100 --json");
  REQUIRE(js.status == 0);
  const nlohmann::json doc = nlohmann::json::parse(js.text.substr(js.text.find('{')));
  REQUIRE(doc.at("warnings").size() == 1);
  CHECK(doc.at("warnings")[0].get<std::string>().find("has H100 GPUs") != std::string::npos);
  const Output js_same = run(job + " --topology h200x2-nv18 --json");
  REQUIRE(js_same.status == 0);
  CHECK(nlohmann::json::parse(js_same.text).at("warnings").empty());
}

TEST_CASE("tandem simulate warns when the calibration did not measure the plan's shapes", "[cli][coverage]") {
  REQUIRE(std::filesystem::exists(tandemBin()));
  const std::string job = "simulate default --set parallel.data_parallel=1 --set training.micro_batch=16 --topology "
                          "h200x2-nv18 --calibration h200x2-nv18";
  // The measured shapes: nothing to say.
  const Output measured = run(job);
  CHECK(measured.status == 0);
  CHECK(measured.text.find("warning") == std::string::npos);
  // The LM head in 16 groups of 1024 tokens was among the calibration's
  // runs; in 32 groups of 512 tokens it is below the smallest it measured.
  const Output sixteen = run(job + " --set schedule.lm_head_chunks=16");
  CHECK(sixteen.status == 0);
  CHECK(sixteen.text.find("warning") == std::string::npos);
  const Output split = run(job + " --set schedule.lm_head_chunks=32 --json");
  INFO(split.text);
  REQUIRE(split.status == 0);
  CHECK(split.text.find("tandem simulate: warning: the calibration did not measure 128 of the plan's 391 kernel "
                        "tasks, ") != std::string::npos);
  const nlohmann::json doc = nlohmann::json::parse(split.text.substr(split.text.find('{')));
  REQUIRE(doc.at("warnings").size() == 1);
  CHECK(doc.at("warnings")[0].get<std::string>().find("matmul m=512 n=50304 k=768") != std::string::npos);
  // The simulated run keeps it: a warning stat that tandem report shows.
  const std::string db = tempPath("cli_coverage.sqlite");
  std::filesystem::remove(db);
  REQUIRE(run(job + " --set schedule.lm_head_chunks=32 --out " + db).status == 0);
  const Output report = run("report " + db + " --json");
  REQUIRE(report.status == 0);
  const nlohmann::json report_doc = nlohmann::json::parse(report.text);
  bool found = false;
  for (const auto& st : report_doc.at("stats"))
    if (st.at("name") == "sim.calibration_unmeasured_tasks") {
      found = true;
      CHECK(st.at("value") == 128);
      CHECK(st.at("severity") == "warning");
      CHECK(st.at("description").get<std::string>().find("did not measure 128") != std::string::npos);
    }
  CHECK(found);
  std::filesystem::remove(db);
}

TEST_CASE("tandem simulate --calibration takes the name of a calibration that comes with tandem", "[cli]") {
  REQUIRE(std::filesystem::exists(tandemBin()));
  const std::string job = "simulate default --set parallel.data_parallel=1 --set model.layers=2 --topology "
                          "h200x2-nv18 --json --calibration ";
  auto stepOf = [&](const std::string& calibration) {
    const Output out = run(job + calibration);
    INFO(out.text);
    REQUIRE(out.status == 0);
    return nlohmann::json::parse(out.text).at("step_ns").get<int64_t>();
  };
  const std::string file = std::string(TANDEM_SOURCE_DIR) + "/resources/calibration/h200x2-nv18.yaml";
  const int64_t by_file = stepOf(file);
  CHECK(stepOf("h200x2-nv18") == by_file);
  CHECK(stepOf("h200x2-nv18.yaml") == by_file);
  const Output missing = run(job + "no-such-calibration");
  CHECK(missing.status != 0);
  CHECK(missing.text.find("no-such-calibration") != std::string::npos);
}

TEST_CASE("tandem simulate warns when the plan does not fit the topology's GPUs", "[cli][memory]") {
  REQUIRE(std::filesystem::exists(tandemBin()));
  const std::string job =
      "simulate gpt2-1.5b --calibration none --set training.micro_batch=64 --set parallel.data_parallel=8 "
      "--topology ";
  // 127.55 GiB per rank with the executor's buffers and reserve: an H200
  // holds it, an H100 does not.
  const Output fits = run(job + "dgx-h200");
  CHECK(fits.status == 0);
  CHECK(fits.text.find("warning") == std::string::npos);
  const Output json = run(job + "dgx-h100 --json");
  INFO(json.text);
  REQUIRE(json.status == 0);  // the step is still simulated
  CHECK(json.text.find("tandem simulate: warning: rank 0 needs 127.55 GiB on its H100") != std::string::npos);
  const nlohmann::json doc = nlohmann::json::parse(json.text.substr(json.text.find('{')));
  REQUIRE(doc.at("warnings").size() == 1);
  CHECK(doc.at("warnings")[0].get<std::string>().find("short by 47.91 GiB") != std::string::npos);
  CHECK(doc.at("step_ns").get<int64_t>() > 0);
  // Kept with the simulated run, for tandem report and the GUI.
  const std::string db = tempPath("cli_memory_short.sqlite");
  std::filesystem::remove(db);
  REQUIRE(run(job + "dgx-h100 --out " + db).status == 0);
  const Output report = run("report " + db + " --json");
  REQUIRE(report.status == 0);
  const nlohmann::json report_doc = nlohmann::json::parse(report.text);
  bool found = false;
  for (const auto& st : report_doc.at("stats"))
    if (st.at("name") == "sim.memory_short_mib") {
      found = true;
      CHECK(st.at("value") == 49056);  // 47.91 GiB in MiB, rounded up
      CHECK(st.at("severity") == "warning");
    }
  CHECK(found);
  std::filesystem::remove(db);
}

TEST_CASE("tandem simulate takes the profile shipped for the topology's GPU, or says it has none", "[cli]") {
  REQUIRE(std::filesystem::exists(tandemBin()));
  const std::string job = "simulate default --set parallel.data_parallel=1 --set model.layers=2 --topology ";
  // An H200 machine: the shipped H200 profile, named, by default and as "auto".
  const Output h200 = run(job + "h200x2-nv18");
  INFO(h200.text);
  REQUIRE(h200.status == 0);
  CHECK(h200.text.find("kernel times     h200.yaml (shipped for the H200)") != std::string::npos);
  // Where the kernel time comes from, beside it.
  CHECK(h200.text.find("\n                 kernel time ") != std::string::npos);
  CHECK(h200.text.find("warning") == std::string::npos);
  const Output json = run(job + "h200x2-nv18 --json");
  const nlohmann::json doc = nlohmann::json::parse(json.text);
  CHECK(doc.at("calibration") == "h200.yaml (shipped for the H200)");
  CHECK(doc.at("kernel_time_sources").get<std::string>().rfind("kernel time ", 0) == 0);
  const std::string file = std::string(TANDEM_SOURCE_DIR) + "/resources/calibration/h200.yaml";
  const Output by_file = run(job + "h200x2-nv18 --json --calibration " + file);
  CHECK(nlohmann::json::parse(by_file.text).at("step_ns") == doc.at("step_ns"));
  // The H100's is derived from it.
  CHECK(run(job + "dgx-h100").text.find("h100.yaml (shipped for the H100)") != std::string::npos);
  // At a sequence longer than the sweep's longest, it says how much of the
  // kernel time it read outside the measured shapes' range, and where.
  const Output long_seq = run(job + "dgx-h100 --set model.seq_len=131072 --set training.micro_batch=1");
  INFO(long_seq.text);
  CHECK(long_seq.text.find("% outside the measured shapes' range in some number, most of it attention_bwd b=1 "
                           "t=131072 c=768 h=12 (b x kv, t)") != std::string::npos);
  // An A100 has none: the roofline, and a warning that says so.
  const Output a100 = run(job + "hgx-a100");
  CHECK(a100.status == 0);
  CHECK(a100.text.find("warning: no calibration comes with tandem for the GPUs of hgx-a100") != std::string::npos);
  CHECK(a100.text.find("kernel times     roofline defaults") != std::string::npos);
  // none asks for the roofline without a word.
  const Output none = run(job + "h200x2-nv18 --calibration none");
  CHECK(none.text.find("kernel times     roofline defaults") != std::string::npos);
  CHECK(none.text.find("kernel time ") == std::string::npos);
  CHECK(none.text.find("warning") == std::string::npos);
}
