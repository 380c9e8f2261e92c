#include "engine/numerics/init.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <future>
#include <stdexcept>
#include <string>
#include <string_view>

#include "engine/numerics/rng.h"

namespace tandem {
namespace {

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The shape of the whole parameter whose slice `param` is.
std::vector<int64_t> wholeShape(const JobSpec& job, const RankPlan& program, const ParamInfo& param) {
  std::vector<int64_t> shape = program.buffers.at(param.param).shape;
  if (param.split_dim >= 0) shape.at(size_t(param.split_dim)) *= job.parallel.tensor_parallel;
  return shape;
}

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

std::vector<float> tensorParallelSlice(const JobSpec& job, const RankPlan& program, const ParamInfo& param,
                                       int rank, const std::vector<float>& whole) {
  if (param.split_dim < 0) return whole;
  const std::vector<int64_t> full = wholeShape(job, program, param);
  if (int64_t(whole.size()) != product(full))
    throw std::invalid_argument(param.name + ": a whole parameter of " + std::to_string(product(full)) +
                                " values expected, got " + std::to_string(whole.size()));
  const int64_t parts = job.parallel.tensor_parallel, part = job.tensorParallelPlace(rank);
  // Rows of `inner` contiguous values each: the split dimension's extent,
  // with everything after it folded into a row, and everything before it
  // into `outer` repetitions.
  const size_t d = size_t(param.split_dim);
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < d; ++i) outer *= full[i];
  for (size_t i = d + 1; i < full.size(); ++i) inner *= full[i];
  const int64_t extent = full[d], block = extent / param.split_blocks, mine = block / parts;
  std::vector<float> out;
  out.reserve(whole.size() / size_t(parts));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t b = 0; b < param.split_blocks; ++b) {
      const int64_t first = (o * extent + b * block + part * mine) * inner;
      out.insert(out.end(), whole.begin() + first, whole.begin() + first + mine * inner);
    }
  return out;
}

void fillNormalRange(float* out, int64_t begin, int64_t end, uint64_t seed, double stddev, int threads) {
  const int64_t n = end - begin;
  // Chunks of at least 1M values: below that a thread costs more than it draws.
  const int64_t chunks = std::clamp<int64_t>(n >> 20, 1, std::max(1, threads));
  auto fill = [&](int64_t from, int64_t to) {  // offsets into out
    for (int64_t i = from; i < to; ++i) out[i] = portable::scaledNormalAt(seed, uint64_t(begin + i), stddev);
  };
  if (chunks <= 1) return fill(0, std::max<int64_t>(n, 0));
  std::vector<std::future<void>> parts;
  for (int64_t c = 1; c < chunks; ++c)
    parts.push_back(std::async(std::launch::async, fill, n * c / chunks, n * (c + 1) / chunks));
  fill(0, n / chunks);
  for (auto& p : parts) p.get();
}

void fillNormal(float* out, int64_t n, uint64_t seed, double stddev, int threads) {
  fillNormalRange(out, 0, n, seed, stddev, threads);
}

InitRule initRule(const JobSpec& job, const ParamInfo& param) {
  const std::string& name = param.name;
  const bool is_norm = name.find(".ln") != std::string::npos || name.rfind("final.ln", 0) == 0;
  InitRule r;
  if (endsWith(name, ".bias")) return r;
  if (is_norm && endsWith(name, ".weight")) {
    r.constant = 1.0f;
    return r;
  }
  r.normal = true;
  r.stddev = 0.02;
  if (endsWith(name, "attn.proj.weight") || endsWith(name, "mlp.proj.weight"))
    r.stddev /= std::sqrt(2.0 * job.model.layers);
  r.seed = fnv1a64(name.data(), name.size(), job.training.seed ^ 0x5EEDull);
  return r;
}

namespace {

// Values [begin, end) of the whole parameter under `rule` into out.
void fillInitial(float* out, int64_t begin, int64_t end, const InitRule& rule, int threads) {
  if (rule.normal) return fillNormalRange(out, begin, end, rule.seed, rule.stddev, threads);
  std::fill(out, out + (end - begin), rule.constant);
}

}  // namespace

void initialParameterValuesInto(std::vector<float>& values, const JobSpec& job, const RankPlan& program,
                                const ParamInfo& param, int rank, int threads) {
  const int64_t n = product(wholeShape(job, program, param));
  values.resize(size_t(n));  // every value is written below
  fillInitial(values.data(), 0, n, initRule(job, param), threads);
  if (param.split_dim >= 0) values = tensorParallelSlice(job, program, param, rank, values);
}

