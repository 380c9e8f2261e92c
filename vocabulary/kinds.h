#pragma once
// The words the Plan and the trace store share: which part of a training
// step a piece of work belongs to (Phase) and what kind of queue it runs on
// (StreamKind). The engine writes them into plans, the simulator and the
// profiler into traces, the analyses and the GUI read them back: one enum
// each, one spelling each, so no layer converts them.
//
// Both are stored in trace files as the small integers below (activities'
// `phase` column, the `phases` table) or as their spelling (`streams.kind`):
// append new values at the end only.

#include <cstdint>
#include <optional>
#include <string_view>

namespace tandem {

// None: work of no phase (set-up kernels, imported activity without one).
// A plan's tasks always have a phase other than None.
enum class Phase : uint8_t { None, Forward, Backward, Recompute, Optimizer, Comm, Data };
inline constexpr Phase kLastPhase = Phase::Data;

// Host: a host thread's track in a trace (API calls, NVTX ranges); a plan's
// streams are compute, comm or copy.
enum class StreamKind : uint8_t { Compute, Comm, Copy, Host };
inline constexpr StreamKind kLastStreamKind = StreamKind::Host;

// "forward", ...; None -> "". A value past the last (a damaged trace's code)
// is "?".
std::string_view toString(Phase v);
// "compute", "comm", "copy", "host".
std::string_view toString(StreamKind v);
// "" -> None.
std::optional<Phase> parsePhase(std::string_view s);
std::optional<StreamKind> parseStreamKind(std::string_view s);

}  // namespace tandem
