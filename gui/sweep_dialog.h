#pragma once
// Sweep dialog: every combination of some job fields simulated on the
// what-if's topology and settings (simulator/pipeline/config_sweep.h, the
// pipeline behind `tandem sweep`), on a worker thread with progress, and
// the combinations ranked by tokens/s in a table: step time, GPUs, MFU,
// peak memory per rank, whether it fits, exposed communication; skipped
// combinations with their reason; the best one that fits named.

#include <QDialog>
#include <QString>
#include <vector>

#include "gui/what_if.h"
#include "simulator/pipeline/config_sweep.h"

class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QTableWidget;
class QCheckBox;
class QThread;

namespace tandem::gui {

class SweepDialog : public QDialog {
  Q_OBJECT
 public:
  // base: the what-if's job, overrides and simulator settings; every
  // combination is applied on top of its overrides.
  explicit SweepDialog(WhatIfRequest base, QWidget* parent = nullptr);
  ~SweepDialog() override;

  // "KEY=V1,V2; KEY=V1,V2" (as `tandem sweep --vary`, axes apart by ';').
  void setAxes(const QString& axes);
  // Whether every combination trains the what-if's global batch (its
  // accumulation set to global batch / (micro-batch x replicas), as `tandem
  // sweep --global-batch`); on by default.
  void setKeepGlobalBatch(bool keep);
  void start();
  bool busy() const { return worker_ != nullptr; }
  // The ranked rows of the last sweep.
  const std::vector<sim::SweepRow>& rows() const { return rows_; }
  QTableWidget* table() const { return table_; }
  QString statusText() const;

 signals:
  void finished();

 private:
  void showRows();

  WhatIfRequest base_;
  std::vector<sim::SweepAxis> axes_;
  std::vector<sim::SweepRow> rows_;
  QLineEdit* axes_edit_ = nullptr;
  QCheckBox* keep_batch_ = nullptr;
  QPushButton* sweep_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QLabel* status_ = nullptr;
  QTableWidget* table_ = nullptr;
  QThread* worker_ = nullptr;
};

}  // namespace tandem::gui