std::vector<float> initialParameterValues(const JobSpec& job, const RankPlan& program, const ParamInfo& param,
                                          int rank, int threads) {
  std::vector<float> values;
  initialParameterValuesInto(values, job, program, param, rank, threads);
  return values;
}

void forEachInitialParameter(const JobSpec& job, const RankPlan& program, const std::vector<const ParamInfo*>& params,
                             int rank, int threads,
                             const std::function<void(const ParamInfo&, const std::vector<float>&)>& use) {
  // The one handed over and the next, each drawn into a vector of its own
  // that is reused: fresh memory for every parameter costs a page fault per
  // 4 KiB (a 7B model's 27 GB of values: tens of seconds), mapped memory
  // only its writes.
  constexpr size_t kWindow = 2;
  std::vector<float> slots[kWindow];
  std::deque<std::pair<std::future<void>, size_t>> ahead;  // (drawing, its slot), in parameter order
  size_t next = 0;
  auto launch = [&] {
    const ParamInfo* p = params[next];
    const size_t slot = next++ % kWindow;  // the slot of the parameter kWindow before, handed over by now
    std::vector<float>* out = &slots[slot];
    ahead.emplace_back(std::async(std::launch::async,
                                  [&job, &program, p, rank, threads, out] {
                                    initialParameterValuesInto(*out, job, program, *p, rank, threads);
                                  }),
                       slot);
  };
  for (size_t i = 0; i < params.size(); ++i) {
    while (next < params.size() && ahead.size() < kWindow) launch();
    ahead.front().first.get();
    const size_t slot = ahead.front().second;
    ahead.pop_front();
    use(*params[i], slots[slot]);
  }
}

double learningRate(const TrainingSpec& t, int step) {
  if (step < t.warmup_steps) return t.lr * double(step + 1) / double(t.warmup_steps);
  const int decay_steps = std::max(1, t.steps - t.warmup_steps - 1);
  const double ratio = std::min(1.0, double(step - t.warmup_steps) / decay_steps);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * ratio));
  return t.min_lr + cosine * (t.lr - t.min_lr);
}

ShardRange shardOf(int rank, int64_t shards, int64_t bucket_elements) {
  if (shards <= 1) return {0, bucket_elements};
  const int64_t size = bucket_elements / shards;
  const int64_t place = rank % shards;  // shard groups are blocks of consecutive ranks
  return {place * size, (place + 1) * size};
}

ShardSegment segmentInShard(const RankPlan& program, const ParamInfo& param, ShardRange shard) {
  const Buffer& grad = program.buffers.at(param.grad);
  const int64_t at = grad.parent_offset / dtypeSize(grad.dtype);  // the parameter's start in the bucket
  ShardSegment s;
  s.from = std::max<int64_t>(0, shard.begin - at);
  s.to = std::min<int64_t>(program.buffers.at(param.param).elementCount(), shard.end - at);
  s.shard_offset = at + s.from - shard.begin;
  return s;
}

const GradBucket* bucketOfGradientShard(const RankPlan& program, int buffer) {
  if (buffer < 0) return nullptr;
  for (const GradBucket& b : program.buckets)
    if (b.grad_shard == buffer) return &b;
  return nullptr;
}

std::vector<float> initialMasterShard(const JobSpec& job, const RankPlan& program, const GradBucket& bucket,
                                      int rank, int world, int threads) {
  // The shard is placed by the rank's place among its data-parallel peers,
  // the slice (tensor parallelism) by its place in its group.
  const ShardRange shard = shardOf(job.dataParallelRank(rank), world, program.buffers.at(bucket.buffer).elementCount());
  std::vector<float> out(size_t(shard.end - shard.begin), 0.0f);
  for (int pi : bucket.params) {
    const ParamInfo& p = program.params.at(size_t(pi));
    const ShardSegment seg = segmentInShard(program, p, shard);
    if (seg.to <= seg.from) continue;
    if (p.split_dim < 0) {
      // A whole parameter: only the shard's part of its values is drawn
      // (the generator skips ahead), a 1/world share of the work.
      fillInitial(out.data() + seg.shard_offset, seg.from, seg.to, initRule(job, p), threads);
      continue;
    }
    const std::vector<float> v = initialParameterValues(job, program, p, rank, threads);
    std::copy(v.begin() + seg.from, v.begin() + seg.to, out.begin() + seg.shard_offset);
  }
  return out;
}

}  // namespace tandem
