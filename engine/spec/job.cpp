// Job spec parsing and validation. The YAML tree is read with yaml-cpp, the
// --set overrides are applied to that tree, and then every field is read and
// checked once, so an error can always name where the bad value came from: a
// line of the file or the override that set it.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/spec/job.h"

namespace tandem {
namespace {

// Edit distance, for "did you mean" suggestions on unknown keys.
size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// A value as it appears in a message: quoted, newlines escaped and long
// values shortened, so the error stays one line.
std::string shown(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 60)) {
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  if (s.size() > 60) out += "...";
  return out + "'";
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

std::string describe(const YAML::Node& v) {
  switch (v.Type()) {
    case YAML::NodeType::Null: return "nothing";
    case YAML::NodeType::Sequence: return "a sequence";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Scalar:
      return v.Tag() == "!" ? "the quoted string " + shown(v.Scalar()) : shown(v.Scalar());
    default: return "an undefined value";
  }
}

struct Override {
  std::string path;  // dotted key
  std::string text;  // as given: "training.micro_batch=32"
};

class JobReader {
 public:
  explicit JobReader(std::string source) : source_(std::move(source)) {}

  // "FILE:LINE" for a field read from the file, "--set k=v" for one set by an
  // override (or inside a value an override set), falling back to the
  // nearest enclosing field that has a known position.
  std::string locate(const std::string& path) const {
    for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it) {
      const std::string& p = it->path;
      if (path == p || (path.size() > p.size() && path.compare(0, p.size(), p) == 0 && path[p.size()] == '.'))
        return "--set " + it->text;
    }
    std::string probe = path;
    while (true) {
      auto found = lines_.find(probe);
      if (found != lines_.end()) return source_ + ":" + std::to_string(found->second);
      size_t dot = probe.rfind('.');
      if (dot == std::string::npos) break;
      probe.resize(dot);
    }
    return source_ + ":1";
  }

  // As locate(), but prefers the given position of this very node (a key
  // that appears twice has two positions; the path alone cannot tell them apart).
  std::string locate(const std::string& path, const YAML::Mark& mark) const {
    std::string where = locate(path);
    if (where.starts_with("--set ") || mark.line < 0) return where;
    return source_ + ":" + std::to_string(mark.line + 1);
  }

  [[noreturn]] void fail(const std::string& path, const std::string& problem,
                         const std::string& allowed) const {
    failAt(locate(path), path, problem, allowed);
  }

  [[noreturn]] static void failAt(const std::string& where, const std::string& path,
                                  const std::string& problem, const std::string& allowed) {
    throw SpecError(where + ": " + path + ": " + problem + " (allowed: " + allowed + ")");
  }

  void remember(const std::string& path, const YAML::Mark& mark) {
    if (mark.line >= 0) lines_.emplace(path, mark.line + 1);  // yaml-cpp counts from 0
  }

  void applyOverride(YAML::Node& root, const std::string& text);

  // Reads a mapping whose keys must be among `fields`; each present key's
  // value goes to its handler. Rejects unknown and duplicate keys.
  using Handler = std::function<void(const YAML::Node& value, const std::string& path)>;
  void readMap(const YAML::Node& map, const std::string& path,
               const std::vector<std::pair<std::string, Handler>>& fields);

  // Typed scalar readers. `allowed` describes the valid values in messages.
  int readInt(const YAML::Node& v, const std::string& path, int64_t min, const std::string& allowed) const;
  uint64_t readUint64(const YAML::Node& v, const std::string& path) const;
  double readNumber(const YAML::Node& v, const std::string& path, bool (*ok)(double),
                    const std::string& allowed) const;
  bool readBool(const YAML::Node& v, const std::string& path) const;
  std::string readString(const YAML::Node& v, const std::string& path, const std::string& allowed) const;
  RecomputePolicy readPolicy(const YAML::Node& v, const std::string& path) const;
  // One of a few spellings, each naming a value; anything else fails with
  // "'x' is not <what> (allowed: ...)".
  template <class E>
  E readChoice(const YAML::Node& v, const std::string& path, std::initializer_list<std::pair<const char*, E>> choices,
               const std::string& what) const {
    std::string allowed;
    for (const auto& [name, value] : choices) allowed += (allowed.empty() ? "" : ", ") + std::string(name);
    const std::string s = readString(v, path, allowed);
    for (const auto& [name, value] : choices)
      if (s == name) return value;
    fail(path, shown(s) + " is not " + what, allowed);
  }

  bool has(const std::string& path) const {
    return lines_.count(path) > 0 || std::any_of(overrides_.begin(), overrides_.end(),
                                                 [&](const Override& o) { return o.path == path; });
  }

 private:
  void requireScalar(const YAML::Node& v, const std::string& path, const std::string& expected,
                     const std::string& allowed, bool allow_quoted) const {
    if (!v.IsScalar() || (!allow_quoted && v.Tag() == "!"))
      fail(path, "expected " + expected + ", got " + describe(v), allowed);
  }

  std::string source_;
  std::vector<Override> overrides_;
  std::map<std::string, int> lines_;  // dotted path -> 1-based line of its key
};

void JobReader::applyOverride(YAML::Node& root, const std::string& text) {
  const std::string where = "--set " + text;
  const std::string usage = "KEY=VALUE with a dotted KEY such as training.micro_batch=32";
  size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) failAt(where, text, "expected KEY=VALUE", usage);
  std::string key = text.substr(0, eq);
  std::vector<std::string> segments;
  for (size_t start = 0;;) {
    size_t dot = key.find('.', start);
    segments.push_back(key.substr(start, dot - start));
    if (segments.back().empty()) failAt(where, key, "empty key segment", usage);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  YAML::Node value;
  try {
    value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    failAt(where, key, "cannot parse the value: " + e.msg, "a YAML scalar, list or flow mapping");
  }
  overrides_.push_back({key, text});

  // Walk (creating missing mappings) with fresh handles: assigning to a
  // yaml-cpp handle that is already bound would overwrite the node it refers to.
  std::function<void(YAML::Node, size_t, std::string)> walk = [&](YAML::Node node, size_t i,
                                                                   std::string prefix) {
    const std::string& seg = segments[i];
    std::string path = prefix.empty() ? seg : prefix + "." + seg;
    if (i + 1 == segments.size()) {
      node.remove(seg);
      node[seg] = value;
      return;
    }
    const YAML::Node& view = node;
    YAML::Node child = view[seg];
    if (!child.IsDefined() || child.IsNull()) {
      node[seg] = YAML::Node(YAML::NodeType::Map);
    } else if (!child.IsMap()) {
      failAt(where, path, "is " + describe(child) + ", not a mapping, so it has no key " + shown(segments[i + 1]),
             "keys of the sections name, model, training, parallel, comm, schedule, recompute, data");
    }
    walk(node[seg], i + 1, path);
  };
  walk(root, 0, "");
}

void JobReader::readMap(const YAML::Node& map, const std::string& path,
                        const std::vector<std::pair<std::string, Handler>>& fields) {
  std::vector<std::string> names;
  for (const auto& f : fields) names.push_back(f.first);
  if (map.IsNull()) return;  // "section:" with nothing under it: all defaults
  if (!map.IsMap()) fail(path, "expected a mapping, got " + describe(map), "a mapping with keys " + joined(names));
  std::map<std::string, int> seen;  // key -> line
  for (const auto& entry : map) {
    const YAML::Node& key_node = entry.first;
    std::string key = key_node.IsScalar() ? key_node.Scalar() : "<" + describe(key_node) + ">";
    std::string field = path.empty() ? key : path + "." + key;
    int line = key_node.Mark().line + 1;
    remember(field, key_node.Mark());
    if (seen.count(key))
      failAt(locate(field, key_node.Mark()), field,
             "duplicate key (first on line " + std::to_string(seen[key]) + ")", "each key once");
    seen[key] = line;
    auto handler = std::find_if(fields.begin(), fields.end(), [&](const auto& f) { return f.first == key; });
    if (handler == fields.end()) {
      std::string closest = names.front();
      for (const auto& n : names)
        if (editDistance(key, n) < editDistance(key, closest)) closest = n;
      fail(field, "unknown key, did you mean '" + closest + "'?", joined(names));
    }
    handler->second(entry.second, field);
  }
}

int JobReader::readInt(const YAML::Node& v, const std::string& path, int64_t min,
                       const std::string& allowed) const {
  requireScalar(v, path, "an integer", allowed, false);
  long long x = 0;
  if (!YAML::convert<long long>::decode(v, x)) fail(path, "expected an integer, got " + describe(v), allowed);
  if (x < min || x > std::numeric_limits<int>::max())
    fail(path, "value " + std::to_string(x) + " is out of range", allowed);
  return static_cast<int>(x);
}

uint64_t JobReader::readUint64(const YAML::Node& v, const std::string& path) const {
  const std::string allowed = "integers from 0 to 18446744073709551615";
  requireScalar(v, path, "an integer", allowed, false);
  unsigned long long x = 0;
  if (v.Scalar().starts_with("-") || !YAML::convert<unsigned long long>::decode(v, x))
    fail(path, "expected an unsigned integer, got " + describe(v), allowed);
  return x;
}

double JobReader::readNumber(const YAML::Node& v, const std::string& path, bool (*ok)(double),
                             const std::string& allowed) const {
  requireScalar(v, path, "a number", allowed, false);
  double x = 0;
  if (!YAML::convert<double>::decode(v, x) || !std::isfinite(x))
    fail(path, "expected a finite number, got " + describe(v), allowed);
  if (!ok(x)) fail(path, "value " + v.Scalar() + " is out of range", allowed);
  return x;
}

bool JobReader::readBool(const YAML::Node& v, const std::string& path) const {
  requireScalar(v, path, "a boolean", "true, false", false);
  bool x = false;
  if (!YAML::convert<bool>::decode(v, x)) fail(path, "expected a boolean, got " + describe(v), "true, false");
  return x;
}

std::string JobReader::readString(const YAML::Node& v, const std::string& path,
                                  const std::string& allowed) const {
  if (v.IsNull()) return "";
  requireScalar(v, path, "a string", allowed, true);
  return v.Scalar();
}

RecomputePolicy JobReader::readPolicy(const YAML::Node& v, const std::string& path) const {
  std::string allowed;
  for (std::string_view name : recomputePolicyNames()) allowed += (allowed.empty() ? "" : ", ") + std::string(name);
  std::string s = readString(v, path, allowed);
  auto policy = parseRecomputePolicy(s);
  if (!policy) fail(path, shown(s) + " is not a recompute policy", allowed);
  return *policy;
}

constexpr int kMaxLayers = 8192;

bool positive(double x) { return x > 0; }
bool nonNegative(double x) { return x >= 0; }
bool unitInterval(double x) { return x >= 0 && x < 1; }

// Reads the model section (architecture: family, sizes, embeddings) into `m`.
void readModel(JobReader& r, const YAML::Node& node, const std::string& node_path, ModelSpec& m) {
  r.readMap(node, node_path, {
      {"family",
       [&](const YAML::Node& v, const std::string& p) {
         m.family = r.readChoice<ModelFamily>(v, p, {{"gpt2", ModelFamily::GPT2}, {"llama", ModelFamily::Llama}}, "a model family");
       }},
      {"mlp_activation",
       [&](const YAML::Node& v, const std::string& p) {
         m.mlp_activation = r.readChoice<MlpActivation>(
             v, p, {{"swiglu", MlpActivation::SwiGlu}, {"squared_relu", MlpActivation::SquaredRelu}}, "an MLP activation");
       }},
      {"attention_dropout",
       [&](const YAML::Node& v, const std::string& p) {
         m.attention_dropout = r.readNumber(v, p, unitInterval, "numbers in [0, 1)");
       }},
      {"vocab", [&](const YAML::Node& v, const std::string& p) { m.vocab = r.readInt(v, p, 2, "integers >= 2"); }},
      {"seq_len", [&](const YAML::Node& v, const std::string& p) { m.seq_len = r.readInt(v, p, 1, "integers >= 1"); }},
      {"layers",
       [&](const YAML::Node& v, const std::string& p) {
         // Far beyond any trained model; a plan's time and memory grow with
         // its length (8000 layers: about 5 s and 700 MB).
         const std::string allowed = "integers from 1 to " + std::to_string(kMaxLayers);
         m.layers = r.readInt(v, p, 1, allowed);
         if (m.layers > kMaxLayers) r.fail(p, "value " + std::to_string(m.layers) + " is out of range", allowed);
       }},
      {"hidden", [&](const YAML::Node& v, const std::string& p) { m.hidden = r.readInt(v, p, 1, "integers >= 1"); }},
      {"heads",
       [&](const YAML::Node& v, const std::string& p) {
         m.heads = r.readInt(v, p, 1, "integers >= 1 dividing model.hidden");
       }},
      {"kv_heads",
       [&](const YAML::Node& v, const std::string& p) {
         m.kv_heads = r.readInt(v, p, 0, "0 (same as heads) or a divisor of model.heads");
       }},
      {"mlp_ratio",
       [&](const YAML::Node& v, const std::string& p) {
         m.mlp_ratio = r.readNumber(v, p, positive, "numbers > 0");
       }},
      {"tied_embeddings", [&](const YAML::Node& v, const std::string& p) { m.tied_embeddings = r.readBool(v, p); }},
  });
}

// Reads the training section (batch sizes, steps, optimizer settings, precision, seed) into `t`.
void readTraining(JobReader& r, const YAML::Node& node, const std::string& node_path, TrainingSpec& t) {
  r.readMap(node, node_path, {
      {"micro_batch",
       [&](const YAML::Node& v, const std::string& p) {
         t.micro_batch = r.readInt(v, p, 1, "integers >= 1");
       }},
      {"grad_accum",
       [&](const YAML::Node& v, const std::string& p) {
         t.grad_accum = r.readInt(v, p, 1, "integers >= 1");
       }},
      {"steps", [&](const YAML::Node& v, const std::string& p) { t.steps = r.readInt(v, p, 1, "integers >= 1"); }},
      {"lr", [&](const YAML::Node& v, const std::string& p) { t.lr = r.readNumber(v, p, positive, "numbers > 0"); }},
      {"min_lr",
       [&](const YAML::Node& v, const std::string& p) {
         t.min_lr = r.readNumber(v, p, nonNegative, "numbers from 0 to training.lr");
       }},
      {"warmup_steps",
       [&](const YAML::Node& v, const std::string& p) {
         t.warmup_steps = r.readInt(v, p, 0, "integers >= 0");
       }},
      {"weight_decay",
       [&](const YAML::Node& v, const std::string& p) {
         t.weight_decay = r.readNumber(v, p, nonNegative, "numbers >= 0");
       }},
      {"beta1",
       [&](const YAML::Node& v, const std::string& p) {
         t.beta1 = r.readNumber(v, p, unitInterval, "numbers in [0, 1)");
       }},
      {"beta2",
       [&](const YAML::Node& v, const std::string& p) {
         t.beta2 = r.readNumber(v, p, unitInterval, "numbers in [0, 1)");
       }},
      {"eps", [&](const YAML::Node& v, const std::string& p) { t.eps = r.readNumber(v, p, positive, "numbers > 0"); }},
      {"grad_clip",
       [&](const YAML::Node& v, const std::string& p) {
         t.grad_clip = r.readNumber(v, p, nonNegative, "numbers >= 0 (0 disables clipping)");
       }},
      {"precision",
       [&](const YAML::Node& v, const std::string& p) {
         std::string s = r.readString(v, p, "fp32, bf16");
         auto precision = parsePrecision(s);
         if (!precision) r.fail(p, shown(s) + " is not a precision", "fp32, bf16, fp8");
         t.precision = *precision;
       }},
      {"fp8_scaling",
       [&](const YAML::Node& v, const std::string& p) {
         t.fp8_scaling = r.readChoice<Fp8Scaling>(v, p, {{"delayed", Fp8Scaling::Delayed}, {"current", Fp8Scaling::Current}},
                                                  "a way to scale FP8 GEMM inputs");
       }},
      {"fp8_bf16_first_layers",
       [&](const YAML::Node& v, const std::string& p) {
         t.fp8_bf16_first_layers = r.readInt(v, p, 0, "integers >= 0 (blocks at the start kept in bf16)");
       }},
      {"fp8_bf16_last_layers",
       [&](const YAML::Node& v, const std::string& p) {
         t.fp8_bf16_last_layers = r.readInt(v, p, 0, "integers >= 0 (blocks at the end kept in bf16)");
       }},
      {"fp8_attention_grad",
       [&](const YAML::Node& v, const std::string& p) { t.fp8_attention_grad = r.readBool(v, p); }},
      {"fp8_param_gather", [&](const YAML::Node& v, const std::string& p) { t.fp8_param_gather = r.readBool(v, p); }},
      {"seed", [&](const YAML::Node& v, const std::string& p) { t.seed = r.readUint64(v, p); }},
  });
}

// Reads the parallel section (data, tensor and pipeline splits; what is sharded).
void readParallel(JobReader& r, const YAML::Node& node, const std::string& node_path, ParallelSpec& parallel) {
  r.readMap(node, node_path, {
      {"data_parallel",
       [&](const YAML::Node& v, const std::string& p) {
         parallel.data_parallel = r.readInt(v, p, 1, "integers >= 1");
       }},
      {"tensor_parallel",
       [&](const YAML::Node& v, const std::string& p) {
         parallel.tensor_parallel =
             r.readInt(v, p, 1, "integers >= 1 dividing model.heads, the MLP width and model.vocab");
       }},
      {"sequence_parallel",
       [&](const YAML::Node& v, const std::string& p) { parallel.sequence_parallel = r.readBool(v, p); }},
      {"context_parallel",
       [&](const YAML::Node& v, const std::string& p) {
         parallel.context_parallel =
             r.readInt(v, p, 1, "integers >= 1 such that 2 x context_parallel divides model.seq_len");
       }},
      {"pipeline_parallel",
       [&](const YAML::Node& v, const std::string& p) {
         parallel.pipeline_parallel = r.readInt(v, p, 1, "integers >= 1 dividing model.layers");
       }},
      {"pipeline_chunks",
       [&](const YAML::Node& v, const std::string& p) {
         parallel.pipeline_chunks = r.readInt(v, p, 1, "integers >= 1 (chunks of blocks per pipeline stage)");
       }},
      {"pipeline_layers",
       [&](const YAML::Node& v, const std::string& p) {
         const std::string allowed = "a list of blocks per stage (integers >= 1), or [] for an even split";
         parallel.pipeline_layers.clear();
         if (v.IsNull()) return;
         if (!v.IsSequence()) r.fail(p, "expected a list, got " + describe(v), allowed);
         for (size_t i = 0; i < v.size(); ++i)
           parallel.pipeline_layers.push_back(r.readInt(v[i], p + "[" + std::to_string(i) + "]", 1, allowed));
       }},
      {"shard_optimizer",
       [&](const YAML::Node& v, const std::string& p) {
         parallel.shard_optimizer = r.readBool(v, p);
       }},
      {"shard_gradients",
       [&](const YAML::Node& v, const std::string& p) {
         parallel.shard_gradients = r.readBool(v, p);
       }},
      {"shard_parameters",
       [&](const YAML::Node& v, const std::string& p) {
         parallel.shard_parameters = r.readBool(v, p);
       }},
      {"shard_group_size",
       [&](const YAML::Node& v, const std::string& p) {
         parallel.shard_group_size = r.readInt(v, p, 0, "0 (all ranks), or integers >= 2 dividing data_parallel");
       }},
  });
}

// Reads the comm section (gradient buckets; how gradients are reduced).
void readComm(JobReader& r, const YAML::Node& node, const std::string& node_path, CommSpec& comm) {
  r.readMap(node, node_path, {
      {"bucket_mib",
       [&](const YAML::Node& v, const std::string& p) {
         comm.bucket_mib = r.readNumber(v, p, positive, "numbers > 0 (MiB)");
       }},
      {"first_bucket_mib",
       [&](const YAML::Node& v, const std::string& p) {
         comm.first_bucket_mib = r.readNumber(v, p, positive, "numbers > 0 (MiB)");
       }},
      {"gather_embedding_gradient",
       [&](const YAML::Node& v, const std::string& p) {
         comm.gather_embedding_gradient = r.readBool(v, p);
       }},
      {"reduce_every_micro_batch",
       [&](const YAML::Node& v, const std::string& p) {
         comm.reduce_every_micro_batch = r.readBool(v, p);
       }},
      {"pipeline_scatter_gather",
       [&](const YAML::Node& v, const std::string& p) { comm.pipeline_scatter_gather = r.readBool(v, p); }},
      {"grad_reduce_fp32", [&](const YAML::Node& v, const std::string& p) { comm.grad_reduce_fp32 = r.readBool(v, p); }},
  });
}

// Reads the schedule section (where tasks run; what is fused or chunked).
void readSchedule(JobReader& r, const YAML::Node& node, const std::string& node_path, ScheduleSpec& schedule) {
  r.readMap(node, node_path, {
      {"weight_gradient_stream",
       [&](const YAML::Node& v, const std::string& p) {
         schedule.weight_gradient_stream = r.readBool(v, p);
       }},
      {"fuse_bias_gradients",
       [&](const YAML::Node& v, const std::string& p) {
         schedule.fuse_bias_gradients = r.readBool(v, p);
       }},
      {"optimizer_beside_forward",
       [&](const YAML::Node& v, const std::string& p) {
         schedule.optimizer_beside_forward = r.readBool(v, p);
       }},
      {"residual_in_gemm",
       [&](const YAML::Node& v, const std::string& p) { schedule.residual_in_gemm = r.readBool(v, p); }},
      {"gather_ahead",
       [&](const YAML::Node& v, const std::string& p) {
         schedule.gather_ahead = r.readInt(v, p, 1, "integers >= 1");
       }},
      {"lm_head_chunks",
       [&](const YAML::Node& v, const std::string& p) {
         schedule.lm_head_chunks = r.readInt(v, p, 1, "integers >= 1");
       }},
      {"materialized_attention",
       [&](const YAML::Node& v, const std::string& p) { schedule.materialized_attention = r.readBool(v, p); }},
      {"tp_comm_overlap",
       [&](const YAML::Node& v, const std::string& p) { schedule.tp_comm_overlap = r.readBool(v, p); }},
      {"attention_kernel",
       [&](const YAML::Node& v, const std::string& p) {
         schedule.attention_kernel = r.readChoice<AttentionKernel>(
             v, p, {{"fused", AttentionKernel::Fused}, {"flash2", AttentionKernel::Flash2}}, "an attention kernel");
       }},
      {"elementwise",
       [&](const YAML::Node& v, const std::string& p) {
         schedule.elementwise = r.readChoice<ElementwiseKernels>(v, p, {{"fused", ElementwiseKernels::Fused}, {"eager", ElementwiseKernels::Eager}},
                                             "a way to run the elementwise ops");
       }},
      {"projections",
       [&](const YAML::Node& v, const std::string& p) {
         schedule.projections = r.readChoice<Projections>(
             v, p, {{"fused", Projections::Fused}, {"separate", Projections::Separate}}, "a way to run the projections");
       }},
  });
}

// Reads the recompute section: the policy, and per-layer policies that override it.
void readRecompute(JobReader& r, const YAML::Node& node, const std::string& node_path, RecomputeSpec& recompute) {
  r.readMap(node, node_path, {
      {"policy", [&](const YAML::Node& v, const std::string& p) { recompute.policy = r.readPolicy(v, p); }},
      {"rerun",
       [&](const YAML::Node& v, const std::string& p) {
         recompute.rerun = r.readChoice<FullRerun>(v, p, {{"block", FullRerun::Block}, {"needed", FullRerun::Needed}},
                                                   "what full recompute runs again");
       }},
      {"layers",
       [&](const YAML::Node& v, const std::string& p) {
         std::string allowed = "a mapping from layer index to";
         const auto names = recomputePolicyNames();
         for (size_t i = 0; i < names.size(); ++i)
           allowed += (i == 0 ? " " : i + 1 == names.size() ? " or " : ", ") + std::string(names[i]);
         if (v.IsNull()) return;
         if (!v.IsMap()) r.fail(p, "expected a mapping, got " + describe(v), allowed);
         for (const auto& entry : v) {
           std::string index_text = entry.first.IsScalar() ? entry.first.Scalar() : describe(entry.first);
           std::string path = p + "." + index_text;
           r.remember(path, entry.first.Mark());
           int index = r.readInt(entry.first, path, 0, "layer indices from 0 to model.layers - 1");
           if (recompute.per_layer.count(index))
             JobReader::failAt(r.locate(path, entry.first.Mark()), path,
                               "layer " + std::to_string(index) + " is listed twice", "each layer index once");
           recompute.per_layer[index] = r.readPolicy(entry.second, path);
         }
       }},
  });
}

// Reads the data section: where the tokens come from (synthetic or a token file).
void readData(JobReader& r, const YAML::Node& node, const std::string& node_path, DataSpec& data) {
  r.readMap(node, node_path, {
      {"source",
       [&](const YAML::Node& v, const std::string& p) {
         data.source = r.readString(v, p, "synthetic, tokens");
       }},
      {"path",
       [&](const YAML::Node& v, const std::string& p) {
         data.path = r.readString(v, p, "a path to a token file");
       }},
      {"markov_order",
       [&](const YAML::Node& v, const std::string& p) {
         data.markov_order = r.readInt(v, p, 1, "integers >= 1");
       }},
      {"branching",
       [&](const YAML::Node& v, const std::string& p) {
         data.branching = r.readInt(v, p, 1, "integers from 1 to model.vocab");
       }},
  });
}

// Reads every section into `job`. Range checks that involve one field happen
// here; checks across fields happen in validateJob below.
void readJob(JobReader& r, const YAML::Node& root, JobSpec& job) {
  r.readMap(root, "", {
      {"name", [&](const YAML::Node& v, const std::string& p) { job.name = r.readString(v, p, "a non-empty string"); }},
      {"model", [&](const YAML::Node& v, const std::string& p) { readModel(r, v, p, job.model); }},
      {"training", [&](const YAML::Node& v, const std::string& p) { readTraining(r, v, p, job.training); }},
      {"parallel", [&](const YAML::Node& v, const std::string& p) { readParallel(r, v, p, job.parallel); }},
      {"comm", [&](const YAML::Node& v, const std::string& p) { readComm(r, v, p, job.comm); }},
      {"schedule", [&](const YAML::Node& v, const std::string& p) { readSchedule(r, v, p, job.schedule); }},
      {"recompute", [&](const YAML::Node& v, const std::string& p) { readRecompute(r, v, p, job.recompute); }},
      {"data", [&](const YAML::Node& v, const std::string& p) { readData(r, v, p, job.data); }},
  });
}

std::string number(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

// A constraint between two fields is reported at the one the user changed
// last (a --set override), else at the one they wrote, so the location
// points at something they can change.
std::string fieldToBlame(const JobReader& r, const std::string& a, const std::string& b) {
  for (const std::string& f : {a, b})
    if (r.locate(f).starts_with("--set ")) return f;
  return r.has(a) || !r.has(b) ? a : b;
}

// Sizes every part of tandem computes in 64-bit integers (bytes, elements,
// tokens) must fit with room to spare, and the plan, which unrolls every
// layer of every micro-batch, must be one that can be built: a job beyond
// either is refused here rather than planned with wrapped-around numbers
// or for hours.
constexpr long double kMaxBytes = 4611686018427387904.0L;  // 2^62
constexpr int64_t kMaxLayerPasses = 65536;                  // layers x micro-batches per step

void validateSizes(const JobReader& r, const JobSpec& job) {
  const ModelSpec& m = job.model;
  const TrainingSpec& t = job.training;
  auto pick = [&](const std::string& a, const std::string& b) { return fieldToBlame(r, a, b); };
  const long double mlp = std::floor((long double)m.hidden * m.mlp_ratio + 0.5L);
  if (mlp < 1 || mlp > std::numeric_limits<int>::max())
    r.fail(pick("model.mlp_ratio", "model.hidden"),
           "the MLP width model.hidden x model.mlp_ratio = " + number(double(mlp)) + " is out of range",
           "an MLP width from 1 to 2147483647");
  const long double h = m.hidden, layers = m.layers;
  // Weights of one layer (attention and MLP matrices, biases, layernorms)
  // and of the embeddings; each parameter has 16 bytes of state at most
  // (bf16 weight and gradient, fp32 master weight and two moments).
  const long double params = layers * (4 * h * h + 2 * h * mlp + 9 * h + mlp) + (m.vocab + m.seq_len + 2.0L) * h;
  if (params * 16 > kMaxBytes)
    r.fail(pick("model.hidden", "model.layers"),
           "the model would have about " + number(double(params)) +
               " parameters, more bytes of weights and optimizer state than sizes can hold (2^62)",
           "models of up to about 2.8e17 parameters");
  // The activations one micro-batch keeps, over-estimated (the plans of the
  // resource jobs keep 32 hidden-widths of bf16 per token and layer).
  const long double tokens = (long double)t.micro_batch * m.seq_len;
  const long double activations = tokens * (layers * (48 * h + 8 * mlp) + 8.0L * m.vocab) * 4;
  if (activations > kMaxBytes)
    r.fail(pick("training.micro_batch", "model.seq_len"),
           "one micro-batch would keep about " + number(double(activations)) +
               " bytes of activations, more than sizes can hold (2^62)",
           "a smaller training.micro_batch, model.seq_len or model");
  const long double step_tokens = tokens * t.grad_accum * job.parallel.data_parallel;
  if (step_tokens > kMaxBytes)
    r.fail(pick("training.grad_accum", "parallel.data_parallel"),
           "a step would train on " + number(double(step_tokens)) + " tokens, more than counts can hold (2^62)",
           "fewer tokens per step");
  const int64_t passes = int64_t(m.layers) * t.grad_accum;
  if (passes > kMaxLayerPasses)
    r.fail(pick("training.grad_accum", "model.layers"),
           "model.layers x training.grad_accum = " + std::to_string(passes) +
               " layer passes per step; the plan unrolls each of them (about 23 tasks per pass) and would not be "
               "built in reasonable time and memory",
           "model.layers x training.grad_accum up to " + std::to_string(kMaxLayerPasses));
}

// Checks within the model and training sections, and the recompute section's
// layer indices against model.layers.
void validateFields(const JobReader& r, const JobSpec& job) {
  const ModelSpec& m = job.model;
  auto pick = [&](const std::string& a, const std::string& b) { return fieldToBlame(r, a, b); };
  if (m.hidden % m.heads != 0) {
    r.fail(pick("model.heads", "model.hidden"),
           "model.heads " + std::to_string(m.heads) + " does not divide model.hidden " + std::to_string(m.hidden),
           "heads dividing hidden");
  }
  if (m.kv_heads != 0 && m.heads % m.kv_heads != 0) {
    r.fail(pick("model.kv_heads", "model.heads"),
           "model.kv_heads " + std::to_string(m.kv_heads) + " does not divide model.heads " + std::to_string(m.heads),
           "0 (same as heads) or a divisor of model.heads");
  }
  const TrainingSpec& t = job.training;
  if (t.min_lr > t.lr) {
    r.fail(pick("training.min_lr", "training.lr"),
           "training.min_lr " + number(t.min_lr) + " is above training.lr " + number(t.lr),
           "0 <= min_lr <= lr");
  }
  if (const int kept = t.fp8_bf16_first_layers + t.fp8_bf16_last_layers; kept > m.layers) {
    r.fail(pick("training.fp8_bf16_last_layers", "training.fp8_bf16_first_layers"),
           "training.fp8_bf16_first_layers + fp8_bf16_last_layers = " + std::to_string(kept) +
               " blocks kept in bf16, the model has " + std::to_string(m.layers),
           "at most model.layers blocks in all");
  }
  for (const auto& [layer, policy] : job.recompute.per_layer) {
    if (layer >= m.layers) {
      r.fail("recompute.layers." + std::to_string(layer),
             "layer " + std::to_string(layer) + " does not exist, the model has " + std::to_string(m.layers) +
                 " layers",
             "layer indices from 0 to " + std::to_string(m.layers - 1));
    }
  }
}

// The data source, and with a token file that the file is named (and, when
// the options ask, exists).
void validateDataSource(const JobReader& r, const JobSpec& job, const JobParseOptions& options) {
  auto pick = [&](const std::string& a, const std::string& b) { return fieldToBlame(r, a, b); };
  const DataSpec& d = job.data;
  if (d.source != "synthetic" && d.source != "tokens")
    r.fail("data.source", shown(d.source) + " is not a data source", "synthetic, tokens");
  if (d.source == "tokens") {
    if (d.path.empty())
      r.fail(pick("data.path", "data.source"), "data.source tokens needs a token file",
             "a path to an existing token file");
    if (options.check_files) {
      std::error_code ec;
      if (!std::filesystem::is_regular_file(d.path, ec))
        r.fail("data.path", "token file " + shown(d.path) + " does not exist",
               "a path to an existing token file, relative to the working directory");
    }
  }
}

// How a rank's tokens of a micro-batch are counted, for messages.
std::string rankTokensMeaning(const JobSpec& job) {
  return job.parallel.context_parallel > 1 ? "(training.micro_batch x model.seq_len / parallel.context_parallel)"
                                           : "(training.micro_batch x model.seq_len)";
}

// Context parallelism: the sequence must split into 2 x context_parallel
// equal chunks (ParallelSpec::context_parallel).
void validateContextParallel(const JobReader& r, const JobSpec& job) {
  const int cp = job.parallel.context_parallel;
  if (cp <= 1) return;
  auto pick = [&](const std::string& a, const std::string& b) { return fieldToBlame(r, a, b); };
  if (job.model.seq_len % (2 * cp) != 0)
    r.fail(pick("parallel.context_parallel", "model.seq_len"),
           "context_parallel " + std::to_string(cp) + " splits each sequence into " + std::to_string(2 * cp) +
               " equal chunks (two per rank, for an even share of the causal attention), which do not divide "
               "model.seq_len " + std::to_string(job.model.seq_len),
           "integers >= 1 such that 2 x context_parallel divides model.seq_len");
  else if (job.schedule.materialized_attention)
    r.fail(pick("schedule.materialized_attention", "parallel.context_parallel"),
           "a materialized score matrix is not planned with context parallelism (its attention reads the gathered "
           "keys and values)",
           "schedule.materialized_attention: false, or parallel.context_parallel: 1");
  else if (job.comm.gather_embedding_gradient)
    r.fail(pick("comm.gather_embedding_gradient", "parallel.context_parallel"),
           "comm.gather_embedding_gradient is not planned with context parallelism (the gathered backward reads "
           "every replica's tokens at the whole sequence's positions)",
           "comm.gather_embedding_gradient: false, or parallel.context_parallel: 1");
}

// What a sharded optimizer or sharded parameters rule out or need.
void validateSharding(const JobReader& r, const JobSpec& job) {
  auto pick = [&](const std::string& a, const std::string& b) { return fieldToBlame(r, a, b); };
  const bool sharded = (job.parallel.shard_optimizer && job.replicas() > 1) || job.parallel.shard_gradients ||
                       job.parallel.shard_parameters;
  if (job.schedule.optimizer_beside_forward && sharded) {
    const char* field = job.parallel.shard_parameters  ? "parallel.shard_parameters"
                        : job.parallel.shard_gradients ? "parallel.shard_gradients"
                                                       : "parallel.shard_optimizer";
    r.fail(pick("schedule.optimizer_beside_forward", field),
           "schedule.optimizer_beside_forward needs an unsharded optimizer (a sharded one updates at the end of the "
           "step, where its all-gathers are planned)",
           "parallel.shard_parameters: false, and parallel.shard_optimizer: false or data_parallel 1");
  }
  if (job.comm.gather_embedding_gradient && (job.parallel.shard_parameters || job.parallel.shard_gradients)) {
    const char* field = job.parallel.shard_parameters ? "parallel.shard_parameters" : "parallel.shard_gradients";
    r.fail(pick("comm.gather_embedding_gradient", field),
           "comm.gather_embedding_gradient is not planned with sharded gradients (they are reduce-scattered out of "
           "place, into shards the gathered embedding backward does not write)",
           std::string("comm.gather_embedding_gradient: false, or ") + field + ": false");
  }
  if (const int s = job.parallel.shard_group_size; s != 0) {
    // Context-parallel ranks shard with the replicas.
    const int dp = job.replicas();
    const std::string replicas = job.parallel.context_parallel > 1
                                     ? "the " + std::to_string(dp) + " replicas (data_parallel x context_parallel)"
                                     : "data_parallel " + std::to_string(dp);
    if (s < 2 || dp % s != 0)
      r.fail(pick("parallel.shard_group_size", "parallel.data_parallel"),
             "shard groups of " + std::to_string(s) + " ranks do not split " + replicas,
             "0 (all ranks), or integers >= 2 dividing data_parallel");
    else if (s < dp && !job.parallel.shard_parameters)
      r.fail(pick("parallel.shard_group_size", "parallel.shard_parameters"),
             "shard groups smaller than data_parallel (hybrid sharding) need parallel.shard_parameters",
             "parallel.shard_parameters: true, or parallel.shard_group_size: 0");
  }
  if (job.comm.reduce_every_micro_batch && !job.parallel.shard_parameters && !job.parallel.shard_gradients) {
    r.fail(pick("comm.reduce_every_micro_batch", "parallel.shard_gradients"),
           "comm.reduce_every_micro_batch needs sharded gradients (only gradient shards can be summed per "
           "micro-batch)",
           "comm.reduce_every_micro_batch: false, or parallel.shard_gradients or parallel.shard_parameters: true");
  }
}

// What each model family's attention allows (GPT-2: no grouped-query
// attention; Llama: rotary pairs, whole key/value groups per rank).
void validateModelFamily(const JobReader& r, const JobSpec& job) {
  const ModelSpec& m = job.model;
  auto pick = [&](const std::string& a, const std::string& b) { return fieldToBlame(r, a, b); };
  if (m.attention_dropout > 0 && !job.schedule.materialized_attention)
    r.fail(pick("model.attention_dropout", "schedule.materialized_attention"),
           "dropout on the attention probabilities is planned with the materialized attention only (a fused "
           "attention kernel draws it on the fly, which tandem does not plan)",
           "model.attention_dropout: 0, or schedule.materialized_attention: true");
  if (job.schedule.attention_kernel == AttentionKernel::Flash2 && job.schedule.materialized_attention)
    r.fail(pick("schedule.attention_kernel", "schedule.materialized_attention"),
           "FlashAttention-2 is a fused attention kernel; a materialized score matrix is another attention",
           "schedule.attention_kernel: fused, or schedule.materialized_attention: false");
  if (m.family == ModelFamily::GPT2 && m.mlp_activation != MlpActivation::SwiGlu)
    r.fail(pick("model.mlp_activation", "model.family"),
           "GPT-2's MLP is GELU; model.mlp_activation chooses the Llama family's",
           "no model.mlp_activation, or model.family: llama");
  if (m.family == ModelFamily::GPT2 && m.kv_heads != 0 && m.kv_heads != m.heads)
    r.fail(pick("model.kv_heads", "model.family"),
           "GPT-2 has no grouped-query attention (model.kv_heads " + std::to_string(m.kv_heads) + " of " +
               std::to_string(m.heads) + " heads)",
           "model.kv_heads: 0, or model.family: llama");
  if (m.family == ModelFamily::Llama) {
    if (m.hidden % m.heads == 0 && (m.hidden / m.heads) % 2 != 0)
      r.fail(pick("model.hidden", "model.heads"),
             "the head width model.hidden / model.heads = " + std::to_string(m.hidden / m.heads) +
                 " is odd; rotary position embeddings rotate pairs of channels",
             "model.hidden / model.heads even");
    else if (const int kv = m.kv_heads > 0 ? m.kv_heads : m.heads; kv % job.parallel.tensor_parallel != 0)
      r.fail(pick("parallel.tensor_parallel", "model.kv_heads"),
             "tensor_parallel " + std::to_string(job.parallel.tensor_parallel) + " does not divide the " +
                 std::to_string(kv) + " key/value heads (each rank computes whole groups of grouped-query attention)",
             "integers >= 1 dividing model.kv_heads (or model.heads), the MLP width and model.vocab");
  }
}

// Tensor parallelism splits heads, the MLP and the vocabulary; sequence
// parallelism splits a micro-batch's tokens over the same group.
void validateTensorParallel(const JobReader& r, const JobSpec& job) {
  const ModelSpec& m = job.model;
  auto pick = [&](const std::string& a, const std::string& b) { return fieldToBlame(r, a, b); };
  if (const int tp = job.parallel.tensor_parallel; tp > 1) {
    if (m.heads % tp != 0)
      r.fail(pick("parallel.tensor_parallel", "model.heads"),
             "tensor_parallel " + std::to_string(tp) + " does not divide model.heads " + std::to_string(m.heads) +
                 " (each rank computes whole attention heads)",
             "integers >= 1 dividing model.heads, the MLP width and model.vocab");
    else if (m.mlpHidden() % tp != 0)
      r.fail(pick("parallel.tensor_parallel", "model.mlp_ratio"),
             "tensor_parallel " + std::to_string(tp) + " does not divide the MLP width " +
                 std::to_string(m.mlpHidden()) + " (model.hidden x model.mlp_ratio)",
             "integers >= 1 dividing model.heads, the MLP width and model.vocab");
    else if (m.vocab % tp != 0)
      r.fail(pick("parallel.tensor_parallel", "model.vocab"),
             "tensor_parallel " + std::to_string(tp) + " does not divide model.vocab " + std::to_string(m.vocab) +
                 " (the embedding and the LM head are split by vocabulary)",
             "integers >= 1 dividing model.heads, the MLP width and model.vocab");
    else if (job.schedule.lm_head_chunks > 1)
      r.fail(pick("schedule.lm_head_chunks", "parallel.tensor_parallel"),
             "the LM head in groups of tokens is not planned with a vocabulary split over tensor-parallel ranks yet",
             "schedule.lm_head_chunks: 1, or parallel.tensor_parallel: 1");
    else if (job.comm.gather_embedding_gradient)
      r.fail(pick("comm.gather_embedding_gradient", "parallel.tensor_parallel"),
             "comm.gather_embedding_gradient is not planned with the embedding split over tensor-parallel ranks",
             "comm.gather_embedding_gradient: false, or parallel.tensor_parallel: 1");
  }
  if (job.schedule.tp_comm_overlap && !job.parallel.sequence_parallel)
    r.fail(pick("schedule.tp_comm_overlap", "parallel.sequence_parallel"),
           "overlapping tensor-parallel communication pipelines sequence parallelism's all-gathers and "
           "reduce-scatters with their GEMMs, and needs parallel.sequence_parallel",
           "schedule.tp_comm_overlap: false, or parallel.sequence_parallel: true");
  if (job.parallel.sequence_parallel) {
    const int tp = job.parallel.tensor_parallel;
    const int64_t tokens = int64_t(job.training.micro_batch) * job.rankSeqLen();
    if (tp <= 1)
      r.fail(pick("parallel.sequence_parallel", "parallel.tensor_parallel"),
             "sequence parallelism splits a tensor-parallel group's tokens and needs tensor_parallel >= 2",
             "parallel.sequence_parallel: false, or parallel.tensor_parallel >= 2");
    else if (tokens % tp != 0)
      r.fail(pick("parallel.sequence_parallel", "training.micro_batch"),
             "tensor_parallel " + std::to_string(tp) + " does not divide a micro-batch's " + std::to_string(tokens) +
                 " tokens " + rankTokensMeaning(job) + ", which sequence parallelism splits over the group",
             "parallel.sequence_parallel: false, or a micro-batch whose tokens tensor_parallel divides");
  }
}

// Pipeline stages and chunks: how the blocks are split and what the
// pipeline schedule does not plan yet.
void validatePipeline(const JobReader& r, const JobSpec& job) {
  const ModelSpec& m = job.model;
  auto pick = [&](const std::string& a, const std::string& b) { return fieldToBlame(r, a, b); };
  if (job.comm.pipeline_scatter_gather) {
    if (job.parallel.pipeline_parallel < 2 || job.parallel.tensor_parallel < 2)
      r.fail(pick("comm.pipeline_scatter_gather", "parallel.pipeline_parallel"),
             "splitting stage transfers over a tensor-parallel group needs pipeline_parallel >= 2 and "
             "tensor_parallel >= 2",
             "comm.pipeline_scatter_gather: false, or parallel.pipeline_parallel and parallel.tensor_parallel >= 2");
    else if (job.parallel.sequence_parallel)
      r.fail(pick("comm.pipeline_scatter_gather", "parallel.sequence_parallel"),
             "with sequence parallelism each rank already sends its own tokens only",
             "comm.pipeline_scatter_gather: false, or parallel.sequence_parallel: false");
  }
  const int chunks = job.parallel.pipeline_chunks;
  if (chunks > 1) {
    const int pp = job.parallel.pipeline_parallel;
    if (pp < 2)
      r.fail(pick("parallel.pipeline_chunks", "parallel.pipeline_parallel"),
             "interleaving chunks of blocks needs pipeline_parallel >= 2",
             "parallel.pipeline_chunks: 1, or parallel.pipeline_parallel >= 2");
    else if (job.training.grad_accum % pp != 0)
      r.fail(pick("parallel.pipeline_chunks", "training.grad_accum"),
             "the interleaved schedule runs micro-batches in groups of pipeline_parallel " + std::to_string(pp) +
                 ", which does not divide training.grad_accum " + std::to_string(job.training.grad_accum),
             "parallel.pipeline_chunks: 1, or training.grad_accum a multiple of pipeline_parallel");
  }
  if (const auto& split = job.parallel.pipeline_layers; !split.empty()) {
    const int64_t sum = std::accumulate(split.begin(), split.end(), int64_t(0));
    const int64_t listed = int64_t(job.parallel.pipeline_parallel) * chunks;
    if (int64_t(split.size()) != listed)
      r.fail(pick("parallel.pipeline_layers", "parallel.pipeline_parallel"),
             std::to_string(split.size()) + " stages listed for pipeline_parallel " +
                 std::to_string(job.parallel.pipeline_parallel) +
                 (chunks > 1 ? " x pipeline_chunks " + std::to_string(chunks) : std::string()),
             chunks > 1 ? "one block count per chunk of every stage, or [] for an even split"
                        : "one block count per stage, or [] for an even split");
    else if (sum != m.layers)
      r.fail(pick("parallel.pipeline_layers", "model.layers"),
             "the stages' blocks add up to " + std::to_string(sum) + ", the model has " + std::to_string(m.layers),
             "block counts summing to model.layers, or [] for an even split");
  }
  if (const int pp = job.parallel.pipeline_parallel; pp > 1) {
    if (job.parallel.pipeline_layers.empty() && m.layers % pp != 0)
      r.fail(pick("parallel.pipeline_parallel", "model.layers"),
             "pipeline_parallel " + std::to_string(pp) + " does not divide model.layers " + std::to_string(m.layers) +
                 " (every stage holds as many blocks; parallel.pipeline_layers splits them unevenly)",
             "integers >= 1 dividing model.layers, or parallel.pipeline_layers");
    else if (job.parallel.pipeline_layers.empty() && m.layers % (int64_t(pp) * chunks) != 0)
      r.fail(pick("parallel.pipeline_chunks", "model.layers"),
             "pipeline_parallel " + std::to_string(pp) + " x pipeline_chunks " + std::to_string(chunks) +
                 " chunks do not divide model.layers " + std::to_string(m.layers) +
                 " (every chunk holds as many blocks; parallel.pipeline_layers splits them unevenly)",
             "chunks dividing model.layers / pipeline_parallel, or parallel.pipeline_layers");
    // What the pipeline schedule does not plan yet: the embedding's gathered
    // gradient (it assumes the embedding and the LM head on one rank) and
    // gradients reduced every micro-batch (that pass places each
    // micro-batch's reduction by the forward-then-backward order, which
    // 1F1B interleaves). Each is refused at its field.
    const std::pair<bool, const char*> unsupported[] = {
        {job.comm.gather_embedding_gradient, "comm.gather_embedding_gradient"},
        {job.comm.reduce_every_micro_batch, "comm.reduce_every_micro_batch"},
    };
    for (const auto& [set, field] : unsupported)
      if (set)
        r.fail(pick(field, "parallel.pipeline_parallel"),
               std::string(field) + " is not planned with pipeline parallelism yet",
               std::string(field) + ": false, or parallel.pipeline_parallel: 1");
  }
}

// Checks across fields. The first check that fails is the error reported, so
// the steps keep the order in which they were written.
void validateJob(const JobReader& r, const JobSpec& job, const JobParseOptions& options) {
  const ModelSpec& m = job.model;
  auto pick = [&](const std::string& a, const std::string& b) { return fieldToBlame(r, a, b); };
  if (job.name.empty()) r.fail("name", "the name is empty", "a non-empty string");
  validateFields(r, job);
  validateDataSource(r, job, options);
  validateContextParallel(r, job);
  validateSharding(r, job);
  validateModelFamily(r, job);
  validateTensorParallel(r, job);
  validatePipeline(r, job);
  const long double world = (long double)job.parallel.data_parallel * job.parallel.context_parallel *
                            job.parallel.tensor_parallel * job.parallel.pipeline_parallel;
  if (world > std::numeric_limits<int>::max())
    r.fail(pick("parallel.data_parallel", "parallel.tensor_parallel"),
           "data_parallel x context_parallel x tensor_parallel x pipeline_parallel = " + number(double(world)) +
               " ranks, more than rank numbers can hold",
           "a world of up to 2147483647 ranks");
  if (const int chunks = job.schedule.lm_head_chunks; chunks > 1) {
    const int64_t tokens = int64_t(job.training.micro_batch) * job.rankSeqLen();
    if (tokens % chunks != 0 || (tokens / chunks) % 8 != 0)
      r.fail(pick("schedule.lm_head_chunks", "training.micro_batch"),
             std::to_string(chunks) + " groups do not split a micro-batch's " + std::to_string(tokens) +
                 " tokens " + rankTokensMeaning(job) + " into equal groups of a multiple of 8 tokens",
             "1, or a divisor of training.micro_batch * model.seq_len that leaves a multiple of 8 tokens");
  }
  const DataSpec& d = job.data;
  if (d.branching > m.vocab) {
    r.fail(pick("data.branching", "model.vocab"),
           "data.branching " + std::to_string(d.branching) + " exceeds model.vocab " + std::to_string(m.vocab),
           "integers from 1 to model.vocab");
  }
  validateSizes(r, job);
}

}  // namespace

RecomputePolicy RecomputeSpec::forLayer(int layer) const {
  auto it = per_layer.find(layer);
  return it == per_layer.end() ? policy : it->second;
}

std::string_view toString(MlpActivation a) { return a == MlpActivation::SquaredRelu ? "squared_relu" : "swiglu"; }
std::string_view toString(AttentionKernel k) { return k == AttentionKernel::Flash2 ? "flash2" : "fused"; }
std::string_view toString(FullRerun r) { return r == FullRerun::Needed ? "needed" : "block"; }
std::string_view toString(Projections p) { return p == Projections::Separate ? "separate" : "fused"; }
std::string_view toString(Fp8Scaling s) { return s == Fp8Scaling::Current ? "current" : "delayed"; }
std::string_view toString(ElementwiseKernels k) { return k == ElementwiseKernels::Eager ? "eager" : "fused"; }

std::string_view toString(ModelFamily f) {
  switch (f) {
    case ModelFamily::GPT2: return "gpt2";
    case ModelFamily::Llama: return "llama";
  }
  return "?";
}

JobSpec parseJob(const std::string& yaml_text, const std::string& source_name,
                 const std::vector<std::string>& overrides) {
  return parseJob(yaml_text, source_name, overrides, JobParseOptions{});
}

JobSpec parseJob(const std::string& yaml_text, const std::string& source_name,
                 const std::vector<std::string>& overrides, const JobParseOptions& options) {
  const std::string sections = "name, model, training, parallel, comm, schedule, recompute, data";
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    JobReader::failAt(source_name + ":" + std::to_string(std::max(e.mark.line, 0) + 1), "yaml",
                      "malformed YAML: " + e.msg, "a YAML mapping with keys " + sections);
  }
  if (root.IsNull())
    JobReader::failAt(source_name + ":1", "job", "the job is empty", "a YAML mapping with keys " + sections);
  if (!root.IsMap()) {
    int line = root.Mark().line >= 0 ? root.Mark().line + 1 : 1;
    JobReader::failAt(source_name + ":" + std::to_string(line), "job",
                      "expected a mapping at the top level, got " + describe(root),
                      "a YAML mapping with keys " + sections);
  }
  if (!options.section.empty()) {
    const YAML::Node job = static_cast<const YAML::Node&>(root)[options.section];
    if (!job || job.IsNull())
      JobReader::failAt(source_name + ":1", options.section, "no '" + options.section + ":' section",
                        "a mapping under '" + options.section + ":' with keys " + sections);
    if (!job.IsMap()) {
      const int line = job.Mark().line >= 0 ? job.Mark().line + 1 : 1;
      JobReader::failAt(source_name + ":" + std::to_string(line), options.section,
                        "expected a mapping, got " + describe(job), "a mapping with keys " + sections);
    }
    root = job;
  }
  JobReader reader(source_name);
  for (const std::string& text : overrides) reader.applyOverride(root, text);

  JobSpec job;
  readJob(reader, root, job);
  validateJob(reader, job, options);
  job.source = source_name;
  refreshJobText(job);
  return job;
}

JobSpec loadJobFile(const std::string& path, const std::vector<std::string>& overrides) {
  // A folder opens as a stream that reads nothing ("the job is empty").
  if (std::filesystem::is_directory(path))
    throw SpecError(path + ": is a folder, not a job file (allowed: a readable YAML file, see resources/jobs/)");
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw SpecError(path + ": cannot open the job file: " + std::strerror(errno) +
                    " (allowed: a readable YAML file, see resources/jobs/)");
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw SpecError(path + ": cannot read the job file (allowed: a readable YAML file)");
  return parseJob(text.str(), path, overrides);
}

}  // namespace tandem
