#include "gui/what_if_worker.h"

#include <QThread>
#include <exception>
#include <memory>

namespace tandem::gui {

QThread* startWhatIf(QObject* owner, WhatIfRequest request, WhatIfCallbacks callbacks) {
  auto cb = std::make_shared<WhatIfCallbacks>(std::move(callbacks));
  QThread* worker = QThread::create([owner, request, cb] {
    try {
      const WhatIfResult r = runWhatIf(request, [owner, cb](int pct, const std::string& stage) {
        QMetaObject::invokeMethod(
            owner, [cb, pct, s = QString::fromStdString(stage)] { cb->progress(pct, s); }, Qt::QueuedConnection);
      });
      QMetaObject::invokeMethod(owner, [cb, r] { cb->done(r); }, Qt::QueuedConnection);
    } catch (const std::exception& e) {
      QMetaObject::invokeMethod(
          owner, [cb, msg = QString::fromUtf8(e.what())] { cb->failed(msg); }, Qt::QueuedConnection);
    }
  });
  QObject::connect(worker, &QThread::finished, owner, [worker, cb] {
    worker->deleteLater();
    cb->finished();
  });
  worker->start();
  return worker;
}

}  // namespace tandem::gui
