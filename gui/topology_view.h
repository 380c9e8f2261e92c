#pragma once
// Topology view: the devices, switches and links of a run's topology, links
// coloured by the utilization the simulation recorded for them (counters
// "link.util.<src>-><dst>" in the trace). Both directions of a connection
// are drawn as one line showing the busier direction.

#include <QWidget>
#include <map>
#include <string>

#include "simulator/topology/topology.h"

namespace tandem::gui {

class TopologyView : public QWidget {
  Q_OBJECT
 public:
  explicit TopologyView(QWidget* parent = nullptr);
  // utilization: counter name "src->dst" (node names) -> fraction 0..1.
  void setTopology(sim::Topology topo, std::map<std::string, double> utilization);
  void setMessage(const QString& message);
  // Colour of a utilization fraction (grey when idle, then green to red).
  static QColor utilizationColor(double fraction);

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  sim::Topology topo_;
  std::map<std::string, double> util_;
  QString message_;
};

}  // namespace tandem::gui
