// `tandem plan` on bad job specs: exit non-zero, exactly one error line that
// names the file, line and field, and no output file left behind.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace fs = std::filesystem;

namespace {

struct Result {
  int exit_code;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path scratchDir() {
  // Removed when the test program exits.
  struct Dir {
    fs::path path = fs::temp_directory_path() / ("tandem-plan-cli-" + std::to_string(::getpid()));
    Dir() { fs::create_directories(path); }
    ~Dir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  static Dir dir;
  return dir.path;
}

Result runTandem(const std::string& args) {
  const char* bin = std::getenv("TANDEM_BIN");
  REQUIRE(bin != nullptr);
  const fs::path dir = scratchDir();
  const std::string cmd = std::string(bin) + " " + args + " >" + (dir / "out.txt").string() + " 2>" +
                          (dir / "err.txt").string();
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir / "out.txt"), slurp(dir / "err.txt")};
}

fs::path writeJob(const std::string& name, const std::string& text) {
  const fs::path p = scratchDir() / name;
  std::ofstream(p) << text;
  return p;
}

const char* kGood = R"(name: small
model:
  vocab: 64
  seq_len: 16
  layers: 2
  hidden: 32
  heads: 4
training:
  micro_batch: 2
  precision: fp32
parallel:
  data_parallel: 2
recompute:
  policy: none
)";

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto pos = text.find(from);
  REQUIRE(pos != std::string::npos);
  return text.replace(pos, from.size(), to);
}

}  // namespace

TEST_CASE("tandem plan accepts the good spec and writes the JSON", "[cli][plan]") {
  const fs::path job = writeJob("good.yaml", kGood);
  const fs::path json = scratchDir() / "good.json";
  fs::remove(json);
  const Result r = runTandem("plan " + job.string() + " --json " + json.string());
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(fs::exists(json));
  CHECK(r.out.find("parameters") != std::string::npos);
}

TEST_CASE("tandem plan rejects bad specs with one line naming file, line and field", "[cli][plan]") {
  struct Bad {
    const char* what;
    std::string text;
    const char* field;   // expected in the message
    const char* where;   // "FILE:LINE" suffix expected after the file name
  };
  const std::vector<Bad> cases = {
      {"unknown key", replaced(kGood, "  heads: 4\n", "  heads: 4\n  hedas: 2\n"), "model.hedas", ":8:"},
      {"wrong type", replaced(kGood, "layers: 2", "layers: two"), "model.layers", ":5:"},
      {"out of range", replaced(kGood, "micro_batch: 2", "micro_batch: 0"), "training.micro_batch", ":9:"},
      {"heads do not divide hidden", replaced(kGood, "heads: 4", "heads: 5"), "heads", ":"},
      {"bad precision", replaced(kGood, "precision: fp32", "precision: fp16"), "training.precision", ":10:"},
      {"bad recompute policy", replaced(kGood, "policy: none", "policy: some"), "recompute.policy", ":14:"},
      {"layer override out of range", kGood + std::string("  layers:\n    7: full\n"), "recompute.layers", ":"},
      {"zero data parallel", replaced(kGood, "data_parallel: 2", "data_parallel: 0"), "parallel.data_parallel", ":12:"},
      {"malformed YAML", replaced(kGood, "vocab: 64", "vocab: [64"), "", ":"},
      {"top-level sequence", "- 1\n- 2\n", "", ":"},
      {"negative learning rate", replaced(kGood, "precision: fp32", "precision: fp32\n  lr: -1"),
       "training.lr", ":11:"},
      {"token file missing", kGood + std::string("data:\n  source: tokens\n  path: /nonexistent/tokens.bin\n"),
       "data.path", ":"},
  };
  int index = 0;
  for (const Bad& bad : cases) {
    const std::string name = "bad" + std::to_string(index++) + ".yaml";
    const fs::path job = writeJob(name, bad.text);
    const fs::path json = scratchDir() / (name + ".json");
    fs::remove(json);
    const Result r = runTandem("plan " + job.string() + " --json " + json.string());
    INFO(bad.what << ": " << r.err);
    CHECK(r.exit_code != 0);
    CHECK(r.err.rfind("tandem: error: ", 0) == 0);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.err.find(name + bad.where) != std::string::npos);
    CHECK(r.err.find(bad.field) != std::string::npos);
    CHECK(r.out.empty());
    CHECK_FALSE(fs::exists(json));
  }
}

TEST_CASE("tandem plan rejects a missing file, an empty file and bad overrides", "[cli][plan]") {
  Result r = runTandem("plan /nonexistent/job.yaml");
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("/nonexistent/job.yaml") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);

  const fs::path empty = writeJob("empty.yaml", "");
  r = runTandem("plan " + empty.string());
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("empty.yaml") != std::string::npos);

  const fs::path good = writeJob("good2.yaml", kGood);
  r = runTandem("plan " + good.string() + " --set training.micro_batchx=3");
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("--set training.micro_batchx=3") != std::string::npos);
  r = runTandem("plan " + good.string() + " --set model.hidden=abc");
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("model.hidden") != std::string::npos);
}

