#pragma once
// Which version of the GPU executor's kernel each op kind runs, so that a
// calibration can say which kernels it measured. A kernel change that moves
// its time bumps its kind's revision here; `tandem calibrate` records the
// revisions of the kinds it measures (Calibration::kernel_revisions), and
// `tandem simulate` warns where a calibration measured another revision than
// the build it runs in (simulator/cost/calibration_warnings.h): its times
// for those kinds describe kernels that no longer run.
//
// One revision per op kind: a change to a kernel that only some plans take
// (an FP8 writer, say, where the sweep measures bf16) is not bumped here
// unless calibrations file its times under that kind.

#include "engine/ir/types.h"

namespace tandem {

// 1 unless listed in kernel_revisions.cpp.
int kernelRevision(OpKind op);

}  // namespace tandem
