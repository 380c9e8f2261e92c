#pragma once
// The side panels' table models. Each shows plain value rows computed by the
// Qt-free code (slice_stats.h, run_loader.h, the trace store); the display
// role is formatted text, kSortRole the raw number so a QSortFilterProxyModel
// sorts durations as numbers.

#include <QAbstractTableModel>
#include <string>
#include <utility>
#include <vector>

#include "gui/run_loader.h"
#include "traces/analysis/analysis.h"
#include "traces/store/trace_model.h"

namespace tandem::gui {

inline constexpr int kSortRole = Qt::UserRole + 1;

// Per op kind / per name statistics (also the aggregate of a selected range).
class KernelStatsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Key, Stream, Count, Total, Mean, P95, Share, Tflops, Gbps, ColumnCount };
  using QAbstractTableModel::QAbstractTableModel;
  void setRows(std::vector<traces::KernelStat> rows, QString key_title);
  const std::vector<traces::KernelStat>& rows() const { return rows_; }
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  std::vector<traces::KernelStat> rows_;
  int64_t total_ns_ = 0;
  QString key_title_ = tr("name");
};

// Overlap and breakdown per rank (the trace store's Breakdown).
class BreakdownModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Rank, Span, Compute, Comm, Hidden, Exposed, OverlapPct, Idle, Recompute, ColumnCount };
  using QAbstractTableModel::QAbstractTableModel;
  void setRows(std::vector<RankBreakdown> rows);
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  std::vector<RankBreakdown> rows_;
};

// Field / value pairs of the selected slice.
class DetailsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  using QAbstractTableModel::QAbstractTableModel;
  void setRows(std::vector<std::pair<std::string, std::string>> rows);
  // The value of a field, or an empty string.
  QString value(const QString& field) const;
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  std::vector<std::pair<std::string, std::string>> rows_;
};

// Runs of every open database: file, id, kind, name, job, topology, ranks, date.
class RunListModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  struct Entry {
    std::string path;
    traces::RunInfo info;
  };
  enum Column { File, Id, Kind, Name, Job, Topology, Ranks, Date, ColumnCount };
  using QAbstractTableModel::QAbstractTableModel;
  // Replaces the runs of `path` (a reopened file) and appends them.
  void setRunsOf(const std::string& path, const std::vector<traces::RunInfo>& runs);
  const Entry& entry(int row) const { return entries_.at(size_t(row)); }
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  std::vector<Entry> entries_;
};

}  // namespace tandem::gui
