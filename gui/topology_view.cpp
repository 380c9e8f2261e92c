#include "gui/topology_view.h"

#include <QPainter>
#include <algorithm>
#include <cmath>
#include <set>

namespace tandem::gui {

TopologyView::TopologyView(QWidget* parent) : QWidget(parent) { setMinimumSize(300, 200); }

void TopologyView::setTopology(sim::Topology topo, std::map<std::string, double> utilization) {
  topo_ = std::move(topo);
  util_ = std::move(utilization);
  message_.clear();
  update();
}

void TopologyView::setMessage(const QString& message) {
  message_ = message;
  topo_ = {};
  update();
}

QColor TopologyView::utilizationColor(double f) {
  if (f <= 0) return QColor(0xB8, 0xBE, 0xC6);
  f = std::clamp(f, 0.0, 1.0);
  // green (low) -> amber -> red (saturated)
  const QColor lo(0x4C, 0xAF, 0x50), mid(0xF2, 0xB1, 0x34), hi(0xE5, 0x39, 0x35);
  auto mix = [](const QColor& a, const QColor& b, double t) {
    return QColor(int(a.red() + (b.red() - a.red()) * t), int(a.green() + (b.green() - a.green()) * t),
                  int(a.blue() + (b.blue() - a.blue()) * t));
  };
  return f < 0.5 ? mix(lo, mid, f / 0.5) : mix(mid, hi, (f - 0.5) / 0.5);
}

void TopologyView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  p.fillRect(rect(), QColor(0xFB, 0xFB, 0xFC));
  p.setPen(QColor(0x22, 0x26, 0x2B));
  if (topo_.devices.empty()) {
    p.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap,
               message_.isEmpty() ? tr("No topology for this run.") : message_);
    return;
  }
  // Layout: devices on the bottom row, switches by kind on rows above.
  const int n_dev = int(topo_.devices.size());
  std::map<int, std::vector<int>> rows;  // row -> node ids
  for (int d = 0; d < n_dev; ++d) rows[0].push_back(d);
  for (size_t s = 0; s < topo_.switches.size(); ++s) {
    const auto kind = topo_.switches[s].kind;
    const int row = kind == sim::NodeKind::NvSwitch ? 1
                    : kind == sim::NodeKind::PcieSwitch || kind == sim::NodeKind::HostBridge ? 2
                    : kind == sim::NodeKind::Cpu || kind == sim::NodeKind::Nic ? 3
                                                                                : 4;
    rows[row].push_back(n_dev + int(s));
  }
  std::vector<QPointF> pos(size_t(topo_.nodeCount()));
  const int n_rows = int(rows.size());
  const QRectF area = rect().adjusted(40, 60, -40, -60);
  int r_index = 0;
  for (auto& [row, nodes] : rows) {
    const double y = area.bottom() - (n_rows > 1 ? area.height() * r_index / (n_rows - 1) : 0);
    for (size_t i = 0; i < nodes.size(); ++i)
      pos[size_t(nodes[i])] = QPointF(area.left() + area.width() * (double(i) + 0.5) / double(nodes.size()), y);
    ++r_index;
  }
  // One line per connected pair, coloured by its busier direction.
  std::map<std::pair<int, int>, double> pair_util;
  std::map<std::pair<int, int>, double> pair_gbps;
  for (const auto& l : topo_.links) {
    const auto key = std::minmax(l.src, l.dst);
    const std::string name = topo_.nodeName(l.src) + "->" + topo_.nodeName(l.dst);
    auto it = util_.find(name);
    pair_util[key] = std::max(pair_util[key], it == util_.end() ? 0.0 : it->second);
    pair_gbps[key] = std::max(pair_gbps[key], l.gbps);
  }
  double max_gbps = 1;
  for (const auto& [k, g] : pair_gbps) max_gbps = std::max(max_gbps, g);
  for (const auto& [k, u] : pair_util) {
    const double width = 1.0 + 3.0 * pair_gbps[k] / max_gbps;
    p.setPen(QPen(utilizationColor(u), width));
    p.drawLine(pos[size_t(k.first)], pos[size_t(k.second)]);
  }
  // Nodes.
  const QFontMetrics fm(font());
  for (int node = 0; node < topo_.nodeCount(); ++node) {
    const bool device = node < n_dev;
    const QString label = QString::fromStdString(topo_.nodeName(node));
    const QString sub = device ? QString::fromStdString(topo_.devices[size_t(node)].model) : QString();
    const double w = std::max(64, fm.horizontalAdvance(label) + 16);
    const QRectF box(pos[size_t(node)].x() - w / 2, pos[size_t(node)].y() - 18, w, 36);
    p.setPen(QPen(QColor(0x55, 0x5B, 0x66), 1));
    p.setBrush(device ? QColor(0x2F, 0x5D, 0xA8) : QColor(0xE4, 0xE8, 0xEE));
    p.drawRoundedRect(box, 5, 5);
    p.setPen(device ? Qt::white : QColor(0x22, 0x26, 0x2B));
    p.drawText(box.adjusted(0, 2, 0, device ? -14 : 0), Qt::AlignCenter, label);
    if (device) p.drawText(box.adjusted(0, 16, 0, 0), Qt::AlignCenter, sub);
  }
  // Title and legend.
  p.setPen(QColor(0x22, 0x26, 0x2B));
  double max_util = 0;
  for (const auto& [k, u] : pair_util) max_util = std::max(max_util, u);
  p.drawText(QRect(12, 8, width() - 24, 20), Qt::AlignLeft,
             tr("%1 · %2 devices · %3 switches · %4 links · busiest link %5% of its bandwidth over the step")
                 .arg(QString::fromStdString(topo_.name))
                 .arg(topo_.devices.size())
                 .arg(topo_.switches.size())
                 .arg(topo_.links.size())
                 .arg(max_util * 100, 0, 'f', 1));
  int x = 12;
  for (double f : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    p.fillRect(QRect(x, 32, 24, 8), utilizationColor(f));
    p.drawText(QRect(x + 28, 28, 60, 16), Qt::AlignLeft | Qt::AlignVCenter, QString("%1%").arg(int(f * 100)));
    x += 80;
  }
}

}  // namespace tandem::gui
