#pragma once
// Moving cuBLASLt's memsets off the step graph's critical path.
//
// Most cuBLASLt algorithms on H200 zero a 4-byte counter in their workspace
// with a memset right before their kernel. Captured into the step's graph,
// each becomes a memset node between two kernels. When every GEMM launch of
// the graph has a workspace slice of its own (Gemm::beginGraphCapture), its
// memset depends on nothing that came before it in the step: it can run at
// the start of the graph, beside the first kernels, and the GEMM's kernel
// then follows its predecessor directly.
//
// Measured on H200 with GPT-2 124M (micro-batch 16, 99 such memsets per
// step; docs/benchmarks.md): the profiled step's idle time between kernels
// fell from 491 to 276 us; unprofiled, steps launched one at a time got
// 0.14 ms faster and 2-GPU steps 0.1-0.3 ms, while one GPU with steps queued
// back to back did not change: there the GPU runs at its power cap, and
// idle gaps cost no energy.

#include <cuda_runtime.h>

#include <string>
#include <vector>

namespace tandem::cuda {

// For every memset node of `graph` that writes only inside [begin, end): its
// incoming edges are removed (it becomes a root of the graph) and each of its
// predecessors gets an edge to each of its dependents instead, so that the
// order of everything else is unchanged. Only valid when nothing else in the
// graph reads or writes the memset's bytes before its dependents run, and a
// replay of the graph starts after the previous one finished (graph launches
// on one stream). Returns how many memsets moved.
int hoistMemsetsInside(cudaGraph_t graph, const void* begin, const void* end);

// Merges every memset node of `graph` that writes zeros only inside
// [begin, end) into one memset of the whole range at the start of the
// graph: each such node is hoisted (as by hoistMemsetsInside), and each of
// its dependents also waits for the new whole-range memset. The nodes stay
// in the graph (the profiler maps graph kernels to plan tasks by node ids
// from capture, and removing nodes broke that); the caller disables them in
// the instantiated graph with disableNodes, which makes them empty nodes.
// Same conditions as hoistMemsetsInside, and nothing may rely on the other
// bytes of the range across a replay. Returns the merged nodes.
//
// Why not just hoist: the 99 hoisted memsets of a GPT-2 step became 99 roots
// of the graph, and the GPU ran them one after another at the step's start,
// about 2 us apart, 230 us in all, before the first kernel (profiled, one
// H200, micro-batch 16).
struct MergedMemsets {
  cudaGraphNode_t whole = nullptr;       // the new memset of the whole range (null when none merged)
  std::vector<cudaGraphNode_t> merged;  // the nodes it replaces, to disable
};
MergedMemsets mergeZeroMemsetsInside(cudaGraph_t graph, const void* begin, const void* end);

// Makes the whole-range memsets run before the graph's roots instead of
// before each GEMM that had a memset: every edge out of `whole` and out of
// the disabled `merged` nodes is removed, and each of `whole` gets an edge
// to every root of the graph (a node without dependencies that is neither).
// Everything in the graph then follows the whole-range memsets, and each
// such GEMM is left with the one dependency it was captured with: the
// kernel before it on its stream. Same conditions as mergeZeroMemsetsInside.
// Returns how many roots the memsets now precede.
//
// Why: with an edge from the whole-range memset and one from its disabled
// node, each of those GEMMs waited for three nodes, two of them on other
// branches of the graph; in a profiled GPT-2 step every such cuBLASLt
// kernel started 4-7 us after the kernel before it, our own kernels (one
// dependency) within 1 us. Measured in docs/benchmarks.md.
int orderBeforeRoots(cudaGraph_t graph, const std::vector<cudaGraphNode_t>& whole,
                     const std::vector<cudaGraphNode_t>& merged);

// The graph's edges: full dependencies (completion of the upstream node)
// and the others (programmatic or launch-completion edges, which a library
// can capture by launching with programmatic dependent launch allowed),
// with a few of the latter named "upstream -> downstream (type, port)".
struct GraphEdges {
  int full = 0, other = 0;
  std::vector<std::string> examples;
};
GraphEdges edgesOf(cudaGraph_t graph);

void disableNodes(cudaGraphExec_t exec, const std::vector<cudaGraphNode_t>& nodes);

// How many memset nodes the graph has (for the report).
int memsetNodesOf(cudaGraph_t graph);

}  // namespace tandem::cuda
