#include "traces/trackers/track_ids.h"

#include <fmt/core.h>

#include "traces/store/trace_model.h"

namespace tandem::traces {

int TrackNumbering::idOf(const std::string& key) {
  if (auto it = ids_.find(key); it != ids_.end()) return it->second;
  const int64_t id = int64_t(range_.first) + int64_t(ids_.size());
  if (id > range_.last)
    throw TraceError(fmt::format("more than {} tracks of one kind ({}) in one run", range_.last - range_.first + 1,
                                 range_.what));
  ids_.emplace(key, int(id));
  return int(id);
}

int importedStreamTrack(int64_t source_id, TrackNumbering& device_tracks) {
  if (source_id >= kPlanStreamTracks.first && source_id <= kPlanStreamTracks.last) return int(source_id);
  return device_tracks.idOf(source_id);
}

}  // namespace tandem::traces
