#pragma once
// Chrome trace JSON (the Trace Event Format that Perfetto's UI and
// chrome://tracing open) from one run of a trace file.
//
// One process per rank (pid = rank), one thread per stream (tid = stream);
// complete events ("X") carry task, phase, layer, micro-batch, bytes and
// FLOPs as args; NVTX ranges go to a per-rank "annotations" thread and steps
// to a "steps" thread; counters become "C" events. A plan dependency between
// tasks on different streams of a rank (an event wait) becomes a flow arrow
// ("s" on the producer's last activity, "f" on the consumer's first).

#include <cstdint>
#include <ostream>

namespace tandem::traces {

class TraceReader;

struct ChromeExportSummary {
  int64_t slices = 0;
  int64_t flows = 0;
  int64_t counters = 0;
  int processes = 0;
  int threads = 0;
};

// Writes the JSON document to `out`. Throws TraceError for an unknown or
// empty run.
ChromeExportSummary exportChromeTrace(TraceReader& reader, int64_t run, std::ostream& out);

// Thread ids used for the non-stream tracks of each rank.
inline constexpr int kChromeAnnotationTid = 1'000'000;
inline constexpr int kChromeStepTid = 1'000'001;

}  // namespace tandem::traces
