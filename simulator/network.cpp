#include "simulator/network.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace tandem::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Whole ns a flow still needs at `rate`. The small relative slack absorbs
// floating-point noise so that 3e6 bytes at 100 bytes/ns take 30000 ns, not 30001.
int64_t nsToFinish(double remaining, double rate) {
  if (remaining <= 0) return 0;
  if (rate == kInf) return 0;
  if (rate <= 0) return std::numeric_limits<int64_t>::max() / 4;
  double dt = remaining / rate;
  double n = std::ceil(dt - 1e-9 * std::max(1.0, dt));
  return n < 0 ? 0 : int64_t(n);
}

}  // namespace

FlowNetwork::FlowNetwork(std::vector<double> link_gbps)
    : capacity_(std::move(link_gbps)),
      link_bytes_(capacity_.size(), 0.0),
      cap_left_(capacity_.size(), 0.0),
      unfrozen_on_link_(capacity_.size(), 0),
      link_epoch_(capacity_.size(), -1) {
  for (double c : capacity_)
    if (!(c > 0)) throw std::invalid_argument("FlowNetwork: every link needs a positive capacity");
}

int FlowNetwork::addFlow(const FlowSpec& spec, int64_t owner) {
  for (int l : spec.links)
    if (l < 0 || size_t(l) >= capacity_.size())
      throw std::out_of_range("FlowNetwork: link index " + std::to_string(l) + " out of range");
  materialize(now_ns_);
  if (links_.size() + spec.links.size() > std::numeric_limits<uint32_t>::max()) compactLinks();
  FlowState st;
  st.remaining = std::max(0.0, spec.bytes);
  st.rate_cap = spec.rate_cap;
  st.owner = owner;
  st.link_begin = uint32_t(links_.size());
  st.link_count = uint32_t(spec.links.size());
  links_.insert(links_.end(), spec.links.begin(), spec.links.end());
  active_links_ += spec.links.size();
  int id = int(flows_.size());
  flows_.push_back(st);
  active_.push_back(id);  // ids grow, so active_ stays sorted
  ++active_count_;
  dirty_ = true;
  next_valid_ = false;
  return id;
}

// Drops the links of finished flows from the arena (active flows keep their
// order), so the arena stays within twice the active flows' links.
void FlowNetwork::compactLinks() {
  std::vector<int> kept;
  kept.reserve(active_links_ * 2 + 64);
  for (int id : active_) {
    FlowState& f = flows_[size_t(id)];
    const uint32_t begin = uint32_t(kept.size());
    kept.insert(kept.end(), links_.begin() + f.link_begin, links_.begin() + f.link_begin + f.link_count);
    f.link_begin = begin;
  }
  links_.swap(kept);
}

double FlowNetwork::rate(int id) {
  if (dirty_) recomputeRates();
  return flows_[size_t(id)].rate;
}

