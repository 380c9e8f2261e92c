#pragma once
// The stream (track) ids of a run, by declared range, for every producer:
// the profiler, the simulator and the importers number their tracks through
// this one layer, so tracks of different roles never collide and a reader
// can tell a track's role from its id (docs/trace-schema.md, streams).
//
//   [0, 998)         plan streams: the stream's index in the rank program
//                    (profiler, simulator); an imported trace's own GPU
//                    stream ids where they fall here (importers)
//   998              the executor's set-up work before the first step (profiler)
//   999              host synchronisation calls (profiler)
//   [1000, 100000)   GPU streams no plan task names (profiler: CUDA streams
//                    first seen outside plan tasks; importers: source stream
//                    ids of 998 and above), numbered in order of appearance
//   [100000, 2^31)   host threads (importers), numbered in order of appearance

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>

namespace tandem::traces {

struct TrackRange {
  int first = 0;
  int last = 0;  // inclusive
  std::string_view what;
  bool contains(int id) const { return id >= first && id <= last; }
};

inline constexpr TrackRange kPlanStreamTracks{0, 997, "plan streams (or an import's own GPU stream ids below 998)"};
inline constexpr int kSetupWorkTrack = 998;
inline constexpr int kHostSyncTrack = 999;
inline constexpr TrackRange kDeviceStreamTracks{1000, 99'999, "GPU streams no plan task names"};
inline constexpr TrackRange kHostThreadTracks{100'000, 2'147'483'646, "host threads"};

// Numbers the tracks of one range in order of first appearance: the same key
// always gets the same id, a new key the next id of the range. Throws
// TraceError when the range is full. Keys are the producer's own (a CUDA
// stream id, a (pid, tid) pair as text, ...).
class TrackNumbering {
 public:
  explicit TrackNumbering(TrackRange range) : range_(range) {}
  int idOf(const std::string& key);
  int idOf(int64_t key) { return idOf(std::to_string(key)); }
  size_t size() const { return ids_.size(); }
  // Every (key, id) handed out, ordered by key.
  const std::map<std::string, int>& ids() const { return ids_; }

 private:
  TrackRange range_;
  std::map<std::string, int> ids_;
};

// The track of a GPU stream an imported trace numbers itself: its own id
// where that lies among the plan stream ids (so a report names the stream
// as the source does), else the next device-stream track.
int importedStreamTrack(int64_t source_id, TrackNumbering& device_tracks);

}  // namespace tandem::traces
