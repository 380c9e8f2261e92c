#include "gui/sweep_dialog.h"

#include <QCheckBox>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QTableWidget>
#include <QThread>
#include <QVBoxLayout>
#include <memory>

namespace tandem::gui {

SweepDialog::SweepDialog(WhatIfRequest base, QWidget* parent) : QDialog(parent), base_(std::move(base)) {
  setWindowTitle(tr("Sweep on %1").arg(QString::fromStdString(base_.settings.topology)));
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(new QLabel(tr("Job fields and their values, each combination simulated "
                                  "(as tandem sweep --vary; axes apart by ';'):"),
                               this));
  axes_edit_ = new QLineEdit(this);
  axes_edit_->setPlaceholderText("parallel.tensor_parallel=1,2,4; recompute.policy=none,selective,full");
  layout->addWidget(axes_edit_);
  keep_batch_ = new QCheckBox(tr("keep the global batch (each combination's accumulation set from its micro-batch "
                                 "and replicas)"),
                              this);
  keep_batch_->setChecked(true);
  layout->addWidget(keep_batch_);
  sweep_ = new QPushButton(tr("Sweep"), this);
  layout->addWidget(sweep_);
  progress_ = new QProgressBar(this);
  layout->addWidget(progress_);
  status_ = new QLabel(this);
  status_->setWordWrap(true);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(status_);
  table_ = new QTableWidget(this);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  layout->addWidget(table_, 1);
  connect(sweep_, &QPushButton::clicked, this, &SweepDialog::start);
  resize(900, 500);
}

SweepDialog::~SweepDialog() {
  if (worker_) worker_->wait();
}

void SweepDialog::setAxes(const QString& axes) { axes_edit_->setText(axes); }
void SweepDialog::setKeepGlobalBatch(bool keep) { keep_batch_->setChecked(keep); }
QString SweepDialog::statusText() const { return status_->text(); }

void SweepDialog::start() {
  if (worker_) return;
  sim::ConfigSweepRequest req;
  try {
    axes_.clear();
    for (const QString& part : axes_edit_->text().split(';', Qt::SkipEmptyParts))
      if (!part.trimmed().isEmpty()) axes_.push_back(sim::parseSweepAxis(part.trimmed().toStdString()));
    if (axes_.empty()) throw std::invalid_argument("name a job field and its values, e.g. training.micro_batch=4,8");
  } catch (const std::exception& e) {
    status_->setText(tr("Not swept: %1").arg(QString::fromUtf8(e.what())));
    return;
  }
  req.job_yaml = base_.job_yaml.empty() ? defaultJob().yaml : base_.job_yaml;
  req.job_source = base_.job_source;
  req.base_sets = base_.overrides;
  req.axes = axes_;
  req.settings = base_.settings;
  if (keep_batch_->isChecked()) {
    try {
      const JobSpec job = parseJob(req.job_yaml, req.job_source, req.base_sets);
      req.global_batch = job.training.micro_batch * job.training.grad_accum * job.parallel.data_parallel;
    } catch (const std::exception& e) {
      status_->setText(tr("Not swept: %1").arg(QString::fromUtf8(e.what())));
      return;
    }
  }
  const size_t total = sim::sweepCombinations(axes_).size();
  progress_->setRange(0, int(total));
  progress_->setValue(0);
  status_->setText(tr("Simulating %1 combinations...").arg(total));
  sweep_->setEnabled(false);
  auto result = std::make_shared<std::vector<sim::SweepRow>>();
  auto error = std::make_shared<QString>();
  worker_ = QThread::create([this, req, result, error] {
    try {
      *result = sim::runConfigSweep(req, [this](size_t done, size_t) {
        QMetaObject::invokeMethod(this, [this, done] { progress_->setValue(int(done)); }, Qt::QueuedConnection);
      });
    } catch (const std::exception& e) {
      *error = QString::fromUtf8(e.what());
    }
  });
  connect(worker_, &QThread::finished, this, [this, result, error] {
    worker_->deleteLater();
    worker_ = nullptr;
    sweep_->setEnabled(true);
    if (!error->isEmpty()) {
      status_->setText(tr("Failed: %1").arg(*error));
    } else {
      rows_ = std::move(*result);
      sim::rankSweepRows(rows_);
      showRows();
    }
    emit finished();
  });
  worker_->start();
}

void SweepDialog::showRows() {
  QStringList headers;
  for (const sim::SweepAxis& a : axes_) headers << QString::fromStdString(sim::sweepAxisLabel(a));
  headers << tr("GPUs") << tr("step ms") << tr("tokens/s") << tr("MFU %") << tr("peak GiB") << tr("fits")
          << tr("exposed ms") << tr("skipped because");
  table_->clear();
  table_->setColumnCount(int(headers.size()));
  table_->setHorizontalHeaderLabels(headers);
  table_->setRowCount(int(rows_.size()));
  int simulated = 0;
  QString best;
  for (size_t i = 0; i < rows_.size(); ++i) {
    const sim::SweepRow& r = rows_[i];
    int col = 0;
    auto put = [&](const QString& text) { table_->setItem(int(i), col++, new QTableWidgetItem(text)); };
    for (const sim::SweepAxis& a : axes_) put(QString::fromStdString(sim::sweepValue(r, a)));
    if (r.simulated) {
      ++simulated;
      put(QString::number(r.world_size));
      put(QString::number(r.step_ms, 'f', 3));
      put(QString::number(r.tokens_per_s, 'f', 0));
      put(QString::number(r.mfu_pct, 'f', 1));
      put(QString::number(r.peak_memory_gib, 'f', 2));
      put(r.fits_memory ? tr("yes") : tr("NO"));
      put(QString::number(r.exposed_comm_ms, 'f', 3));
      if (best.isEmpty() && r.fits_memory)
        for (const std::string& s : r.sets) best += QString(" --set ") + QString::fromStdString(s);
    } else {
      col += 7;
      put(QString::fromStdString(r.why_not));
    }
  }
  table_->resizeColumnsToContents();
  status_->setText(tr("%1 of %2 combinations simulated, those that fit first, ranked by tokens/s.").arg(simulated).arg(rows_.size()) +
                   (best.isEmpty() ? tr(" None fits the GPUs.") : tr(" Best that fits:%1").arg(best)));
}

}  // namespace tandem::gui
