// Per-rank summary of a simulated step from interval unions, with the same
// definitions as the trace analyses (traces/analysis/analysis.h, after HTA): overlap %
// = |U compute ∩ U comm| / |U comm|, exposed comm = |U comm \ U compute|.
#include <algorithm>
#include <utility>
#include <vector>

#include "simulator/replay/replay.h"

namespace tandem::sim {
namespace {

using Intervals = std::vector<std::pair<int64_t, int64_t>>;

Intervals unite(Intervals v) {
  std::sort(v.begin(), v.end());
  Intervals out;
  for (const auto& iv : v) {
    if (iv.second <= iv.first) continue;
    if (!out.empty() && iv.first <= out.back().second) out.back().second = std::max(out.back().second, iv.second);
    else out.push_back(iv);
  }
  return out;
}

int64_t length(const Intervals& v) {
  int64_t n = 0;
  for (const auto& iv : v) n += iv.second - iv.first;
  return n;
}

// Both inputs are sorted, disjoint unions.
int64_t intersection(const Intervals& a, const Intervals& b) {
  int64_t n = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) n += hi - lo;
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return n;
}

}  // namespace

SimRankSummary summarizeRank(const SimResult& result, int rank) {
  const SimRank& own = result.ranks.at(size_t(rank));
  const SimRank& src = own.represented_by >= 0 ? result.ranks.at(size_t(own.represented_by)) : own;
  SimRankSummary s;
  s.rank = rank;
  s.step_ns = src.end_ns;
  s.peak_memory_bytes = own.peak_memory_bytes;
  Intervals compute, comm, p2p, other_comm, all;
  // Per phase the time some task of it runs (a union: the weight-gradient
  // stream's kernels run beside the compute stream's, and a phase's time is
  // wall time, not the sum of its tasks).
  Intervals forward, backward, recompute, optimizer, data;
  for (const SimActivity a : src.activities) {
    const auto iv = std::make_pair(a.start_ns, a.end_ns);
    all.push_back(iv);
    const bool is_comm = a.kind == TaskKind::Collective || a.kind == TaskKind::SendRecv;
    if (is_comm) {
      comm.push_back(iv);
      (a.kind == TaskKind::SendRecv ? p2p : other_comm).push_back(iv);
      continue;
    }
    // Compute is kernels only, as in the trace analyses; memcpy and host work
    // count in the step but in neither union.
    if (a.kind == TaskKind::Kernel) compute.push_back(iv);
    switch (a.phase) {
      case Phase::Forward: forward.push_back(iv); break;
      case Phase::Backward: backward.push_back(iv); break;
      case Phase::Recompute: recompute.push_back(iv); break;
      case Phase::Optimizer: optimizer.push_back(iv); break;
      case Phase::Data: data.push_back(iv); break;
      case Phase::Comm:
      case Phase::None: break;
    }
  }
  s.forward_ns = length(unite(std::move(forward)));
  s.backward_ns = length(unite(std::move(backward)));
  s.recompute_ns = length(unite(std::move(recompute)));
  s.optimizer_ns = length(unite(std::move(optimizer)));
  s.data_ns = length(unite(std::move(data)));
  const Intervals uc = unite(std::move(compute)), um = unite(std::move(comm)), ua = unite(std::move(all));
  s.compute_ns = length(uc);
  s.comm_ns = length(um);
  s.overlap_ns = intersection(uc, um);
  // Only the transfers run: a receive posted early spins beside the other
  // collectives' exposed time, which is not the pipeline's.
  const Intervals up = unite(std::move(p2p));
  Intervals busy = uc;
  for (const auto& iv : other_comm) busy.push_back(iv);
  s.exposed_p2p_ns = length(up) - intersection(unite(std::move(busy)), up);
  s.exposed_comm_ns = s.comm_ns - s.overlap_ns;
  s.idle_ns = s.step_ns - length(ua);
  s.overlap_pct = s.comm_ns > 0 ? 100.0 * double(s.overlap_ns) / double(s.comm_ns) : 0;
  return s;
}

std::vector<SimRankSummary> summarizeRanks(const SimResult& result) {
  // A rank that shares a representative's timeline shares its unions too:
  // computed once per representative (at 1024 ranks the unions took most of
  // a simulation's time when done per rank).
  std::vector<SimRankSummary> out;
  out.reserve(result.ranks.size());
  std::vector<int> summarized_at(result.ranks.size(), -1);  // representative -> index in out
  for (const SimRank& r : result.ranks) {
    const int source = r.represented_by >= 0 ? r.represented_by : r.rank;
    int& at = summarized_at.at(size_t(source));
    if (at < 0) {
      at = int(out.size());
      out.push_back(summarizeRank(result, r.rank));
      continue;
    }
    SimRankSummary s = out[size_t(at)];
    s.rank = r.rank;
    s.peak_memory_bytes = r.peak_memory_bytes;
    out.push_back(s);
  }
  return out;
}

}  // namespace tandem::sim
