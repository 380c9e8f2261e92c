#pragma once
// Kernel names as people read them. Traces store the symbol a GPU activity
// was recorded with (CUPTI gives our kernels and CUTLASS's as mangled C++
// symbols, cuBLAS's own as plain C names); what is shown is demangled:
// in full where one kernel is looked at (details, exports), compact in
// lanes and tables (the qualified name and its template arguments, without
// the return type, the parameter list or "(anonymous namespace)").
// Names that are not mangled symbols pass through unchanged.

#include <string>
#include <string_view>

namespace tandem::traces {

// The demangled symbol, or `raw` itself where it does not demangle.
std::string demangledName(std::string_view raw);

// The compact form of demangledName(raw).
std::string compactName(std::string_view raw);

}  // namespace tandem::traces
