#include "engine/memory/buffer_placement.h"

#include <algorithm>
#include <limits>

namespace tandem {
namespace {

bool liveBeside(const PlacedRange& p, int first, int last) { return p.last >= first && p.first <= last; }

bool byOffset(const PlacedRange& a, const PlacedRange& b) { return a.offset < b.offset; }

}  // namespace

void PlacementList::Chunk::summarize() {
  const PlacedRange& head = items.front();
  min_first = max_first = head.first;
  min_last = max_last = head.last;
  max_end = head.offset + head.size;
  max_gap = std::numeric_limits<int64_t>::min();
  for (size_t i = 1; i < items.size(); ++i) {
    const PlacedRange& p = items[i];
    min_first = std::min(min_first, p.first);
    max_first = std::max(max_first, p.first);
    min_last = std::min(min_last, p.last);
    max_last = std::max(max_last, p.last);
    max_gap = std::max(max_gap, p.offset - max_end);
    max_end = std::max(max_end, p.offset + p.size);
  }
}

void PlacementList::insert(const PlacedRange& p) {
  if (chunks_.empty()) chunks_.emplace_back();
  // The first chunk holding a buffer above p's offset takes it (after the
  // buffers at the same offset, as a sorted insert would); else the last.
  auto it = std::partition_point(chunks_.begin(), chunks_.end(),
                                 [&](const Chunk& c) { return !c.items.empty() && c.items.back().offset <= p.offset; });
  if (it == chunks_.end()) --it;
  it->items.insert(std::upper_bound(it->items.begin(), it->items.end(), p, byOffset), p);
  if (it->items.size() <= 2 * kChunk) {
    it->summarize();
    return;
  }
  Chunk upper;
  upper.items.assign(it->items.begin() + kChunk, it->items.end());
  it->items.resize(kChunk);
  it->summarize();
  upper.summarize();
  chunks_.insert(it + 1, std::move(upper));
}

bool PlacementList::Cursor::advance(int first, int last, int64_t size, int64_t* candidate) {
  const std::vector<Chunk>& chunks = list_->chunks_;
  const int64_t before = *candidate;
  while (chunk_ < chunks.size()) {
    const Chunk& c = chunks[chunk_];
    if (c.items[item_].offset >= *candidate + size) break;  // nothing further down the list can block
    if (item_ == 0) {
      if (c.min_first > last || c.max_last < first) {  // none of it is live beside the question
        ++chunk_;
        continue;
      }
      if (c.max_first <= last && c.min_last >= first && c.max_gap < size) {
        // All of it live beside, its first buffer reaching into the window
        // and no gap of `size` between its buffers: every offset below its
        // highest end is blocked.
        *candidate = std::max(*candidate, c.max_end);
        ++chunk_;
        continue;
      }
    }
    const PlacedRange& p = c.items[item_];
    if (liveBeside(p, first, last)) *candidate = std::max(*candidate, p.offset + p.size);
    if (++item_ == c.items.size()) {
      ++chunk_;
      item_ = 0;
    }
  }
  return *candidate != before;
}

PlacedBuffers::PlacedBuffers(int tasks) {
  tasks = std::max(1, tasks);
  int block_tasks = std::max(1, (tasks + kBaseBlocks - 1) / kBaseBlocks);
  while (true) {
    Level level;
    level.block_tasks = block_tasks;
    level.blocks.resize(size_t((tasks + block_tasks - 1) / block_tasks));
    const bool top = level.blocks.size() == 1;
    levels_.push_back(std::move(level));
    if (top) break;
    block_tasks *= kFanout;
  }
}

int64_t PlacedBuffers::lowestFit(int first, int last, int64_t size) const {
  int64_t candidate = 0;
  // Every level's lists of the blocks the window meets (a buffer past the
  // program's end, as tests place, counts in its last block).
  cursors_.clear();
  for (const Level& level : levels_) {
    const int count = int(level.blocks.size());
    const int b0 = std::min(first / level.block_tasks, count - 1), b1 = std::min(last / level.block_tasks, count - 1);
    for (int b = b0; b <= b1; ++b)
      if (!level.blocks[size_t(b)].empty()) cursors_.emplace_back(level.blocks[size_t(b)]);
  }
  // Each list's cursor reads what lies below the candidate's window; one
  // that raises it sends the others round again, until none does.
  for (bool raised = true; raised;) {
    raised = false;
    for (PlacementList::Cursor& c : cursors_) raised |= c.advance(first, last, size, &candidate);
  }
  return candidate;
}

void PlacedBuffers::add(const PlacedRange& p) {
  for (Level& level : levels_) {
    const int count = int(level.blocks.size());
    const int b0 = std::min(p.first / level.block_tasks, count - 1);
    const int b1 = std::min(p.last / level.block_tasks, count - 1);
    if (b1 - b0 + 1 > kShortBlocks && count > 1 && &level != &levels_.back()) continue;
    for (int b = b0; b <= b1; ++b) level.blocks[size_t(b)].insert(p);
    return;
  }
}

int64_t lowestFitByScan(const std::vector<PlacedRange>& placed, int first, int last, int64_t size) {
  std::vector<PlacedRange> sorted = placed;
  std::stable_sort(sorted.begin(), sorted.end(), byOffset);
  int64_t candidate = 0;
  for (const PlacedRange& p : sorted) {
    if (!liveBeside(p, first, last)) continue;
    if (p.offset >= candidate + size) break;
    candidate = std::max(candidate, p.offset + p.size);
  }
  return candidate;
}

}  // namespace tandem
