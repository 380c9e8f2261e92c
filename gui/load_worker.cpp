#include "gui/load_worker.h"

#include <QThread>
#include <exception>

namespace tandem::gui {

QThread* startRunLoad(QObject* owner, const std::string& path, int64_t run, std::shared_ptr<std::atomic<bool>> cancel,
                      RunLoadCallbacks callbacks) {
  auto cb = std::make_shared<RunLoadCallbacks>(std::move(callbacks));
  QThread* worker = QThread::create([owner, path, run, cancel, cb] {
    int last_pct = -1;
    LoadOptions options;
    options.progress = [&](int pct, const std::string& stage) {
      if (pct != last_pct && cb->progress) {
        last_pct = pct;
        QMetaObject::invokeMethod(
            owner, [cb, pct, text = QString::fromStdString(stage)] { cb->progress(pct, text); },
            Qt::QueuedConnection);
      }
      return !cancel->load();
    };
    try {
      auto loaded = std::make_shared<LoadedRun>(loadRunFile(path, run, options));
      QMetaObject::invokeMethod(owner, [cb, loaded] { cb->done(loaded); }, Qt::QueuedConnection);
    } catch (const LoadCancelled& e) {
      QMetaObject::invokeMethod(
          owner, [cb, msg = QString::fromUtf8(e.what())] { cb->failed(msg, true); }, Qt::QueuedConnection);
    } catch (const std::exception& e) {
      QMetaObject::invokeMethod(
          owner, [cb, msg = QString::fromUtf8(e.what())] { cb->failed(msg, false); }, Qt::QueuedConnection);
    }
  });
  QObject::connect(worker, &QThread::finished, worker, &QObject::deleteLater);
  worker->start();
  return worker;
}

}  // namespace tandem::gui
