// The sweep dialog (gui/sweep_dialog.h) runs the combinations on a worker
// thread and shows them ranked, skipped ones with their reason.
#include <catch2/catch.hpp>
#include <QSignalSpy>
#include <QTableWidget>

#include "gui/sweep_dialog.h"
#include "gui_test_app.h"

using namespace tandem;
using namespace tandem::gui;

TEST_CASE("sweep dialog: combinations ranked by tokens/s, skipped ones named", "[gui][sweep]") {
  test::app();
  WhatIfRequest base;
  base.overrides = {"model.layers=2"};
  base.settings.topology = "h200x2-nv18";
  base.settings.calibration = "none";
  SweepDialog dialog(base);
  dialog.setKeepGlobalBatch(false);  // more replicas, more tokens per step
  // A bad axis is said without sweeping.
  dialog.setAxes("training.micro_batch");
  dialog.start();
  CHECK_FALSE(dialog.busy());
  CHECK(dialog.statusText().contains("Not swept"));

  dialog.setAxes("parallel.data_parallel=1,2,4; training.micro_batch=4,8");
  QSignalSpy done(&dialog, &SweepDialog::finished);
  dialog.start();
  CHECK(dialog.busy());
  REQUIRE(done.wait(120000));
  CHECK_FALSE(dialog.busy());
  REQUIRE(dialog.rows().size() == 6);
  CHECK(dialog.table()->rowCount() == 6);
  // Two GPUs at micro-batch 8 move the most tokens; four ranks do not fit
  // the machine's two GPUs and come last with their reason.
  CHECK(dialog.table()->item(0, 0)->text() == "2");
  CHECK(dialog.table()->item(0, 1)->text() == "8");
  for (int r = 1; r < 4; ++r) CHECK(dialog.rows()[size_t(r - 1)].tokens_per_s >= dialog.rows()[size_t(r)].tokens_per_s);
  const int last = dialog.table()->columnCount() - 1;
  CHECK(dialog.table()->item(5, last)->text().contains("4 ranks"));
  CHECK(dialog.statusText().contains("4 of 6 combinations simulated"));
  CHECK(dialog.statusText().contains("Best that fits: --set parallel.data_parallel=2 --set training.micro_batch=8"));
}

TEST_CASE("sweep dialog: the what-if's global batch kept, the accumulation following", "[gui][sweep]") {
  test::app();
  WhatIfRequest base;
  base.overrides = {"model.layers=2", "parallel.data_parallel=2", "training.micro_batch=4"};  // 8 sequences
  base.settings.topology = "h200x2-nv18";
  base.settings.calibration = "none";
  SweepDialog dialog(base);
  dialog.setAxes("training.micro_batch=2,4,8");
  QSignalSpy done(&dialog, &SweepDialog::finished);
  dialog.start();
  REQUIRE(done.wait(120000));
  REQUIRE(dialog.rows().size() == 3);
  std::vector<double> tokens_per_step;
  for (const sim::SweepRow& r : dialog.rows())
    if (r.simulated) tokens_per_step.push_back(r.tokens_per_s * r.step_ms / 1e3);
  REQUIRE(tokens_per_step.size() == 2);  // 8 sequences are no whole number of 8 x 2
  CHECK(tokens_per_step[0] == Approx(tokens_per_step[1]));
  CHECK_THAT(dialog.rows().back().why_not, Catch::Contains("a global batch of 8 sequences"));
}
