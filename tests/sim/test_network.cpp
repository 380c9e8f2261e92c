// Max-min fairness of the flow network on textbook cases, and completion times.
#include <catch2/catch.hpp>

#include "simulator/network.h"

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
