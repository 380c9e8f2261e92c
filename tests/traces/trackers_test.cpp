// The tracker layer every trace producer shares (traces/trackers/): stat
// declarations that name each stat once, and track ids by declared range.
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "traces/trackers/stats.h"
#include "traces/trackers/track_ids.h"

using namespace tandem::traces;

TEST_CASE("every stat is declared once, and a stored name finds its declaration", "[trackers][stats]") {
  std::set<std::string_view> names;
  for (const stats::StatDecl* d : stats::all()) {
    INFO(d->name);
    CHECK(names.insert(d->name).second);
    CHECK(!d->description.empty());
    if (d->form == stats::NameForm::PerRank) CHECK(d->name.substr(d->name.size() - 5) == ".rank");
    if (d->form == stats::NameForm::Family) CHECK(d->name.back() == '.');
    const std::string stored = d->form == stats::NameForm::Plain     ? d->nameOf()
                               : d->form == stats::NameForm::PerRank ? d->nameOf(12)
                                                                     : d->nameOf("x");
    CHECK(stats::find(stored) == d);
  }
  CHECK(stats::find("no.such.stat") == nullptr);
  CHECK(stats::find("clock.offset_ns.rank") == nullptr);     // a prefix alone is no stat
  CHECK(stats::find("clock.offset_ns.rank3x") == nullptr);   // nor a rank that is not a number
  CHECK(stats::rankOf(stats::kClockOffsetNs, "clock.offset_ns.rank3") == 3);
  CHECK(stats::rankOf(stats::kClockOffsetNs, "clock.offset_rtt_ns.rank3") == -1);
  CHECK(stats::rankOf(stats::kClockOffsetNs, "clock.offset_ns.rank99999999999") == -1);  // out of range
}

TEST_CASE("a stat row takes its declared severity, name and description", "[trackers][stats]") {
  const StatRow dropped = stats::kCuptiDroppedRecords.row(0);
  CHECK(dropped.name == "cupti.dropped_records");
  CHECK(dropped.severity == Severity::Info);  // none dropped is no data loss
  CHECK(stats::kCuptiDroppedRecords.row(7).severity == Severity::DataLoss);
  const StatRow offset = stats::kClockOffsetNs.row(3, -1500);
  CHECK(offset.name == "clock.offset_ns.rank3");
  CHECK(offset.value == -1500);
  CHECK(offset.description == stats::kClockOffsetNs.description);
  const StatRow skipped = stats::kKinetoSkippedPhase.row("i", 4);
  CHECK(skipped.name == "import.kineto.skipped_phase.i");
  CHECK(stats::kSimMemoryShortMib.row(12, "short by 12 MiB").description == "short by 12 MiB");
  CHECK(stats::kTokensPerSecond.merge == stats::MergeRule::Max);
  CHECK(stats::kCuptiRecords.merge == stats::MergeRule::Sum);
}

TEST_CASE("tracks are numbered in their declared ranges in order of appearance", "[trackers][tracks]") {
  TrackNumbering host(kHostThreadTracks);
  CHECK(host.idOf("12/7") == 100000);
  CHECK(host.idOf("12/9") == 100001);
  CHECK(host.idOf("12/7") == 100000);  // the same key keeps its track
  CHECK(host.size() == 2);
  TrackNumbering device(kDeviceStreamTracks);
  CHECK(importedStreamTrack(7, device) == 7);       // a source id among the plan stream ids keeps its number
  CHECK(importedStreamTrack(998, device) == 1000);  // one that would take the set-up track does not
  CHECK(importedStreamTrack(-3, device) == 1001);
  CHECK(importedStreamTrack(998, device) == 1000);
  for (int id : {kSetupWorkTrack, kHostSyncTrack}) {
    CHECK_FALSE(kPlanStreamTracks.contains(id));
    CHECK_FALSE(kDeviceStreamTracks.contains(id));
    CHECK_FALSE(kHostThreadTracks.contains(id));
  }
  TrackNumbering tiny(TrackRange{10, 11, "test tracks"});
  tiny.idOf(1);
  tiny.idOf(2);
  CHECK_THROWS_WITH(tiny.idOf(3), Catch::Contains("more than 2 tracks") && Catch::Contains("test tracks"));
}
