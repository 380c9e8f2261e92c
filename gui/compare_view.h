#pragma once
// Compare view: what `tandem compare` computes for two runs of trace files
// (traces/analysis/compare.h; the main window runs it on a worker thread):
// a summary of what got faster or slower (step, compute, exposed and hidden
// communication, recompute, idle: per rank and step, median), a one-line
// verdict, the tasks whose time per step changed most, the error
// distribution per op kind and each stream's waits side by side.

#include <QAbstractTableModel>
#include <QWidget>

#include "traces/analysis/compare.h"

class QLabel;

namespace tandem::gui {

// One row of the summary: a figure per rank and step in A and B.
struct CompareSummaryRow {
  std::string metric;  // "step", "compute", "exposed comm", "hidden comm", "recompute", "idle"
  double a_ns = 0;
  double b_ns = 0;
};
std::vector<CompareSummaryRow> summaryRows(const traces::RunComparison& c);

class CompareSummaryModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Metric, A, B, Delta, DeltaPct, ColumnCount };
  using QAbstractTableModel::QAbstractTableModel;
  void setRows(std::vector<CompareSummaryRow> rows);
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  std::vector<CompareSummaryRow> rows_;
};

class TaskDeltaModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Rank, Task, Name, Op, MeanA, MeanB, Delta, DeltaPct, ColumnCount };
  using QAbstractTableModel::QAbstractTableModel;
  void setRows(std::vector<traces::TaskDelta> rows);
  const std::vector<traces::TaskDelta>& rows() const { return rows_; }
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  std::vector<traces::TaskDelta> rows_;
};

// Per op kind: tasks, time per step in A and B, |B - A| / A per task
// (median, p90, max), as `tandem compare`.
class OpErrorModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  // Alone / Beside: the median over the tasks that ran alone in both runs,
  // and over those beside another stream's GPU work (traces::OpError).
  enum Column { Op, Tasks, A, B, Median, P90, Max, Alone, Beside, ColumnCount };
  using QAbstractTableModel::QAbstractTableModel;
  void setRows(std::vector<traces::OpError> rows);
  const std::vector<traces::OpError>& rows() const { return rows_; }
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  std::vector<traces::OpError> rows_;
};

// Each stream's waits per (rank, step), median, in A and B, and the share
// other streams' work filled (docs/trace-schema.md, stream waits).
class StreamWaitModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Stream, A, B, Delta, AFilled, BFilled, ColumnCount };
  using QAbstractTableModel::QAbstractTableModel;
  void setRows(std::vector<traces::StreamWaitDelta> rows);
  const std::vector<traces::StreamWaitDelta>& rows() const { return rows_; }
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  std::vector<traces::StreamWaitDelta> rows_;
};

class CompareView : public QWidget {
  Q_OBJECT
 public:
  explicit CompareView(QWidget* parent = nullptr);
  // Says why there is no comparison (none chosen, runs not from files, no
  // plan task ids, still computing) and empties the tables.
  void setMessage(const QString& message);
  void setComparison(const QString& a_label, const QString& b_label, const traces::RunComparison& c);
  CompareSummaryModel* summary() const { return summary_; }
  TaskDeltaModel* tasks() const { return tasks_; }
  OpErrorModel* opErrors() const { return op_errors_; }
  StreamWaitModel* streamWaits() const { return stream_waits_; }
  // The line under the title: the figures as `tandem compare` states them, or the message.
  QString traceComparisonText() const;

 private:
  QLabel* title_ = nullptr;
  QLabel* verdict_ = nullptr;
  CompareSummaryModel* summary_ = nullptr;
  TaskDeltaModel* tasks_ = nullptr;
  QLabel* trace_summary_ = nullptr;
  OpErrorModel* op_errors_ = nullptr;
  StreamWaitModel* stream_waits_ = nullptr;
};

}  // namespace tandem::gui
