#pragma once
// Times of shapes the calibration did not measure, from two it did.
//
// A calibration measures each op kind at the shapes its runs had (the shape
// key: "m=16384 n=50304 k=768", "b=16 t=1024 c=768 h=12", with "epi=gelu"
// and the like). A job between them, micro-batch 12 between 8 and 16 say,
// has shapes that differ from two measured ones in a single number and lie
// between them there. Its time is read off the line through those two
// points: the kernels of such neighbours do the same work per row, and the
// algorithm a GEMM gets between them changes less than the op kind's one
// linear fit over all its shapes (docs/accuracy.md: at micro-batch 12 the
// fit put the vocabulary projection 8-13% slow and the weight gradients
// 10-13% fast; the line through the neighbours is within 1-3%).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tandem::sim {

// A shape key split into its fields, in order: ("m", "16384"), ("epi", "gelu").
using ShapeFields = std::vector<std::pair<std::string, std::string>>;
ShapeFields parseShapeKey(const std::string& key);

// Of `candidates`, the shape key nearest to `key`: the same fields in the
// same order, the same values where they are not numbers ("epi=gelu"), and
// the least sum of |ln(a / b)| over the numeric fields (the first of those
// tied); nothing when no candidate has that form. For what a shape key
// cannot be interpolated in, such as the kernel a library picks: a job
// between or beside measured ones most likely gets its nearest neighbour's.
std::optional<std::string> nearestShapeKey(const std::string& key, const std::vector<std::string>& candidates);

class ShapeInterpolator {
 public:
  ShapeInterpolator() = default;
  // The measured times by shape key (entries without a time are left out).
  explicit ShapeInterpolator(const std::map<std::string, int64_t>& measured_ns);
  // The time of `key` from the nearest measured shape below and above it in
  // one numeric field, every other field the same; nothing when there is
  // no such pair.
  std::optional<int64_t> ns(const std::string& key) const;
  bool empty() const { return shapes_.empty(); }

 private:
  struct Shape {
    ShapeFields fields;
    int64_t ns;
  };
  std::vector<Shape> shapes_;
};

}  // namespace tandem::sim
