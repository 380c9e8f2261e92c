#include "engine/plan/plan.h"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>
#include <utility>

namespace tandem {
namespace {

constexpr std::array<std::pair<CollectiveOp, std::string_view>, 8> kCollectiveNames{{
    {CollectiveOp::AllReduce, "all_reduce"},
    {CollectiveOp::AllGather, "all_gather"},
    {CollectiveOp::ReduceScatter, "reduce_scatter"},
    {CollectiveOp::Broadcast, "broadcast"},
    {CollectiveOp::Reduce, "reduce"},
    {CollectiveOp::AllToAll, "all_to_all"},
    {CollectiveOp::Send, "send"},
    {CollectiveOp::Recv, "recv"},
}};

constexpr std::array<std::pair<ReduceOp, std::string_view>, 3> kReduceNames{{
    {ReduceOp::Sum, "sum"},
    {ReduceOp::Avg, "avg"},
    {ReduceOp::Max, "max"},
}};

}  // namespace

int64_t Buffer::elementCount() const {
  // An empty shape is a scalar: one element.
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  return count;
}

const RankPlan& Plan::forRank(int rank) const {
  if (rank < 0 || rank >= world_size)
    throw std::out_of_range("plan: rank " + std::to_string(rank) + " is outside the world of " +
                            std::to_string(world_size) + " ranks");
  for (const RankPlan& program : programs)
    if (std::find(program.ranks.begin(), program.ranks.end(), rank) != program.ranks.end())
      return program;
  throw std::out_of_range("plan: no program lists rank " + std::to_string(rank));
}

std::string_view toString(CollectiveOp v) {
  for (const auto& [op, name] : kCollectiveNames)
    if (op == v) return name;
  return "?";
}

std::string_view toString(ReduceOp v) {
  for (const auto& [op, name] : kReduceNames)
    if (op == v) return name;
  return "?";
}

std::optional<CollectiveOp> parseCollectiveOp(std::string_view s) {
  for (const auto& [op, name] : kCollectiveNames)
    if (name == s) return op;
  return std::nullopt;
}

std::optional<ReduceOp> parseReduceOp(std::string_view s) {
  for (const auto& [op, name] : kReduceNames)
    if (name == s) return op;
  return std::nullopt;
}

}  // namespace tandem
