#pragma once
// Loads a run of a trace file (run_loader.h) on a worker thread, so that the
// window stays responsive while a file of millions of activities is read
// (seconds), with progress and cancellation. Progress and the outcome come
// back to the owner's thread as queued calls carrying plain values.

#include <QString>
#include <atomic>
#include <functional>
#include <memory>

#include "gui/run_loader.h"

class QObject;
class QThread;

namespace tandem::gui {

struct RunLoadCallbacks {
  std::function<void(int percent, const QString& stage)> progress;  // when the percent changes
  std::function<void(std::shared_ptr<LoadedRun>)> done;
  std::function<void(const QString& message, bool cancelled)> failed;
};

// Starts the worker and returns it (it deletes itself when finished). The
// callbacks run on the owner's thread, unless the owner is gone by then;
// setting `*cancel` stops the load at its next progress point (it then
// fails with cancelled = true).
QThread* startRunLoad(QObject* owner, const std::string& path, int64_t run, std::shared_ptr<std::atomic<bool>> cancel,
                      RunLoadCallbacks callbacks);

}  // namespace tandem::gui
