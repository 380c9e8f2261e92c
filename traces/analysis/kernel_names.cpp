#include "traces/analysis/kernel_names.h"

#include <cxxabi.h>

#include <cctype>
#include <cstdlib>
#include <memory>

namespace tandem::traces {
namespace {

// The Itanium ABI's symbols start with _Z; a device symbol may carry a
// leading extra underscore on some tool chains.
bool looksMangled(std::string_view s) { return s.starts_with("_Z") || s.starts_with("__Z"); }

// Position of the '(' that opens the parameter list closing the name, or
// npos when the name does not end with one (a trailing " const" allowed).
size_t parameterListStart(std::string_view s) {
  size_t end = s.size();
  while (end > 0 && s[end - 1] == ' ') --end;
  if (std::string_view(s.substr(0, end)).ends_with(" const")) end -= 6;
  if (end == 0 || s[end - 1] != ')') return std::string_view::npos;
  int depth = 0;
  for (size_t i = end; i-- > 0;) {
    if (s[i] == ')') ++depth;
    else if (s[i] == '(' && --depth == 0) return i;
  }
  return std::string_view::npos;
}

// Whether `s` reads as a (qualified, possibly templated) function name: it
// starts like an identifier and has no space outside <...> and (...).
// "Memcpy DtoH (Device -> Pinned)" is a label, not a signature.
bool qualifiedName(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_' || s[0] == '(')) return false;
  int angle = 0, paren = 0;
  for (const char c : s) {
    if (c == '<') ++angle;
    else if (c == '>' && angle > 0) --angle;
    else if (c == '(') ++paren;
    else if (c == ')' && paren > 0) --paren;
    else if (c == ' ' && angle == 0 && paren == 0) return false;
  }
  return true;
}

void eraseAll(std::string& s, std::string_view what) {
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at)) s.erase(at, what.size());
}

}  // namespace

std::string demangledName(std::string_view raw) {
  if (!looksMangled(raw)) return std::string(raw);
  const std::string symbol(raw.starts_with("__Z") ? raw.substr(1) : raw);
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status),
                                             std::free);
  if (status != 0 || !out) return std::string(raw);
  return std::string(out.get());
}

std::string compactName(std::string_view raw) {
  // Demangled here, or already by the tool that wrote the trace (nsys).
  std::string s = demangledName(raw);
  // A kernel returns void: a signature starts with it or with the name.
  const bool returns_void = s.starts_with("void ");
  std::string_view name = returns_void ? std::string_view(s).substr(5) : std::string_view(s);
  const size_t open = parameterListStart(name);
  if (open == std::string_view::npos || open == 0 || !qualifiedName(name.substr(0, open))) {
    // Not a signature: a plain C kernel name ("sm90_xmma_gemm_..."), an API
    // call or a label ("Memcpy DtoH (Device -> Pinned)"); nothing to shorten.
    return s;
  }
  std::string out(name.substr(0, open));
  eraseAll(out, "(anonymous namespace)::");
  return out;
}

}  // namespace tandem::traces
