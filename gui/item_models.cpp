#include "gui/item_models.h"

#include <QDateTime>
#include <QFileInfo>

#include "gui/run_loader.h"
#include "gui/timeline_math.h"

namespace tandem::gui {

namespace {

QString dur(int64_t ns) { return QString::fromStdString(formatDuration(ns)); }

QVariant headerFor(const QStringList& titles, int section, Qt::Orientation o, int role) {
  if (o != Qt::Horizontal || role != Qt::DisplayRole || section < 0 || section >= titles.size()) return {};
  return titles[section];
}

bool isNumeric(int role) { return role == kSortRole; }

}  // namespace

// ---------------------------------------------------------------- KernelStatsModel

void KernelStatsModel::setRows(std::vector<traces::KernelStat> rows, QString key_title) {
  beginResetModel();
  rows_ = std::move(rows);
  key_title_ = std::move(key_title);
  total_ns_ = 0;
  for (const auto& r : rows_) total_ns_ += r.total_ns;
  endResetModel();
  emit headerDataChanged(Qt::Horizontal, 0, 0);
}

int KernelStatsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(rows_.size());
}
int KernelStatsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant KernelStatsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= int(rows_.size())) return {};
  const auto& r = rows_[size_t(index.row())];
  const double share = total_ns_ > 0 ? 100.0 * double(r.total_ns) / double(total_ns_) : 0.0;
  if (role == Qt::TextAlignmentRole)
    return index.column() >= Count ? QVariant(int(Qt::AlignRight | Qt::AlignVCenter)) : QVariant();
  if (role != Qt::DisplayRole && !isNumeric(role) && role != Qt::ToolTipRole) return {};
  const bool raw = isNumeric(role);
  switch (index.column()) {
    case Key: return QString::fromStdString(r.key);
    case Stream: return QString::fromStdString(r.category);
    case Count: return raw ? QVariant(qlonglong(r.count)) : QVariant(QString::number(r.count));
    case Total: return raw ? QVariant(qlonglong(r.total_ns)) : QVariant(dur(r.total_ns));
    case Mean: return raw ? QVariant(r.mean_ns) : QVariant(dur(int64_t(r.mean_ns)));
    case P95: return raw ? QVariant(qlonglong(r.p95_ns)) : QVariant(dur(r.p95_ns));
    case Share: return raw ? QVariant(share) : QVariant(QString::number(share, 'f', 1) + "%");
    case Tflops: return raw ? QVariant(r.tflops) : QVariant(r.tflops > 0 ? QString::number(r.tflops, 'f', 1) : "");
    case Gbps: return raw ? QVariant(r.gbps) : QVariant(r.gbps > 0 ? QString::number(r.gbps, 'f', 1) : "");
  }
  return {};
}

QVariant KernelStatsModel::headerData(int section, Qt::Orientation o, int role) const {
  return headerFor({key_title_, tr("stream"), tr("count"), tr("total"), tr("mean"), tr("p95"), tr("share"),
                    tr("TFLOP/s"), tr("GB/s")},
                   section, o, role);
}

// ---------------------------------------------------------------- BreakdownModel

void BreakdownModel::setRows(std::vector<RankBreakdown> rows) {
  beginResetModel();
  rows_ = std::move(rows);
  endResetModel();
}

int BreakdownModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : int(rows_.size()); }
int BreakdownModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant BreakdownModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= int(rows_.size())) return {};
  const auto& r = rows_[size_t(index.row())];
  const auto& b = r.breakdown;
  if (role == Qt::TextAlignmentRole) return QVariant(int(Qt::AlignRight | Qt::AlignVCenter));
  if (role != Qt::DisplayRole && !isNumeric(role)) return {};
  const bool raw = isNumeric(role);
  auto ns = [&](int64_t v) { return raw ? QVariant(qlonglong(v)) : QVariant(dur(v)); };
  switch (index.column()) {
    case Rank: return raw ? QVariant(r.rank) : QVariant(QString::number(r.rank));
    case Span: return ns(b.span_ns);
    case Compute: return ns(b.compute_ns);
    case Comm: return ns(b.comm_ns);
    case Hidden: return ns(b.overlap_ns);
    case Exposed: return ns(b.exposed_comm_ns);
    case OverlapPct: return raw ? QVariant(b.overlap_pct) : QVariant(QString::number(b.overlap_pct, 'f', 1) + "%");
    case Idle: return ns(b.idle_ns);
    case Recompute: return ns(b.recompute_ns);
  }
  return {};
}

