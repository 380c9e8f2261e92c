#pragma once
// Runs the trace store's comparison of two runs (traces/analysis/compare.h, the same
// figures `tandem compare` prints) on a worker thread: on runs of millions
// of activities it reads both files again and takes seconds. The outcome
// comes back to the owner's thread as a queued call carrying plain values.

#include <QString>
#include <functional>

#include "traces/analysis/compare.h"

class QObject;
class QThread;

namespace tandem::gui {

struct TraceComparisonRequest {
  std::string a_path, b_path;  // trace databases (A: the reference)
  int64_t a_run = -1, b_run = -1;
  size_t top_n = 20;           // tasks listed, largest difference first
};

// Starts the worker and returns it (it deletes itself when finished). `done`
// or `failed` (the store's message: a run without plan task ids, say) is
// called on the owner's thread, unless the owner is gone by then.
QThread* startTraceComparison(QObject* owner, TraceComparisonRequest request,
                              std::function<void(const traces::RunComparison&)> done,
                              std::function<void(const QString&)> failed);

}  // namespace tandem::gui
