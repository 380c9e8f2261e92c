#include "simulator/network/network.h"

#include <algorithm>
#include <bit>
#include <cstring>
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

// FNV-style mixing of the fresh set's contents (only to pick a memo: a match
// is then checked exactly).
uint64_t mixIn(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0x100000001b3ull;
}

}  // namespace

FlowNetwork::FlowNetwork(std::vector<double> link_gbps)
    : capacity_(std::move(link_gbps)),
      link_bytes_(capacity_.size(), 0.0),
      scratch_(capacity_.size()),
      heap_link_(capacity_.size()) {
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
  st.id = int(owners_.size());
  st.remaining = std::max(0.0, spec.bytes);
  st.rate_cap = spec.rate_cap;
  st.link_begin = uint32_t(links_.size());
  st.link_count = uint32_t(spec.links.size());
  links_.insert(links_.end(), spec.links.begin(), spec.links.end());
  active_links_ += spec.links.size();
  if (active_.empty()) {
    fresh_ = true;
    fresh_hash_ = 0;
  }
  if (fresh_) {
    // The sum of the link ids stands for the links (a chain of mixing steps
    // per link cost as much as the rest of addFlow); the flow's link count
    // and cap are mixed in. A match is checked exactly anyway.
    uint64_t sum = 0;
    for (int l : spec.links) sum += uint32_t(l);
    fresh_hash_ = mixIn(mixIn(mixIn(fresh_hash_, spec.links.size()), sum), std::bit_cast<uint64_t>(st.rate_cap));
  }
  owners_.push_back(owner);
  active_.push_back(st);  // ids grow, so active_ stays sorted
  dirty_ = true;
  next_valid_ = false;
  return st.id;
}

// Drops the links of finished flows from the arena (active flows keep their
// order), so the arena stays within about twice the active flows' links.
void FlowNetwork::compactLinks() {
  std::vector<int> kept;
  kept.reserve(active_links_ * 2 + 64);
  for (FlowState& f : active_) {
    const uint32_t begin = uint32_t(kept.size());
    kept.insert(kept.end(), links_.begin() + f.link_begin, links_.begin() + f.link_begin + f.link_count);
    f.link_begin = begin;
  }
  links_.swap(kept);
}

double FlowNetwork::rate(int id) {
  if (dirty_) recomputeRates();
  auto it = std::lower_bound(active_.begin(), active_.end(), id,
                             [](const FlowState& f, int v) { return f.id < v; });
  return it != active_.end() && it->id == id ? it->rate : 0.0;
}

// Progressive filling: raise every unfrozen flow's rate together until a link
// is full or a flow hits its cap; freeze the flows there; repeat. Each round
// freezes at least one flow, and in the symmetric patterns collectives make
// (every ring edge alike) a single round settles everything.
void FlowNetwork::recomputeRates() {
  dirty_ = false;
  ++recomputations_;
  if (!fresh_ || active_.empty()) {
    fillRates();
    return;
  }
  if (const RateMemo* m = findMemo()) {
    for (size_t k = 0; k < active_.size(); ++k) active_[k].rate = m->rates[k];
    return;
  }
  fillRates();
  remember();
}

// The remembered set equal to the active (fresh) one, or null. A fresh set's
// links are contiguous in the arena (flows are appended in id order and
// compaction keeps that order), from the first active flow's begin.
const FlowNetwork::RateMemo* FlowNetwork::findMemo() const {
  for (const RateMemo& m : memos_) {
    if (m.hash != fresh_hash_ || m.counts.size() != active_.size() || m.links.size() != active_links_) continue;
    if (active_links_ > 0 &&
        std::memcmp(m.links.data(), links_.data() + active_.front().link_begin, active_links_ * sizeof(int)) != 0)
      continue;
    bool same = true;
    for (size_t k = 0; same && k < active_.size(); ++k)
      same = m.counts[k] == active_[k].link_count &&
             std::bit_cast<uint64_t>(m.caps[k]) == std::bit_cast<uint64_t>(active_[k].rate_cap);
    if (same) return &m;
  }
  return nullptr;
}

void FlowNetwork::remember() {
  // Bounded: once full, later sets are simply computed every time.
  if (memos_.size() >= kMaxMemos || memo_links_ + active_links_ > kMaxMemoLinks) return;
  RateMemo m;
  m.hash = fresh_hash_;
  const int* first = links_.data() + active_.front().link_begin;
  m.links.assign(first, first + active_links_);
  m.counts.reserve(active_.size());
  m.caps.reserve(active_.size());
  m.rates.reserve(active_.size());
  for (const FlowState& f : active_) {
    m.counts.push_back(f.link_count);
    m.caps.push_back(f.rate_cap);
    m.rates.push_back(f.rate);
  }
  memo_links_ += active_links_;
  memos_.push_back(std::move(m));
}

