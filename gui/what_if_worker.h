#pragma once
// Runs a what-if (re-plan + simulate + append a run) on a worker thread. The
// worker only computes; progress and the outcome come back to the owner's
// thread as queued calls carrying plain values, so widgets are only touched
// from the GUI thread.

#include <QString>
#include <functional>

#include "gui/what_if.h"

class QObject;
class QThread;

namespace tandem::gui {

struct WhatIfCallbacks {
  std::function<void(int percent, const QString& stage)> progress;
  std::function<void(const WhatIfResult& result)> done;
  std::function<void(const QString& message)> failed;
  std::function<void()> finished;  // after done or failed; the thread is gone
};

// Starts the worker and returns it (it deletes itself when finished).
QThread* startWhatIf(QObject* owner, WhatIfRequest request, WhatIfCallbacks callbacks);

}  // namespace tandem::gui
