#pragma once
// Gradient buckets and data-parallel all-reduce.
//
// Parameter gradients are grouped in the order the backward completes them
// (reverse layer order), into buckets of comm.bucket_mib (the first one
// comm.first_bucket_mib, so communication starts early). Each bucket is one
// flat gradient tensor and every gradient is a view into it, so one
// collective covers the bucket. With data_parallel > 1 an all-reduce (average)
// of the bucket is issued on the comm stream right after the node that
// completes the bucket on the last micro-batch; earlier micro-batches only
// accumulate (gradient accumulation).

#include "engine/graph.h"
#include "engine/job.h"

namespace tandem {

void applyGradientBuckets(Graph& g, const JobSpec& job);

// Gradient norm and one AdamW node per bucket, after every all-reduce.
void appendOptimizer(Graph& g, const JobSpec& job);

}  // namespace tandem
