#pragma once
// Flow-level network: flows cross directed links and share each link's
// bandwidth max-min fairly (progressive filling). Rates are recomputed only
// when the set of flows changes (a flow starts or ends), never per byte or per
// chunk, which is what keeps thousands of GPUs cheap.
//
// Units: link capacity in GB/s, which is exactly bytes per ns, so a rate times
// a duration in ns is a byte count. Time is integer ns; a flow finishes at the
// first integer ns at which its remaining bytes reach zero.
//
// Determinism: flow ids count up in start order, every loop over flows runs
// in id order, and no container with unspecified order affects a result.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace tandem::sim {

struct FlowSpec {
  std::vector<int> links;  // directed link indices in path order (may be empty)
  double bytes = 0;        // bytes put on the wire (payload / protocol efficiency)
  double rate_cap = std::numeric_limits<double>::infinity();  // bytes/ns, e.g. channel limit
  int64_t owner = -1;      // caller's tag (the collective instance it belongs to)
};

class FlowNetwork {
 public:
  // One capacity (GB/s == bytes/ns) per directed link.
  explicit FlowNetwork(std::vector<double> link_gbps);

  // Starts a flow at the current time; returns its id (ids count up from 0 in
  // start order). Flows with no links and no cap finish at the next advance
  // (zero duration). The second form tags the flow with `owner` instead of
  // spec.owner, so callers can start flows of a shared spec without a copy.
  int addFlow(const FlowSpec& spec) { return addFlow(spec, spec.owner); }
  int addFlow(const FlowSpec& spec, int64_t owner);

  int64_t now() const { return now_ns_; }
  int activeFlows() const { return int(active_.size()); }

  // Earliest ns at which an active flow finishes; INT64_MAX when none.
  int64_t nextCompletionNs();

  // Moves the clock to t (>= now, <= nextCompletionNs()) and returns the ids
  // of the flows that finished by then, in id order.
  std::vector<int> advanceTo(int64_t t_ns);

  int64_t owner(int id) const { return owners_[size_t(id)]; }
  double rate(int id);  // current rate (bytes/ns) of an active flow; 0 once finished

  // Bytes carried by each link so far (for utilization counters).
  const std::vector<double>& linkBytes() const { return link_bytes_; }
  int64_t rateRecomputations() const { return recomputations_; }
  int64_t flowsStarted() const { return int64_t(owners_.size()); }

 private:
  // The state of an active flow. Active flows sit together in one vector in
  // id order (finished ones are removed in place), so the loops over them
  // read memory in sequence; their links live in links_ (one arena for all
  // flows, no allocation per flow), compacted as flows finish.
  struct FlowState {
    int id = 0;
    uint32_t link_begin = 0;  // into links_
    uint32_t link_count = 0;
    double remaining = 0;
    double rate = 0;
    double rate_cap = 0;
  };
  const int* linksOf(const FlowState& f) const { return links_.data() + f.link_begin; }
  void recomputeRates();
  void fillRates();  // progressive filling over the active flows (recomputeRates' work)

  // Rates of flow sets met before. Rates are a function of the active flows'
  // links and caps in id order only (not of bytes or time), and a collective
  // of a repeated size starts the very same flows again (in the GPT-2 1.5B
  // data-parallel bench, 441 rate recomputations come from a handful of
  // distinct phases, each with one flow per GPU). While the active set is
  // "fresh" (every active flow started since the network was last empty and
  // none has finished) it is compared with the remembered sets (a hash picks
  // the candidate, then links, link counts and caps are compared exactly) and
  // a match takes the remembered rates: the same doubles progressive filling
  // would give, without a pass over the links of every flow.
  struct RateMemo {
    uint64_t hash = 0;
    std::vector<int> links;         // the set's links, flow after flow
    std::vector<uint32_t> counts;   // links per flow
    std::vector<double> caps;       // rate cap per flow
    std::vector<double> rates;      // what fillRates gave
  };
  const RateMemo* findMemo() const;
  void remember();
  static constexpr size_t kMaxMemos = 64;
  static constexpr size_t kMaxMemoLinks = size_t(1) << 23;  // ints over all memos (32 MiB)
  std::vector<RateMemo> memos_;
  size_t memo_links_ = 0;
  bool fresh_ = true;        // see RateMemo
  uint64_t fresh_hash_ = 0;  // of the fresh set's links, counts and caps
  void compactLinks();
  // Brings remaining bytes and link counters up to t. Progress is applied
  // lazily (only when the flow set changes or flows finish), so events that
  // do not touch the network cost nothing here.
  void materialize(int64_t t_ns);

  std::vector<double> capacity_;
  std::vector<double> link_bytes_;
  std::vector<int64_t> owners_;     // per flow id, finished flows too
  std::vector<FlowState> active_;   // active flows, ascending id
  std::vector<int> links_;          // link arena, see FlowState
  size_t active_links_ = 0;         // arena entries that belong to active flows
  bool dirty_ = false;
  int64_t now_ns_ = 0;
  int64_t last_update_ns_ = 0;  // remaining bytes are as of this time
  int64_t next_completion_ns_ = 0;
  bool next_valid_ = false;
  int64_t recomputations_ = 0;

  // Scratch for recomputeRates, one entry per link (sized once): together,
  // so that visiting a link touches one cache line, not three.
  struct LinkScratch {
    int64_t epoch = -1;   // valid when equal to epoch_
    double cap_left = 0;  // capacity not yet given to frozen flows
    int unfrozen = 0;     // unfrozen flows crossing the link
  };
  std::vector<LinkScratch> scratch_;
  std::vector<int> used_links_;
  std::vector<uint32_t> unfrozen_, next_, frozen_;  // positions in active_
  int64_t epoch_ = 0;
  // fillByHeap's scratch.
  void fillByHeap();
  int64_t round_stamp_ = 0;
  struct HeapLink {
    int local = 0;      // index into heap_links_
    int64_t stamp = 0;  // marks (see round_stamp_)
  };
  std::vector<HeapLink> heap_link_;  // per link, apart from scratch_ to keep that small
  std::vector<int64_t> flow_stamp_;  // per position in active_
  std::vector<int> heap_links_;
  std::vector<int> csr_off_, csr_fill_;
  std::vector<uint32_t> csr_flow_;
  std::vector<std::pair<double, int>> heap_;
  std::vector<uint32_t> by_cap_;
  std::vector<int> touched_;
};

}  // namespace tandem::sim
