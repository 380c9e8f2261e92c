// Plan JSON: exact round trips (hand-built plans that set every field, and
// the planner's own plans) and clear errors for damaged documents.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "engine/plan/plan_json.h"
#include "engine/plan/planner.h"

using namespace tandem;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Every field away from its default, with awkward doubles, both kinds of
// task (kernel and collective), views, events and several programs.
Plan handBuiltPlan() {
  Plan p;
  p.job = parseJob("name: hand-built\nmodel: {layers: 2, hidden: 64, heads: 4, vocab: 128, seq_len: 16}\n"
                   "recompute: {policy: selective, layers: {1: full}}\nparallel: {data_parallel: 4}\n",
                   "hand.yaml");
  p.world_size = 4;
  p.groups = {{"dp", {0, 1, 2, 3}}, {"pair", {1, 3}}};

  RankPlan rp;
  rp.ranks = {0, 2};
  rp.streams = {{0, StreamKind::Compute, "compute"}, {1, StreamKind::Comm, "comm0"}, {2, StreamKind::Copy, "h2d"}};

  Buffer flat;
  flat.id = 0;
  flat.name = "bucket0.grads";
  flat.dtype = DType::BF16;
  flat.shape = {3, 5, 7};
  flat.bytes = 210;
  flat.category = TensorCategory::Gradient;
  flat.layer = 1;
  flat.offset = 4096;
  flat.first_use = 0;
  flat.last_use = 2;
  flat.persistent = true;
  Buffer view = flat;
  view.id = 1;
  view.name = "layer1.mlp.fc.weight.grad";
  view.shape = {5, 7};
  view.bytes = 70;
  view.parent = 0;
  view.parent_offset = 140;
  view.offset = 4236;
  Buffer big;
  big.id = 2;
  big.name = "huge.i32";
  big.dtype = DType::I32;
  big.shape = {int64_t(1) << 40};
  big.bytes = int64_t(1) << 42;  // beyond 32 bits on purpose
  big.category = TensorCategory::Input;
  big.offset = 0;
  big.first_use = 1;
  big.last_use = 1;
  rp.buffers = {flat, view, big};

  Task kernel;
  kernel.id = 7;
  kernel.stream = 0;
  kernel.kind = TaskKind::Kernel;
  kernel.op = OpKind::MatmulBwdWeight;
  kernel.name = "layer1.mlp.fc.bwd_weight.mb1";
  kernel.phase = Phase::Backward;
  kernel.layer = 1;
  kernel.micro_batch = 1;
  kernel.flops = 0.1 + 0.2;  // not representable exactly in few digits
  kernel.bytes_read = 123456789012345;
  kernel.bytes_written = 98765;
  kernel.reads = {2, 1};
  kernel.writes = {1};
  kernel.wait_events = {0, 3};
  kernel.record_event = 1;
  kernel.attrs.m = 11;
  kernel.attrs.n = 12;
  kernel.attrs.k = 13;
  kernel.attrs.has_bias = true;
  kernel.attrs.b = 2;
  kernel.attrs.t = 3;
  kernel.attrs.c = 4;
  kernel.attrs.h = 5;
  kernel.attrs.v = 6;
  kernel.attrs.elements = 77;
  kernel.attrs.accumulate = true;
  kernel.attrs.accumulate_params = true;
  kernel.attrs.loss_scale = 1.0 / 3.0;
  kernel.attrs.micro_batch = 1;
  kernel.attrs.params = {0, 2, 5};

  Task collective;
  collective.id = 8;
  collective.stream = 1;
  collective.kind = TaskKind::Collective;
  collective.op = OpKind::AllReduce;
  collective.name = "bucket0.all_reduce";
  collective.phase = Phase::Comm;
  collective.flops = 5e-324;  // the smallest denormal
  collective.bytes_read = 210;
  collective.bytes_written = 210;
  collective.reads = {0};
  collective.writes = {0};
  collective.wait_events = {1};
  collective.record_event = 2;
  collective.collective = CollectiveInfo{CollectiveOp::ReduceScatter, ReduceOp::Max, "pair", 210, 105, DType::BF16};

  Task host;
  host.id = 9;
  host.stream = 2;
  host.kind = TaskKind::Host;
  host.op = OpKind::LoadBatch;
  host.name = "data.mb0 \"quoted\" \xc3\xa9";
  host.phase = Phase::Data;
  host.flops = 1.7976931348623157e308;
  rp.tasks = {kernel, collective, host};
  rp.num_events = 4;

  rp.params = {{"layer1.mlp.fc.weight", 3, 1, 4, 5, 6, false, 0}};
  rp.buckets = {{3, 0, 210, {0}}};
  rp.memory = {1 << 20, (1 << 20) - 7, 999999, 2, 12345, {{"gradients", 210}, {"inputs", int64_t(1) << 42}}};

  RankPlan other = rp;
  other.ranks = {1, 3};
  other.tasks.pop_back();
  other.memory.peak_task = 1;
  p.programs = {rp, other};

  p.recompute = {{0, RecomputePolicy::Selective, 100, 50, 1e9 / 7}, {1, RecomputePolicy::Full, 10, 140, 2.5e12}};
  p.summary = {124439808, 6.02214076e23 / 3, 746 * 1e6 + 0.125, 131072};
  return p;
}

