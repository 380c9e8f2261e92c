// Max-min fairness of the flow network on textbook cases, and completion times.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <random>

#include "simulator/network/network.h"

using tandem::sim::FlowNetwork;
using tandem::sim::FlowSpec;

namespace {
FlowSpec flow(std::vector<int> links, double bytes, double cap = std::numeric_limits<double>::infinity()) {
  FlowSpec f;
  f.links = std::move(links);
  f.bytes = bytes;
  f.rate_cap = cap;
  return f;
}
}  // namespace

TEST_CASE("two flows on one link share it equally", "[network]") {
  FlowNetwork net({10.0});
  int a = net.addFlow(flow({0}, 100));
  int b = net.addFlow(flow({0}, 100));
  CHECK(net.rate(a) == Approx(5.0));
  CHECK(net.rate(b) == Approx(5.0));
  CHECK(net.nextCompletionNs() == 20);
  auto done = net.advanceTo(20);
  CHECK(done == std::vector<int>{a, b});
}

TEST_CASE("shared bottleneck: a two-link flow and one single-link flow per link", "[network]") {
  // L0 and L1 of 10 bytes/ns; f0 crosses both, f1 only L0, f2 only L1: 5 each.
  FlowNetwork net({10.0, 10.0});
  int f0 = net.addFlow(flow({0, 1}, 1000));
  int f1 = net.addFlow(flow({0}, 1000));
  int f2 = net.addFlow(flow({1}, 1000));
  CHECK(net.rate(f0) == Approx(5.0));
  CHECK(net.rate(f1) == Approx(5.0));
  CHECK(net.rate(f2) == Approx(5.0));
}

TEST_CASE("parking lot: the long flow gets its fair share of the narrowest link", "[network]") {
  // Links of 10, 4 and 10 in a row; the long flow crosses all three and one
  // short flow uses each link. The 4-link is the bottleneck: long = short1 = 2;
  // short0 and short2 take the rest of their links: 8 each.
  FlowNetwork net({10.0, 4.0, 10.0});
  int lng = net.addFlow(flow({0, 1, 2}, 1e6));
  int s0 = net.addFlow(flow({0}, 1e6));
  int s1 = net.addFlow(flow({1}, 1e6));
  int s2 = net.addFlow(flow({2}, 1e6));
  CHECK(net.rate(lng) == Approx(2.0));
  CHECK(net.rate(s1) == Approx(2.0));
  CHECK(net.rate(s0) == Approx(8.0));
  CHECK(net.rate(s2) == Approx(8.0));
}

TEST_CASE("parking lot with equal links: every flow gets half a link", "[network]") {
  const int n = 5;
  std::vector<double> caps(n, 12.0);
  FlowNetwork net(caps);
  std::vector<int> all;
  for (int i = 0; i < n; ++i) all.push_back(i);
  int lng = net.addFlow(flow(all, 1e6));
  std::vector<int> shorts;
  for (int i = 0; i < n; ++i) shorts.push_back(net.addFlow(flow({i}, 1e6)));
  CHECK(net.rate(lng) == Approx(6.0));
  for (int s : shorts) CHECK(net.rate(s) == Approx(6.0));
}

TEST_CASE("a rate cap frees bandwidth for the other flows", "[network]") {
  FlowNetwork net({10.0});
  int capped = net.addFlow(flow({0}, 1000, 3.0));
  int other = net.addFlow(flow({0}, 1000));
  CHECK(net.rate(capped) == Approx(3.0));
  CHECK(net.rate(other) == Approx(7.0));
}

TEST_CASE("rates are recomputed when a flow finishes", "[network]") {
  // 100 and 300 bytes on a 10 bytes/ns link: both at 5 until t=20, when the
  // first ends; the second has 200 left at 10 bytes/ns and ends at t=40.
  FlowNetwork net({10.0});
  int a = net.addFlow(flow({0}, 100));
  int b = net.addFlow(flow({0}, 300));
  REQUIRE(net.nextCompletionNs() == 20);
  CHECK(net.advanceTo(20) == std::vector<int>{a});
  CHECK(net.rate(b) == Approx(10.0));
  REQUIRE(net.nextCompletionNs() == 40);
  CHECK(net.advanceTo(40) == std::vector<int>{b});
  CHECK(net.activeFlows() == 0);
  CHECK(net.linkBytes()[0] == Approx(400.0));
  CHECK(net.nextCompletionNs() == std::numeric_limits<int64_t>::max());
}

TEST_CASE("a flow joining later slows the running one", "[network]") {
  FlowNetwork net({10.0});
  int a = net.addFlow(flow({0}, 200));
  net.advanceTo(10);  // 100 bytes moved
  int b = net.addFlow(flow({0}, 50));
  CHECK(net.rate(a) == Approx(5.0));
  CHECK(net.nextCompletionNs() == 20);  // b: 50 bytes at 5
  CHECK(net.advanceTo(20) == std::vector<int>{b});
  CHECK(net.nextCompletionNs() == 25);  // a: 50 left at 10
  CHECK(net.advanceTo(25) == std::vector<int>{a});
}

TEST_CASE("bad input is refused", "[network]") {
  CHECK_THROWS(FlowNetwork({0.0}));
  FlowNetwork net({1.0});
  CHECK_THROWS(net.addFlow(flow({1}, 10)));
  net.advanceTo(5);
  CHECK_THROWS(net.advanceTo(4));
}

