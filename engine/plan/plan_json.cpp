// Plan <-> JSON. The writer emits every field of every struct (OpAttrs only
// where it differs from the default, to keep task lists readable); the reader
// checks the type of every field and names the JSON path of anything wrong.
#include "engine/plan/plan_json.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace tandem {
namespace {

using nlohmann::json;

// ---------------------------------------------------------------- writing

template <class E>
std::string name(E v) {
  return std::string(toString(v));
}

json toJson(const ProcessGroup& g) { return {{"name", g.name}, {"ranks", g.ranks}}; }

json toJson(const StreamInfo& s) { return {{"id", s.id}, {"kind", name(s.kind)}, {"name", s.name}}; }

json toJson(const Buffer& b) {
  return {{"id", b.id},
          {"name", b.name},
          {"dtype", name(b.dtype)},
          {"shape", b.shape},
          {"bytes", b.bytes},
          {"category", name(b.category)},
          {"layer", b.layer},
          {"parent", b.parent},
          {"parent_offset", b.parent_offset},
          {"offset", b.offset},
          {"first_use", b.first_use},
          {"last_use", b.last_use},
          {"persistent", b.persistent}};
}

// Only the attributes that differ from a default OpAttrs: a matmul task then
// shows m, n, k and has_bias instead of seventeen fields, most of them zero.
json toJson(const OpAttrs& a) {
  const OpAttrs d;
  json j = json::object();
  auto put = [&](const char* key, const auto& value, const auto& fallback) {
    if (value != fallback) j[key] = value;
  };
  put("m", a.m, d.m);
  put("n", a.n, d.n);
  put("k", a.k, d.k);
  put("has_bias", a.has_bias, d.has_bias);
  put("b", a.b, d.b);
  put("t", a.t, d.t);
  put("c", a.c, d.c);
  put("h", a.h, d.h);
  put("kv_heads", a.kv_heads, d.kv_heads);
  put("v", a.v, d.v);
  put("elements", a.elements, d.elements);
  put("accumulate", a.accumulate, d.accumulate);
  put("accumulate_params", a.accumulate_params, d.accumulate_params);
  put("bias_grad", a.bias_grad, d.bias_grad);
  put("from_previous_step", a.from_previous_step, d.from_previous_step);
  put("loss_scale", a.loss_scale, d.loss_scale);
  put("micro_batch", a.micro_batch, d.micro_batch);
  put("params", a.params, d.params);
  put("shards", a.shards, d.shards);
  put("tensor_parallel", a.tensor_parallel, d.tensor_parallel);
  put("context_parallel", a.context_parallel, d.context_parallel);
  put("fp8", a.fp8, d.fp8);
  put("fp8_transposed", a.fp8_transposed, d.fp8_transposed);
  put("fp8_out", a.fp8_out, d.fp8_out);
  put("fp8_transposed_out", a.fp8_transposed_out, d.fp8_transposed_out);
  put("materialized", a.materialized, d.materialized);
  put("dropout", a.dropout, d.dropout);
  put("overlapped", a.overlapped, d.overlapped);
  put("norm_squared", a.norm_squared, d.norm_squared);
  put("flash2", a.flash2, d.flash2);
  put("eager", a.eager, d.eager);
  put("parts", a.parts, d.parts);
  put("current_scaling", a.current_scaling, d.current_scaling);
  put("amax_by_writer", a.amax_by_writer, d.amax_by_writer);
  return j;
}

json toJson(const CollectiveInfo& c) {
  return {{"op", name(c.op)},       {"reduce", name(c.reduce)}, {"group", c.group},
          {"bytes", c.bytes},       {"count", c.count},         {"dtype", name(c.dtype)}};
}

json toJson(const Task& t) {
  json j = {{"id", t.id},
            {"stream", t.stream},
            {"kind", name(t.kind)},
            {"op", name(t.op)},
            {"name", t.name},
            {"phase", name(t.phase)},
            {"layer", t.layer},
            {"micro_batch", t.micro_batch},
            {"flops", t.flops},
            {"bytes_read", t.bytes_read},
            {"bytes_written", t.bytes_written},
            {"reads", t.reads},
            {"writes", t.writes},
            {"wait_events", t.wait_events},
            {"record_event", t.record_event},
            {"attrs", toJson(t.attrs)}};
  if (t.collective) j["collective"] = toJson(*t.collective);
  // Fusion fields only where set: unfused plans read as before.
  if (t.epilogue != Epilogue::None) {
    j["epilogue"] = name(t.epilogue);
    j["epilogue_partner"] = t.epilogue_partner;
  }
  if (t.fused_into >= 0) j["fused_into"] = t.fused_into;
  return j;
}

json toJson(const ParamInfo& p) {
  json j = {{"name", p.name},     {"param", p.param},   {"grad", p.grad},
            {"master", p.master}, {"adam_m", p.adam_m}, {"adam_v", p.adam_v},
            {"weight_decay", p.weight_decay}, {"bucket", p.bucket}};
  // Only tensor-parallel slices have these (docs/plan-format.md).
  if (p.split_dim >= 0) {
    j["split_dim"] = p.split_dim;
    j["split_blocks"] = p.split_blocks;
  }
  if (p.copies != 1) j["copies"] = p.copies;
  return j;
}

json toJson(const GradBucket& b) {
  json j = {{"id", b.id}, {"buffer", b.buffer}, {"bytes", b.bytes}, {"params", b.params}};
  // Only sharded plans have these (docs/plan-format.md).
  if (b.param_buffer >= 0) j["param_buffer"] = b.param_buffer;
  if (b.param_shard >= 0) j["param_shard"] = b.param_shard;
  if (b.grad_shard >= 0) j["grad_shard"] = b.grad_shard;
  if (b.master_shard >= 0) j["master_shard"] = b.master_shard;
  if (b.adam_m_shard >= 0) j["adam_m_shard"] = b.adam_m_shard;
  if (b.adam_v_shard >= 0) j["adam_v_shard"] = b.adam_v_shard;
  return j;
}

json toJson(const MemoryPlan& m) {
  return {{"arena_bytes", m.arena_bytes},
          {"peak_bytes", m.peak_bytes},
          {"lower_bound_bytes", m.lower_bound_bytes},
          {"peak_task", m.peak_task},
          {"activation_peak_bytes", m.activation_peak_bytes},
          {"by_category", m.by_category}};
}

json toJson(const RecomputeDecision& r) {
  return {{"layer", r.layer},
          {"policy", name(r.policy)},
          {"bytes_kept", r.bytes_kept},
          {"bytes_saved", r.bytes_saved},
          {"extra_flops", r.extra_flops}};
}

json toJson(const RankPlan& p);

template <class T>
json toJsonArray(const std::vector<T>& items) {
  json a = json::array();
  for (const T& item : items) a.push_back(toJson(item));
  return a;
}

json toJson(const RankPlan& p) {
  return {{"ranks", p.ranks},
          {"streams", toJsonArray(p.streams)},
          {"buffers", toJsonArray(p.buffers)},
          {"tasks", toJsonArray(p.tasks)},
          {"num_events", p.num_events},
          {"params", toJsonArray(p.params)},
          {"buckets", toJsonArray(p.buckets)},
          {"memory", toJson(p.memory)}};
}

// ---------------------------------------------------------------- reading

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw PlanFormatError((path.empty() ? std::string("(document)") : path) + ": " + problem);
}

