#include "simulator/cost/gemm_tiles.h"

#include <cctype>

#include "simulator/cost/cost_model.h"

namespace tandem::sim {
namespace {

// Reads "<a>x<b>" (and "x<c>" when `three`) at `pos`, each a whole number;
// the end position, or npos.
size_t readDims(std::string_view s, size_t pos, int count, int* out) {
  for (int i = 0; i < count; ++i) {
    if (i > 0) {
      if (pos >= s.size() || s[pos] != 'x') return std::string_view::npos;
      ++pos;
    }
    const size_t begin = pos;
    int64_t v = 0;
    while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos])) && pos - begin < 5)
      v = v * 10 + (s[pos++] - '0');
    if (pos == begin) return std::string_view::npos;
    out[i] = int(v);
  }
  return pos;
}

// A tile edge the GEMM libraries use: 8 to 512 elements.
bool plausible(int v) { return v >= 8 && v <= 512; }

}  // namespace

std::optional<GemmTile> gemmTileFromKernelName(std::string_view name) {
  int d[3] = {0, 0, 0};
  // cuBLAS's xmma kernels spell it out.
  if (const size_t p = name.find("tilesize"); p != std::string_view::npos) {
    if (readDims(name, p + 8, 2, d) != std::string_view::npos && plausible(d[0]) && plausible(d[1]))
      return GemmTile{d[0], d[1]};
    return std::nullopt;
  }
  // nvjet: the first "_<m>x<n>_" after the prefix (the next group is the K
  // step and stages, then the cluster).
  if (name.rfind("nvjet", 0) == 0) {
    for (size_t p = name.find('_'); p != std::string_view::npos; p = name.find('_', p + 1)) {
      const size_t end = readDims(name, p + 1, 2, d);
      if (end != std::string_view::npos && end < name.size() && name[end] == '_' && plausible(d[0]) &&
          plausible(d[1]))
        return GemmTile{d[0], d[1]};
    }
    return std::nullopt;
  }
  // CUTLASS: the first "_<m>x<n>x<k>_" group.
  for (size_t p = name.find('_'); p != std::string_view::npos; p = name.find('_', p + 1)) {
    const size_t end = readDims(name, p + 1, 3, d);
    if (end != std::string_view::npos && (end == name.size() || name[end] == '_') && plausible(d[0]) &&
        plausible(d[1]))
      return GemmTile{d[0], d[1]};
  }
  return std::nullopt;
}

std::optional<GemmTile> parseGemmTile(std::string_view text) {
  int d[2] = {0, 0};
  if (readDims(text, 0, 2, d) != text.size() || !plausible(d[0]) || !plausible(d[1])) return std::nullopt;
  return GemmTile{d[0], d[1]};
}

int64_t gemmOutputTiles(const Task& task, std::optional<GemmTile> tile) {
  const OpAttrs& a = task.attrs;
  int64_t rows = 0, cols = 0;
  switch (costOpKind(task)) {
    case OpKind::Matmul: rows = a.m, cols = a.n; break;            // y [tokens, out]
    case OpKind::MatmulBwdData: rows = a.m, cols = a.k; break;     // dx [tokens, in]
    case OpKind::MatmulBwdWeight: rows = a.n, cols = a.k; break;   // dW [out, in]
    default: return 0;
  }
  if (rows <= 0 || cols <= 0) return 0;
  const auto tiles = [](int64_t r, int64_t c, int64_t tr, int64_t tc) { return ((r + tr - 1) / tr) * ((c + tc - 1) / tc); };
  // cuBLASLt sees the row-major output transposed: its M runs along our
  // columns.
  if (tile && tile->m > 0 && tile->n > 0) return tiles(cols, rows, tile->m, tile->n);
  return std::min(tiles(rows, cols, 256, 128), tiles(cols, rows, 256, 128));
}

std::string_view gemmReductionField(const Task& task) {
  switch (costOpKind(task)) {
    case OpKind::Matmul: return "k";
    case OpKind::MatmulBwdData: return "n";
    case OpKind::MatmulBwdWeight: return "m";
    default: return {};
  }
}

}  // namespace tandem::sim
