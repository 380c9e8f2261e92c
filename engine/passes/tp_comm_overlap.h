#pragma once
// Tensor-parallel communication overlapped with the GEMMs beside it
// (schedule.tp_comm_overlap; Megatron-LM and NeMo's tp_comm_overlap through
// Transformer Engine's userbuffers): with sequence parallelism, each
// all-gather of a rank's tokens is pipelined into the GEMM that reads the
// gathered rows, and each reduce-scatter into the GEMM whose output it
// scatters: the GEMM works on the chunks that have arrived (or have been
// computed) while the rest move, so the pair takes about as long as the
// longer of the two instead of their sum.
//
// The pass marks such a collective (attrs.overlapped) and moves it to a
// communication stream of its own ("comm.tp"); lowering (engine/plan/lower.h)
// then lets its partner run beside it: the GEMM that first reads an
// all-gather's output does not wait for it, the next task on that GEMM's
// stream does; a reduce-scatter does not wait for the GEMM that writes its
// input but starts with it, and reads that GEMM's inputs (added to its
// reads) so that neither the events nor the memory plan let it outrun the
// GEMM's inputs. The arithmetic is unchanged (the CPU reference runs tasks
// in order); what changes is when the simulator lets them run.
//
// Only the sequence-parallel transitions that neighbour a GEMM are
// overlapped: the vocabulary-parallel loss's statistics and the norms'
// gradient sums keep their streams.

#include "engine/ir/graph.h"
#include "engine/spec/job.h"

namespace tandem {

// Returns the number of collectives it overlapped (0 unless the job asks).
int applyTpCommOverlap(Graph& g, const JobSpec& job);

}  // namespace tandem
