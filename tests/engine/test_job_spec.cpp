// Job spec: the shipped files, defaults, --set overrides, canonical YAML and
// the one-line error messages (file, line, field, allowed values).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/numerics/init.h"
#include "engine/spec/job.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {

const fs::path kJobsDir = fs::path(TANDEM_SOURCE_DIR) / "resources" / "jobs";

std::string readText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Jobs compare equal apart from where they were read from.
JobSpec withoutSource(JobSpec j) {
  j.source.clear();
  return j;
}

std::string errorOf(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    parseJob(yaml, "bad.yaml", overrides);
  } catch (const SpecError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("every shipped job file parses and is compiled in byte for byte", "[job]") {
  std::vector<std::string> names = builtinJobNames();
  int files = 0;
  for (const auto& entry : fs::directory_iterator(kJobsDir)) {
    if (entry.path().extension() != ".yaml") continue;
    ++files;
    const std::string stem = entry.path().stem().string();
    INFO("resources/jobs/" << stem << ".yaml");
    JobSpec job = loadJobFile(entry.path().string());
    CHECK(job.name == stem);
    CHECK(job.source == entry.path().string());
    // Every shipped file is compiled in (engine/CMakeLists.txt lists them).
    CHECK(std::string(builtinJobText(stem)) == readText(entry.path()));
    CHECK(std::find(names.begin(), names.end(), stem) != names.end());
  }
  CHECK(files == 9);
  CHECK(names.size() == 9);
  CHECK(builtinJobText("no-such-job").empty());
}

TEST_CASE("defaultJob and tinyJob equal their files and hold the documented values", "[job]") {
  JobSpec d = defaultJob();
  CHECK(d.source == "<embedded>");
  CHECK(withoutSource(d) == withoutSource(loadJobFile((kJobsDir / "gpt2-124m-dp8.yaml").string())));
  CHECK(d.name == "gpt2-124m-dp8");
  CHECK(d.model.family == ModelFamily::GPT2);
  CHECK(d.model.vocab == 50304);
  CHECK(d.model.seq_len == 1024);
  CHECK(d.model.layers == 12);
  CHECK(d.model.hidden == 768);
  CHECK(d.model.heads == 12);
  CHECK(d.model.kv_heads == 0);
  CHECK(d.model.mlp_ratio == 4.0);
  CHECK(d.model.tied_embeddings);
  CHECK(d.training.micro_batch == 16);
  CHECK(d.training.grad_accum == 1);
  CHECK(d.training.steps == 10);
  CHECK(d.training.lr == 6e-4);
  CHECK(d.training.min_lr == 6e-5);
  CHECK(d.training.warmup_steps == 0);
  CHECK(d.training.weight_decay == 0.1);
  CHECK(d.training.beta1 == 0.9);
  CHECK(d.training.beta2 == 0.95);
  CHECK(d.training.eps == 1e-8);
  CHECK(d.training.grad_clip == 1.0);
  CHECK(d.training.precision == Precision::BF16);
  CHECK(d.training.seed == 1337);
  CHECK(d.parallel.data_parallel == 8);
  CHECK(d.comm.bucket_mib == 25.0);
  CHECK(d.comm.first_bucket_mib == 1.0);
  CHECK(d.recompute.policy == RecomputePolicy::None);
  CHECK(d.recompute.per_layer.empty());
  CHECK(d.data.source == "synthetic");
  CHECK(d.data.path.empty());
  CHECK(d.data.markov_order == 2);
  CHECK(d.data.branching == 4);
  CHECK(d.globalBatch() == 128);
  CHECK(d.tokensPerStep() == 128 * 1024);

  JobSpec t = tinyJob();
  CHECK(withoutSource(t) == withoutSource(loadJobFile((kJobsDir / "gpt2-tiny.yaml").string())));
  CHECK(t.model.vocab == 64);
  CHECK(t.model.seq_len == 32);
  CHECK(t.model.layers == 2);
  CHECK(t.model.hidden == 64);
  CHECK(t.model.heads == 4);
  CHECK(t.training.micro_batch == 16);
  CHECK(t.parallel.data_parallel == 1);
  CHECK(t.training.precision == Precision::FP32);
  // A bigram process and lr 1e-2 let 600 CPU steps reach the data's entropy.
  CHECK(t.training.lr == 1e-2);
  CHECK(t.training.min_lr == 1e-3);
  CHECK(t.training.warmup_steps == 20);
  CHECK(t.training.steps == 600);
  CHECK(t.training.weight_decay == 0.0);
  CHECK(t.training.grad_clip == 1.0);
  CHECK(t.data.markov_order == 1);
  CHECK(t.data.branching == 4);
  CHECK(t.comm.bucket_mib == 0.05);
}

TEST_CASE("missing fields take the defaults of engine/spec/job.h", "[job]") {
  JobSpec parsed = parseJob("model: {layers: 3}\n", "partial.yaml");
  JobSpec expected;
  expected.model.layers = 3;
  CHECK(parsed.model == expected.model);
  CHECK(parsed.training == expected.training);
  CHECK(parsed.parallel == expected.parallel);
  CHECK(parsed.comm == expected.comm);
  CHECK(parsed.recompute == expected.recompute);
  CHECK(parsed.data == expected.data);
  CHECK(parsed.name == "job");
  // An empty section is the same as a missing one.
  CHECK(withoutSource(parseJob("training:\nmodel: {layers: 3}\n", "x")) == withoutSource(parsed));
}

TEST_CASE("the llama family is accepted by the parser", "[job]") {
  JobSpec j = parseJob("model: {family: llama, kv_heads: 4}\n", "llama.yaml");
  CHECK(j.model.family == ModelFamily::Llama);
  CHECK(j.model.kv_heads == 4);
  CHECK(toString(ModelFamily::Llama) == "llama");
  CHECK(toString(ModelFamily::GPT2) == "gpt2");
}

TEST_CASE("--set overrides change the tree before validation", "[job]") {
  const std::string text = readText(kJobsDir / "gpt2-124m-dp8.yaml");
  JobSpec j = parseJob(text, "gpt2-124m-dp8.yaml",
                       {"training.micro_batch=32", "recompute.policy=full", "recompute.layers.3=full",
                        "recompute.layers.4=selective", "parallel.data_parallel=2", "training.lr=1e-3"});
  CHECK(j.training.micro_batch == 32);
  CHECK(j.recompute.policy == RecomputePolicy::Full);
  CHECK(j.recompute.per_layer ==
        std::map<int, RecomputePolicy>{{3, RecomputePolicy::Full}, {4, RecomputePolicy::Selective}});
  CHECK(j.parallel.data_parallel == 2);
  CHECK(j.training.lr == 1e-3);
  CHECK(j.globalBatch() == 64);
  // The stored text is the effective spec, so the hash changes with it.
  CHECK(j.yaml.find("micro_batch: 32") != std::string::npos);
  CHECK(j.content_hash != defaultJob().content_hash);

  SECTION("the last override of a key wins, and replaces the file's entry") {
    JobSpec k = parseJob("recompute:\n  layers:\n    3: none\n", "r.yaml",
                         {"recompute.layers.3=selective", "recompute.layers.3=full"});
    CHECK(k.recompute.per_layer == std::map<int, RecomputePolicy>{{3, RecomputePolicy::Full}});
  }
  SECTION("an override may create a section the file lacks") {
    JobSpec k = parseJob("name: bare\n", "r.yaml", {"comm.bucket_mib=0.5", "data.branching=2"});
    CHECK(k.comm.bucket_mib == 0.5);
    CHECK(k.data.branching == 2);
  }
  SECTION("an override value that breaks a cross-field rule is named as the location") {
    CHECK(errorOf("name: a\n", {"model.heads=7"}) ==
          "--set model.heads=7: model.heads: model.heads 7 does not divide model.hidden 768 "
          "(allowed: heads dividing hidden)");
  }
}

TEST_CASE("canonical YAML round-trips every field", "[job]") {
  std::vector<JobSpec> jobs;
  for (const std::string& name : builtinJobNames()) jobs.push_back(parseJob(std::string(builtinJobText(name)), name));
  // Every field away from its default, and strings that need quoting.
  JobSpec odd = parseJob(
      "name: \"odd: job #1 'quoted' \\\"x\\\"\"\n"
      "model: {family: llama, vocab: 300, seq_len: 77, layers: 5, hidden: 96, heads: 6, kv_heads: 3, "
      "mlp_ratio: 2.6666666666666665, tied_embeddings: false}\n"
      "training: {micro_batch: 3, grad_accum: 7, steps: 11, lr: 0.1, min_lr: 1e-300, warmup_steps: 9, "
      "weight_decay: 0.30000000000000004, beta1: 0.5, beta2: 0.999, eps: 3e-12, grad_clip: 0, "
      "precision: fp32, seed: 18446744073709551615}\n"
      "parallel: {data_parallel: 64}\n"
      "comm: {bucket_mib: 0.1, first_bucket_mib: 123456.789}\n"
      "recompute: {policy: selective, layers: {0: full, 4: none}}\n"
      "schedule: {weight_gradient_stream: false, fuse_bias_gradients: true, optimizer_beside_forward: true, "
      "residual_in_gemm: false}\n"
      "data: {source: synthetic, path: \"tokens/some file.bin\", markov_order: 3, branching: 300}\n",
      "odd.yaml");
  CHECK(odd.name == "odd: job #1 'quoted' \"x\"");
  CHECK(odd.training.seed == 18446744073709551615ull);
  CHECK(odd.data.path == "tokens/some file.bin");
  CHECK_FALSE(odd.schedule.residual_in_gemm);
  jobs.push_back(odd);
  // The parallelism fields away from their defaults.
  jobs.push_back(parseJob("parallel: {data_parallel: 2, tensor_parallel: 2, sequence_parallel: true, "
                          "pipeline_parallel: 2, pipeline_chunks: 2, pipeline_layers: [3, 2, 4, 3], "
                          "shard_parameters: true}\ntraining: {grad_accum: 4}\n",
                          "parallel.yaml"));
  CHECK(jobs.back().parallel.sequence_parallel);
  CHECK(jobs.back().parallel.pipeline_chunks == 2);
  jobs.push_back(parseJob("parallel: {tensor_parallel: 2, sequence_parallel: true}\nschedule: {tp_comm_overlap: true}\n",
                          "overlap.yaml"));
  CHECK(jobs.back().schedule.tp_comm_overlap);
  jobs.push_back(parseJob("parallel: {data_parallel: 2, context_parallel: 4, tensor_parallel: 2}\n", "cp.yaml"));
  CHECK(jobs.back().parallel.context_parallel == 4);
  CHECK(jobs.back().worldSize() == 16);
  CHECK(jobs.back().yaml.find("context_parallel: 4") != std::string::npos);
  jobs.push_back(parseJob("schedule: {attention_kernel: flash2, elementwise: eager}\n"
                          "recompute: {policy: alternate_gemms}\n",
                          "torch.yaml"));
  CHECK(jobs.back().schedule.attention_kernel == AttentionKernel::Flash2);
  CHECK(jobs.back().schedule.elementwise == ElementwiseKernels::Eager);
  CHECK(jobs.back().recompute.policy == RecomputePolicy::AlternateGemms);
  CHECK(jobs.front().yaml.find("attention_kernel") == std::string::npos);
  jobs.push_back(parseJob("recompute: {policy: full, rerun: needed}\n", "needed.yaml"));
  CHECK(jobs.back().recompute.rerun == FullRerun::Needed);
  jobs.push_back(parseJob("training: {precision: fp8, fp8_scaling: current}\n", "cs.yaml"));
  CHECK(jobs.back().training.fp8_scaling == Fp8Scaling::Current);
  CHECK(jobs.front().yaml.find("fp8_scaling") == std::string::npos);
  jobs.push_back(parseJob("schedule: {projections: separate}\n", "separate.yaml"));
  CHECK(jobs.back().schedule.projections == Projections::Separate);
  CHECK(jobs.front().yaml.find("projections") == std::string::npos);
  CHECK(jobs.front().recompute.rerun == FullRerun::Block);
  CHECK(jobs.front().yaml.find("rerun") == std::string::npos);
  // A field added after the first format is written only away from its
  // default: jobs planned before it keep their text and hash.
  CHECK(jobs.front().yaml.find("context_parallel") == std::string::npos);
  for (const JobSpec& j : jobs) {
    INFO(j.yaml);
    CHECK(j.yaml == jobToYaml(j));
    JobSpec again = parseJob(j.yaml, j.source);
    CHECK(again == j);
    CHECK(jobToYaml(again) == j.yaml);
  }
}

TEST_CASE("canonical YAML quotes strings that YAML would read as something else", "[job]") {
  for (const std::string name : {"tab\there", "line\nbreak", "\xc3\xa9t\xc3\xa9", "bell\x07", "true", "null", "~",
                                 "123", "- dash", "a: b", "#hash", " lead", "back\\slash", "plain-name_1.0"}) {
    JobSpec j = defaultJob();
    j.name = name;
    j.data.path = name;
    refreshJobText(j);
    INFO(j.yaml);
    JobSpec k = parseJob(j.yaml, j.source);
    CHECK(k.name == name);
    CHECK(k.data.path == name);
    CHECK(k == j);
  }
  CHECK(defaultJob().yaml.rfind("name: gpt2-124m-dp8\n", 0) == 0);  // plain when it is safe
}

TEST_CASE("the content hash is FNV-1a 64 of the canonical text", "[job]") {
  // Published FNV-1a 64 test vectors.
  CHECK(fnv1a64("", 0) == 0xcbf29ce484222325ull);
  CHECK(fnv1a64("a", 1) == 0xaf63dc4c8601ec8cull);
  CHECK(fnv1a64("foobar", 6) == 0x85944171f73967e8ull);

  JobSpec d = defaultJob();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a64(d.yaml.data(), d.yaml.size())));
  CHECK(d.content_hash == hex);
  // Flow or block style, comments and field order do not change the hash.
  JobSpec flow = parseJob("data: {branching: 4}\nname: gpt2-124m-dp8 # c\nparallel: {data_parallel: 8}\n", "f");
  JobSpec block = parseJob("name: gpt2-124m-dp8\nparallel:\n  data_parallel: 8\n", "b");
  CHECK(flow.content_hash == block.content_hash);

  SECTION("refreshJobText follows a change made in code") {
    JobSpec changed = d;
    changed.training.micro_batch = 4;
    refreshJobText(changed);
    CHECK(changed.content_hash != d.content_hash);
    CHECK(withoutSource(parseJob(changed.yaml, "<embedded>")) == withoutSource(changed));
  }
}

