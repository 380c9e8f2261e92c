#include <catch2/catch.hpp>

#include "engine/spec/parse_number.h"

using tandem::parseFiniteNumber;
using tandem::parseWholeNumber;

TEST_CASE("whole numbers: the whole text or nothing", "[parse_number]") {
  CHECK(parseWholeNumber("5") == 5);
  CHECK(parseWholeNumber("-3") == -3);
  CHECK(parseWholeNumber("0") == 0);
  for (const char* bad : {"", " 5", "5 ", "+5", "5x", "x", "1.0", "99999999999999999999"})
    CHECK_FALSE(parseWholeNumber(bad).has_value());
  CHECK(parseWholeNumber<int>("2147483647") == 2147483647);
  CHECK_FALSE(parseWholeNumber<int>("2147483648").has_value());  // out of int's range
}

TEST_CASE("finite numbers: decimal and exponent forms, nothing else", "[parse_number]") {
  CHECK(parseFiniteNumber("2") == 2.0);
  CHECK(parseFiniteNumber("0.5") == 0.5);
  CHECK(parseFiniteNumber(".5") == 0.5);
  CHECK(parseFiniteNumber("-2.5") == -2.5);
  CHECK(parseFiniteNumber("1e-3") == Approx(1e-3));
  for (const char* bad : {"", " 1", "1 ", "1.5.", "inf", "nan", "-inf", "1e999", "0x10", "two"})
    CHECK_FALSE(parseFiniteNumber(bad).has_value());
}
