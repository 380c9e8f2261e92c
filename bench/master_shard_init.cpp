// master_shard_init: the initial fp32 master shards of one rank of a ZeRO-3
// job (sharded parameters), drawn the way initialMasterShard did before
// (each parameter of a bucket drawn whole on one thread, the shard's part cut
// out) and the way it does now (only the shard's part of each whole
// parameter, on --threads threads). Both must give the same values; the JSON
// line says whether their sums agree. Default: Llama 2 7B cut to 2 layers,
// data parallel 8, rank 0.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "engine/numerics/init.h"
#include "engine/passes/buckets.h"
#include "engine/plan/planner.h"
#include "engine/spec/job.h"

using namespace tandem;

namespace {

double seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, layers = 2, dp = 8;
  bench::ArgReader args("bench_master_shard_init", "[--threads N] [--layers N] [--data-parallel N]", argc, argv);
  while (args.next()) {
    if (args.is("--threads")) threads = int(args.integer(1, 256));
    else if (args.is("--layers")) layers = int(args.integer(1, 32));
    else if (args.is("--data-parallel")) dp = int(args.integer(2, 1024));
    else args.unknown();
  }
  const JobSpec job = parseJob(std::string(builtinJobText("llama2-7b")), "llama2-7b",
                               {fmt::format("parallel.data_parallel={}", dp), "parallel.shard_parameters=true",
                                fmt::format("model.layers={}", layers)});
  const Plan plan = buildPlan(job);
  const RankPlan& rp = plan.forRank(0);
  const int shards = shardCount(plan.job);

  // Before: every parameter of the bucket drawn whole, on one thread.
  double sum_whole = 0;
  int64_t values = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (const GradBucket& b : rp.buckets)
    for (int shard_buffer : {b.master_shard, b.param_shard}) {
      if (shard_buffer < 0) continue;
      const ShardRange shard =
          shardOf(plan.job.dataParallelRank(0), shards, rp.buffers.at(size_t(b.buffer)).elementCount());
      std::vector<float> out(size_t(shard.end - shard.begin), 0.0f);
      for (int pi : b.params) {
        const ParamInfo& p = rp.params.at(size_t(pi));
        const ShardSegment seg = segmentInShard(rp, p, shard);
        if (seg.to <= seg.from) continue;
        const std::vector<float> v = initialParameterValues(plan.job, rp, p, 0);
        std::copy(v.begin() + seg.from, v.begin() + seg.to, out.begin() + seg.shard_offset);
      }
      for (float x : out) sum_whole += x;
      values += int64_t(out.size());
    }
  const double whole_s = seconds(t0);

  // Now: only the shard's part, on `threads` threads.
  double sum_part = 0;
  t0 = std::chrono::steady_clock::now();
  for (const GradBucket& b : rp.buckets)
    for (int shard_buffer : {b.master_shard, b.param_shard}) {
      if (shard_buffer < 0) continue;
      for (float x : initialMasterShard(plan.job, rp, b, 0, shards, threads)) sum_part += x;
    }
  const double part_s = seconds(t0);
  fmt::print("{{\"bench\":\"master_shard_init\",\"job\":\"llama2-7b\",\"layers\":{},\"data_parallel\":{},"
             "\"shard_values\":{},\"whole_then_cut_s\":{:.2f},\"shard_part_s\":{:.2f},\"threads\":{},"
             "\"same_sum\":{}}}\n",
             layers, dp, values, whole_s, part_s, threads, sum_whole == sum_part ? "true" : "false");
  return sum_whole == sum_part ? 0 : 1;
}