std::string errorOf(const json& doc) {
  try {
    planFromJson(doc);
  } catch (const PlanFormatError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("a hand-built plan with every field set round-trips exactly", "[plan_json]") {
  const Plan p = handBuiltPlan();
  // Guard against a fixture that forgets a field: every struct differs from its default.
  CHECK(!(p.programs[0].tasks[0].attrs == OpAttrs{}));
  CHECK(!(p.programs[0].memory == MemoryPlan{}));
  CHECK(!(p.summary == PlanSummary{}));

  const json doc = planToJson(p);
  CHECK(doc.at("format") == "tandem-plan");
  CHECK(doc.at("version") == kPlanFormatVersion);
  CHECK(doc.at("job").at("content_hash") == p.job.content_hash);
  CHECK(doc.at("programs")[0].at("tasks")[1].at("collective").at("op") == "reduce_scatter");
  CHECK(doc.at("programs")[0].at("tasks")[0].at("phase") == "backward");
  CHECK(!doc.at("programs")[0].at("tasks")[2].contains("collective"));

  const Plan back = planFromJson(doc);
  CHECK(back.job == p.job);
  CHECK(back.programs[0].tasks == p.programs[0].tasks);
  CHECK(back.programs[0].buffers == p.programs[0].buffers);
  CHECK(back == p);

  SECTION("through text, doubles keep every bit") {
    const Plan reparsed = planFromJson(json::parse(doc.dump()));
    CHECK(reparsed == p);
    CHECK(reparsed.programs[0].tasks[0].flops == 0.1 + 0.2);
    CHECK(reparsed.programs[0].tasks[1].flops == 5e-324);
    CHECK(reparsed.programs[0].tasks[2].flops == std::numeric_limits<double>::max());
    CHECK(reparsed.programs[0].tasks[0].attrs.loss_scale == 1.0 / 3.0);
  }
  SECTION("through a file, with no temporary file left behind") {
    const fs::path dir = fs::path(TANDEM_BINARY_DIR) / "test-plan-json";
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string path = (dir / "plan.json").string();
    writePlanJson(p, path);
    writePlanJson(p, path);  // replaces the existing file
    CHECK(readPlanJson(path) == p);
    int entries = 0;
    for (const auto& e : fs::directory_iterator(dir)) entries += e.path().filename() == "plan.json" ? 1 : 100;
    CHECK(entries == 1);
  }
}

TEST_CASE("forRank finds the program of a rank", "[plan_json]") {
  const Plan p = handBuiltPlan();
  CHECK(&p.forRank(2) == &p.programs[0]);
  CHECK(&p.forRank(3) == &p.programs[1]);
  CHECK_THROWS_AS(p.forRank(4), std::out_of_range);
  CHECK_THROWS_AS(p.forRank(-1), std::out_of_range);
  CHECK(p.programs[0].buffers[0].elementCount() == 105);
  CHECK(Buffer{}.elementCount() == 1);
}

TEST_CASE("collective and reduce ops have stable spellings both ways", "[plan_json]") {
  for (auto op : {CollectiveOp::AllReduce, CollectiveOp::AllGather, CollectiveOp::ReduceScatter,
                  CollectiveOp::Broadcast, CollectiveOp::Reduce, CollectiveOp::AllToAll, CollectiveOp::Send,
                  CollectiveOp::Recv})
    CHECK(parseCollectiveOp(toString(op)) == op);
  for (auto op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) CHECK(parseReduceOp(toString(op)) == op);
  CHECK(toString(CollectiveOp::AllToAll) == "all_to_all");
  CHECK(!parseCollectiveOp("allreduce"));
  CHECK(!parseReduceOp("mean"));
}

TEST_CASE("damaged plan documents fail with the JSON path of the bad field", "[plan_json]") {
  const json good = planToJson(handBuiltPlan());

  json doc = good;
  doc["programs"][0]["tasks"][1].erase("stream");
  CHECK(errorOf(doc) == "programs[0].tasks[1].stream: missing field");

  doc = good;
  doc["programs"][1]["buffers"][2]["bytes"] = "lots";
  CHECK(errorOf(doc) == "programs[1].buffers[2].bytes: expected an integer, got string");

  doc = good;
  doc["programs"][0]["tasks"][0]["phase"] = "sideways";
  CHECK(errorOf(doc) == "programs[0].tasks[0].phase: unknown value 'sideways' "
                        "(allowed: forward, backward, recompute, optimizer, comm, data)");

  doc = good;
  doc["programs"][0]["tasks"][1]["collective"]["op"] = "gossip";
  CHECK(errorOf(doc).rfind("programs[0].tasks[1].collective.op: unknown value 'gossip' (allowed: all_reduce,", 0) == 0);

  doc = good;
  doc["programs"][0]["memory"]["by_category"]["gradients"] = 1.5;
  CHECK(errorOf(doc) == "programs[0].memory.by_category.gradients: expected an integer, got number");

  doc = good;
  doc["world_size"] = int64_t(1) << 40;
  CHECK(errorOf(doc) == "world_size: integer 1099511627776 out of the 32-bit range");

  doc = good;
  doc["version"] = kPlanFormatVersion + 1;
  CHECK(errorOf(doc).rfind("version: plan format version " + std::to_string(kPlanFormatVersion + 1) +
                               " is newer than this build reads",
                           0) == 0);

  doc = good;
  doc["format"] = "chrome-trace";
  CHECK(errorOf(doc) == "format: 'chrome-trace' is not a plan document (allowed: tandem-plan)");

  doc = good;
  doc["job"]["content_hash"] = "0000000000000000";
  CHECK(errorOf(doc).rfind("job.content_hash: '0000000000000000' does not match the embedded job YAML", 0) == 0);

  doc = good;
  doc["job"]["yaml"] = "model: {heads: 5}\n";
  CHECK(errorOf(doc).rfind("job.yaml: the embedded job does not parse: hand.yaml:1: model.heads:", 0) == 0);

  doc = good;
  doc.erase("summary");
  CHECK(errorOf(doc) == "summary: missing field");

  CHECK(errorOf(json::array()) == "(document): expected an object, got array");
}

TEST_CASE("readPlanJson names the file of unreadable or malformed plans", "[plan_json]") {
  const fs::path dir = fs::path(TANDEM_BINARY_DIR) / "test-plan-json-bad";
  fs::create_directories(dir);
  const std::string truncated = (dir / "truncated.json").string();
  { std::ofstream(truncated) << planToJson(handBuiltPlan()).dump().substr(0, 200); }
  try {
    readPlanJson(truncated);
    FAIL("no error for a truncated plan");
  } catch (const PlanFormatError& e) {
    CHECK(std::string(e.what()).rfind(truncated + ": not valid JSON: ", 0) == 0);
  }
  const std::string newer = (dir / "newer.json").string();
  json doc = planToJson(handBuiltPlan());
  doc["version"] = 99;
  { std::ofstream(newer) << doc.dump(); }
  try {
    readPlanJson(newer);
    FAIL("no error for a newer version");
  } catch (const PlanFormatError& e) {
    CHECK(std::string(e.what()).rfind(newer + ": version: plan format version 99 is newer", 0) == 0);
  }
  CHECK_THROWS_AS(readPlanJson((dir / "absent.json").string()), std::runtime_error);
  CHECK_THROWS_AS(writePlanJson(handBuiltPlan(), (dir / "no-such-dir" / "plan.json").string()), std::runtime_error);
}

TEST_CASE("the planner's plans round-trip exactly", "[plan_json][planner]") {
  JobSpec sharded = defaultJob();
  sharded.parallel.shard_optimizer = true;
  for (const JobSpec& job : {tinyJob(), defaultJob(), sharded}) {
    INFO(job.name << (job.parallel.shard_optimizer ? " sharded" : ""));
    const Plan p = buildPlan(job);
    REQUIRE(!p.programs.empty());
    REQUIRE(!p.programs[0].tasks.empty());
    const Plan back = planFromJson(json::parse(planToJson(p).dump()));
    CHECK(back.job == p.job);
    CHECK(back.groups == p.groups);
    CHECK(back.recompute == p.recompute);
    CHECK(back.summary == p.summary);
    REQUIRE(back.programs.size() == p.programs.size());
    for (size_t i = 0; i < p.programs.size(); ++i) {
      CHECK(back.programs[i].buffers == p.programs[i].buffers);
      CHECK(back.programs[i].tasks == p.programs[i].tasks);
      CHECK(back.programs[i].memory == p.programs[i].memory);
    }
    CHECK(back == p);
  }
}