TEST_CASE("tandem plan --fit names what fits a memory budget", "[cli][plan][fit]") {
  const std::string gpt2 = "plan gpt2-124m-dp8 --set training.micro_batch=16 --set parallel.data_parallel=1";
  // 8.14 GiB of arena, 0.08 of executor buffers and 0.5 kept free, as
  // `tandem run` counts them (engine/memory/gpu_footprint.h). With 7 GiB free the
  // split LM head alone (6.8 GiB of arena) no longer fits: selective
  // recompute needs it too.
  Result r = runTandem(gpt2 + " --fit 7");
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("fit        7.00 GiB free per rank: the plan needs 8.71 GiB (arena 8.14 + executor 0.08 + "
                   "reserve 0.50); choices that fit (arena, executor and reserve):\n"
                   "           recompute.policy=none training.micro_batch=8 training.grad_accum=2 (5.6 GiB)\n"
                   "           recompute.policy=selective training.micro_batch=16 schedule.lm_head_chunks=16 "
                   "(5.8 GiB)\n"
                   "           recompute.policy=full training.micro_batch=16 (4.8 GiB)\n") != std::string::npos);
  // The summary says the same without --fit.
  CHECK(r.out.find("           a GPU run needs 8.71 GiB free per rank: arena + executor 79.58 MiB (GEMM "
                   "workspaces 64.00 MiB, scratch 15.38 MiB) + reserve 512.00 MiB\n") != std::string::npos);
  // 8.71 GiB is the boundary: just above it the job fits, just below it not.
  r = runTandem(gpt2 + " --fit 8.72");
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("the plan fits as it is: 8.71 GiB (arena 8.14 + executor 0.08 + reserve 0.50)") !=
        std::string::npos);
  r = runTandem(gpt2 + " --fit 8.70");
  CHECK(r.out.find("the plan needs 8.71 GiB") != std::string::npos);
  r = runTandem(gpt2 + " --fit 0.01");
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("no recompute policy, micro-batch or LM head split fits") != std::string::npos);
  // A budget that is not a positive number is refused on one line.
  for (const char* bad : {"0", "-3", "nan", "1e400", "''"}) {
    r = runTandem(gpt2 + " --fit " + bad);
    INFO(bad);
    CHECK(r.exit_code != 0);
    CHECK(r.err.find("--fit: takes a number greater than 0 or a topology") != std::string::npos);
    CHECK(r.out.empty());
  }
  // Neither a number nor a topology: one line, and no summary before it.
  r = runTandem(gpt2 + " --fit lots");
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("tandem: error: --fit: expected a number of GiB or a topology: 'lots' is neither a preset") !=
        std::string::npos);
  CHECK(r.out.empty());
}

TEST_CASE("tandem plan --fit takes the smallest GPU of a topology", "[cli][plan][fit]") {
  const std::string large = "plan gpt2-1.5b --set training.micro_batch=64";
  // 127.55 GiB per rank with the executor's buffers and the reserve: more
  // than an H100 has, less than an H200.
  Result r = runTandem(large + " --fit dgx-h100");
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("fit        dgx-h100's H100 (79.65 GiB) per rank: the plan needs 127.55 GiB (arena 126.96 + "
                   "executor 0.10 + reserve 0.50); choices that fit (arena, executor and reserve):\n"
                   "           recompute.policy=none training.micro_batch=16 training.grad_accum=8 (63.6 GiB)\n") !=
        std::string::npos);
  r = runTandem(large + " --fit dgx-h200");
  CHECK(r.out.find("fit        dgx-h200's H200 (140.40 GiB) per rank: the plan fits as it is: 127.55 GiB") !=
        std::string::npos);
  // A MIG slice is the GPU there.
  r = runTandem(large + " --fit dgx-h100:mig=1g.10gb");
  CHECK(r.out.find("dgx-h100:mig=1g.10gb's H100 MIG 1g.10gb (9.96 GiB) per rank") != std::string::npos);
}

TEST_CASE("tandem train reaches the synthetic data's entropy on the tiny job", "[cli][train]") {
  const Result r = runTandem("train tiny --backend cpu --log-every 100");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const auto pos = r.out.find("; gap ");
  REQUIRE(pos != std::string::npos);
  const double gap = std::stod(r.out.substr(pos + 6));
  CHECK(gap < 0.05);
  CHECK(gap > -0.05);  // below the entropy would mean the loss is measured wrong
}

