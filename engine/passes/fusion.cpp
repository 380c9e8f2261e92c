#include "engine/passes/fusion.h"

#include <algorithm>
#include <vector>

namespace tandem {
namespace {

struct Range {
  int64_t lo = 0, hi = 0;
};

Range rangeOf(const RankPlan& p, int buffer) {
  const Buffer& b = p.buffers.at(size_t(buffer));
  return {b.offset, b.offset + b.bytes};
}

bool overlaps(Range a, Range b) { return a.lo < b.hi && b.lo < a.hi; }

bool anyOverlaps(const RankPlan& p, const std::vector<int>& buffers, Range r) {
  return std::any_of(buffers.begin(), buffers.end(), [&](int b) { return overlaps(rangeOf(p, b), r); });
}

bool mentions(const std::vector<int>& buffers, int b) {
  return std::find(buffers.begin(), buffers.end(), b) != buffers.end();
}

DType dtypeOf(const RankPlan& p, int buffer) { return p.buffers.at(size_t(buffer)).dtype; }

// Who touches each buffer, counted once over the program, so that "nobody
// else reads or writes it" and "it has views" are lookups rather than scans
// of every task and buffer per candidate (which made the pass quadratic in
// the number of layers). The pass changes no task's reads or writes, so the
// counts hold while it runs.
struct BufferUse {
  std::vector<int> tasks;       // tasks that read or write the buffer (a task counted once)
  std::vector<int> last_task;   // the last task index that touches it
  std::vector<char> has_views;  // some buffer is a view into it

