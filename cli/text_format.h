#pragma once
// Number formatting shared by the commands' human-readable output.

#include <cstdint>
#include <string>

namespace tandem::cli {

std::string withThousands(int64_t v);       // 124475904 -> "124,475,904"
std::string humanBytes(double bytes);       // binary units: "1.50 GiB"
std::string humanCount(double v);           // SI units: "1.23 T"

}  // namespace tandem::cli
