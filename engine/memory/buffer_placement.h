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
// - the program is cut into blocks of tasks; a buffer live over at most
//   kShortBlocks blocks is listed in each of its blocks, a longer-lived one
//   in a list of its own: a short-lived buffer's question reads only its
//   blocks' lists and the long-lived one, a long-lived buffer's every buffer;
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
  static constexpr int kBlocks = 256;
  static constexpr int kShortBlocks = 4;

  int block_tasks_;
  PlacementList all_, long_lived_;
  std::vector<PlacementList> blocks_;
};

// The lowest offset by the definition, over a plain list: for tests.
int64_t lowestFitByScan(const std::vector<PlacedRange>& placed, int first, int last, int64_t size);

}  // namespace tandem