void FlowNetwork::fillRates() {
  ++epoch_;
  used_links_.clear();
  for (const FlowState& f : active_) {
    const int* links = linksOf(f);
    for (uint32_t i = 0; i < f.link_count; ++i) {
      const int l = links[i];
      LinkScratch& ls = scratch_[size_t(l)];
      if (ls.epoch != epoch_) {
        ls.epoch = epoch_;
        ls.cap_left = capacity_[size_t(l)];
        ls.unfrozen = 0;
        used_links_.push_back(l);
      }
      ++ls.unfrozen;
    }
  }
  // used_links_ is in first-use order; nothing below depends on the order
  // (a minimum, and per-flow tests), so it needs no sort.

  unfrozen_.resize(active_.size());
  for (size_t k = 0; k < active_.size(); ++k) unfrozen_[k] = uint32_t(k);
  while (!unfrozen_.empty()) {
    double share = kInf;
    for (int l : used_links_) {
      const LinkScratch& ls = scratch_[size_t(l)];
      if (ls.unfrozen > 0) share = std::min(share, std::max(0.0, ls.cap_left) / ls.unfrozen);
    }
    for (uint32_t k : unfrozen_) share = std::min(share, active_[k].rate_cap);
    if (share == kInf) {
      // Flows with neither links nor a cap: they complete instantly.
      for (uint32_t k : unfrozen_) active_[k].rate = kInf;
      break;
    }
    const double threshold = share * (1 + 1e-12) + 1e-300;
    next_.clear();
    frozen_.clear();
    for (uint32_t k : unfrozen_) {
      const FlowState& f = active_[k];
      const int* links = linksOf(f);
      bool freeze = f.rate_cap <= threshold;
      for (uint32_t i = 0; !freeze && i < f.link_count; ++i) {
        const LinkScratch& ls = scratch_[size_t(links[i])];
        freeze = std::max(0.0, ls.cap_left) / ls.unfrozen <= threshold;
      }
      (freeze ? frozen_ : next_).push_back(k);
    }
    for (uint32_t k : frozen_) {
      FlowState& f = active_[k];
      f.rate = share;
      const int* links = linksOf(f);
      for (uint32_t i = 0; i < f.link_count; ++i) {
        LinkScratch& ls = scratch_[size_t(links[i])];
        ls.cap_left -= share;
        --ls.unfrozen;
      }
    }
    unfrozen_.swap(next_);
    // One round settles symmetric patterns. Flows left after it have
    // several bottleneck levels; rescanning every link and flow per level
    // would cost rounds x (links + flows), so the rest goes by a heap.
    if (!unfrozen_.empty()) {
      fillByHeap();
      break;
    }
  }
}

