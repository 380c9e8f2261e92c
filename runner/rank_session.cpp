#include "runner/rank_session.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <stdexcept>

#include "engine/checkpoint/checkpoint.h"
#include "engine/numerics/init.h"
#include "engine/cuda/device_record.h"
#include "engine/memory/gpu_footprint.h"
#include "engine/memory/memory_fit.h"
#include "plan_trace/plan_facts.h"
#include "traces/trackers/stats.h"
#include "vocabulary/version.h"
#ifdef TANDEM_HAVE_PROFILER
#include "plan_trace/gpu/plan_observer.h"
#endif

namespace tandem::runner {

bool profilingAvailable() {
#ifdef TANDEM_HAVE_PROFILER
  return true;
#else
  return false;
#endif
}

std::string profileSummaryLine(const profiler::ProfileSummary& summary) {
#ifdef TANDEM_HAVE_PROFILER
  return profiler::formatSummary(summary);
#else
  (void)summary;
  return "no profile (built without the profiler)";
#endif
}

traces::RunInfo realRunInfo(const Plan& plan, int device) {
  traces::RunInfo info;
  info.kind = traces::RunKind::Real;
  info.name = plan.job.name;
  info.job_yaml = plan.job.yaml;
  info.job_hash = plan.job.content_hash;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  info.host = host;
  info.devices_json = cuda::devicesJson(cuda::deviceRecord(device));
  info.tool_version = std::string(toolVersion());
  info.created_unix_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  info.world_size = plan.world_size;
  info.plan_format = plan.version;
  return info;
}

std::string fittingChoices(const JobSpec& job, int64_t free_bytes) {
  const std::vector<FittingChoice> fits = choicesThatFit(job, free_bytes, gpu_footprint::runOverheadBytes);
  if (fits.empty()) return "no recompute policy, micro-batch or LM head split fits on this GPU";
  std::string s = "choices that fit: ";
  for (size_t i = 0; i < fits.size(); ++i) s += (i ? "; " : "") + fits[i].text(job);
  return s;
}

std::vector<traces::StatRow> summaryStats(const Plan& plan, const StepStats& stats,
                                          const cuda::GpuMemoryReport& memory, const RunPlacement& placement) {
  namespace st = traces::stats;
  std::vector<traces::StatRow> rows{st::kTokensPerSecond.row(int64_t(stats.tokens_per_s)),
                                    st::kMfuPpm.row(int64_t(stats.mfu * 1e6)),
                                    st::kPlannedArenaBytes.row(memory.planned_arena_bytes),
                                    st::kPlannedExecutorBytes.row(gpu_footprint::executorFootprint(plan).total()),
                                    st::kAllocatedBytes.row(memory.allocated_bytes),
                                    st::kDeviceUsedBytes.row(memory.device_used_bytes)};
  if (!placement.device_of_rank.empty()) {
    rows.push_back(st::kPlacementApplied.row(1, "each rank's GPU from tandem run --placement: " + placement.source));
    for (size_t r = 0; r < placement.device_of_rank.size(); ++r)
      rows.push_back(st::kPlacementDevice.row(int(r), placement.device_of_rank[r]));
  }
  return rows;
}

std::unique_ptr<profiler::Profiler> makeSharedProfiler(const Plan& plan, const std::string& path, int device) {
#ifdef TANDEM_HAVE_PROFILER
  profiler::ProfilerOptions po;
  po.path = path;
  std::error_code ec;
  std::filesystem::remove(po.path, ec);  // one run per rank file: a fresh profile
  po.run = realRunInfo(plan, device);
  po.run.created_unix_ns = 0;  // the profiler stamps its own start
  po.plan_facts = plan_trace::planFacts(plan);
  po.ranks = plan.world_size;
  po.device = device;
  // The arena counters are rank 0's program's.
  po.arena_bytes = plan.forRank(0).memory.arena_bytes;
  po.arena_peak_bytes = plan.forRank(0).memory.peak_bytes;
  return std::make_unique<profiler::Profiler>(po);
#else
  (void)plan, (void)path, (void)device;
  throw std::runtime_error("run: this tandem was built without the CUPTI profiler (--profile unavailable)");
#endif
}

RankSession::RankSession(const Plan& plan, const SessionOptions& options)
    : plan_(plan), options_(options), device_(cuda::deviceInfo(options.executor.device)) {
  cuda::ExecutorOptions eo = options.executor;
  if (options.shared_profiler) {
#ifdef TANDEM_HAVE_PROFILER
    observer_ = std::make_unique<plan_trace::PlanObserver>(*options.shared_profiler, plan.forRank(eo.rank), eo.rank);
    eo.observer = observer_.get();
#endif
  } else if (!options.profile_path.empty()) {
#ifdef TANDEM_HAVE_PROFILER
    profiler::ProfilerOptions po;
    po.path = options.profile_path;
    std::error_code ec;
    std::filesystem::remove(po.path, ec);  // one run per rank file: a fresh profile
    po.run = realRunInfo(plan, eo.device);
    po.run.created_unix_ns = 0;  // the profiler stamps its own start
    po.plan_facts = plan_trace::planFacts(plan);
    po.rank = eo.rank;
    po.device = eo.device;
    // The rank's own program (pipeline stages differ).
    const RankPlan& program = plan.forRank(eo.rank);
    po.arena_bytes = program.memory.arena_bytes;
    po.arena_peak_bytes = program.memory.peak_bytes;
    profiler_ = std::make_unique<profiler::Profiler>(po);
    observer_ = std::make_unique<plan_trace::PlanObserver>(*profiler_, program);
    eo.observer = observer_.get();
#else
    throw std::runtime_error("run: this tandem was built without the CUPTI profiler (--profile unavailable)");
#endif
  }
  try {
    executor_ = std::make_unique<cuda::CudaExecutor>(plan, eo);
  } catch (const cuda::OutOfDeviceMemory& e) {
    throw cuda::OutOfDeviceMemory(std::string(e.what()) + "; " + fittingChoices(plan.job, e.free_bytes),
                                  e.needed_bytes, e.free_bytes);
  }
}

RankSession::~RankSession() {
  // The executor first: it may still call the observer.
  executor_.reset();
  observer_.reset();
  profiler_.reset();
}

std::vector<cuda::ClockOffset> RankSession::measureClocks(bool at_end) {
  if (!executor_->communicator()) return {};
#ifdef TANDEM_HAVE_PROFILER
  if (profiler_) {
    profiler_->clockSyncBegin();
    std::vector<cuda::ClockOffset> all =
        executor_->communicator()->measureClockOffsets([this] { return profiler_->nowNs(); }, 20);
    const cuda::ClockOffset& mine = all.at(size_t(options_.executor.rank));
    profiler_->clockSyncEnd({mine.local_ns, mine.offset_ns, mine.rtt_ns}, at_end);
    return all;
  }
#endif
  (void)at_end;
  return {};
}

std::string RankSession::resumeIfAsked() {
  const CheckpointSettings& c = options_.checkpoints;
  if (!c.resume) return "";
  if (c.dir.empty()) throw std::runtime_error("run: --resume needs --checkpoint-dir");
  const auto latest = checkpoint::latestCheckpoint(c.dir);
  if (!latest) return "";
  executor_->restore(checkpoint::readCheckpoint(*latest, plan_));
  return latest->string();
}

std::vector<cuda::GpuStepResult> RankSession::run(int steps,
                                                   const std::function<void(const cuda::GpuStepResult&)>& each) {
  ended_.clear();
  auto onStep = [&](const cuda::GpuStepResult& r) {
    ended_.push_back(std::chrono::steady_clock::now());
    if (each) each(r);
  };
  const CheckpointSettings& c = options_.checkpoints;
  const bool checkpointing = c.every > 0 && !c.dir.empty();
  const bool flipping = c.flip_rank == options_.executor.rank && c.flip_after_step > 0;
  if (!checkpointing && c.check_replicas_every <= 0 && !flipping) {
    results_ = executor_->run(steps, onStep);
    return results_;
  }
  if (checkpointing && !writer_) {
    writer_ = std::make_unique<checkpoint::AsyncWriter>(c.dir, plan_, c.keep, std::string(toolVersion()));
    // A process per rank: its part of each checkpoint, tagged with this
    // launch's NCCL id (every rank has it; an interrupted earlier launch's
    // parts have another).
    if (options_.executor.world > 1) {
      const auto& id = options_.executor.nccl_id;
      writer_->writeRankPartOnly(options_.executor.rank,
                                 fmt::format("{:016x}", fnv1a64(id.data(), id.size(), 0)), c.wait_for_parts_s);
    }
  }
  results_.clear();
  // Steps to the next multiple of `every` (0: none), so that checkpoints
  // and checks fall on the same steps after a resume.
  auto toNext = [this](int every) { return every > 0 ? every - executor_->stepsDone() % every : 1 << 30; };
  for (int left = steps; left > 0;) {
    int n = std::min({left, checkpointing ? toNext(c.every) : left, toNext(c.check_replicas_every)});
    if (flipping && executor_->stepsDone() < c.flip_after_step) n = std::min(n, c.flip_after_step - executor_->stepsDone());
    for (const cuda::GpuStepResult& r : executor_->run(n, onStep)) results_.push_back(r);
    left -= n;
    const int done = executor_->stepsDone();
    if (flipping && done == c.flip_after_step) {
      if (const auto target = checkpoint::flipTarget(plan_, options_.executor.rank); target.buffer >= 0)
        executor_->flipBit(target.buffer, target.bit);
      fmt::print(stderr, "test: one bit of rank {}'s parameters flipped after step {}\n", options_.executor.rank,
                 done);
    }
    if (c.check_replicas_every > 0 && done % c.check_replicas_every == 0) checkReplicasAt(done);
    if (checkpointing && (done % c.every == 0 || (left == 0 && c.save_last))) {
      // The last snapshot written lends its (page-locked) memory to this one.
      std::optional<checkpoint::Snapshot> written = writer_->takeWritten();
      const auto start = std::chrono::steady_clock::now();
      checkpoint::Snapshot snap = executor_->snapshot(std::move(written));
      const double copy_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (checkpoint_cost_.copies == 0) checkpoint_cost_.first_copy_s = copy_s;
      checkpoint_cost_.copy_s += copy_s;
      checkpoint_cost_.copies += 1;
      checkpoint_cost_.copy_bytes += checkpoint::snapshotBytes(snap, options_.executor.rank);
      writer_->submit(std::move(snap));
    }
  }
  if (writer_) {
    writer_->wait();
    checkpoint_cost_.writes = writer_->cost();
  }
  return results_;
}

void RankSession::checkReplicasAt(int step) {
  const auto start = std::chrono::steady_clock::now();
  const std::optional<checkpoint::ReplicaMismatch> mismatch = executor_->checkReplicas();
  replica_checks_.checks += 1;
  replica_checks_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!mismatch) return;
  const std::string line = fmt::format("step {}: {}", step, mismatch->line);
#ifdef TANDEM_HAVE_PROFILER
  if (profiler::Profiler* p = profiler()) {
    traces::StatRow row;
    row.name = "replica_check.mismatch";
    row.value = step;
    row.severity = traces::Severity::Error;
    row.description = line;
    p->setStat(row);
  }
#endif
  if (writer_) writer_->wait();  // the checkpoints before the fault stay usable
  throw ReplicaMismatchError(line);
}