QVariant BreakdownModel::headerData(int section, Qt::Orientation o, int role) const {
  return headerFor({tr("rank"), tr("span"), tr("compute"), tr("comm"), tr("hidden comm"), tr("exposed comm"),
                    tr("overlap"), tr("idle"), tr("recompute")},
                   section, o, role);
}

// ---------------------------------------------------------------- DetailsModel

void DetailsModel::setRows(std::vector<std::pair<std::string, std::string>> rows) {
  beginResetModel();
  rows_ = std::move(rows);
  endResetModel();
}

QString DetailsModel::value(const QString& field) const {
  for (const auto& [k, v] : rows_)
    if (QString::fromStdString(k) == field) return QString::fromStdString(v);
  return {};
}

int DetailsModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : int(rows_.size()); }
int DetailsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : 2; }

QVariant DetailsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= int(rows_.size())) return {};
  if (role != Qt::DisplayRole && role != kSortRole && role != Qt::ToolTipRole) return {};
  const auto& [k, v] = rows_[size_t(index.row())];
  return QString::fromStdString(index.column() == 0 ? k : v);
}

QVariant DetailsModel::headerData(int section, Qt::Orientation o, int role) const {
  return headerFor({tr("field"), tr("value")}, section, o, role);
}

// ---------------------------------------------------------------- RunListModel

void RunListModel::setRunsOf(const std::string& path, const std::vector<traces::RunInfo>& runs) {
  beginResetModel();
  std::erase_if(entries_, [&](const Entry& e) { return e.path == path; });
  for (const auto& r : runs) entries_.push_back({path, r});
  endResetModel();
}

int RunListModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : int(entries_.size()); }
int RunListModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant RunListModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= int(entries_.size())) return {};
  const auto& e = entries_[size_t(index.row())];
  if (role == Qt::ToolTipRole && index.column() == File) return QString::fromStdString(e.path);
  if (role != Qt::DisplayRole && !isNumeric(role)) return {};
  const bool raw = isNumeric(role);
  switch (index.column()) {
    case File: return QFileInfo(QString::fromStdString(e.path)).fileName();
    case Id: return raw ? QVariant(qlonglong(e.info.id)) : QVariant(QString::number(e.info.id));
    case Kind: return QString::fromStdString(std::string(traces::toString(e.info.kind)));
    case Name: return QString::fromStdString(e.info.name);
    case Job: return QString::fromStdString(jobNameOf(e.info));
    case Topology: return QString::fromStdString(e.info.topology).left(40);
    case Ranks: return raw ? QVariant(e.info.world_size) : QVariant(QString::number(e.info.world_size));
    case Date:
      if (raw) return QVariant(qlonglong(e.info.created_unix_ns));
      if (e.info.created_unix_ns <= 0) return QString();
      return QDateTime::fromMSecsSinceEpoch(e.info.created_unix_ns / 1'000'000, Qt::UTC)
          .toString("yyyy-MM-dd hh:mm");
  }
  return {};
}

QVariant RunListModel::headerData(int section, Qt::Orientation o, int role) const {
  return headerFor({tr("file"), tr("run"), tr("kind"), tr("name"), tr("job"), tr("topology"), tr("ranks"), tr("date")},
                   section, o, role);
}

}  // namespace tandem::gui
