#include "gui/compare_worker.h"

#include <QThread>
#include <exception>
#include <memory>

#include "traces/store/trace_reader.h"

namespace tandem::gui {

QThread* startTraceComparison(QObject* owner, TraceComparisonRequest request,
                              std::function<void(const traces::RunComparison&)> done,
                              std::function<void(const QString&)> failed) {
  QThread* worker = QThread::create([owner, request, done = std::move(done), failed = std::move(failed)] {
    try {
      // One reader per file; the same file twice shares one.
      traces::TraceReader a(request.a_path);
      std::unique_ptr<traces::TraceReader> other;
      if (request.b_path != request.a_path) other = std::make_unique<traces::TraceReader>(request.b_path);
      traces::TraceReader& b = other ? *other : a;
      auto c = std::make_shared<traces::RunComparison>(
          traces::compareRuns(a, request.a_run, b, request.b_run, request.top_n));
      QMetaObject::invokeMethod(owner, [done, c] { done(*c); }, Qt::QueuedConnection);
    } catch (const std::exception& e) {
      QMetaObject::invokeMethod(
          owner, [failed, msg = QString::fromUtf8(e.what())] { failed(msg); }, Qt::QueuedConnection);
    }
  });
  QObject::connect(worker, &QThread::finished, worker, &QObject::deleteLater);
  worker->start();
  return worker;
}

}  // namespace tandem::gui
