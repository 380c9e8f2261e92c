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
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
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

// The same with one numeric field weighed `weight` times the others (a
// GEMM's reduction dimension: the kernel a library picks follows the output
// more than the depth).
std::optional<std::string> nearestShapeKey(const std::string& key, const std::vector<std::string>& candidates,
                                           std::string_view lighter_field, double weight);

// A measured shape with its task's work (CostEntry::gflop, mb).
struct ShapeWork {
  int64_t ns = 0;  // launch included
  double gflop = 0, mb = 0;
};

// What a shape's work takes at best on a device: max(FLOPs / peak, bytes /
// bandwidth), in ns (the roofline at 100% of both peaks).
struct PeakRates {
  double flop_per_ns = 0, bytes_per_ns = 0;
  double idealNs(double gflop, double mb) const;
};

// Times of unmeasured shapes from the efficiency of measured ones, for
// calibrations that record each shape's work (a kernel sweep's:
// simulator/calibrate/sweep_grid.h). A measured shape's slowness is its
// time beyond what a kernel of its kind costs whatever its work (the fixed
// part: launch, ramp-up; the op kind's fitted constant) over its ideal time
// at the device's peaks;
// a new shape takes
//   - between two measured shapes that differ from it in one number only,
//     the slowness interpolated linearly in the logarithms of that number
//     and of the slowness (a GEMM's m doubled between 8k and 32k keeps the
//     efficiency it has there, where a line through the times would not);
//   - otherwise the trend through its nearest measured neighbours: a plane
//     in the logarithms of the fields and of the slowness, fitted to the
//     eight of least log distance (weights 1 / (distance^2 + 0.01), slopes
//     held back by a ridge), read at the shape and kept within 10% of those
//     neighbours' slowness; so a shape beyond the measured ones (a longer
//     sequence) follows their trend rather than stopping at the last;
// where an attention shape is compared by what its kernel's efficiency
// follows (efficiencyFields): key/value heads in flight b x kv, the
// sequence, the head width and whether heads are grouped (another kernel:
// only shapes of the same width and either grouped or not count) and the
// grouping;
// and never less than 1: no shape runs faster than the peaks. Nothing when
// no measured shape has the key's form.
// "b=2 t=8192 c=4096 h=32 kv=8" -> "bkv=16 t=8192 head=w128-grouped group=4"; other keys as they are.
ShapeFields efficiencyFields(const ShapeFields& fields);

class WorkInterpolator {
 public:
  WorkInterpolator() = default;
  explicit WorkInterpolator(const std::map<std::string, ShapeWork>& measured);
  std::optional<int64_t> ns(const std::string& key, double gflop, double mb, const PeakRates& peaks,
                            int64_t fixed_ns) const;
  // How far the reading is off where the answer is known: each measured
  // shape read off the others as if it had not been measured, |read /
  // measured - 1| per shape that has neighbours to read from (in the
  // measured shapes' order).
  std::vector<double> leaveOneOutErrors(const PeakRates& peaks, int64_t fixed_ns) const;
  // The same with more hidden than the shape itself: each measured shape
  // read off the others that `hidden(read, other)` leaves visible (the
  // shapes' efficiency fields), read / measured - 1 where there was
  // something to read from. Leaving out every longer sequence of an
  // attention, say, tests how far the reading extrapolates.
  struct ReadError {
    ShapeFields fields;
    double error = 0;
  };
  using Hidden = std::function<bool(const ShapeFields& read, const ShapeFields& other)>;
  std::vector<ReadError> readErrors(const PeakRates& peaks, int64_t fixed_ns, const Hidden& hidden) const;
  // The numeric fields (of the efficiency fields: "t" for an attention's
  // sequence) in which `key` lies outside every measured shape of its form,
  // below the least or above the greatest; none when it lies within the
  // measured range in every field, or no shape has its form. Such a reading
  // follows the neighbours' trend past the last of them.
  std::vector<std::string> fieldsBeyondMeasured(const std::string& key) const;
  bool empty() const { return shapes_.empty(); }

 private:
  struct Shape {
    ShapeFields fields;
    ShapeWork work;
  };
  std::optional<int64_t> nsOf(const ShapeFields& want, double gflop, double mb, const PeakRates& peaks,
                              int64_t fixed_ns, const std::function<bool(const Shape&)>& skip) const;
  std::vector<Shape> shapes_;
};

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
