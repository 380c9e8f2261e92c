#pragma once
// Compare view: two runs aligned by step and plan task. A summary of what got
// faster or slower (step, compute, exposed and hidden communication,
// recompute, idle, per step on rank 0), a one-line verdict, and the tasks
// whose mean duration changed most. For runs from trace files, also what
// `tandem compare` prints (traces/analysis/compare.h, computed on a worker thread):
// the step-time error, overlap and exposed communication of both runs, the
// error distribution per op kind and each stream's waits side by side.

#include <QAbstractTableModel>
#include <QWidget>

#include "gui/compare.h"
#include "traces/analysis/compare.h"

class QLabel;

namespace tandem::gui {

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
  enum Column { Task, Name, Phase, Stream, MeanA, MeanB, Delta, DeltaPct, ColumnCount };
  using QAbstractTableModel::QAbstractTableModel;
  void setRows(std::vector<TaskDelta> rows);
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  std::vector<TaskDelta> rows_;
};

// Per op kind: tasks, time per step in A and B, |B - A| / A per task
// (median, p90, max), as `tandem compare`.
class OpErrorModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Op, Tasks, A, B, Median, P90, Max, ColumnCount };
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
  void setComparison(const QString& a_label, const QString& b_label, Comparison comparison);
  void setMessage(const QString& message);
  // The trace store's comparison of the same two runs, once computed; or
  // why there is none (runs not from files, no plan task ids, computing).
  void setTraceComparison(const traces::RunComparison& c);
  void setTraceComparisonMessage(const QString& message);
  CompareSummaryModel* summary() const { return summary_; }
  TaskDeltaModel* tasks() const { return tasks_; }
  OpErrorModel* opErrors() const { return op_errors_; }
  StreamWaitModel* streamWaits() const { return stream_waits_; }
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
