#include "simulator/cost/cost_model.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/memory/gpu_footprint.h"
#include "engine/spec/parse_number.h"
#include "simulator/cost/gemm_tiles.h"
#include "simulator/topology/topology_presets.h"

namespace tandem::sim {

RooflineParams RooflineParams::defaults() {
  RooflineParams p;
  // Bandwidth-bound kernels reach 60-80% of HBM bandwidth; tensor-core GEMMs
  // of transformer shapes 60-75% of dense peak; flash attention a little
  // less, its backward less again (recompute of scores, atomics).
  p.flops_efficiency.fill(0.5);
  p.bw_efficiency.fill(0.7);
  auto set = [&](OpKind k, double f, double b) {
    p.flops_efficiency[size_t(k)] = f;
    p.bw_efficiency[size_t(k)] = b;
  };
  set(OpKind::Matmul, 0.70, 0.80);
  set(OpKind::MatmulBwdData, 0.68, 0.80);
  set(OpKind::MatmulBwdWeight, 0.65, 0.80);
  // Fitted to the H100 sweep's 554 GEMM shapes (three roles,
  // docs/simulator.md): a depth of 300 and 1e6 outputs on its 132 SMs each
  // halve a GEMM's efficiency. Applied to every GPU (measured on Hopper
  // only; tying the depth to a GPU's FLOP per HBM byte fitted the H100 as
  // well and the published A100 rows worse, docs/accuracy.md).
  p.gemm_depth_half = 300;
  p.gemm_outputs_half_per_sm = 1e6 / 132;
  set(OpKind::Attention, 0.55, 0.75);
  set(OpKind::AttentionBwd, 0.45, 0.70);
  set(OpKind::LayerNorm, 0.5, 0.70);
  set(OpKind::LayerNormBwd, 0.5, 0.60);
  set(OpKind::Gelu, 0.5, 0.75);
  set(OpKind::GeluBwd, 0.5, 0.75);
  // Llama's norm and gated activation: as the layernorm and GELU kernels
  // (memory-bound, one or two passes), until a calibration measures them.
  set(OpKind::RmsNorm, 0.5, 0.70);
  set(OpKind::RmsNormBwd, 0.5, 0.60);
  set(OpKind::SwiGlu, 0.5, 0.75);
  set(OpKind::SwiGluBwd, 0.5, 0.75);
  set(OpKind::SquaredRelu, 0.5, 0.75);
  set(OpKind::SquaredReluBwd, 0.5, 0.75);
  // Context parallelism's copies of the keys and values (and their
  // gradients' adds): strided elementwise passes.
  set(OpKind::PackKv, 0.5, 0.75);
  set(OpKind::PackKvBwd, 0.5, 0.75);
  set(OpKind::CastFp8, 0.5, 0.75);
  set(OpKind::Add, 0.5, 0.80);
  set(OpKind::Embedding, 0.5, 0.60);
  set(OpKind::EmbeddingBwd, 0.5, 0.40);  // scatter-add with atomics
  set(OpKind::CrossEntropy, 0.5, 0.70);
  set(OpKind::CrossEntropyBwd, 0.5, 0.70);
  set(OpKind::CrossEntropyStats, 0.5, 0.70);
  set(OpKind::GradNorm, 0.5, 0.60);
  set(OpKind::AdamW, 0.5, 0.75);
  // FP8 GEMMs at the power limit gain less than the data sheet's twice the
  // BF16 peak: one H100 SXM at 700 W (bench_fp8_gemm, 2026-12-05), the
  // GEMMs of Llama 3.1 8B, 70B (tensor parallel 4) and 405B (8) layers at
  // 8192 tokens in their three roles, 137 to 8796 GFLOP, FP8 (E4M3 x E4M3
  // forward, E4M3 x E5M2 gradients, per-tensor scales) against BF16 back to
  // back: BF16 705-731 TFLOP/s at 1455-1485 MHz, FP8 1170-1207 at 1275-1350
  // MHz, both at about 700 W. Per shape 1.57-1.81 with no trend in size:
  // the median per role, one point (the table's end points hold beyond
  // it). Applies to every GPU with FP8 tensor cores (measured on Hopper
  // only: Blackwell's ratio at its power limit is not measured).
  p.fp8_gemm_speedup[OpKind::Matmul] = {{137.4, 1.650}};
  p.fp8_gemm_speedup[OpKind::MatmulBwdData] = {{274.9, 1.666}};
  p.fp8_gemm_speedup[OpKind::MatmulBwdWeight] = {{274.9, 1.650}};
  return p;
}

std::string shapeKey(const Task& task) {
  const OpAttrs& a = task.attrs;
  std::string key;
  auto add = [&](const char* name, int64_t v) {
    if (v == 0) return;
    if (!key.empty()) key += ' ';
    key += name;
    key += '=';
    key += std::to_string(v);
  };
  add("m", a.m);
  add("n", a.n);
  add("k", a.k);
  add("b", a.b);
  add("t", a.t);
  add("c", a.c);
  add("h", a.h);
  // Grouped-query attention (the Llama family) is another kernel sequence
  // than multi-head attention of the same b, t, c, h on the GPU (the
  // executor rotates queries and keys into a copy first, and a key/value
  // head's gradients are summed over its group): a shape of its own. 0
  // (GPT-2) adds nothing, so existing calibrations keep their keys.
  add("kv", a.kv_heads);
  add("v", a.v);
  // An FP8 GEMM is another kernel than the bf16 one of its shape: a
  // profiled FP8 run calibrates it apart (its key has a field more, so no
  // bf16 shape is its neighbour either). One that transposes operands
  // itself (no cast wrote their K-major copies) measures those kernels too.
  if (a.fp8) {
    add("fp8", 1);
    add("fp8t", gpu_footprint::fp8TransposeCount(task));
  }
  // A norm or activation writing FP8 (delayed scaling) is another kernel
  // than its bf16 twin: "fp8out" is the number of layouts it writes (2 with
  // the transposed copy).
  if (a.fp8_out) add("fp8out", a.fp8_transposed_out ? 2 : 1);
  // A fused GEMM is another kernel than the plain one of the same shape.
  if (task.epilogue != Epilogue::None)
    return key + (key.empty() ? "" : " ") + "epi=" + std::string(toString(task.epilogue));
  add("elements", a.elements);
  return key;
}

OpKind costOpKind(const Task& task) {
  switch (task.epilogue) {
    case Epilogue::Gelu:
    case Epilogue::Residual: return OpKind::Matmul;
    case Epilogue::DGelu: return OpKind::MatmulBwdData;
    case Epilogue::AddLayerNorm: return OpKind::LayerNorm;
    case Epilogue::None: break;
  }
  return task.op;
}

namespace {

[[noreturn]] void fail(const std::string& source, const YAML::Node& node, const std::string& what) {
  int line = node.IsDefined() ? node.Mark().line + 1 : 0;
  throw CalibrationError(source + ":" + std::to_string(line) + ": " + what);
}

double number(const std::string& source, const YAML::Node& node, const std::string& field, double lo,
              double hi) {
  double v = 0;
  try {
    v = node.as<double>();
  } catch (const YAML::Exception&) {
    fail(source, node, field + ": expected a number");
  }
  if (!(v >= lo && v <= hi))
    fail(source, node, field + ": " + node.as<std::string>() + " is out of range [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "]");
  return v;
}

// A map of op kinds to numbers in [lo, hi] (`what` says what they are).
std::map<OpKind, double> opKindNumbers(const std::string& source, const YAML::Node& node, const std::string& key,
                                       const std::string& what, double lo, double hi) {
  if (!node.IsMap()) fail(source, node, key + ": expected a map of op kinds to " + what);
  std::map<OpKind, double> out;
  for (const auto& op : node) {
    const std::string name = op.first.as<std::string>();
    const auto kind = parseOpKind(name);
    if (!kind) fail(source, op.first, key + "." + name + ": unknown op kind (allowed: matmul, attention, ...)");
    out[*kind] = number(source, op.second, key + "." + name, lo, hi);
  }
  return out;
}

CostEntry parseEntry(const std::string& source, const YAML::Node& node, const std::string& field,
                     bool allow_shapes) {
  if (!node.IsMap()) fail(source, node, field + ": expected a map");
  CostEntry e;
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const std::string f = field + "." + key;
    if (key == "ns") {
      e.ns = int64_t(number(source, kv.second, f, 0, 1e15));
    } else if (key == "flops_efficiency") {
      e.flops_efficiency = number(source, kv.second, f, 1e-6, 1.0);
    } else if (key == "bw_efficiency") {
      e.bw_efficiency = number(source, kv.second, f, 1e-6, 1.0);
    } else if (key == "fit") {
      if (!kv.second.IsMap()) fail(source, kv.second, f + ": expected a map of base_ns, ns_per_gflop, ns_per_mb");
      e.has_fit = true;
      for (const auto& c : kv.second) {
        const std::string ck = c.first.as<std::string>();
        double v = number(source, c.second, f + "." + ck, 0, 1e15);
        if (ck == "base_ns") e.base_ns = v;
        else if (ck == "ns_per_gflop") e.ns_per_gflop = v;
        else if (ck == "ns_per_mb") e.ns_per_mb = v;
        else if (ck == "ns_per_mb_slow") e.ns_per_mb_slow = v;
        else fail(source, c.first,
                  f + "." + ck + ": unknown key (allowed: base_ns, ns_per_gflop, ns_per_mb, ns_per_mb_slow)");
      }
    } else if (key == "shapes" && allow_shapes) {
      // handled by the caller
    } else if (key == "gflop" && !allow_shapes) {
      e.gflop = number(source, kv.second, f, 0, 1e12);
    } else if (key == "mb" && !allow_shapes) {
      e.mb = number(source, kv.second, f, 0, 1e12);
    } else if (key == "from" && !allow_shapes) {
      const std::string v = kv.second.IsScalar() ? kv.second.as<std::string>() : std::string();
      if (v == "sweep") e.origin = ShapeOrigin::Sweep;
      else if (v == "runs") e.origin = ShapeOrigin::Runs;
      else fail(source, kv.second, f + ": expected sweep or runs, got '" + v + "'");
    } else if (key == "blocks") {
      const double v = number(source, kv.second, f, 1, 1e9);
      if (v != std::floor(v)) fail(source, kv.second, f + ": expected a whole number of thread blocks");
      e.blocks = int(v);
    } else if (!allow_shapes && (key == "threads" || key == "regs" || key == "smem" || key == "cluster")) {
      // A block's resources: threads 1-1024, registers per thread up to
      // 255, shared memory up to an SM's 228 KiB, clusters up to 16 blocks.
      const double hi = key == "threads" ? 1024 : key == "regs" ? 255 : key == "smem" ? 228 * 1024 : 16;
      const double v = number(source, kv.second, f, key == "threads" || key == "cluster" ? 1 : 0, hi);
      if (v != std::floor(v)) fail(source, kv.second, f + ": expected a whole number");
      (key == "threads" ? e.threads : key == "regs" ? e.registers : key == "smem" ? e.shared_bytes : e.cluster) =
          int(v);
    } else if (!allow_shapes && key == "tile") {
      const std::string v = kv.second.IsScalar() ? kv.second.as<std::string>() : std::string();
      e.tile = parseGemmTile(v);
      if (!e.tile) fail(source, kv.second, f + ": expected a GEMM tile as MxN (8 to 512 each), got '" + v + "'");
    } else {
      fail(source, kv.first,
           f + ": unknown key (allowed: ns, flops_efficiency, bw_efficiency, fit, blocks" +
               std::string(allow_shapes ? ", shapes)" : ", threads, regs, smem, cluster, tile, gflop, mb, from)"));
    }
  }
  return e;
}

bool isGemmKind(OpKind op) {
  return op == OpKind::Matmul || op == OpKind::MatmulBwdData || op == OpKind::MatmulBwdWeight;
}

// The GEMM op kind a map key of section `section` names; fails otherwise.
OpKind gemmKindKey(const std::string& source, const YAML::Node& key, const std::string& section) {
  const std::string name = key.as<std::string>();
  const auto kind = parseOpKind(name);
  if (!kind || !isGemmKind(*kind))
    fail(source, key,
         section + "." + name + ": not a GEMM op kind (allowed: matmul, matmul_bwd_data, matmul_bwd_weight)");
  return *kind;
}

// One census entry's text, "blocks 120 cluster 8 tile 128x160 threads 384
// regs 168 smem 213220": pairs of a name and a value, blocks required. One
// YAML scalar per shape, not a map: a census holds thousands, and
// yaml-cpp's maps took 0.15 s of every simulation to read them.
CostEntry parseGemmKernel(const std::string& source, const YAML::Node& node, const std::string& field) {
  const std::string text = node.IsScalar() ? node.as<std::string>() : std::string();
  std::istringstream in(text);
  std::string name, value;
  CostEntry e;
  while (in >> name) {
    if (!(in >> value)) fail(source, node, field + ": '" + name + "' has no value");
    if (name == "tile") {
      e.tile = parseGemmTile(value);
      if (!e.tile) fail(source, node, field + ": expected a GEMM tile as MxN (8 to 512 each), got '" + value + "'");
      continue;
    }
    int* slot = name == "blocks"    ? &e.blocks
                : name == "cluster" ? &e.cluster
                : name == "threads" ? &e.threads
                : name == "regs"    ? &e.registers
                : name == "smem"    ? &e.shared_bytes
                                    : nullptr;
    if (!slot) fail(source, node, field + ": unknown '" + name + "' (allowed: blocks, cluster, tile, threads, regs, smem)");
    const auto v = parseFiniteNumber(value);
    if (!v || *v < 0 || *v > 1e9 || *v != std::floor(*v))
      fail(source, node, field + ": " + name + " must be a whole number, got '" + value + "'");
    *slot = int(*v);
  }
  if (e.blocks <= 0) fail(source, node, field + ": blocks is required (\"blocks 132 ...\")");
  return e;
}

// `gemm_kernels:` (Calibration::gemm_kernels): per GEMM op kind, shape keys
// to the kernel's geometry (parseGemmKernel).
std::map<OpKind, std::map<std::string, CostEntry>> parseGemmKernels(const std::string& source,
                                                                   const YAML::Node& node) {
  if (!node.IsMap()) fail(source, node, "gemm_kernels: expected a map of GEMM op kinds");
  std::map<OpKind, std::map<std::string, CostEntry>> out;
  for (const auto& op : node) {
    const OpKind kind = gemmKindKey(source, op.first, "gemm_kernels");
    const std::string name = op.first.as<std::string>();
    if (!op.second.IsMap()) fail(source, op.second, "gemm_kernels." + name + ": expected a map of shape keys");
    auto& shapes = out[kind];
    for (const auto& sh : op.second) {
      const std::string field = "gemm_kernels." + name + "[" + sh.first.as<std::string>() + "]";
      shapes[sh.first.as<std::string>()] = parseGemmKernel(source, sh.second, field);
    }
  }
  return out;
}

// `fp8_gemm_speedup:` per GEMM op kind, [gflop, speedup] points in
// ascending GFLOP (Calibration::fp8_gemm_speedup).
std::map<OpKind, std::vector<std::pair<double, double>>> parseFp8GemmSpeedup(const std::string& source,
                                                                            const YAML::Node& node) {
  if (!node.IsMap()) fail(source, node, "fp8_gemm_speedup: expected a map of GEMM op kinds");
  std::map<OpKind, std::vector<std::pair<double, double>>> out;
  for (const auto& op : node) {
    const OpKind kind = gemmKindKey(source, op.first, "fp8_gemm_speedup");
    const std::string what = "fp8_gemm_speedup." + op.first.as<std::string>();
    if (!op.second.IsSequence() || op.second.size() == 0)
      fail(source, op.second, what + ": expected a list of [gflop, speedup]");
    auto& points = out[kind];
    for (const auto& pt : op.second) {
      if (!pt.IsSequence() || pt.size() != 2) fail(source, pt, what + ": each entry is [gflop, speedup]");
      const double gflop = number(source, pt[0], what + " gflop", 1e-6, 1e9);
      const double speedup = number(source, pt[1], what + " speedup", 0.1, 10.0);
      if (!points.empty() && gflop <= points.back().first) fail(source, pt, what + ": GFLOP must be ascending");
      points.push_back({gflop, speedup});
    }
  }
  return out;
}

}  // namespace