std::optional<RankSession::CheckpointCost> RankSession::checkpointCost() const {
  if (checkpoint_cost_.copies == 0) return std::nullopt;
  return checkpoint_cost_;
}

std::optional<RankSession::ReplicaChecks> RankSession::replicaChecks() const {
  if (replica_checks_.checks == 0) return std::nullopt;
  return replica_checks_;
}

StepStats RankSession::stats() const {
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  std::vector<double> ms;
  for (size_t i = std::min<size_t>(3, results_.size() / 2); i < results_.size(); ++i) ms.push_back(results_[i].ms);
  std::vector<double> wall;
  for (size_t i = std::max<size_t>(1, std::min<size_t>(3, ended_.size() / 2)); i < ended_.size(); ++i)
    wall.push_back(std::chrono::duration<double, std::milli>(ended_[i] - ended_[i - 1]).count());
  StepStats s;
  s.median_ms = median(ms);
  s.median_wall_ms = median(wall);
  const double tokens = double(plan_.job.tokensPerStep());
  const double flops_per_step = plan_.summary.model_flops_per_token * tokens;
  // Ranks sharing one GPU (--ranks-per-gpu) have that GPU's peak between them.
  const int gpus = options_.executor.local_world ? 1 : options_.executor.world;
  const double peak = device_.peak_bf16_flops * gpus;
  s.tokens_per_s = s.median_ms > 0 ? tokens / (s.median_ms / 1e3) : 0;
  s.mfu = peak > 0 && s.median_ms > 0 ? flops_per_step / (s.median_ms / 1e3) / peak : 0;
  return s;
}

profiler::ProfileSummary RankSession::finishProfile() {
#ifdef TANDEM_HAVE_PROFILER
  profiler::Profiler* p = profiler();
  if (!p) throw std::logic_error("finishProfile: this session does not profile");
  for (const traces::StatRow& row : summaryStats(plan_, stats(), executor_->memory(), options_.placement))
    p->setStat(row);
  return p->finish();
#else
  throw std::logic_error("finishProfile: this tandem was built without the profiler");
#endif
}

}  // namespace tandem::runner