TEST_CASE("random networks: every flow is held by its cap or by a full link where it is among the fastest",
          "[network]") {
  // The bottleneck characterisation of max-min fairness, on networks with
  // many bottleneck levels (so the heap rounds after the first do the work),
  // before and after flows finish.
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 40; ++trial) {
    const int links = 6 + int(rng() % 30);
    std::vector<double> caps;
    for (int l = 0; l < links; ++l) caps.push_back(std::vector<double>{10, 25, 40, 100}[rng() % 4]);
    FlowNetwork net(caps);
    std::vector<int> ids;
    std::vector<std::vector<int>> paths;
    std::vector<double> flow_caps;
    const int flows = 5 + int(rng() % 60);
    for (int i = 0; i < flows; ++i) {
      std::vector<int> path;
      const int hops = 1 + int(rng() % 4);
      for (int h = 0; h < hops; ++h) {
        const int l = int(rng() % links);
        if (std::find(path.begin(), path.end(), l) == path.end()) path.push_back(l);
      }
      const double cap = rng() % 4 == 0 ? double(1 + rng() % 30) : std::numeric_limits<double>::infinity();
      ids.push_back(net.addFlow(flow(path, double(1000 + rng() % 100000), cap)));
      paths.push_back(path);
      flow_caps.push_back(cap);
    }
    for (int stage = 0; stage < 3 && net.activeFlows() > 0; ++stage) {
      std::vector<double> rate(ids.size(), 0), load(size_t(links), 0), fastest(size_t(links), 0);
      std::vector<char> active(ids.size(), 0);
      for (size_t i = 0; i < ids.size(); ++i) {
        rate[i] = net.rate(ids[i]);
        active[i] = rate[i] > 0;
        if (!active[i]) continue;
        for (int l : paths[i]) {
          load[size_t(l)] += rate[i];
          fastest[size_t(l)] = std::max(fastest[size_t(l)], rate[i]);
        }
      }
      for (int l = 0; l < links; ++l) CHECK(load[size_t(l)] <= caps[size_t(l)] * (1 + 1e-9));
      for (size_t i = 0; i < ids.size(); ++i) {
        if (!active[i]) continue;
        INFO("trial " << trial << " stage " << stage << " flow " << i << " rate " << rate[i]);
        CHECK(rate[i] <= flow_caps[i] * (1 + 1e-9));
        bool held = rate[i] >= flow_caps[i] * (1 - 1e-9);
        for (int l : paths[i])
          held = held || (load[size_t(l)] >= caps[size_t(l)] * (1 - 1e-9) &&
                          rate[i] >= fastest[size_t(l)] * (1 - 1e-9));
        CHECK(held);
      }
      net.advanceTo(net.nextCompletionNs());  // some flows finish; the rest are recomputed
    }
  }
}

TEST_CASE("a flow set started again gets bit-identical rates, and a changed one is recomputed", "[network]") {
  // The network remembers the rates of a set of flows that all started since
  // it was last empty; the same set started again (a collective of a repeated
  // size) takes them. Every answer must equal what a fresh network computes.
  std::mt19937 rng(777);
  const int links = 24;
  std::vector<double> caps;
  for (int l = 0; l < links; ++l) caps.push_back(std::vector<double>{10, 25, 40, 100}[rng() % 4]);
  auto randomSet = [&](int flows) {
    std::vector<FlowSpec> set;
    for (int i = 0; i < flows; ++i) {
      std::vector<int> path;
      for (int h = 0, hops = 1 + int(rng() % 4); h < hops; ++h) {
        const int l = int(rng() % links);
        if (std::find(path.begin(), path.end(), l) == path.end()) path.push_back(l);
      }
      const double cap = rng() % 4 == 0 ? double(1 + rng() % 30) : std::numeric_limits<double>::infinity();
      set.push_back(flow(path, double(1000 + rng() % 100000), cap));
    }
    return set;
  };
  auto freshRates = [&](const std::vector<FlowSpec>& set) {
    FlowNetwork fresh(caps);
    std::vector<int> ids;
    for (const FlowSpec& f : set) ids.push_back(fresh.addFlow(f));
    std::vector<double> out;
    for (int id : ids) out.push_back(fresh.rate(id));
    return out;
  };
  const std::vector<FlowSpec> a = randomSet(40), b = randomSet(40);
  std::vector<FlowSpec> a_capped = a;  // same links, other caps: not the same set
  for (FlowSpec& f : a_capped) f.rate_cap = 7;
  FlowNetwork net(caps);
  const std::vector<FlowSpec>* order[] = {&a, &b, &a, &a_capped, &b, &a};
  for (const std::vector<FlowSpec>* set : order) {
    const std::vector<double> expected = freshRates(*set);
    std::vector<int> ids;
    for (const FlowSpec& f : *set) ids.push_back(net.addFlow(f));
    for (size_t i = 0; i < ids.size(); ++i) {
      INFO("flow " << i);
      CHECK(std::bit_cast<uint64_t>(net.rate(ids[i])) == std::bit_cast<uint64_t>(expected[i]));
    }
    // Let some finish: the rest is a subset (recomputed, not remembered).
    net.advanceTo(net.nextCompletionNs());
    std::vector<FlowSpec> rest;
    std::vector<int> rest_ids;
    for (size_t i = 0; i < ids.size(); ++i)
      if (net.rate(ids[i]) > 0) {
        rest.push_back((*set)[i]);
        rest_ids.push_back(ids[i]);
      }
    const std::vector<double> rest_expected = freshRates(rest);
    for (size_t i = 0; i < rest_ids.size(); ++i)
      CHECK(std::bit_cast<uint64_t>(net.rate(rest_ids[i])) == std::bit_cast<uint64_t>(rest_expected[i]));
    while (net.activeFlows() > 0) net.advanceTo(net.nextCompletionNs());
  }
  CHECK(net.rateRecomputations() > 0);
}