Calibration parseCalibration(const std::string& yaml_text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    throw CalibrationError(source + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  Calibration cal;
  cal.source = source;
  if (!root.IsMap()) throw CalibrationError(source + ":1: expected a map with version, ops, collectives");
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (key == "version") {
      if (number(source, kv.second, "version", 1, 1e9) != 1) fail(source, kv.second, "version: only 1 is known");
    } else if (key == "gpu") {
      const std::string v = kv.second.IsScalar() ? kv.second.as<std::string>() : std::string();
      if (v.empty()) fail(source, kv.second, "gpu: expected the GPU's name as its runs recorded it (\"NVIDIA H200\")");
      cal.gpu = v;
    } else if (key == "launch_overhead_ns") {
      cal.launch_overhead_ns = int64_t(number(source, kv.second, key, 0, 1e9));
    } else if (key == "step_overhead_ns") {
      cal.step_overhead_ns = int64_t(number(source, kv.second, key, 0, 1e12));
    } else if (key == "multi_rank_launch_ns") {
      cal.multi_rank_launch_ns = int64_t(number(source, kv.second, key, 0, 1e9));
    } else if (key == "comm_slowdown") {
      cal.comm_slowdown = number(source, kv.second, key, 1.0, 10.0);
    } else if (key == "comm_slowdown_by_op") {
      cal.comm_slowdown_by_op = opKindNumbers(source, kv.second, key, "factors", 1.0, 10.0);
    } else if (key == "kernel_revisions") {
      for (const auto& [op, rev] : opKindNumbers(source, kv.second, key, "revisions", 1, 1e9))
        cal.kernel_revisions[op] = int(rev);
    } else if (key == "kernel_overlap_efficiency") {
      cal.kernel_overlap_efficiency = number(source, kv.second, key, 0.5, 2.0);
    } else if (key == "kernel_sharing") {
      const std::string v = kv.second.IsScalar() ? kv.second.as<std::string>() : std::string();
      if (v == "first_holds")
        cal.kernel_sharing = KernelSharing::FirstHolds;
      else if (v == "fair")
        cal.kernel_sharing = KernelSharing::Fair;
      else
        fail(source, kv.second, "kernel_sharing: expected first_holds or fair, got '" + v + "'");
    } else if (key == "fixed_grid_guests") {
      const std::string v = kv.second.IsScalar() ? kv.second.as<std::string>() : std::string();
      if (v != "true" && v != "false")
        fail(source, kv.second, "fixed_grid_guests: expected true or false, got '" + v + "'");
      cal.fixed_grid_guests = v == "true";
    } else if (key == "collective_start_wait") {
      cal.collective_start_wait = number(source, kv.second, key, 0.0, 1.0);
    } else if (key == "collective_beside") {
      if (!kv.second.IsMap()) fail(source, kv.second, "collective_beside: expected a map of task roles to factors");
      for (const auto& role : kv.second)
        cal.collective_beside[role.first.as<std::string>()] =
            number(source, role.second, "collective_beside." + role.first.as<std::string>(), 0.2, 5.0);
    } else if (key == "ops") {
      if (!kv.second.IsMap()) fail(source, kv.second, "ops: expected a map of op kinds");
      for (const auto& op : kv.second) {
        const std::string name = op.first.as<std::string>();
        auto kind = parseOpKind(name);
        if (!kind)
          fail(source, op.first, "ops." + name + ": unknown op kind (allowed: matmul, attention, layernorm, ...)");
        OpCalibration oc;
        oc.all_shapes = parseEntry(source, op.second, "ops." + name, true);
        if (const YAML::Node shapes = op.second["shapes"]) {
          if (!shapes.IsMap()) fail(source, shapes, "ops." + name + ".shapes: expected a map of shape keys");
          for (const auto& sh : shapes)
            oc.shapes[sh.first.as<std::string>()] =
                parseEntry(source, sh.second, "ops." + name + ".shapes[" + sh.first.as<std::string>() + "]", false);
        }
        cal.ops[*kind] = std::move(oc);
      }
    } else if (key == "gemm_kernels") {
      cal.gemm_kernels = parseGemmKernels(source, kv.second);
    } else if (key == "fp8_gemm_speedup") {
      cal.fp8_gemm_speedup = parseFp8GemmSpeedup(source, kv.second);
    } else if (key == "fp8_writer_slowdown") {
      if (!kv.second.IsMap()) fail(source, kv.second, "fp8_writer_slowdown: expected a map of op kinds");
      for (const auto& op : kv.second) {
        const std::string name = op.first.as<std::string>();
        const auto kind = parseOpKind(name);
        if (!kind) fail(source, op.first, "fp8_writer_slowdown." + name + ": not an op kind");
        cal.fp8_writer_slowdown[*kind] = number(source, op.second, "fp8_writer_slowdown." + name, 0.1, 10.0);
      }
    } else if (key == "collectives") {
      if (!kv.second.IsSequence()) fail(source, kv.second, "collectives: expected a list");
      for (const auto& item : kv.second) {
        CollectiveCalibration c;
        bool has_op = false, has_ranks = false, has_gbps = false;
        for (const auto& f : item) {
          const std::string fk = f.first.as<std::string>();
          if (fk == "op") {
            auto op = parseCollectiveOp(f.second.as<std::string>());
            if (!op)
              fail(source, f.second, "collectives.op: unknown (allowed: all_reduce, all_gather, reduce_scatter, "
                                     "broadcast, reduce, all_to_all, send, recv)");
            c.op = *op;
            has_op = true;
          } else if (fk == "ranks") {
            c.ranks = int(number(source, f.second, "collectives.ranks", 1, 1e7));
            has_ranks = true;
          } else if (fk == "latency_ns") {
            c.latency_ns = int64_t(number(source, f.second, "collectives.latency_ns", 0, 1e12));
          } else if (fk == "gbps") {
            c.gbps = number(source, f.second, "collectives.gbps", 1e-6, 1e6);
            has_gbps = true;
          } else if (fk == "sizes") {
            if (!f.second.IsSequence()) fail(source, f.second, "collectives.sizes: expected a list of [bytes, gbps]");
            for (const auto& pt : f.second) {
              if (!pt.IsSequence() || pt.size() != 2)
                fail(source, pt, "collectives.sizes: each entry is [bytes, gbps]");
              const double bytes = number(source, pt[0], "collectives.sizes bytes", 1, 1e15);
              const double gbps = number(source, pt[1], "collectives.sizes gbps", 1e-6, 1e6);
              if (!c.sizes.empty() && bytes <= c.sizes.back().first)
                fail(source, pt, "collectives.sizes: sizes must be ascending");
              c.sizes.push_back({bytes, gbps});
            }
          } else {
            fail(source, f.first, "collectives." + fk + ": unknown key (allowed: op, ranks, latency_ns, gbps, sizes)");
          }
        }
        if (!has_op || !has_ranks || !has_gbps) fail(source, item, "collectives: each entry needs op, ranks and gbps");
        cal.collectives.push_back(c);
      }
    } else {
      fail(source, kv.first,
           key + ": unknown key (allowed: version, gpu, launch_overhead_ns, comm_slowdown, comm_slowdown_by_op, "
                 "step_overhead_ns, multi_rank_launch_ns, kernel_revisions, kernel_overlap_efficiency, "
                 "kernel_sharing, fixed_grid_guests, collective_start_wait, collective_beside, fp8_gemm_speedup, "
                 "fp8_writer_slowdown, ops, collectives)");
    }
  }
  return cal;
}