  explicit BufferUse(const RankPlan& p)
      : tasks(p.buffers.size(), 0), last_task(p.buffers.size(), -1), has_views(p.buffers.size(), 0) {
    for (size_t i = 0; i < p.tasks.size(); ++i) {
      const Task& t = p.tasks[i];
      for (int b : t.reads) ++tasks.at(size_t(b)), last_task.at(size_t(b)) = int(i);
      for (int b : t.writes) {
        if (!mentions(t.reads, b)) ++tasks.at(size_t(b));
        last_task.at(size_t(b)) = int(i);
      }
    }
    for (const Buffer& b : p.buffers)
      if (b.parent >= 0) has_views.at(size_t(b.parent)) = 1;
  }
};

// Matmul (i) -> Gelu: the next task on i's stream must be the Gelu of i's
// output, with no event between them. Returns the Gelu's index or -1.
int geluAfterMatmul(const RankPlan& p, int i) {
  const Task& t = p.tasks[size_t(i)];
  if (t.writes.size() != 1 || t.record_event >= 0) return -1;
  for (size_t j = size_t(i) + 1; j < p.tasks.size(); ++j) {
    const Task& u = p.tasks[j];
    if (u.stream != t.stream) continue;
    if (u.op != OpKind::Gelu || u.reads.size() != 1 || u.writes.size() != 1 || u.reads[0] != t.writes[0] ||
        !u.wait_events.empty())
      return -1;
    const int pre = t.writes[0], y = u.writes[0];
    if (dtypeOf(p, pre) != dtypeOf(p, y) || u.attrs.elements != t.attrs.m * t.attrs.n) return -1;
    // y is written while the GEMM still reads its inputs: it must not share
    // memory with them (the planner may reuse an input's memory after its
    // last read) nor with the pre-activation.
    if (overlaps(rangeOf(p, y), rangeOf(p, pre)) || anyOverlaps(p, t.reads, rangeOf(p, y))) return -1;
    return int(j);
  }
  return -1;
}

// MatmulBwdData (i) -> GeluBwd (u) later on the same stream, i's output read
// by u only. The DGELU GEMM reads i's inputs and writes u's output, so one of
// the two tasks must move:
//  - early (at i): u's output is written before the tasks between i and u,
//    so none of them (same stream) may touch its memory or write u's x, and
//    none of (i, u] may wait for another stream;
//  - late (at u): i's inputs are read after the tasks between, so none of
//    them may write i's inputs, and none of [i, u) may record an event
//    (another stream could take the memory of i's inputs after it).
// Returns u or -1; *late says which placement.
int geluBwdAfterMatmulBwdData(const RankPlan& p, const BufferUse& use, int i, bool* late) {
  const Task& t = p.tasks[size_t(i)];
  if (t.writes.size() != 1 || t.attrs.accumulate) return -1;
  const int out = t.writes[0];
  const Buffer& ob = p.buffers.at(size_t(out));
  if (ob.parent >= 0 || use.has_views.at(size_t(out))) return -1;
  // Nobody else (any stream) may read or write the gradient the GEMM no
  // longer writes: i writes it, u reads it, and no third task touches it.
  // Asked first, and the search ends at the last task touching it: a
  // gradient read on another stream alone (a tensor-parallel reduce-scatter)
  // would otherwise send it to the end of the program for every GEMM.
  if (use.tasks.at(size_t(out)) != 2) return -1;
  int u_index = -1;
  for (size_t j = size_t(i) + 1; j <= size_t(use.last_task.at(size_t(out))); ++j) {
    const Task& u = p.tasks[j];
    if (u.stream != t.stream) continue;
    if (mentions(u.reads, out) || mentions(u.writes, out)) {
      if (u.op != OpKind::GeluBwd || u.reads.size() != 2 || u.writes.size() != 1 || u.reads[0] != out ||
          u.attrs.accumulate)
        return -1;
      u_index = int(j);
      break;
    }
  }
  if (u_index < 0) return -1;
  const Task& u = p.tasks[size_t(u_index)];
  const int pre = u.reads[1], dx = u.writes[0];
  if (dtypeOf(p, pre) != dtypeOf(p, out) || dtypeOf(p, dx) != dtypeOf(p, out) ||
      u.attrs.elements != t.attrs.m * t.attrs.k)
    return -1;
  const Range rdx = rangeOf(p, dx), rpre = rangeOf(p, pre);
  // The GEMM writes dx while it reads its inputs and x.
  if (overlaps(rdx, rpre) || anyOverlaps(p, t.reads, rdx)) return -1;
  bool early = u.wait_events.empty(), at_u = t.record_event < 0;
  for (int j = i + 1; j < u_index; ++j) {
    const Task& v = p.tasks[size_t(j)];
    if (v.stream != t.stream) continue;
    if (!v.wait_events.empty() || anyOverlaps(p, v.reads, rdx) || anyOverlaps(p, v.writes, rdx) ||
        anyOverlaps(p, v.writes, rpre))
      early = false;
    if (v.record_event >= 0) at_u = false;
    for (int b : t.reads)
      if (anyOverlaps(p, v.writes, rangeOf(p, b))) at_u = false;
  }
  if (!early && !at_u) return -1;
  *late = !early;
  return u_index;
}

// Add (i) -> LayerNorm of its output, the very next task of the program (so
// that no task of any stream lies between them in the memory plan's order),
// on the same stream, with no event between them. The fused kernel writes
// the sum and the layernorm's outputs while it still reads the add's
// inputs, row by row on different warps, so no output may share memory with
// an input. Returns the LayerNorm's index or -1.
int layernormAfterAdd(const RankPlan& p, int i) {
  const Task& t = p.tasks[size_t(i)];
  if (t.reads.size() != 2 || t.writes.size() != 1 || t.record_event >= 0 || size_t(i) + 1 >= p.tasks.size())
    return -1;
  const Task& u = p.tasks[size_t(i) + 1];
  if (u.op != OpKind::LayerNorm || u.stream != t.stream || !u.wait_events.empty() || u.reads.size() != 3 ||
      u.writes.size() != 3 || u.reads[0] != t.writes[0])
    return -1;
  const int sum = t.writes[0];
  if (dtypeOf(p, sum) != dtypeOf(p, t.reads[0]) || dtypeOf(p, sum) != dtypeOf(p, t.reads[1]) ||
      dtypeOf(p, u.writes[0]) != dtypeOf(p, sum) || u.attrs.m * u.attrs.c != t.attrs.elements)
    return -1;
  std::vector<int> outputs = u.writes;
  outputs.push_back(sum);
  for (int o : outputs)
    if (anyOverlaps(p, t.reads, rangeOf(p, o))) return -1;
  for (int o : u.writes)
    if (overlaps(rangeOf(p, o), rangeOf(p, sum))) return -1;
  return i + 1;
}

// Matmul (i) -> Add of its output and another tensor (the residual stream),
// the very next task of the program, on the same stream, with no event
// between them: the GEMM takes the other tensor as its C operand (beta = 1)
// and writes the add's output, so the matmul's own output is never written
// and must be read by nobody else (nor be a view, nor have views). The GEMM
// writes the sum while it reads its inputs, so the sum shares no memory with
// them, except that it may take the residual's place exactly (C == D).
// Returns the Add's index or -1.
int residualAddAfterMatmul(const RankPlan& p, const BufferUse& use, int i) {
  const Task& t = p.tasks[size_t(i)];
  if (t.writes.size() != 1 || t.record_event >= 0 || t.attrs.accumulate || size_t(i) + 1 >= p.tasks.size())
    return -1;
  const Task& u = p.tasks[size_t(i) + 1];
  if (u.op != OpKind::Add || u.stream != t.stream || !u.wait_events.empty() || u.reads.size() != 2 ||
      u.writes.size() != 1)
    return -1;
  const int out = t.writes[0];
  if (u.reads[0] == u.reads[1] || (u.reads[0] != out && u.reads[1] != out)) return -1;
  const int residual = residualInput(u, out);
  const int sum = u.writes[0];
  if (dtypeOf(p, residual) != dtypeOf(p, out) || dtypeOf(p, sum) != dtypeOf(p, out) ||
      u.attrs.elements != t.attrs.m * t.attrs.n)
    return -1;
  if (p.buffers.at(size_t(out)).parent >= 0 || use.has_views.at(size_t(out))) return -1;
  // i writes `out` and the add reads it; no third task may touch it.
  if (use.tasks.at(size_t(out)) != 2) return -1;
  const Range rs = rangeOf(p, sum), rr = rangeOf(p, residual);
  if (anyOverlaps(p, t.reads, rs)) return -1;
  if (overlaps(rs, rr) && !(rs.lo == rr.lo && rs.hi == rr.hi)) return -1;
  return i + 1;
}

EpilogueCandidate candidateAt(const RankPlan& p, const BufferUse& use, int i, bool residual_in_gemm) {
  EpilogueCandidate c;
  const Task& t = p.tasks[size_t(i)];
  if (t.op == OpKind::Matmul) {
    const int g = geluAfterMatmul(p, i);
    const int add = g < 0 && residual_in_gemm ? residualAddAfterMatmul(p, use, i) : -1;
    if (g >= 0) c = {Epilogue::Gelu, i, g, i};
    else if (add >= 0) c = {Epilogue::Residual, i, add, i};
  } else if (t.op == OpKind::MatmulBwdData) {
    bool late = false;
    const int g = geluBwdAfterMatmulBwdData(p, use, i, &late);
    if (g >= 0) c = {Epilogue::DGelu, i, g, late ? g : i};
  } else if (t.op == OpKind::Add) {
    const int ln = layernormAfterAdd(p, i);
    if (ln >= 0) c = {Epilogue::AddLayerNorm, i, ln, i};
  }
  return c;
}

}  // namespace

EpilogueCandidate epilogueCandidate(const RankPlan& p, int i, bool residual_in_gemm) {
  return candidateAt(p, BufferUse(p), i, residual_in_gemm);
}

bool biasGradInGemmCandidate(const RankPlan& p, int i) {
  const Task& t = p.tasks[size_t(i)];
  if (!t.attrs.has_bias || t.attrs.accumulate_params || t.writes.size() < 2) return false;
  if (dtypeOf(p, t.writes[1]) != dtypeOf(p, t.writes[0])) return false;
  const Range db = rangeOf(p, t.writes[1]);
  return !anyOverlaps(p, t.reads, db) && !overlaps(rangeOf(p, t.writes[0]), db);
}


int applyEpilogueFusion(RankPlan& p, bool residual_in_gemm) {
  int fused = 0;
  const BufferUse use(p);
  // In program order, so that a residual add taken by its GEMM is no longer
  // a candidate for the add+layernorm kernel.
  for (size_t i = 0; i < p.tasks.size(); ++i) {
    if (p.tasks[i].fused_into >= 0 || p.tasks[i].epilogue != Epilogue::None) continue;
    const EpilogueCandidate c = candidateAt(p, use, int(i), residual_in_gemm);
    if (c.epilogue == Epilogue::None) continue;
    // The launching task names the epilogue and the other task of the pair;
    // the other task issues nothing.
    const int quiet = c.runs == c.gemm ? c.partner : c.gemm;
    Task& runs = p.tasks[size_t(c.runs)];
    Task& q = p.tasks[size_t(quiet)];
    runs.epilogue = c.epilogue;
    runs.epilogue_partner = q.id;
    q.fused_into = runs.id;
    // The cost facts follow the work: the launching task does both tasks'
    // FLOPs (step totals stay the same) and the fused kernel's memory
    // traffic; the quiet task issues nothing.
    if (c.epilogue == Epilogue::AddLayerNorm) {
      // One kernel reads the add's inputs and writes the sum and the
      // layernorm's outputs; the layernorm no longer reads the sum back.
      // The add carries the layernorm's shape for costing (m, c).
      const int64_t sum_bytes = p.buffers.at(size_t(runs.writes[0])).bytes;
      runs.flops += q.flops;
      runs.bytes_read += q.bytes_read - sum_bytes;
      runs.bytes_written += q.bytes_written;
      runs.attrs.m = q.attrs.m;
      runs.attrs.c = q.attrs.c;
      q.flops = 0;
      q.bytes_read = q.bytes_written = 0;
      ++fused;
      continue;
    }
    if (c.epilogue == Epilogue::Residual) {
      // The GEMM also reads the residual (C) and writes the sum in place of
      // its own output (same size); the add reads and writes nothing.
      const int residual = residualInput(q, runs.writes[0]);
      runs.flops += q.flops;
      runs.bytes_read += p.buffers.at(size_t(residual)).bytes;
      q.flops = 0;
      q.bytes_read = q.bytes_written = 0;
      ++fused;
      continue;
    }
    // GELU_AUX writes GELU's output besides the pre-activation and no longer
    // reads the pre-activation back; DGELU reads the pre-activation and
    // writes GELU backward's output instead of the data gradient (same
    // size), which nobody reads back.
    const Task& gelu = p.tasks[size_t(c.partner)];
    const Task& gemm = p.tasks[size_t(c.gemm)];
    const int64_t gemm_read = gemm.bytes_read, gemm_written = gemm.bytes_written;
    const int64_t gelu_written = gelu.bytes_written;
    const int64_t pre_bytes = c.epilogue == Epilogue::DGelu ? p.buffers.at(size_t(gelu.reads[1])).bytes : 0;
    runs.flops = gemm.flops + gelu.flops;
    // A GELU backward that launches the DGELU GEMM carries the GEMM's shape,
    // so that it is costed and calibrated as that GEMM.
    if (c.runs != c.gemm) {
      runs.attrs.m = gemm.attrs.m;
      runs.attrs.n = gemm.attrs.n;
      runs.attrs.k = gemm.attrs.k;
    }
    if (c.epilogue == Epilogue::Gelu) {
      runs.bytes_read = gemm_read;
      runs.bytes_written = gemm_written + gelu_written;
    } else {
      runs.bytes_read = gemm_read + pre_bytes;
      runs.bytes_written = gemm_written;
    }
    q.flops = 0;
    q.bytes_read = q.bytes_written = 0;
    ++fused;
  }
  return fused;
}

}  // namespace tandem