// The remaining rounds of progressive filling, with the same results as the
// scanning rounds above: the same share per round (a minimum, over the same
// ratio expressions and caps), the same set of flows frozen in it (those on
// a link whose ratio before the round is within the threshold, or whose cap
// is), and the same subtractions on each link. A heap holds every link's
// current ratio (entries that no longer match the link are skipped), each
// link lists its unfrozen flows, and the caps are sorted once, so a round
// costs what it freezes, not the whole component.
void FlowNetwork::fillByHeap() {
  ++round_stamp_;
  const int64_t frozen_mark = round_stamp_;
  if (flow_stamp_.size() < active_.size()) flow_stamp_.resize(active_.size(), 0);
  // Links of the unfrozen flows, and each link's unfrozen flows (CSR).
  heap_links_.clear();
  for (uint32_t k : unfrozen_) {
    const FlowState& f = active_[k];
    const int* links = linksOf(f);
    for (uint32_t i = 0; i < f.link_count; ++i) {
      HeapLink& hl = heap_link_[size_t(links[i])];
      if (hl.stamp != frozen_mark) {
        hl.stamp = frozen_mark;
        hl.local = int(heap_links_.size());
        heap_links_.push_back(links[i]);
      }
    }
  }
  csr_off_.assign(heap_links_.size() + 1, 0);
  for (uint32_t k : unfrozen_) {
    const FlowState& f = active_[k];
    const int* links = linksOf(f);
    for (uint32_t i = 0; i < f.link_count; ++i) ++csr_off_[size_t(heap_link_[size_t(links[i])].local) + 1];
  }
  for (size_t i = 1; i < csr_off_.size(); ++i) csr_off_[i] += csr_off_[i - 1];
  csr_flow_.resize(size_t(csr_off_.back()));
  csr_fill_.assign(csr_off_.begin(), csr_off_.end() - 1);
  for (uint32_t k : unfrozen_) {
    const FlowState& f = active_[k];
    const int* links = linksOf(f);
    for (uint32_t i = 0; i < f.link_count; ++i)
      csr_flow_[size_t(csr_fill_[size_t(heap_link_[size_t(links[i])].local)]++)] = k;
  }
  auto ratio = [&](int l) {
    const LinkScratch& ls = scratch_[size_t(l)];
    return std::max(0.0, ls.cap_left) / ls.unfrozen;
  };
  using Entry = std::pair<double, int>;  // (ratio, link)
  heap_.clear();
  for (int l : heap_links_)
    if (scratch_[size_t(l)].unfrozen > 0) heap_.push_back({ratio(l), l});
  std::make_heap(heap_.begin(), heap_.end(), std::greater<Entry>());
  auto valid = [&](const Entry& e) {
    return scratch_[size_t(e.second)].unfrozen > 0 && ratio(e.second) == e.first;
  };
  by_cap_.clear();
  for (uint32_t k : unfrozen_)
    if (active_[k].rate_cap < kInf) by_cap_.push_back(k);
  std::sort(by_cap_.begin(), by_cap_.end(),
            [&](uint32_t a, uint32_t b) { return active_[a].rate_cap < active_[b].rate_cap; });
  size_t cap_next = 0;
  size_t left = unfrozen_.size();
  ++round_stamp_;  // from here on, flow_stamp_ == frozen_stamp marks frozen flows
  const int64_t frozen_stamp = round_stamp_;
  while (left > 0) {
    while (!heap_.empty() && !valid(heap_.front())) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<Entry>());
      heap_.pop_back();
    }
    while (cap_next < by_cap_.size() && flow_stamp_[by_cap_[cap_next]] == frozen_stamp) ++cap_next;
    double share = heap_.empty() ? kInf : heap_.front().first;
    if (cap_next < by_cap_.size()) share = std::min(share, active_[by_cap_[cap_next]].rate_cap);
    if (share == kInf) {
      // Flows with neither links nor a cap: they complete instantly.
      for (uint32_t k : unfrozen_)
        if (flow_stamp_[k] != frozen_stamp) active_[k].rate = kInf;
      break;
    }
    const double threshold = share * (1 + 1e-12) + 1e-300;
    frozen_.clear();
    auto freeze = [&](uint32_t k) {
      if (flow_stamp_[k] == frozen_stamp) return;
      flow_stamp_[k] = frozen_stamp;
      frozen_.push_back(k);
    };
    while (!heap_.empty() && heap_.front().first <= threshold) {
      const Entry e = heap_.front();
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<Entry>());
      heap_.pop_back();
      if (!valid(e)) continue;
      const int local = heap_link_[size_t(e.second)].local;
      for (int i = csr_off_[size_t(local)]; i < csr_off_[size_t(local) + 1]; ++i) freeze(csr_flow_[size_t(i)]);
    }
    while (cap_next < by_cap_.size() && active_[by_cap_[cap_next]].rate_cap <= threshold) freeze(by_cap_[cap_next++]);
    left -= frozen_.size();
    ++round_stamp_;
    const int64_t touched = round_stamp_;
    touched_.clear();
    for (uint32_t k : frozen_) {
      FlowState& f = active_[k];
      f.rate = share;
      const int* links = linksOf(f);
      for (uint32_t i = 0; i < f.link_count; ++i) {
        LinkScratch& ls = scratch_[size_t(links[i])];
        ls.cap_left -= share;
        --ls.unfrozen;
        HeapLink& hl = heap_link_[size_t(links[i])];
        if (hl.stamp != touched) {
          hl.stamp = touched;
          touched_.push_back(links[i]);
        }
      }
    }
    for (int l : touched_) {
      if (scratch_[size_t(l)].unfrozen <= 0) continue;
      heap_.push_back({ratio(l), l});
      std::push_heap(heap_.begin(), heap_.end(), std::greater<Entry>());
    }
  }
}

void FlowNetwork::materialize(int64_t t_ns) {
  const int64_t dt = t_ns - last_update_ns_;
  if (dt <= 0) return;
  if (dirty_) recomputeRates();
  for (FlowState& f : active_) {
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
    for (const FlowState& f : active_) best = std::min(best, nsToFinish(f.remaining, f.rate));
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
    FlowState& f = active_[k];
    const bool done = nsToFinish(f.remaining, f.rate) <= dt;
    const double moved = done ? f.remaining : std::min(f.remaining, f.rate * double(dt));
    const int* links = linksOf(f);
    for (uint32_t i = 0; i < f.link_count; ++i) link_bytes_[size_t(links[i])] += moved;
    f.remaining -= moved;
    if (done) {
      active_links_ -= f.link_count;
      finished.push_back(f.id);
    } else {
      if (kept != k) active_[kept] = f;  // in place: the order (ascending ids) is kept
      ++kept;
    }
  }
  active_.resize(kept);
  if (!finished.empty() && kept > 0) fresh_ = false;  // a subset of what started: no memo
  if (links_.size() > 2 * active_links_ + 4096) compactLinks();
  if (!finished.empty()) dirty_ = true;
  next_valid_ = false;
  now_ns_ = t_ns;
  last_update_ns_ = t_ns;
  return finished;
}

}  // namespace tandem::sim
