#pragma once
// The memory plan's placement question, answered fast: given the transient
// buffers placed so far (offset, size, live range of task indices), the
// lowest offset >= 0 where `size` bytes fit over [first, last], i.e. the
// lowest x with [x, x + size) free of every placed buffer live at some task
// of [first, last]. engine/memory/memory_plan.cpp places buffers greedily with it.
//
// The answer is defined by the placed set alone, not by any order of
// looking at it, so any exact search gives the same plan. Scanning every
// placed buffer in offset order answers it, but two shapes of program make
// that scan quadratic: with many micro-batches most placed buffers belong to
// other micro-batches (at the same offsets), and in a deep model a layer's
// saved activations stack up under every later one. So:
// - the program is cut into blocks of tasks at several levels, each level's
//   blocks kFanout times longer than the one below, the top one block of
//   the whole program. A buffer is listed at the lowest level where it
//   spans at most kShortBlocks blocks, in each of those blocks; a question
//   reads, at every level, the lists of the blocks its window meets. A
//   buffer live beside the window is in one of them, and the buffers read
//   are those of the window's time and a little around it, whatever their
//   lifetime (with one list of long-lived buffers, as interleaved pipelines
//   of hundreds of micro-batches make most activations, every question
//   read nearly every buffer: the plan of Llama 3.1 405B over 16 stages
//   and 384 micro-batches spent minutes there);
// - each list is kept in offset order in chunks that know their buffers'
//   extent in time and offset and the largest gap between them, so that a
//   chunk whose buffers are all live beside the question and leave no gap of
//   `size` is passed over at once, and one whose buffers are none is skipped.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem {

struct PlacedRange {
  int64_t offset = 0, size = 0;
  int first = 0, last = 0;  // live over tasks [first, last]
};

// One list of placed buffers in offset order, in chunks.
class PlacementList {
 public:
  void insert(const PlacedRange& p);
  bool empty() const { return chunks_.empty(); }

  // A position in the list for one question: passes over what cannot move
  // the candidate offset and raises it past what blocks it.
  class Cursor {
   public:
    Cursor() = default;
    explicit Cursor(const PlacementList& list) : list_(&list) {}
    // Reads, in offset order, the buffers starting below *candidate + size;
    // raises *candidate past those live over [first, last] that block it.
    // Returns true when it raised the candidate.
    bool advance(int first, int last, int64_t size, int64_t* candidate);

   private:
    const PlacementList* list_ = nullptr;
    size_t chunk_ = 0, item_ = 0;  // item_ > 0: inside chunk_
  };

 private:
  struct Chunk {
    std::vector<PlacedRange> items;  // by offset
    int min_first = 0, max_first = 0, min_last = 0, max_last = 0;
    int64_t max_end = 0;
    int64_t max_gap = 0;  // largest offset_i - max(end_j, j < i), i >= 1
    void summarize();
  };
  static constexpr size_t kChunk = 64;  // a chunk is split at twice this
  std::vector<Chunk> chunks_;
};

class PlacedBuffers {
 public:
  explicit PlacedBuffers(int tasks);

  // Lowest offset >= 0 where `size` bytes fit over [first, last].
  int64_t lowestFit(int first, int last, int64_t size) const;
  void add(const PlacedRange& p);

 private:
  static constexpr int kBaseBlocks = 1024;  // blocks of the lowest level
  static constexpr int kFanout = 32;
  static constexpr int kShortBlocks = 4;

  struct Level {
    int block_tasks = 1;
    std::vector<PlacementList> blocks;
  };
  std::vector<Level> levels_;  // the lowest first; the last has one block
  mutable std::vector<PlacementList::Cursor> cursors_;  // a question's, reused
};

// The lowest offset by the definition, over a plain list: for tests.
int64_t lowestFitByScan(const std::vector<PlacedRange>& placed, int first, int last, int64_t size);

}  // namespace tandem
