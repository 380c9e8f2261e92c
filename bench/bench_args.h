#pragma once
// Command-line flags of the benchmarks, read one way: a bad flag or value
// gets one line naming it and the usage, exit status 2; --help gets the
// usage. (Each bench parsed its own before: a value that was not a number
// ended in std::terminate through std::stoi, or became 0 without a word
// through atoi.)
//
//   bench::ArgReader args("bench_x", "[--reps N] [--keep]", argc, argv);
//   while (args.next()) {
//     if (args.is("--reps")) reps = int(args.integer(1, 1000000));
//     else if (args.is("--keep")) keep = true;
//     else args.unknown();
//   }
#include <fmt/core.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "engine/spec/parse_number.h"

namespace tandem::bench {

class ArgReader {
 public:
  // Reads argv[first..argc).
  ArgReader(std::string program, std::string usage, int argc, char** argv, int first = 1)
      : program_(std::move(program)), usage_(std::move(usage)), argc_(argc), argv_(argv), i_(first - 1) {}

  // Moves to the next flag; false when there is none left. --help (or -h)
  // prints the usage and exits with status 0.
  bool next() {
    ++i_;
    if (i_ >= argc_) return false;
    flag_ = argv_[i_];
    if (flag_ == "--help" || flag_ == "-h") {
      fmt::print("usage: {} {}\n", program_, usage_);
      std::exit(0);
    }
    return true;
  }
  bool is(const char* name) const { return flag_ == name; }
  const std::string& flag() const { return flag_; }

  // The value after the current flag.
  std::string text() {
    if (i_ + 1 >= argc_) fail(flag_ + " needs a value");
    return argv_[++i_];
  }
  int64_t integer(int64_t min, int64_t max) {
    const std::string v = text();
    const auto x = parseWholeNumber<int64_t>(v);
    if (!x || *x < min || *x > max)
      fail(fmt::format("{} takes a whole number from {} to {}, not '{}'", flag_, min, max, v));
    return *x;
  }
  double number(double min, double max) {
    const std::string v = text();
    const auto x = parseFiniteNumber(v);
    if (!x || !(*x >= min && *x <= max))
      fail(fmt::format("{} takes a number from {} to {}, not '{}'", flag_, min, max, v));
    return *x;
  }

  [[noreturn]] void unknown() const { fail("unknown argument " + flag_); }
  [[noreturn]] void fail(const std::string& what) const {
    fmt::print(stderr, "{}: {}\nusage: {} {}\n", program_, what, program_, usage_);
    std::exit(2);
  }

 private:
  std::string program_, usage_;
  int argc_;
  char** argv_;
  int i_;
  std::string flag_;
};

}  // namespace tandem::bench
