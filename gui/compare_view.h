#pragma once
// Compare view: two runs aligned by step and plan task. A summary of what got
// faster or slower (step, compute, exposed and hidden communication,
// recompute, idle, per step on rank 0), a one-line verdict, and the tasks
// whose mean duration changed most.

#include <QAbstractTableModel>
#include <QWidget>

#include "gui/compare.h"

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

class CompareView : public QWidget {
  Q_OBJECT
 public:
  explicit CompareView(QWidget* parent = nullptr);
  void setComparison(const QString& a_label, const QString& b_label, Comparison comparison);
  void setMessage(const QString& message);
  CompareSummaryModel* summary() const { return summary_; }
  TaskDeltaModel* tasks() const { return tasks_; }

 private:
  QLabel* title_ = nullptr;
  QLabel* verdict_ = nullptr;
  CompareSummaryModel* summary_ = nullptr;
  TaskDeltaModel* tasks_ = nullptr;
};

}  // namespace tandem::gui