TEST_CASE("tandem train runs pipeline and tensor parallel jobs; tandem run refuses them on one line",
          "[cli][train][pp][tp]") {
  // The tiny job's 2 blocks in 2 stages of 2-way tensor parallelism (with
  // the sequence split), 4 micro-batches: the same losses as on one rank.
  const Result one = runTandem("train tiny --backend cpu --steps 4 --set training.grad_accum=4");
  const Result split = runTandem(
      "train tiny --backend cpu --steps 4 --set training.grad_accum=4 --set parallel.pipeline_parallel=2 "
      "--set parallel.tensor_parallel=2 --set parallel.sequence_parallel=true");
  INFO(one.out << one.err << split.out << split.err);
  REQUIRE(one.exit_code == 0);
  REQUIRE(split.exit_code == 0);
  CHECK_THAT(split.out, Catch::Contains("4 ranks"));
  auto lastLoss = [](const std::string& out) {
    const auto pos = out.find("step     4/4  loss ");
    REQUIRE(pos != std::string::npos);
    return out.substr(pos + 19, 6);
  };
  CHECK(lastLoss(split.out) == lastLoss(one.out));
  // Four blocks in 2 stages of 2 interleaved chunks.
  const Result four = runTandem("train tiny --backend cpu --steps 4 --set training.grad_accum=4 --set model.layers=4");
  const Result chunked = runTandem(
      "train tiny --backend cpu --steps 4 --set training.grad_accum=4 --set model.layers=4 "
      "--set parallel.pipeline_parallel=2 --set parallel.pipeline_chunks=2");
  INFO(four.out << four.err << chunked.out << chunked.err);
  REQUIRE(four.exit_code == 0);
  REQUIRE(chunked.exit_code == 0);
  CHECK(lastLoss(chunked.out) == lastLoss(four.out));
  const Result interleaved = runTandem(
      "plan tiny --set model.layers=4 --set parallel.pipeline_parallel=2 --set parallel.pipeline_chunks=2 "
      "--set training.grad_accum=4");
  CHECK_THAT(interleaved.out, Catch::Contains("2 stages of 2 chunks of 1 blocks, interleaved 1F1B over 4 micro-batches"));
  const Result plan = runTandem("plan tiny --set parallel.tensor_parallel=2 --set parallel.sequence_parallel=true");
  INFO(plan.out << plan.err);
  CHECK(plan.exit_code == 0);
  CHECK_THAT(plan.out, Catch::Contains("split over 2 consecutive ranks, the residual stream's tokens too (1/2 each)"));

  // A Llama job: planned and trained on the CPU reference. Llama 2 7B's
  // heads are 128 wide, which the GPU kernels take in bf16 only: `run`
  // refuses an fp32 one in one line (or, without a GPU, says so).
  const Result llama = runTandem(
      "train tiny --backend cpu --steps 30 --set model.family=llama --set model.kv_heads=2 "
      "--set model.mlp_ratio=2.75 --set model.tied_embeddings=false");
  INFO(llama.out << llama.err);
  REQUIRE(llama.exit_code == 0);
  CHECK_THAT(llama.out, Catch::Contains("step    30/30"));
  // `tandem plan` says so on a machine without a GPU too.
  const Result llama_plan = runTandem("plan llama2-7b --set training.precision=fp32");
  CHECK(llama_plan.exit_code == 0);
  CHECK_THAT(llama_plan.out, Catch::Contains("tandem run refuses it: attention heads 128 wide"));
  CHECK_THAT(runTandem("plan llama-124m").out, !Catch::Contains("refuses"));
  const Result seven = runTandem("plan llama2-7b");
  CHECK_THAT(seven.out, !Catch::Contains("refuses"));
  CHECK_THAT(seven.out, !Catch::Contains("sharded over one data-parallel rank"));
  // On one rank its ZeRO-3 gathers from itself: `plan` says how to run it without.
  CHECK_THAT(runTandem("plan llama2-7b --set parallel.data_parallel=1").out,
             Catch::Contains("note: parameters sharded over one data-parallel rank") &&
                 Catch::Contains("--set parallel.shard_parameters=false"));
  const Result llama_run = runTandem("run llama2-7b --gpus 1 --set training.precision=fp32");
  INFO(llama_run.err);
  CHECK(llama_run.exit_code != 0);
  CHECK(std::count(llama_run.err.begin(), llama_run.err.end(), '\n') == 1);
  CHECK((llama_run.err.find("attention heads 128 wide") != std::string::npos ||
         llama_run.err.find("built without CUDA support") != std::string::npos));

  // Context parallelism is planned and simulated, not run on GPUs yet.
  const Result run = runTandem("run tiny --set parallel.context_parallel=2");
  INFO(run.err);
  CHECK(run.exit_code != 0);
  CHECK(run.out.empty());
  const bool refused = run.err.find("context parallelism (parallel.context_parallel 2") != std::string::npos ||
                       run.err.find("built without CUDA support") != std::string::npos;
  CHECK(refused);
  CHECK(std::count(run.err.begin(), run.err.end(), '\n') == 1);
}