Calibration loadCalibration(const std::string& path) {
  // A folder opens as a stream that reads nothing: say what it is instead of
  // "expected a map".
  if (std::filesystem::is_directory(path))
    throw CalibrationError(path + ":0: is a folder, not a calibration file");
  std::ifstream in(path);
  if (!in) throw CalibrationError(path + ":0: cannot read the calibration file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parseCalibration(ss.str(), path);
}

namespace {

// Whether an op kind's kernel takes its slow path at rows this wide
// (slowPathMb). Calibrations from before the layernorm backward took the
// block-per-row kernels beyond 768 fitted the warp kernel's shared-memory
// sums there; for later ones the per-MB term is the block-per-row kernel's
// own segment of the fit.
bool onSlowPath(OpKind op, int64_t c) { return op == OpKind::LayerNormBwd && c > 768; }

// The GPU executor's kernel for a norm's rows this wide (bf16): a warp per
// row up to 2048 (the RMSNorm forward's up to 1024, the layernorm
// backward's up to 768), a block per row up to 8192, and beyond that
// kernels that hold no whole row (engine/cuda/layernorm.cu, llama.cu). ""
// for other op kinds.
std::string normKernelPath(OpKind op, int64_t c) {
  const bool norm = op == OpKind::LayerNorm || op == OpKind::LayerNormBwd || op == OpKind::RmsNorm ||
                    op == OpKind::RmsNormBwd;
  if (!norm || c <= 0) return "";
  if (c > 8192) return "streamed";
  const int64_t warp_up_to = op == OpKind::RmsNorm ? 1024 : op == OpKind::LayerNormBwd ? 768 : 2048;
  return c > warp_up_to ? "wide" : "";
}

// The key a shape is interpolated under: its shape key, with the kernel's
// path added where the op kind has several (shapes on different paths are
// different kernels, whose efficiencies must not mix).
std::string interpolationKey(OpKind op, const std::string& key) {
  int64_t c = 0;
  for (const auto& [field, value] : parseShapeKey(key))
    if (field == "c") c = int64_t(parseFiniteNumber(value).value_or(0));
  const std::string path = normKernelPath(op, c);
  return path.empty() ? key : key + " path=" + path;
}

}  // namespace

RooflineCostModel::RooflineCostModel(RooflineParams params, Calibration calibration)
    : params_(params), calibration_(std::move(calibration)) {
  if (calibration_.launch_overhead_ns) params_.launch_overhead_ns = *calibration_.launch_overhead_ns;
  if (calibration_.comm_slowdown) params_.comm_slowdown = *calibration_.comm_slowdown;
  if (calibration_.kernel_overlap_efficiency)
    params_.kernel_overlap_efficiency = *calibration_.kernel_overlap_efficiency;
  if (calibration_.kernel_sharing) params_.kernel_sharing = *calibration_.kernel_sharing;
  for (const auto& [op, oc] : calibration_.ops) {
    std::map<std::string, int64_t> measured;
    std::map<std::string, ShapeWork> with_work;
    for (const auto& [key, entry] : oc.shapes) {
      measured[key] = entry.ns;
      if (entry.ns > 0 && entry.gflop >= 0 && entry.mb >= 0)
        with_work[interpolationKey(op, key)] = {entry.ns, entry.gflop, entry.mb};
    }
    interpolators_[op] = ShapeInterpolator(measured);
    if (!with_work.empty()) work_interpolators_[op] = WorkInterpolator(with_work);
    if (op != OpKind::Matmul && op != OpKind::MatmulBwdData && op != OpKind::MatmulBwdWeight) continue;
    for (const auto& [key, entry] : oc.shapes)
      if (const auto flops = gemmKeyFlops(key); flops && entry.ns > 0)
        fastest_flop_per_ns_[op] = std::max(fastest_flop_per_ns_[op], *flops / double(entry.ns));
  }
}

std::optional<double> gemmKeyFlops(const std::string& key) {
  double m = 0, n = 0, k = 0;
  for (const auto& [field, value] : parseShapeKey(key)) {
    double* at = field == "m" ? &m : field == "n" ? &n : field == "k" ? &k : nullptr;
    if (at == nullptr) continue;
    try {
      *at = std::stod(value);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  if (m <= 0 || n <= 0 || k <= 0) return std::nullopt;
  return 2.0 * m * n * k;
}

std::string taskRole(const std::string& name) {
  size_t begin = 0;
  if (name.rfind("layer", 0) == 0) {
    size_t i = 5;
    while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
    if (i > 5 && i < name.size() && name[i] == '.') begin = i + 1;
  }
  size_t end = name.size();
  const size_t mb = name.rfind(".mb");
  if (mb != std::string::npos && mb >= begin && mb + 3 < name.size() &&
      std::all_of(name.begin() + long(mb + 3), name.end(),
                  [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
    end = mb;
  return name.substr(begin, end - begin);
}


double slowPathMb(const Task& task) {
  if (onSlowPath(costOpKind(task), task.attrs.c)) return double(task.bytes_read + task.bytes_written) / 1e6;
  return 0;
}

int64_t RooflineCostModel::trailingNs(const Task& task, const DeviceSpec& device, Precision precision) const {
  // The executor's bias gradient after a weight GEMM: kernels that read dy
  // once, at an elementwise op's share of the memory bandwidth (a roofline
  // estimate on purpose: calibration measures the task as a whole).
  if (task.op != OpKind::MatmulBwdWeight || !task.attrs.has_bias || task.fused_into >= 0 || device.hbm_gbps <= 0)
    return 0;
  const double bytes = double(task.attrs.m) * double(task.attrs.n) * (precision == Precision::FP32 ? 4.0 : 2.0);
  return int64_t(std::ceil(bytes / (device.hbm_gbps * params_.bw_efficiency[size_t(OpKind::Add)])));
}

bool blocksTakeWholeSms(OpKind op) {
  return op == OpKind::Matmul || op == OpKind::MatmulBwdData || op == OpKind::MatmulBwdWeight ||
         op == OpKind::Attention || op == OpKind::AttentionBwd;
}

SmRoom RooflineCostModel::smRoomBeside(const Task& task, const DeviceSpec& device) const {
  const int blocks = kernelBlocks(task, device);
  if (blocks <= 0) return SmRoom::Unknown;
  if (!blocksTakeWholeSms(costOpKind(task))) return SmRoom::Some;
  if (device.sm_count <= 0) return SmRoom::Unknown;
  return blocks >= device.sm_count ? SmRoom::None : SmRoom::Some;
}

double RooflineCostModel::spareSmShare(const Task& task, const DeviceSpec& device) const {
  const int blocks = kernelBlocks(task, device);
  if (blocks <= 0 || !blocksTakeWholeSms(costOpKind(task)) || device.sm_count <= 0 || blocks >= device.sm_count)
    return -1;
  return double(device.sm_count - blocks) / double(device.sm_count);
}

// Besides the persistent GEMMs: kernels whose calibrated grid is at most two
// blocks per SM, each block taking an even share of the rows (the
// layernorm's and RMSNorm's backwards: 256 or 264 blocks on 132 SMs, their
// weight-gradient partial sums per block). In an H100's held-out traces
// such a backward, launched beside a weight-gradient GEMM that left 12 SMs,
// did no useful work until the GEMM ended (its time beside the GEMM was 1.9
// to 5 times its time alone, about its time alone after the GEMM's end
// plus the overlap), where SwiGLU's and GELU's backwards (tens of
// thousands of small blocks) progressed beside it (docs/accuracy.md).
// Only under a calibration fitted with the rule (Calibration::fixed_grid_guests).
bool RooflineCostModel::fixedGrid(const Task& task, const DeviceSpec& device) const {
  if (CostModel::fixedGrid(task, device)) return true;
  if (!calibration_.fixed_grid_guests || blocksTakeWholeSms(costOpKind(task)) || device.sm_count <= 0) return false;
  const int blocks = kernelBlocks(task, device);
  return blocks > 0 && blocks <= 2 * device.sm_count;
}

namespace {

// The measured shape whose kernel (tile, blocks) a shape not measured most
// likely gets: the nearest, a GEMM's output dimensions first. The kernel
// follows the output's shape more than the depth summed over: of the H100
// sweep's neighbours a factor 1.3-4.5 apart in one dimension, 74% of
// weight-gradient pairs apart in depth (the tokens) share the tile, 35% of
// those apart in an output dimension. Leave-one-out over that sweep, the
// depth weighed 0.05-0.15 against the output dimensions predicts the rounds
// and the last round's blocks of 378 of 522 tiled shapes (weighed as much
// as they, 276) and the blocks of 499 of 544 (472).
std::optional<std::string> nearestKernelShape(const Task& task, const std::string& key,
                                              const std::vector<std::string>& candidates) {
  constexpr double kReductionWeight = 0.1;
  return nearestShapeKey(key, candidates, gemmReductionField(task), kReductionWeight);
}

}  // namespace

bool isFp8ShapeKey(const std::string& key) {
  return key.find("fp8=") != std::string::npos || key.find("fp8out=") != std::string::npos;
}

std::string RooflineCostModel::geometryKey(const Task& task) const {
  std::string key = shapeKey(task);
  if (!task.attrs.fp8) return key;
  if (const auto it = calibration_.ops.find(costOpKind(task)); it != calibration_.ops.end())
    for (const auto& [shape, e] : it->second.shapes)
      if (isFp8ShapeKey(shape)) return key;
  Task bf16 = task;
  bf16.attrs.fp8 = false;
  return shapeKey(bf16);
}

const CostEntry* RooflineCostModel::kernelEntry(const Task& task, const std::string& key, bool with_tile) const {
  const OpKind op = costOpKind(task);
  // Read once per shape: the nearest of thousands of census shapes, asked by every task.
  const std::string memo = fmt::format("{}|{}|{}", int(op), key, with_tile);
  {
    std::lock_guard<std::mutex> lock(memo_mutex_);
    if (const auto m = kernel_entry_memo_.find(memo); m != kernel_entry_memo_.end()) return m->second;
  }
  const CostEntry* e = kernelEntryUncached(task, key, with_tile);
  std::lock_guard<std::mutex> lock(memo_mutex_);
  kernel_entry_memo_.emplace(memo, e);
  return e;
}

const CostEntry* RooflineCostModel::kernelEntryUncached(const Task& task, const std::string& key,
                                                        bool with_tile) const {
  const OpKind op = costOpKind(task);
  const auto measured = calibration_.ops.find(op);
  const auto census = calibration_.gemm_kernels.find(op);
  auto usable = [&](const CostEntry& e) { return e.blocks > 0 && (!with_tile || e.tile); };
  // The shape's own kernel: as its runs traced it, else as the census found it.
  if (measured != calibration_.ops.end())
    if (const auto e = measured->second.shapes.find(key); e != measured->second.shapes.end() && usable(e->second))
      return &e->second;
  if (census != calibration_.gemm_kernels.end())
    if (const auto e = census->second.find(key); e != census->second.end() && usable(e->second)) return &e->second;
  // Else the nearest of both (a traced shape first where both have a key).
  std::map<std::string, const CostEntry*> candidates;
  if (measured != calibration_.ops.end())
    for (const auto& [shape, e] : measured->second.shapes)
      if (usable(e)) candidates.emplace(shape, &e);
  if (census != calibration_.gemm_kernels.end())
    for (const auto& [shape, e] : census->second)
      if (usable(e)) candidates.emplace(shape, &e);
  std::vector<std::string> keys;
  for (const auto& [shape, e] : candidates) keys.push_back(shape);
  if (const auto near = nearestKernelShape(task, key, keys)) return candidates.at(*near);
  return nullptr;
}

const CostEntry* RooflineCostModel::tiledEntry(const Task& task) const {
  if (task.fused_into >= 0) return nullptr;
  return kernelEntry(task, geometryKey(task), /*with_tile=*/true);
}

bool RooflineCostModel::hasLastRounds() const {
  for (const auto& [op, oc] : calibration_.ops)
    for (const auto& [shape, e] : oc.shapes)
      if (e.tile && e.blocks > 0) return true;
  for (const auto& [op, shapes] : calibration_.gemm_kernels)
    for (const auto& [shape, e] : shapes)
      if (e.tile && e.blocks > 0) return true;
  return false;
}

LastRound RooflineCostModel::lastRound(const Task& task, const DeviceSpec& device) const {
  const CostEntry* e = tiledEntry(task);
  if (!e || device.sm_count <= 0) return {};
  const int64_t tiles = gemmOutputTiles(task, e->tile);
  // Persistent blocks, at most one per SM, take tiles in turn (the traces:
  // of 260 tiles on 132 blocks, 4 blocks end after the first round). The
  // blocks are those of the shape whose tile this is: the kernel's.
  const int64_t active = std::min<int64_t>(e->blocks, device.sm_count);
  if (tiles <= active) return {};
  const int64_t rounds = (tiles + active - 1) / active;
  const int64_t last = tiles - (rounds - 1) * active;
  if (last >= active) return {};
  return {float(double(device.sm_count - last) / double(device.sm_count)), float(1.0 / double(rounds))};
}

int RooflineCostModel::kernelBlocks(const Task& task, const DeviceSpec& device) const {
  if (task.fused_into >= 0) return -1;
  const auto it = calibration_.ops.find(costOpKind(task));
  if (it == calibration_.ops.end()) return -1;
  const std::string key = geometryKey(task);
  // The answer depends on the op kind, the shape and the device's SMs.
  const std::string memo = fmt::format("{}|{}|{}", int(costOpKind(task)), key, device.sm_count);
  {
    std::lock_guard<std::mutex> lock(memo_mutex_);
    if (const auto m = blocks_memo_.find(memo); m != blocks_memo_.end()) return m->second;
  }
  const int blocks = kernelBlocksUncached(task, device, it->second, key);
  std::lock_guard<std::mutex> lock(memo_mutex_);
  blocks_memo_.emplace(memo, blocks);
  return blocks;
}

int RooflineCostModel::kernelBlocksUncached(const Task& task, const DeviceSpec& device, const OpCalibration& oc,
                                            const std::string& key) const {
  // With the GEMM census (Calibration::gemm_kernels) the kernel's own or
  // its nearest real choice over a dense grid of shapes: cuBLASLt's choice
  // of blocks does not follow the output's size (clusters of 8 leave 12 SMs
  // free at outputs of 5 to 20 million elements; docs/accuracy.md).
  if (calibration_.gemm_kernels.count(costOpKind(task)))
    if (const CostEntry* e = kernelEntry(task, key, /*with_tile=*/false)) return e->blocks;
  std::vector<std::string> with_blocks;
  for (const auto& [shape, e] : oc.shapes) {
    if (e.blocks <= 0) continue;
    if (shape == key) return e.blocks;
    with_blocks.push_back(shape);
  }
  // A calibration that traced no launch geometry for the kind says nothing.
  if (with_blocks.empty() && oc.all_shapes.blocks <= 0) return -1;
  // A GEMM whose output holds two waves of even the largest tile fills the
  // SMs: the GEMMs are persistent, a block per SM unless the output has
  // fewer tiles (every one of the 33 traced shapes of that size on H200,
  // GPT-2's and Llama 2 7B's, ran 132 blocks; a 7B shape's nearest GPT-2
  // neighbour, a weight gradient of 120 blocks, would leave 12 SMs free
  // that the real GEMM does not).
  if (device.sm_count > 0 && gemmOutputTiles(task) >= 2 * int64_t(device.sm_count)) return device.sm_count;
  // Another shape not measured takes its nearest measured neighbour's
  // (cuBLASLt picks kernels by shape: the vocabulary projection's weight
  // gradient fills the SMs at every batch where the layers' leave some
  // free), and without one the op kind's.
  if (const auto near = nearestKernelShape(task, key, with_blocks)) return oc.shapes.at(*near).blocks;
  return oc.all_shapes.blocks;
}

double RooflineCostModel::gemmShapeFactor(const Task& task, const DeviceSpec& device) const {
  const OpAttrs& a = task.attrs;
  double rows = 0, cols = 0, depth = 0;
  switch (costOpKind(task)) {
    case OpKind::Matmul: rows = double(a.m), cols = double(a.n), depth = double(a.k); break;
    case OpKind::MatmulBwdData: rows = double(a.m), cols = double(a.k), depth = double(a.n); break;
    case OpKind::MatmulBwdWeight: rows = double(a.n), cols = double(a.k), depth = double(a.m); break;
    default: return 1.0;
  }
  return gemmShapeFactor(rows * cols, depth, device);
}

// DeviceSpec::best_gemm_fraction of the GPU whose GEMMs the roofline's
// efficiencies describe (the GPU table's H100).
static double h100BestGemmFraction() {
  static const double fraction = gpuModelSpec("H100")->best_gemm_fraction;
  return fraction;
}

double RooflineCostModel::gemmShapeFactor(double outputs, double depth, const DeviceSpec& device) const {
  if (outputs <= 0 || depth <= 0) return 1.0;
  const double outputs_half = params_.gemm_outputs_half_per_sm * double(std::max(device.sm_count, 1));
  auto reached = [&](double o, double d) {
    double f = 1.0;
    if (params_.gemm_depth_half > 0) f *= d / (d + params_.gemm_depth_half);
    if (outputs_half > 0) f *= o / (o + outputs_half);
    return f;
  };
  // The op kinds' efficiencies are those of a large GEMM (8192 cubed) on an
  // H100; a GPU whose best GEMM reaches more of its peak reaches more.
  const double gpu = device.best_gemm_fraction > 0 ? device.best_gemm_fraction / h100BestGemmFraction() : 1.0;
  return gpu * reached(outputs, depth) / reached(8192.0 * 8192.0, 8192);
}

int64_t RooflineCostModel::materializedAttentionNs(const Task& task, const DeviceSpec& device,
                                                   Precision precision) const {
  const OpAttrs& a = task.attrs;
  const double el = precision == Precision::FP32 ? 4.0 : 2.0;
  const double scores = double(a.b) * double(a.h) * double(a.t) * double(a.t);  // elements of S, P, dP or dS
  const double rows = double(a.b) * double(a.t) * double(a.c);                   // of q, k, v, out or dout
  const double product = 2.0 * double(a.b) * double(a.t) * double(a.t) * double(a.c);  // a T x T x D GEMM per head
  const double head = a.h > 0 ? double(a.c) / double(a.h) : double(a.c);  // depth of Q K^T and dO V^T
  const double t = double(a.t);
  struct Kernel {
    double flops, bytes;
    OpKind as;  // whose efficiencies it takes
    double outputs = 0, depth = 0;  // a batched GEMM's, for its shape factor
  };
  // Batched GEMMs as the GEMMs; the softmax and its backward as the
  // loss's softmax passes.
  const std::vector<Kernel> kernels =
      task.op == OpKind::Attention
          ? std::vector<Kernel>{{product, (2 * rows + scores) * el, OpKind::Matmul, scores, head},  // S = Q K^T
                                {5 * scores, 2 * scores * el, OpKind::CrossEntropy},  // P = softmax(scale S, masked)
                                {product, (scores + 2 * rows) * el, OpKind::Matmul, rows, t}}  // out = P V
          : std::vector<Kernel>{{product, (2 * rows + scores) * el, OpKind::MatmulBwdData, scores, head},  // dP = dO V^T
                                {product, (scores + 2 * rows) * el, OpKind::MatmulBwdWeight, rows, t},     // dV = P^T dO
                                {4 * scores, 3 * scores * el, OpKind::CrossEntropyBwd},  // dS = P (dP - rowsum)
                                {product, (scores + 2 * rows) * el, OpKind::MatmulBwdData, rows, t},     // dQ = dS K
                                {product, (scores + 2 * rows) * el, OpKind::MatmulBwdWeight, rows, t}};  // dK = dS^T Q
  std::vector<Kernel> all = kernels;
  if (a.dropout > 0) {
    // Dropout on the probabilities, an elementwise pass each way (PyTorch's
    // fused dropout): P read, the dropped P and a byte of mask written; in
    // the backward dP' and the mask read, dP written. P V and its gradient
    // read the dropped P in place of P.
    all.push_back(Kernel{scores, (2 * el + 1) * scores, OpKind::Add});
  }
  const double peak = precision == Precision::FP32 ? device.fp32_flops : device.bf16_flops;
  int64_t ns = 0;
  for (const Kernel& k : all) {
    const double flops_eff = params_.flops_efficiency[size_t(k.as)] * gemmShapeFactor(k.outputs, k.depth, device);
    const double compute_ns = peak > 0 ? k.flops / (peak * 1e-9 * flops_eff) : 0;
    const double memory_ns = device.hbm_gbps > 0 ? k.bytes / (device.hbm_gbps * params_.bw_efficiency[size_t(k.as)]) : 0;
    ns += params_.launch_overhead_ns + int64_t(std::ceil(std::max(compute_ns, memory_ns)));
  }
  return ns;
}

std::optional<int64_t> RooflineCostModel::interpolatedNs(const Task& task, const std::string& key,
                                                         const DeviceSpec& device, Precision precision) const {
  const OpKind op = costOpKind(task);
  // Everything the answer depends on.
  const std::string memo = fmt::format("{}|{}|{}|{}|{}|{}|{}|{}", int(op), key, task.flops,
                                       task.bytes_read + task.bytes_written, device.bf16_flops, device.fp32_flops,
                                       device.hbm_gbps, int(precision));
  {
    std::lock_guard<std::mutex> lock(memo_mutex_);
    if (const auto it = interpolated_memo_.find(memo); it != interpolated_memo_.end()) return it->second;
  }
  const std::optional<int64_t> ns = interpolatedNsUncached(task, key, device, precision);
  std::lock_guard<std::mutex> lock(memo_mutex_);
  interpolated_memo_.emplace(memo, ns);
  return ns;
}

std::optional<int64_t> RooflineCostModel::interpolatedNsUncached(const Task& task, const std::string& key,
                                                                 const DeviceSpec& device, Precision precision) const {
  const OpKind op = costOpKind(task);
  // From the efficiency of measured neighbours where the calibration
  // records the shapes' work, else between two measured times.
  if (const auto w = work_interpolators_.find(op); w != work_interpolators_.end()) {
    const double bytes = double(task.bytes_read + task.bytes_written);
    if (const auto ns = w->second.ns(interpolationKey(op, key), task.flops * 1e-9, bytes * 1e-6,
                                     peakRates(device, precision), fixedNs(op)))
      return ns;
  }
  return interpolators_.at(op).ns(key);
}

std::vector<std::string> RooflineCostModel::fieldsBeyondMeasured(const Task& task) const {
  const OpKind op = costOpKind(task);
  const auto w = work_interpolators_.find(op);
  if (w == work_interpolators_.end()) return {};
  return w->second.fieldsBeyondMeasured(interpolationKey(op, geometryKey(task)));
}

const WorkInterpolator* RooflineCostModel::workInterpolator(OpKind op) const {
  const auto w = work_interpolators_.find(op);
  return w == work_interpolators_.end() ? nullptr : &w->second;
}

PeakRates RooflineCostModel::peakRates(const DeviceSpec& device, Precision precision) const {
  return {(precision == Precision::FP32 ? device.fp32_flops : device.bf16_flops) * 1e-9, device.hbm_gbps};
}

int64_t RooflineCostModel::fixedNs(OpKind op) const {
  // What a kernel of the kind costs whatever its work: the fit's constant
  // (launch included), else the launch.
  const CostEntry& kind = calibration_.ops.at(op).all_shapes;
  return kind.has_fit ? int64_t(std::llround(kind.base_ns)) : params_.launch_overhead_ns;
}

std::vector<double> RooflineCostModel::neighbourReadErrors(OpKind op, const DeviceSpec& device,
                                                           Precision precision) const {
  const auto w = work_interpolators_.find(op);
  if (w == work_interpolators_.end()) return {};
  const PeakRates peaks = peakRates(device, precision);
  const std::string memo = fmt::format("{}|{}|{}", int(op), peaks.flop_per_ns, peaks.bytes_per_ns);
  {
    std::lock_guard<std::mutex> lock(memo_mutex_);
    if (const auto it = read_errors_memo_.find(memo); it != read_errors_memo_.end()) return it->second;
  }
  std::vector<double> errors = w->second.leaveOneOutErrors(peaks, fixedNs(op));
  std::lock_guard<std::mutex> lock(memo_mutex_);
  read_errors_memo_.emplace(memo, errors);
  return errors;
}

int64_t RooflineCostModel::chainNs(const std::vector<PassKernel>& kernels, const DeviceSpec& device) const {
  const double flops_eff = params_.flops_efficiency[size_t(OpKind::Add)];
  const double bw_eff = params_.bw_efficiency[size_t(OpKind::Add)];
  int64_t ns = 0;
  for (const PassKernel& k : kernels) {
    // Elementwise arithmetic runs on the CUDA cores: the fp32 peak.
    const double compute_ns = device.fp32_flops > 0 ? k.flops / (device.fp32_flops * 1e-9 * flops_eff) : 0;
    const double memory_ns = device.hbm_gbps > 0 ? k.bytes / (device.hbm_gbps * bw_eff) : 0;
    ns += params_.launch_overhead_ns + int64_t(std::ceil(std::max(compute_ns, memory_ns)));
  }
  return ns;
}

RooflineCostModel::TaskTime RooflineCostModel::taskTime(const Task& task, const DeviceSpec& device,
                                                       Precision precision) const {
  if (!task.attrs.parts.empty() && task.fused_into < 0) return separateGemmsTime(task, device, precision);
  const bool attention = task.op == OpKind::Attention || task.op == OpKind::AttentionBwd;
  const std::vector<PassKernel> chain = eagerKernels(task, precision);
  // A calibration measured the fused kernel, not the chain that replaces it.
  if (!chain.empty() && !attention && task.fused_into < 0) return {chainNs(chain, device), TimeSource::Roofline};
  TaskTime t = ownKernelTime(task, device, precision);
  if (!attention || t.source == TimeSource::NoKernel) return t;
  // FlashAttention-2 in place of the fused kernel, and eager PyTorch's
  // kernels around it.
  if (const double stretch = flash2Stretch(task, device); stretch != 1.0)
    t.ns = int64_t(std::llround(double(t.ns) * stretch));
  t.ns += chainNs(chain, device);
  return t;
}

namespace {

// The part of a fused GEMM task that one of the framework's separate GEMMs
// computes (OpAttrs::parts): `width` of its n, with its FLOPs and bytes.
// The fused task's bytes give the element size; each part reads the whole
// of the operand the parts share (x forward, the weight gradient's x; the
// data gradient's output, which every part adds into).
Task gemmPart(const Task& task, int64_t width) {
  Task part = task;
  part.attrs.parts.clear();
  const OpAttrs& a = task.attrs;
  const double m = double(a.m), n = double(a.n), k = double(a.k), w = double(width);
  const double elements = m * k + n * k + m * n;
  const double elem = elements > 0 ? double(task.bytes_read + task.bytes_written) / elements : 2.0;
  part.attrs.n = width;
  part.flops = n > 0 ? task.flops * w / n : 0;
  double read = 0, written = 0;
  if (task.op == OpKind::MatmulBwdData) read = m * w + w * k, written = m * k;
  else if (task.op == OpKind::MatmulBwdWeight) read = m * w + m * k, written = w * k;
  else read = m * k + w * k, written = m * w;
  part.bytes_read = int64_t(std::llround(read * elem));
  part.bytes_written = int64_t(std::llround(written * elem));
  return part;
}

}  // namespace

bool RooflineCostModel::measuredShape(OpKind op, const std::string& key) const {
  const auto it = calibration_.ops.find(op);
  if (it == calibration_.ops.end()) return false;
  const auto sh = it->second.shapes.find(key);
  return sh != it->second.shapes.end() && (sh->second.ns >= 0 || sh->second.has_fit);
}

std::optional<RooflineCostModel::TaskTime> RooflineCostModel::fp8FromBf16Time(const Task& task,
                                                                             const DeviceSpec& device,
                                                                             Precision precision) const {
  if (!task.attrs.fp8 || task.fused_into >= 0) return std::nullopt;
  // The calibration's own measurement first, else the defaults'.
  auto table = calibration_.fp8_gemm_speedup.find(costOpKind(task));
  if (table == calibration_.fp8_gemm_speedup.end()) {
    table = params_.fp8_gemm_speedup.find(costOpKind(task));
    if (table == params_.fp8_gemm_speedup.end()) return std::nullopt;
  }
  // The same GEMM in bf16: its operands twice the bytes.
  Task bf16 = task;
  bf16.attrs.fp8 = false;
  bf16.bytes_read *= 2;
  const TaskTime t = ownKernelTime(bf16, device, precision);
  const auto& points = table->second;
  const double gflop = std::max(task.flops * 1e-9, 1e-9);
  double speedup = points.front().second;
  if (gflop >= points.back().first) {
    speedup = points.back().second;
  } else if (gflop > points.front().first) {
    const auto hi = std::upper_bound(points.begin(), points.end(), gflop,
                                     [](double g, const std::pair<double, double>& p) { return g < p.first; });
    const auto lo = hi - 1;
    const double w = std::log(gflop / lo->first) / std::log(hi->first / lo->first);
    speedup = lo->second + w * (hi->second - lo->second);
  }
  // The launch stays; the kernel's time shrinks, never below the FP8 peak.
  const double kernel = double(std::max<int64_t>(0, t.ns - params_.launch_overhead_ns)) / speedup;
  const double floor = device.fp8_flops > 0 ? task.flops / (device.fp8_flops * 1e-9) : 0;
  return TaskTime{params_.launch_overhead_ns + int64_t(std::ceil(std::max(kernel, floor))), t.source};
}

std::optional<RooflineCostModel::TaskTime> RooflineCostModel::fp8WriterFromBf16Time(const Task& task,
                                                                                   const DeviceSpec& device,
                                                                                   Precision precision) const {
  if (!task.attrs.fp8_out || task.fused_into >= 0 || !calibration_.ops.count(costOpKind(task))) return std::nullopt;
  // The same kernel writing bf16: two bytes a value where FP8 writes one
  // per layout (the rest of its writes, an RMSNorm's rstd, counted alike).
  Task bf16 = task;
  bf16.attrs.fp8_out = false;
  bf16.attrs.fp8_transposed_out = false;
  bf16.bytes_written = task.bytes_written * 2 / (task.attrs.fp8_transposed_out ? 2 : 1);
  const TaskTime t = ownKernelTime(bf16, device, precision);
  const auto slowdown = calibration_.fp8_writer_slowdown.find(costOpKind(task));
  if (slowdown == calibration_.fp8_writer_slowdown.end()) return t;
  const double kernel = double(std::max<int64_t>(0, t.ns - params_.launch_overhead_ns)) * slowdown->second;
  return TaskTime{params_.launch_overhead_ns + int64_t(std::ceil(kernel)), t.source};
}

RooflineCostModel::TaskTime RooflineCostModel::separateGemmsTime(const Task& task, const DeviceSpec& device,
                                                                Precision precision) const {
  TaskTime sum{0, TimeSource::Measured};
  for (int64_t width : task.attrs.parts) {
    const TaskTime t = taskTime(gemmPart(task, width), device, precision);
    sum.ns += t.ns;
    // The least certain part's source names the whole.
    if (uint8_t(t.source) > uint8_t(sum.source)) sum.source = t.source;
  }
  return sum;
}

RooflineCostModel::TaskTime RooflineCostModel::ownKernelTime(const Task& task, const DeviceSpec& device,
                                                            Precision precision) const {
  const double bytes = double(task.bytes_read + task.bytes_written);
  if (task.kind == TaskKind::Host) return {params_.host_task_ns, TimeSource::NoKernel};
  // Its work runs in another task's fused GEMM (engine/passes/fusion.h): it
  // issues no kernel, so it has no launch either.
  if (task.fused_into >= 0) return {0, TimeSource::NoKernel};
  if (task.op == OpKind::LoadBatch || (task.kind == TaskKind::Memcpy && task.flops == 0 && device.hbm_gbps <= 0))
    return {params_.launch_overhead_ns + int64_t(std::ceil(bytes / params_.host_to_device_gbps)),
            TimeSource::NoKernel};
  // Copies and collectives are timed here too but are not kernels whose
  // time a calibration covers (calibration_coverage.h).
  const bool kernel =
      task.kind != TaskKind::Memcpy && task.kind != TaskKind::Collective && task.kind != TaskKind::SendRecv;
  auto from = [kernel](TimeSource s) { return kernel ? s : TimeSource::NoKernel; };

  // A calibration measured the fused attention kernels, not these.
  if (task.attrs.materialized && (task.op == OpKind::Attention || task.op == OpKind::AttentionBwd))
    return {materializedAttentionNs(task, device, precision), from(TimeSource::Roofline)};
  // A GELU backward that launches the DGELU GEMM (placed there by memory)
  // runs a GEMM: the roofline takes the data-gradient GEMM's efficiencies.
  const OpKind roofline_op = costOpKind(task);
  // An FP8 GEMM of a shape a profiled FP8 run measured takes that time;
  // any other, its bf16 time over the FP8 speed-up.
  const bool fp8_measured = task.attrs.fp8 && measuredShape(roofline_op, shapeKey(task));
  const int64_t fp8_transposes = task.attrs.fp8 && !fp8_measured ? fp8TransposeNs(task, device) : 0;
  if (!fp8_measured)
    if (const auto fp8 = fp8FromBf16Time(task, device, precision)) return {fp8->ns + fp8_transposes, fp8->source};
  if (task.attrs.fp8_out && !measuredShape(roofline_op, shapeKey(task)))
    if (const auto writer = fp8WriterFromBf16Time(task, device, precision)) return *writer;
  double flops_eff = params_.flops_efficiency[size_t(roofline_op)];
  double bw_eff = params_.bw_efficiency[size_t(roofline_op)];
  TimeSource source = TimeSource::Roofline;
  // A calibration measured bf16 GEMMs: an FP8 one it did not measure takes
  // the roofline at the FP8 peak (the op kind's efficiency against it,
  // docs/simulator.md).
  auto it = task.attrs.fp8 && !fp8_measured ? calibration_.ops.end() : calibration_.ops.find(roofline_op);
  if (it != calibration_.ops.end()) {
    const OpCalibration& oc = it->second;
    // The op kind's entry: exact for a kind calibrated as a whole, with no
    // shapes (a task the executor fuses away: "ns: 0"), else a fit over
    // shapes this task's may be outside of.
    const CostEntry* e = &oc.all_shapes;
    source = oc.shapes.empty() ? TimeSource::Measured : TimeSource::OpKindFit;
    const std::string key = shapeKey(task);
    if (auto sh = oc.shapes.find(key); sh != oc.shapes.end()) {
      e = &sh->second;
      // Only a shape entry with a time, a fit or an efficiency says more
      // than its op kind (one with blocks alone takes the kind's efficiencies).
      if (e->ns >= 0 || e->has_fit || e->flops_efficiency > 0 || e->bw_efficiency > 0) source = TimeSource::Measured;
    } else if (const auto between = interpolatedNs(task, key, device, precision)) {
      return {*between, from(TimeSource::Interpolated)};
    }
    if (e->ns >= 0) return {e->ns, from(source)};
    if (e->has_fit) {
      int64_t ns = std::llround(e->base_ns + e->ns_per_gflop * task.flops * 1e-9 + e->ns_per_mb * bytes * 1e-6 +
                                e->ns_per_mb_slow * slowPathMb(task));
      // The fit adds a FLOP term to a byte term; beyond the measured shapes,
      // where a GEMM's FLOPs outgrow its bytes, that sum promises more
      // FLOP/s than any measured shape ran at (Llama 2 7B's GEMMs under the
      // GPT-2 calibration: 20-33% fast). No faster than the fastest one.
      if (const auto fast = fastest_flop_per_ns_.find(roofline_op);
          source == TimeSource::OpKindFit && fast != fastest_flop_per_ns_.end() && fast->second > 0)
        ns = std::max(ns, int64_t(std::ceil(task.flops / fast->second)));
      return {ns, from(source)};
    }
    if (e->flops_efficiency > 0) flops_eff = e->flops_efficiency;
    if (e->bw_efficiency > 0) bw_eff = e->bw_efficiency;
    // A shape entry with only one efficiency keeps the op kind's other one.
    if (e != &oc.all_shapes) {
      if (e->flops_efficiency <= 0 && oc.all_shapes.flops_efficiency > 0) flops_eff = oc.all_shapes.flops_efficiency;
      if (e->bw_efficiency <= 0 && oc.all_shapes.bw_efficiency > 0) bw_eff = oc.all_shapes.bw_efficiency;
    }
  }
  if (source == TimeSource::Roofline) flops_eff *= gemmShapeFactor(task, device);
  const double peak = task.attrs.fp8                     ? device.fp8_flops
                      : precision == Precision::FP32 ? device.fp32_flops
                                                     : device.bf16_flops;
  // FLOP/s -> FLOP/ns, GB/s == bytes/ns.
  const double compute_ns = peak > 0 ? task.flops / (peak * 1e-9 * flops_eff) : 0;
  const double memory_ns = device.hbm_gbps > 0 ? bytes / (device.hbm_gbps * bw_eff) : 0;
  return {params_.launch_overhead_ns + int64_t(std::ceil(std::max(compute_ns, memory_ns))) + fp8_transposes,
          from(source)};
}

int64_t RooflineCostModel::fp8TransposeNs(const Task& task, const DeviceSpec& device) const {
  const int kernels = gpu_footprint::fp8TransposeCount(task);
  if (kernels == 0 || device.hbm_gbps <= 0) return 0;
  // A byte read and a byte written per element, as fast as a cast moves them.
  const double bytes = 2.0 * double(gpu_footprint::fp8TransposeBytes(task));
  const double ns = bytes / (device.hbm_gbps * params_.bw_efficiency[size_t(OpKind::CastFp8)]);
  return kernels * params_.launch_overhead_ns + int64_t(std::ceil(ns));
}

}  // namespace tandem::sim