std::string member(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string element(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

std::string typeOf(const json& j) { return j.is_null() ? "null" : j.type_name(); }

// Every spelling the parser accepts, for "allowed:" in messages. Enums are
// contiguous from 0 and toString answers "?" past the last one.
template <class E, class Parse>
std::string spellings(Parse parse) {
  std::string out;
  for (int i = 0; i < 64; ++i) {
    std::string_view s = toString(static_cast<E>(i));
    if (s == "?") break;
    if (!parse(s)) continue;
    out += (out.empty() ? "" : ", ") + std::string(s);
  }
  return out;
}

void readValue(const json& j, const std::string& path, int64_t& out) {
  if (!j.is_number_integer()) fail(path, "expected an integer, got " + typeOf(j));
  if (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    fail(path, "integer out of the 64-bit signed range");
  out = j.get<int64_t>();
}

void readValue(const json& j, const std::string& path, int& out) {
  int64_t wide = 0;
  readValue(j, path, wide);
  if (wide < std::numeric_limits<int>::min() || wide > std::numeric_limits<int>::max())
    fail(path, "integer " + std::to_string(wide) + " out of the 32-bit range");
  out = static_cast<int>(wide);
}

void readValue(const json& j, const std::string& path, double& out) {
  if (!j.is_number()) fail(path, "expected a number, got " + typeOf(j));
  out = j.get<double>();
}

void readValue(const json& j, const std::string& path, bool& out) {
  if (!j.is_boolean()) fail(path, "expected true or false, got " + typeOf(j));
  out = j.get<bool>();
}

void readValue(const json& j, const std::string& path, std::string& out) {
  if (!j.is_string()) fail(path, "expected a string, got " + typeOf(j));
  out = j.get<std::string>();
}

template <class E, class Parse>
void readEnum(const json& j, const std::string& path, E& out, Parse parse) {
  std::string s;
  readValue(j, path, s);
  auto v = parse(s);
  if (!v) fail(path, "unknown value '" + s + "' (allowed: " + spellings<E>(parse) + ")");
  out = *v;
}

void readValue(const json& j, const std::string& p, DType& out) { readEnum(j, p, out, parseDType); }
void readValue(const json& j, const std::string& p, TensorCategory& out) { readEnum(j, p, out, parseTensorCategory); }
// A plan's tasks have a phase and run on compute, comm or copy streams:
// the shared vocabulary's None phase and host tracks belong to traces only.
std::optional<Phase> parseTaskPhase(std::string_view s) {
  const std::optional<Phase> p = parsePhase(s);
  return p == Phase::None ? std::nullopt : p;
}
std::optional<StreamKind> parsePlanStreamKind(std::string_view s) {
  const std::optional<StreamKind> k = parseStreamKind(s);
  return k == StreamKind::Host ? std::nullopt : k;
}
void readValue(const json& j, const std::string& p, Phase& out) { readEnum(j, p, out, parseTaskPhase); }
void readValue(const json& j, const std::string& p, RecomputePolicy& out) { readEnum(j, p, out, parseRecomputePolicy); }
void readValue(const json& j, const std::string& p, StreamKind& out) { readEnum(j, p, out, parsePlanStreamKind); }
void readValue(const json& j, const std::string& p, TaskKind& out) { readEnum(j, p, out, parseTaskKind); }
void readValue(const json& j, const std::string& p, OpKind& out) { readEnum(j, p, out, parseOpKind); }
void readValue(const json& j, const std::string& p, Epilogue& out) { readEnum(j, p, out, parseEpilogue); }
void readValue(const json& j, const std::string& p, CollectiveOp& out) { readEnum(j, p, out, parseCollectiveOp); }
void readValue(const json& j, const std::string& p, ReduceOp& out) { readEnum(j, p, out, parseReduceOp); }

// The struct readers, declared ahead of the templates below that call them
// (ordinary lookup from a template only sees what is declared before it).
void readValue(const json& j, const std::string& path, std::map<std::string, int64_t>& out);
void readValue(const json& j, const std::string& path, ProcessGroup& g);
void readValue(const json& j, const std::string& path, StreamInfo& s);
void readValue(const json& j, const std::string& path, Buffer& b);
void readValue(const json& j, const std::string& path, OpAttrs& a);
void readValue(const json& j, const std::string& path, CollectiveInfo& c);
void readValue(const json& j, const std::string& path, Task& t);
void readValue(const json& j, const std::string& path, ParamInfo& p);
void readValue(const json& j, const std::string& path, GradBucket& b);
void readValue(const json& j, const std::string& path, MemoryPlan& m);
void readValue(const json& j, const std::string& path, RankPlan& p);
void readValue(const json& j, const std::string& path, RecomputeDecision& r);
void readValue(const json& j, const std::string& path, PlanSummary& s);
template <class T>
void readValue(const json& j, const std::string& path, std::vector<T>& out);

void requireObject(const json& j, const std::string& path) {
  if (!j.is_object()) fail(path, "expected an object, got " + typeOf(j));
}

// A required member of an object, read into `out` with the overload for its type.
template <class T>
void field(const json& obj, const std::string& path, const char* key, T& out) {
  auto it = obj.find(key);
  if (it == obj.end()) fail(member(path, key), "missing field");
  readValue(*it, member(path, key), out);
}

// An optional member: absent keeps `out` as it is (the default).
template <class T>
void optionalField(const json& obj, const std::string& path, const char* key, T& out) {
  auto it = obj.find(key);
  if (it != obj.end()) readValue(*it, member(path, key), out);
}

template <class T>
void readValue(const json& j, const std::string& path, std::vector<T>& out) {
  if (!j.is_array()) fail(path, "expected an array, got " + typeOf(j));
  out.clear();
  out.resize(j.size());
  for (size_t i = 0; i < j.size(); ++i) readValue(j[i], element(path, i), out[i]);
}

void readValue(const json& j, const std::string& path, std::map<std::string, int64_t>& out) {
  requireObject(j, path);
  out.clear();
  for (auto it = j.begin(); it != j.end(); ++it) readValue(it.value(), member(path, it.key()), out[it.key()]);
}

void readValue(const json& j, const std::string& path, ProcessGroup& g) {
  requireObject(j, path);
  field(j, path, "name", g.name);
  field(j, path, "ranks", g.ranks);
}

void readValue(const json& j, const std::string& path, StreamInfo& s) {
  requireObject(j, path);
  field(j, path, "id", s.id);
  field(j, path, "kind", s.kind);
  field(j, path, "name", s.name);
}

void readValue(const json& j, const std::string& path, Buffer& b) {
  requireObject(j, path);
  field(j, path, "id", b.id);
  field(j, path, "name", b.name);
  field(j, path, "dtype", b.dtype);
  field(j, path, "shape", b.shape);
  field(j, path, "bytes", b.bytes);
  field(j, path, "category", b.category);
  field(j, path, "layer", b.layer);
  field(j, path, "parent", b.parent);
  field(j, path, "parent_offset", b.parent_offset);
  field(j, path, "offset", b.offset);
  field(j, path, "first_use", b.first_use);
  field(j, path, "last_use", b.last_use);
  field(j, path, "persistent", b.persistent);
}

void readValue(const json& j, const std::string& path, OpAttrs& a) {
  requireObject(j, path);
  optionalField(j, path, "m", a.m);
  optionalField(j, path, "n", a.n);
  optionalField(j, path, "k", a.k);
  optionalField(j, path, "has_bias", a.has_bias);
  optionalField(j, path, "b", a.b);
  optionalField(j, path, "t", a.t);
  optionalField(j, path, "c", a.c);
  optionalField(j, path, "h", a.h);
  optionalField(j, path, "kv_heads", a.kv_heads);
  optionalField(j, path, "v", a.v);
  optionalField(j, path, "elements", a.elements);
  optionalField(j, path, "accumulate", a.accumulate);
  optionalField(j, path, "accumulate_params", a.accumulate_params);
  optionalField(j, path, "bias_grad", a.bias_grad);
  optionalField(j, path, "from_previous_step", a.from_previous_step);
  optionalField(j, path, "loss_scale", a.loss_scale);
  optionalField(j, path, "micro_batch", a.micro_batch);
  optionalField(j, path, "params", a.params);
  optionalField(j, path, "shards", a.shards);
  optionalField(j, path, "tensor_parallel", a.tensor_parallel);
  optionalField(j, path, "context_parallel", a.context_parallel);
  optionalField(j, path, "fp8", a.fp8);
  optionalField(j, path, "fp8_transposed", a.fp8_transposed);
  optionalField(j, path, "fp8_out", a.fp8_out);
  optionalField(j, path, "fp8_transposed_out", a.fp8_transposed_out);
  optionalField(j, path, "materialized", a.materialized);
  optionalField(j, path, "dropout", a.dropout);
  optionalField(j, path, "overlapped", a.overlapped);
  optionalField(j, path, "norm_squared", a.norm_squared);
  optionalField(j, path, "flash2", a.flash2);
  optionalField(j, path, "eager", a.eager);
  optionalField(j, path, "parts", a.parts);
  optionalField(j, path, "current_scaling", a.current_scaling);
  optionalField(j, path, "amax_by_writer", a.amax_by_writer);
}

void readValue(const json& j, const std::string& path, CollectiveInfo& c) {
  requireObject(j, path);
  field(j, path, "op", c.op);
  field(j, path, "reduce", c.reduce);
  field(j, path, "group", c.group);
  field(j, path, "bytes", c.bytes);
  field(j, path, "count", c.count);
  field(j, path, "dtype", c.dtype);
}

void readValue(const json& j, const std::string& path, Task& t) {
  requireObject(j, path);
  field(j, path, "id", t.id);
  field(j, path, "stream", t.stream);
  field(j, path, "kind", t.kind);
  field(j, path, "op", t.op);
  field(j, path, "name", t.name);
  field(j, path, "phase", t.phase);
  field(j, path, "layer", t.layer);
  field(j, path, "micro_batch", t.micro_batch);
  field(j, path, "flops", t.flops);
  field(j, path, "bytes_read", t.bytes_read);
  field(j, path, "bytes_written", t.bytes_written);
  field(j, path, "reads", t.reads);
  field(j, path, "writes", t.writes);
  field(j, path, "wait_events", t.wait_events);
  field(j, path, "record_event", t.record_event);
  field(j, path, "attrs", t.attrs);
  optionalField(j, path, "epilogue", t.epilogue);
  optionalField(j, path, "epilogue_partner", t.epilogue_partner);
  optionalField(j, path, "fused_into", t.fused_into);
  auto c = j.find("collective");
  if (c != j.end() && !c->is_null()) {
    t.collective.emplace();
    readValue(*c, member(path, "collective"), *t.collective);
  }
}

void readValue(const json& j, const std::string& path, ParamInfo& p) {
  requireObject(j, path);
  field(j, path, "name", p.name);
  field(j, path, "param", p.param);
  field(j, path, "grad", p.grad);
  field(j, path, "master", p.master);
  field(j, path, "adam_m", p.adam_m);
  field(j, path, "adam_v", p.adam_v);
  field(j, path, "weight_decay", p.weight_decay);
  field(j, path, "bucket", p.bucket);
  optionalField(j, path, "split_dim", p.split_dim);
  optionalField(j, path, "split_blocks", p.split_blocks);
  optionalField(j, path, "copies", p.copies);
}

void readValue(const json& j, const std::string& path, GradBucket& b) {
  requireObject(j, path);
  field(j, path, "id", b.id);
  field(j, path, "buffer", b.buffer);
  field(j, path, "bytes", b.bytes);
  field(j, path, "params", b.params);
  optionalField(j, path, "param_buffer", b.param_buffer);
  optionalField(j, path, "param_shard", b.param_shard);
  optionalField(j, path, "grad_shard", b.grad_shard);
  optionalField(j, path, "master_shard", b.master_shard);
  optionalField(j, path, "adam_m_shard", b.adam_m_shard);
  optionalField(j, path, "adam_v_shard", b.adam_v_shard);
}

void readValue(const json& j, const std::string& path, MemoryPlan& m) {
  requireObject(j, path);
  field(j, path, "arena_bytes", m.arena_bytes);
  field(j, path, "peak_bytes", m.peak_bytes);
  field(j, path, "lower_bound_bytes", m.lower_bound_bytes);
  field(j, path, "peak_task", m.peak_task);
  field(j, path, "activation_peak_bytes", m.activation_peak_bytes);
  field(j, path, "by_category", m.by_category);
}

void readValue(const json& j, const std::string& path, RankPlan& p) {
  requireObject(j, path);
  field(j, path, "ranks", p.ranks);
  field(j, path, "streams", p.streams);
  field(j, path, "buffers", p.buffers);
  field(j, path, "tasks", p.tasks);
  field(j, path, "num_events", p.num_events);
  field(j, path, "params", p.params);
  field(j, path, "buckets", p.buckets);
  field(j, path, "memory", p.memory);
}

void readValue(const json& j, const std::string& path, RecomputeDecision& r) {
  requireObject(j, path);
  field(j, path, "layer", r.layer);
  field(j, path, "policy", r.policy);
  field(j, path, "bytes_kept", r.bytes_kept);
  field(j, path, "bytes_saved", r.bytes_saved);
  field(j, path, "extra_flops", r.extra_flops);
}

void readValue(const json& j, const std::string& path, PlanSummary& s) {
  requireObject(j, path);
  field(j, path, "parameters", s.parameters);
  field(j, path, "flops_per_step", s.flops_per_step);
  field(j, path, "model_flops_per_token", s.model_flops_per_token);
  field(j, path, "tokens_per_step", s.tokens_per_step);
}

// The job travels as its canonical YAML and hash; reading parses it again so
// the JobSpec fields come from the same validated code path as a job file.
JobSpec readJob(const json& doc) {
  const json* j = nullptr;
  auto it = doc.find("job");
  if (it == doc.end()) fail("job", "missing field");
  j = &*it;
  requireObject(*j, "job");
  std::string source, yaml, hash;
  field(*j, "job", "source", source);
  field(*j, "job", "yaml", yaml);
  field(*j, "job", "content_hash", hash);
  JobSpec job;
  JobParseOptions no_file_checks;  // the token file may live on another machine
  no_file_checks.check_files = false;
  try {
    job = parseJob(yaml, source, {}, no_file_checks);
  } catch (const SpecError& e) {
    fail("job.yaml", std::string("the embedded job does not parse: ") + e.what());
  }
  if (job.content_hash != hash)
    fail("job.content_hash", "'" + hash + "' does not match the embedded job YAML (its hash is '" +
                                 job.content_hash + "'); the plan was edited or damaged");
  return job;
}

}  // namespace

json planToJson(const Plan& plan) {
  JobSpec job = plan.job;
  refreshJobText(job);  // the fields are the truth; the text and hash follow them
  json doc;
  doc["format"] = kPlanFormatName;
  doc["version"] = plan.version;
  doc["job"] = {{"source", job.source}, {"yaml", job.yaml}, {"content_hash", job.content_hash}};
  doc["world_size"] = plan.world_size;
  doc["groups"] = toJsonArray(plan.groups);
  doc["programs"] = toJsonArray(plan.programs);
  doc["recompute"] = toJsonArray(plan.recompute);
  doc["summary"] = {{"parameters", plan.summary.parameters},
                    {"flops_per_step", plan.summary.flops_per_step},
                    {"model_flops_per_token", plan.summary.model_flops_per_token},
                    {"tokens_per_step", plan.summary.tokens_per_step}};
  return doc;
}

Plan planFromJson(const json& doc) {
  requireObject(doc, "");
  std::string format;
  field(doc, "", "format", format);
  if (format != kPlanFormatName)
    fail("format", "'" + format + "' is not a plan document (allowed: " + kPlanFormatName + ")");
  Plan plan;
  field(doc, "", "version", plan.version);
  if (plan.version > kPlanFormatVersion)
    fail("version", "plan format version " + std::to_string(plan.version) + " is newer than this build reads (" +
                        std::to_string(kPlanFormatVersion) + "); use a newer tandem");
  if (plan.version < 1) fail("version", "plan format version " + std::to_string(plan.version) + " is invalid");
  plan.job = readJob(doc);
  field(doc, "", "world_size", plan.world_size);
  field(doc, "", "groups", plan.groups);
  field(doc, "", "programs", plan.programs);
  field(doc, "", "recompute", plan.recompute);
  field(doc, "", "summary", plan.summary);
  return plan;
}

void writePlanJson(const Plan& plan, const std::string& path) {
  namespace fs = std::filesystem;
  std::string text;
  try {
    text = planToJson(plan).dump() + "\n";
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": cannot serialize the plan: " + e.what());
  }
  // A unique temporary name beside the target, so the final rename is atomic
  // on the same file system and concurrent writers do not collide.
  static std::atomic<unsigned> counter{0};
  std::random_device entropy;
  fs::path target(path);
  fs::path temp = target;
  temp += ".tmp-" + std::to_string(entropy()) + "-" + std::to_string(counter++);
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(path + ": cannot write the plan: " + std::strerror(errno));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) {
      std::error_code ignored;
      fs::remove(temp, ignored);
      throw std::runtime_error(path + ": cannot write the plan (disk full?)");
    }
  }
  std::error_code ec;
  fs::rename(temp, target, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(temp, ignored);
    throw std::runtime_error(path + ": cannot replace the plan file: " + ec.message());
  }
}

Plan readPlanJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open the plan: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  json doc;
  try {
    doc = json::parse(text.str());
  } catch (const json::parse_error& e) {
    throw PlanFormatError(path + ": not valid JSON: " + e.what());
  }
  try {
    return planFromJson(doc);
  } catch (const PlanFormatError& e) {
    throw PlanFormatError(path + ": " + e.what());
  }
}

}  // namespace tandem