TEST_CASE("RecomputeSpec::forLayer applies per-layer overrides", "[job]") {
  JobSpec j = parseJob("recompute: {policy: selective, layers: {1: full, 2: none}}\n", "r.yaml");
  CHECK(j.recompute.forLayer(0) == RecomputePolicy::Selective);
  CHECK(j.recompute.forLayer(1) == RecomputePolicy::Full);
  CHECK(j.recompute.forLayer(2) == RecomputePolicy::None);
  CHECK(j.recompute.forLayer(11) == RecomputePolicy::Selective);
}

namespace {

// A job spec that must fail, and what its error must say.
struct BadSpec {
  std::string yaml;
  std::vector<std::string> overrides;
  std::string expected_prefix;  // "FILE:LINE: FIELD: "
  std::string expected_detail;  // the problem and the allowed values
};

// Each error is one line: where the bad value came from, the problem and
// the allowed values.
void checkBadSpecs(const std::vector<BadSpec>& cases) {
  for (const BadSpec& c : cases) {
    INFO("input:\n" << c.yaml);
    const std::string message = errorOf(c.yaml, c.overrides);
    INFO("message: " << message);
    CHECK(message.rfind(c.expected_prefix, 0) == 0);
    CHECK(message.find(c.expected_detail) != std::string::npos);
    CHECK(message.find("(allowed: ") != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
}

}  // namespace

TEST_CASE("bad values and unknown keys fail with one line naming file, line, field and allowed values", "[job]") {
  const std::vector<BadSpec> cases = {
      {"name: a\ntraining:\n  micro_bach: 3\n", {}, "bad.yaml:3: training.micro_bach: ",
       "unknown key, did you mean 'micro_batch'? (allowed: micro_batch, grad_accum"},
      {"name: a\ntraining:\n  micro_batch: abc\n", {}, "bad.yaml:3: training.micro_batch: ",
       "expected an integer, got 'abc' (allowed: integers >= 1)"},
      {"training:\n  steps: \"16\"\n", {}, "bad.yaml:2: training.steps: ",
       "expected an integer, got the quoted string '16'"},
      {"name: a\n\ntraining:\n  micro_batch: 0\n", {}, "bad.yaml:4: training.micro_batch: ",
       "value 0 is out of range (allowed: integers >= 1)"},
      {"training: {beta2: 1.0}\n", {}, "bad.yaml:1: training.beta2: ", "out of range (allowed: numbers in [0, 1))"},
      {"training:\n  precision: fp16\n", {}, "bad.yaml:2: training.precision: ",
       "'fp16' is not a precision (allowed: fp32, bf16, fp8)"},
      {"recompute:\n  policy: most\n", {}, "bad.yaml:2: recompute.policy: ",
       "'most' is not a recompute policy (allowed: none, selective, full, attention, alternate_gemms)"},
      {"schedule:\n  attention_kernel: flash3\n", {}, "bad.yaml:2: schedule.attention_kernel: ",
       "'flash3' is not an attention kernel (allowed: fused, flash2)"},
      {"training:\n  fp8_scaling: block\n", {}, "bad.yaml:2: training.fp8_scaling: ",
       "'block' is not a way to scale FP8 GEMM inputs (allowed: delayed, current)"},
      {"schedule:\n  projections: split\n", {}, "bad.yaml:2: schedule.projections: ",
       "'split' is not a way to run the projections (allowed: fused, separate)"},
      {"recompute:\n  rerun: some\n", {}, "bad.yaml:2: recompute.rerun: ",
       "'some' is not what full recompute runs again (allowed: block, needed)"},
      {"schedule:\n  elementwise: lazy\n", {}, "bad.yaml:2: schedule.elementwise: ",
       "'lazy' is not a way to run the elementwise ops (allowed: fused, eager)"},
      {"schedule:\n  materialized_attention: true\n  attention_kernel: flash2\n", {},
       "bad.yaml:3: schedule.attention_kernel: ", "FlashAttention-2 is a fused attention kernel"},
      {"data:\n  source: web\n", {}, "bad.yaml:2: data.source: ",
       "'web' is not a data source (allowed: synthetic, tokens)"},
      {"comm:\n  bucket_mib: 0\n", {}, "bad.yaml:2: comm.bucket_mib: ", "out of range (allowed: numbers > 0 (MiB))"},
      {"parallel: {tensor_parallel: 0}\n", {}, "bad.yaml:1: parallel.tensor_parallel: ",
       "value 0 is out of range (allowed: integers >= 1 dividing model.heads, the MLP width and model.vocab)"},
      {"parallel: {tensor_parallel: 2, sequence_parallel: 2}\n", {}, "bad.yaml:1: parallel.sequence_parallel: ",
       "expected a boolean"},
      {"parallel: {pipeline_parallel: 2, pipeline_chunks: 0}\n", {}, "bad.yaml:1: parallel.pipeline_chunks: ",
       "value 0 is out of range"},
      {"parallel: {pipeline_parallel: 2, pipeline_layers: [12, 0]}\n", {}, "bad.yaml:1: parallel.pipeline_layers[1]: ",
       "value 0 is out of range"},
      {"parallel: {pipeline_parallel: 2, pipeline_layers: 6}\n", {}, "bad.yaml:1: parallel.pipeline_layers: ",
       "expected a list, got"},
      {"parallel: {pipeline_parallel: 0}\n", {}, "bad.yaml:1: parallel.pipeline_parallel: ",
       "value 0 is out of range (allowed: integers >= 1 dividing model.layers)"},
      {"parallel:\n  shard_parameters: all\n", {}, "bad.yaml:2: parallel.shard_parameters: ",
       "expected a boolean, got 'all' (allowed: true, false)"},
      {"schedule:\n  residual_in_gemm: 1\n", {}, "bad.yaml:2: schedule.residual_in_gemm: ",
       "expected a boolean, got '1' (allowed: true, false)"},
      {"schedule:\n  lm_head_chunks: 0\n", {}, "bad.yaml:2: schedule.lm_head_chunks: ",
       "value 0 is out of range (allowed: integers >= 1)"},
      {"parallel: {data_parallel: -2}\n", {}, "bad.yaml:1: parallel.data_parallel: ", "value -2 is out of range"},
      {"model: {tied_embeddings: maybe}\n", {}, "bad.yaml:1: model.tied_embeddings: ",
       "expected a boolean, got 'maybe' (allowed: true, false)"},
      {"model:\n  family: bert\n", {}, "bad.yaml:2: model.family: ",
       "'bert' is not a model family (allowed: gpt2, llama)"},
      {"training: {seed: -1}\n", {}, "bad.yaml:1: training.seed: ", "expected an unsigned integer, got '-1'"},
      {"model:\n  layers: 9000\n", {}, "bad.yaml:2: model.layers: ",
       "value 9000 is out of range (allowed: integers from 1 to 8192)"},
  };
  checkBadSpecs(cases);
}

TEST_CASE("malformed YAML and bad --set overrides fail with one line naming the file or the override", "[job]") {
  const std::vector<BadSpec> cases = {
      {"name: a\nmodel:\n  layers: [1, 2\n", {}, "bad.yaml:", "yaml: malformed YAML: "},
      {"", {}, "bad.yaml:1: job: ", "the job is empty (allowed: a YAML mapping with keys name, model"},
      {"- a\n- b\n", {}, "bad.yaml:1: job: ", "expected a mapping at the top level, got a sequence"},
      {"name: a\ntraining: {}\nname: b\n", {}, "bad.yaml:3: name: ", "duplicate key (first on line 1)"},
      {"name: a\ntraining: 5\n", {}, "bad.yaml:2: training: ",
       "expected a mapping, got '5' (allowed: a mapping with keys"},
      {"name: a\n", {"training.micro_batch=abc"}, "--set training.micro_batch=abc: training.micro_batch: ",
       "expected an integer, got 'abc' (allowed: integers >= 1)"},
      {"name: a\n", {"training.micro_bach=3"}, "--set training.micro_bach=3: training.micro_bach: ",
       "unknown key, did you mean 'micro_batch'?"},
      {"name: a\n", {"nokey"}, "--set nokey: nokey: ", "expected KEY=VALUE"},
      {"name: a\n", {"name.first=x"}, "--set name.first=x: name: ", "not a mapping"},
  };
  checkBadSpecs(cases);
  // The malformed YAML is reported at the line yaml-cpp stopped on (1-based).
  CHECK(errorOf("name: a\nmodel:\n  layers: [1, 2\n").rfind("bad.yaml:4: yaml:", 0) == 0);
}

TEST_CASE("model, training, schedule, recompute and data checks fail at the field to change", "[job]") {
  const std::vector<BadSpec> cases = {
      {"model:\n  hidden: 768\n  heads: 7\n", {}, "bad.yaml:3: model.heads: ",
       "model.heads 7 does not divide model.hidden 768 (allowed: heads dividing hidden)"},
      {"model:\n  hidden: 100\n", {}, "bad.yaml:2: model.hidden: ", "model.heads 12 does not divide model.hidden 100"},
      {"training:\n  lr: 1e-3\n  min_lr: 0.01\n", {}, "bad.yaml:3: training.min_lr: ",
       "is above training.lr 0.001 (allowed: 0 <= min_lr <= lr)"},
      {"recompute:\n  layers:\n    12: full\n", {}, "bad.yaml:3: recompute.layers.12: ",
       "layer 12 does not exist, the model has 12 layers (allowed: layer indices from 0 to 11)"},
      {"data:\n  source: tokens\n", {}, "bad.yaml:2: data.source: ", "data.source tokens needs a token file"},
      {"data:\n  source: tokens\n  path: /no/such/file.bin\n", {}, "bad.yaml:3: data.path: ",
       "token file '/no/such/file.bin' does not exist"},
      {"model: {vocab: 64}\ndata: {branching: 65}\n", {}, "bad.yaml:2: data.branching: ",
       "data.branching 65 exceeds model.vocab 64 (allowed: integers from 1 to model.vocab)"},
      {"model: {family: llama, hidden: 60, heads: 4}\n", {}, "bad.yaml:1: model.hidden: ",
       "the head width model.hidden / model.heads = 15 is odd; rotary position embeddings rotate pairs of channels"},
      {"model: {heads: 4, hidden: 64}\n", {"model.kv_heads=2"}, "--set model.kv_heads=2: model.kv_heads: ",
       "GPT-2 has no grouped-query attention (model.kv_heads 2 of 4 heads)"},
      {"training: {micro_batch: 2}\nschedule:\n  lm_head_chunks: 3\n", {}, "bad.yaml:3: schedule.lm_head_chunks: ",
       "3 groups do not split a micro-batch's 2048 tokens (training.micro_batch x model.seq_len)"},
      {"model: {seq_len: 12}\nschedule: {lm_head_chunks: 8}\n", {"training.micro_batch=4"},
       "--set training.micro_batch=4: training.micro_batch: ", "into equal groups of a multiple of 8 tokens"},
      {"model:\n  hidden: 768\n  heads: 12\n", {"model.hidden=100"}, "--set model.hidden=100: model.hidden: ",
       "model.heads 12 does not divide model.hidden 100"},
  };
  checkBadSpecs(cases);
}

TEST_CASE("sharding settings that do not fit together fail at the field to change", "[job]") {
  const std::vector<BadSpec> cases = {
      {"parallel: {data_parallel: 2, shard_optimizer: true}\nschedule:\n  optimizer_beside_forward: true\n", {},
       "bad.yaml:3: schedule.optimizer_beside_forward: ", "needs an unsharded optimizer"},
      {"parallel: {data_parallel: 4, shard_parameters: true}\nschedule:\n  optimizer_beside_forward: true\n", {},
       "bad.yaml:3: schedule.optimizer_beside_forward: ", "needs an unsharded optimizer"},
      {"parallel: {data_parallel: 2, shard_parameters: true}\ncomm:\n  gather_embedding_gradient: true\n", {},
       "bad.yaml:3: comm.gather_embedding_gradient: ", "is not planned with sharded gradients"},
      {"parallel: {data_parallel: 2, shard_gradients: true}\ncomm:\n  gather_embedding_gradient: true\n", {},
       "bad.yaml:3: comm.gather_embedding_gradient: ",
       "(allowed: comm.gather_embedding_gradient: false, or parallel.shard_gradients: false)"},
      {"parallel: {data_parallel: 2, shard_gradients: true}\nschedule:\n  optimizer_beside_forward: true\n", {},
       "bad.yaml:3: schedule.optimizer_beside_forward: ", "needs an unsharded optimizer"},
      {"parallel: {data_parallel: 2, shard_optimizer: true}\ncomm:\n  reduce_every_micro_batch: true\n", {},
       "bad.yaml:3: comm.reduce_every_micro_batch: ", "needs sharded gradients"},
      {"parallel: {data_parallel: 8, shard_parameters: true, shard_group_size: 3}\n", {},
       "bad.yaml:1: parallel.shard_group_size: ", "shard groups of 3 ranks do not split data_parallel 8"},
      {"parallel: {data_parallel: 8, shard_group_size: 4}\n", {}, "bad.yaml:1: parallel.shard_group_size: ",
       "hybrid sharding) need parallel.shard_parameters"},
      {"parallel: {data_parallel: 8, shard_parameters: true, shard_group_size: 1}\n", {},
       "bad.yaml:1: parallel.shard_group_size: ", "(allowed: 0 (all ranks), or integers >= 2 dividing data_parallel)"},
  };
  checkBadSpecs(cases);
}

TEST_CASE("tensor and sequence parallel splits the model cannot take, and too many ranks, fail at the field", "[job]") {
  const std::vector<BadSpec> cases = {
      {"model: {heads: 12}\nparallel: {tensor_parallel: 8}\n", {}, "bad.yaml:2: parallel.tensor_parallel: ",
       "tensor_parallel 8 does not divide model.heads 12 (each rank computes whole attention heads)"},
      {"model: {heads: 8, hidden: 64, mlp_ratio: 1.1}\n", {"parallel.tensor_parallel=8"},
       "--set parallel.tensor_parallel=8: parallel.tensor_parallel: ", "does not divide the MLP width 70"},
      {"model: {vocab: 50257}\nparallel: {tensor_parallel: 2}\n", {}, "bad.yaml:2: parallel.tensor_parallel: ",
       "tensor_parallel 2 does not divide model.vocab 50257 (the embedding and the LM head are split by vocabulary)"},
      {"parallel: {tensor_parallel: 2}\n", {"schedule.lm_head_chunks=4"},
       "--set schedule.lm_head_chunks=4: schedule.lm_head_chunks: ", "not planned with a vocabulary split"},
      {"parallel: {tensor_parallel: 2, data_parallel: 2, shard_optimizer: true}\ncomm: {gather_embedding_gradient: true}\n",
       {}, "bad.yaml:2: comm.gather_embedding_gradient: ", "not planned with the embedding split"},
      {"parallel: {data_parallel: 1073741824, tensor_parallel: 4}\n", {}, "bad.yaml:1: parallel.data_parallel: ",
       "data_parallel x context_parallel x tensor_parallel x pipeline_parallel = 4.29497e+09 ranks, more than rank numbers can hold"},
      {"model: {family: llama, heads: 8, hidden: 64, kv_heads: 2}\nparallel: {tensor_parallel: 4}\n", {},
       "bad.yaml:2: parallel.tensor_parallel: ", "tensor_parallel 4 does not divide the 2 key/value heads"},
      {"parallel: {tensor_parallel: 2}\nschedule: {tp_comm_overlap: true}\n", {}, "bad.yaml:2: schedule.tp_comm_overlap: ",
       "needs parallel.sequence_parallel (allowed: schedule.tp_comm_overlap: false, or parallel.sequence_parallel: true)"},
      {"parallel: {tensor_parallel: 2}\ncomm: {pipeline_scatter_gather: true}\n", {},
       "bad.yaml:2: comm.pipeline_scatter_gather: ", "needs pipeline_parallel >= 2 and tensor_parallel >= 2"},
      {"model: {layers: 4}\nparallel: {tensor_parallel: 2, pipeline_parallel: 2, sequence_parallel: true}\n"
       "comm: {pipeline_scatter_gather: true}\n",
       {}, "bad.yaml:3: comm.pipeline_scatter_gather: ", "already sends its own tokens only"},
      {"parallel: {sequence_parallel: true}\n", {}, "bad.yaml:1: parallel.sequence_parallel: ",
       "needs tensor_parallel >= 2 (allowed: parallel.sequence_parallel: false, or parallel.tensor_parallel >= 2)"},
      {"model: {seq_len: 7}\ntraining: {micro_batch: 3}\nparallel: {tensor_parallel: 2}\n",
       {"parallel.sequence_parallel=true"},
       "--set parallel.sequence_parallel=true: parallel.sequence_parallel: ",
       "tensor_parallel 2 does not divide a micro-batch's 21 tokens"},
      {"model: {seq_len: 12}\nparallel: {context_parallel: 4}\n", {}, "bad.yaml:2: parallel.context_parallel: ",
       "context_parallel 4 splits each sequence into 8 equal chunks"},
      {"parallel: {context_parallel: 0}\n", {}, "bad.yaml:1: parallel.context_parallel: ",
       "(allowed: integers >= 1 such that 2 x context_parallel divides model.seq_len)"},
      {"parallel: {context_parallel: 2, shard_optimizer: true}\ncomm: {gather_embedding_gradient: true}\n", {},
       "bad.yaml:2: comm.gather_embedding_gradient: ", "not planned with context parallelism"},
      {"model: {seq_len: 12}\ntraining: {micro_batch: 1}\nparallel: {context_parallel: 2, tensor_parallel: 4}\n",
       {"parallel.sequence_parallel=true"}, "--set parallel.sequence_parallel=true: parallel.sequence_parallel: ",
       "tensor_parallel 4 does not divide a micro-batch's 6 tokens (training.micro_batch x model.seq_len / "
       "parallel.context_parallel)"},
      {"parallel: {context_parallel: 2, data_parallel: 3, shard_parameters: true, shard_group_size: 4}\n", {},
       "bad.yaml:1: parallel.shard_group_size: ", "do not split the 6 replicas (data_parallel x context_parallel)"},
  };
  checkBadSpecs(cases);
}

TEST_CASE("pipeline settings that do not split the model or are not planned fail at the field to change", "[job]") {
  const std::vector<BadSpec> cases = {
      {"parallel: {pipeline_chunks: 2}\n", {}, "bad.yaml:1: parallel.pipeline_chunks: ",
       "interleaving chunks of blocks needs pipeline_parallel >= 2"},
      {"parallel: {pipeline_parallel: 2, pipeline_chunks: 2}\ntraining: {grad_accum: 3}\n", {},
       "bad.yaml:1: parallel.pipeline_chunks: ",
       "pipeline_parallel 2, which does not divide training.grad_accum 3 (allowed: parallel.pipeline_chunks: 1, or "
       "training.grad_accum a multiple of pipeline_parallel)"},
      {"parallel: {pipeline_parallel: 2}\ntraining: {grad_accum: 4}\n", {"parallel.pipeline_chunks=4"},
       "--set parallel.pipeline_chunks=4: parallel.pipeline_chunks: ",
       "pipeline_parallel 2 x pipeline_chunks 4 chunks do not divide model.layers 12"},
      {"parallel: {pipeline_parallel: 2, pipeline_chunks: 2, pipeline_layers: [6, 6]}\ntraining: {grad_accum: 2}\n",
       {}, "bad.yaml:1: parallel.pipeline_layers: ",
       "2 stages listed for pipeline_parallel 2 x pipeline_chunks 2 (allowed: one block count per chunk of every "
       "stage, or [] for an even split)"},
      {"parallel: {pipeline_parallel: 5}\n", {}, "bad.yaml:1: parallel.pipeline_parallel: ",
       "pipeline_parallel 5 does not divide model.layers 12 (every stage holds as many blocks; parallel.pipeline_layers"},
      {"parallel: {pipeline_parallel: 2, data_parallel: 2, shard_optimizer: true}\n",
       {"comm.gather_embedding_gradient=true"},
       "--set comm.gather_embedding_gradient=true: comm.gather_embedding_gradient: ",
       "is not planned with pipeline parallelism yet (allowed: comm.gather_embedding_gradient: false, or "
       "parallel.pipeline_parallel: 1)"},
      {"parallel: {pipeline_parallel: 2, data_parallel: 2, shard_parameters: true}\ntraining: {grad_accum: 2}\n",
       {"comm.reduce_every_micro_batch=true"},
       "--set comm.reduce_every_micro_batch=true: comm.reduce_every_micro_batch: ",
       "is not planned with pipeline parallelism yet"},
      {"parallel: {pipeline_parallel: 3, pipeline_layers: [4, 4]}\n", {}, "bad.yaml:1: parallel.pipeline_layers: ",
       "2 stages listed for pipeline_parallel 3 (allowed: one block count per stage, or [] for an even split)"},
      {"parallel: {pipeline_parallel: 2}\n", {"parallel.pipeline_layers=[5, 6]"},
       "--set parallel.pipeline_layers=[5, 6]: parallel.pipeline_layers: ",
       "the stages' blocks add up to 11, the model has 12"},
  };
  checkBadSpecs(cases);
}

TEST_CASE("sizes beyond 64-bit arithmetic and plans too long to build fail at the field to change", "[job]") {
  const std::vector<BadSpec> cases = {
      // Sizes that would not fit the planner's 64-bit arithmetic, and plans too long to build.
      {"model: {hidden: 1000000008, heads: 8}\n", {}, "bad.yaml:1: model.hidden: ",
       "the MLP width model.hidden x model.mlp_ratio = 4e+09 is out of range"},
      {"model: {mlp_ratio: 1e-9}\n", {}, "bad.yaml:1: model.mlp_ratio: ", "= 0 is out of range"},
      {"model:\n  hidden: 8388608\n  heads: 16\n  layers: 400\n", {}, "bad.yaml:2: model.hidden: ",
       "more bytes of weights and optimizer state than sizes can hold (2^62)"},
      {"model:\n  seq_len: 1000000000\ntraining:\n  micro_batch: 1000000\n", {}, "bad.yaml:4: training.micro_batch: ",
       "bytes of activations, more than sizes can hold (2^62)"},
      {"model:\n  layers: 12\ntraining:\n  grad_accum: 6000\n", {}, "bad.yaml:4: training.grad_accum: ",
       "model.layers x training.grad_accum = 72000 layer passes per step"},
      // Between two fields, the one a --set override changed is blamed.
      {"model:\n  layers: 12\ntraining:\n  grad_accum: 12\n", {"model.layers=6000"},
       "--set model.layers=6000: model.layers: ", "= 72000 layer passes per step"},
  };
  checkBadSpecs(cases);
}

TEST_CASE("token files are checked on disk unless the caller says otherwise", "[job]") {
  const fs::path dir = fs::path(TANDEM_BINARY_DIR) / "test-job-spec";
  fs::create_directories(dir);
  const fs::path tokens = dir / "tokens.bin";
  { std::ofstream(tokens, std::ios::binary) << std::string(64, '\0'); }
  const std::string yaml = "data: {source: tokens, path: \"" + tokens.string() + "\"}\n";
  CHECK(parseJob(yaml, "t.yaml").data.path == tokens.string());
  fs::remove(tokens);
  CHECK_THROWS_AS(parseJob(yaml, "t.yaml"), SpecError);
  JobParseOptions no_file_checks;
  no_file_checks.check_files = false;
  CHECK(parseJob(yaml, "t.yaml", {}, no_file_checks).data.source == "tokens");
}

TEST_CASE("loadJobFile names the file it cannot open and the file of a bad value", "[job]") {
  const fs::path dir = fs::path(TANDEM_BINARY_DIR) / "test-job-spec";
  fs::create_directories(dir);
  const fs::path missing = dir / "missing.yaml";
  fs::remove(missing);
  try {
    loadJobFile(missing.string());
    FAIL("no error for a missing file");
  } catch (const SpecError& e) {
    CHECK(std::string(e.what()).rfind(missing.string() + ": cannot open the job file", 0) == 0);
  }
  // A folder opens and reads nothing; the error says what it is.
  CHECK_THROWS_WITH(loadJobFile(dir.string()), Catch::StartsWith(dir.string() + ": is a folder, not a job file"));
  const fs::path bad = dir / "bad-layers.yaml";
  { std::ofstream(bad) << "# comment\nmodel:\n  layers: zero\n"; }
  try {
    loadJobFile(bad.string());
    FAIL("no error for a bad value");
  } catch (const SpecError& e) {
    CHECK(std::string(e.what()).rfind(bad.string() + ":3: model.layers: expected an integer", 0) == 0);
  }
}