// Progressive filling: raise every unfrozen flow's rate together until a link
// is full or a flow hits its cap; freeze the flows there; repeat. Each round
// freezes at least one flow, and in the symmetric patterns collectives make
// (every ring edge alike) a single round settles everything.
void FlowNetwork::recomputeRates() {
  dirty_ = false;
  ++recomputations_;
  ++epoch_;
  used_links_.clear();
  for (int id : active_) {
    const FlowState& f = flows_[size_t(id)];
    const int* links = linksOf(f);
    for (uint32_t i = 0; i < f.link_count; ++i) {
      const int l = links[i];
      if (link_epoch_[size_t(l)] != epoch_) {
        link_epoch_[size_t(l)] = epoch_;
        cap_left_[size_t(l)] = capacity_[size_t(l)];
        unfrozen_on_link_[size_t(l)] = 0;
        used_links_.push_back(l);
      }
      ++unfrozen_on_link_[size_t(l)];
    }
  }
  // used_links_ is in first-use order; nothing below depends on the order
  // (a minimum, and per-flow tests), so it needs no sort.

  unfrozen_ = active_;
  while (!unfrozen_.empty()) {
    double share = kInf;
    for (int l : used_links_)
      if (unfrozen_on_link_[size_t(l)] > 0)
        share = std::min(share, std::max(0.0, cap_left_[size_t(l)]) / unfrozen_on_link_[size_t(l)]);
    for (int id : unfrozen_) share = std::min(share, flows_[size_t(id)].rate_cap);
    if (share == kInf) {
      // Flows with neither links nor a cap: they complete instantly.
      for (int id : unfrozen_) flows_[size_t(id)].rate = kInf;
      break;
    }
    const double threshold = share * (1 + 1e-12) + 1e-300;
    next_.clear();
    frozen_.clear();
    for (int id : unfrozen_) {
      const FlowState& f = flows_[size_t(id)];
      const int* links = linksOf(f);
      bool freeze = f.rate_cap <= threshold;
      for (uint32_t i = 0; !freeze && i < f.link_count; ++i) {
        const int l = links[i];
        freeze = std::max(0.0, cap_left_[size_t(l)]) / unfrozen_on_link_[size_t(l)] <= threshold;
      }
      (freeze ? frozen_ : next_).push_back(id);
    }
    for (int id : frozen_) {
      FlowState& f = flows_[size_t(id)];
      f.rate = share;
      const int* links = linksOf(f);
      for (uint32_t i = 0; i < f.link_count; ++i) {
        cap_left_[size_t(links[i])] -= share;
        --unfrozen_on_link_[size_t(links[i])];
      }
    }
    unfrozen_.swap(next_);
  }
}

void FlowNetwork::materialize(int64_t t_ns) {
  const int64_t dt = t_ns - last_update_ns_;
  if (dt <= 0) return;
  if (dirty_) recomputeRates();
  for (int id : active_) {
    FlowState& f = flows_[size_t(id)];
    const double moved = std::min(f.remaining, f.rate * double(dt));
    const int* links = linksOf(f);
    for (uint32_t i = 0; i < f.link_count; ++i) link_bytes_[size_t(links[i])] += moved;
    f.remaining -= moved;
  }
  last_update_ns_ = t_ns;
}

int64_t FlowNetwork::nextCompletionNs() {
  if (active_.empty()) return std::numeric_limits<int64_t>::max();
  if (dirty_) recomputeRates();
  if (!next_valid_) {
    int64_t best = std::numeric_limits<int64_t>::max();
    for (int id : active_) {
      const FlowState& f = flows_[size_t(id)];
      best = std::min(best, nsToFinish(f.remaining, f.rate));
    }
    next_completion_ns_ = last_update_ns_ + best;
    next_valid_ = true;
  }
  return next_completion_ns_;
}

std::vector<int> FlowNetwork::advanceTo(int64_t t_ns) {
  if (t_ns < now_ns_) throw std::logic_error("FlowNetwork: time cannot go backwards");
  std::vector<int> finished;
  if (active_.empty() || t_ns < nextCompletionNs()) {
    // Nothing finishes: progress stays implicit (rates are constant until
    // the flow set changes).
    now_ns_ = t_ns;
    if (active_.empty()) last_update_ns_ = t_ns;
    return finished;
  }
  const int64_t dt = t_ns - last_update_ns_;
  size_t kept = 0;
  for (size_t k = 0; k < active_.size(); ++k) {
    const int id = active_[k];
    FlowState& f = flows_[size_t(id)];
    const bool done = nsToFinish(f.remaining, f.rate) <= dt;
    const double moved = done ? f.remaining : std::min(f.remaining, f.rate * double(dt));
    const int* links = linksOf(f);
    for (uint32_t i = 0; i < f.link_count; ++i) link_bytes_[size_t(links[i])] += moved;
    f.remaining -= moved;
    if (done) {
      f.remaining = 0;
      f.rate = 0;
      active_links_ -= f.link_count;
      f.link_count = 0;  // finished flows keep only their owner
      finished.push_back(id);
    } else {
      active_[kept++] = id;  // in place: the order (ascending ids) is kept
    }
  }
  active_.resize(kept);
  if (links_.size() > 2 * active_links_ + 4096) compactLinks();
  active_count_ = int(active_.size());
  if (!finished.empty()) dirty_ = true;
  next_valid_ = false;
  now_ns_ = t_ns;
  last_update_ns_ = t_ns;
  return finished;
}

}  // namespace tandem::sim
