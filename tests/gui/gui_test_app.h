#pragma once
// One QApplication for every GUI test case, created on first use with a
// fixed font and 96 DPI so pixel positions are stable across machines.
#include <QApplication>
#include <QFont>
#include <QFontDatabase>

namespace tandem::gui::test {

inline QApplication& app() {
  static int argc = 1;
  static char name[] = "gui_tests";
  static char* argv[] = {name, nullptr};
  static QApplication* instance = [] {
    QCoreApplication::setAttribute(Qt::AA_Use96Dpi);
    auto* a = new QApplication(argc, argv);
    QFontDatabase::addApplicationFont("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf");
    QFont f("DejaVu Sans");
    f.setPixelSize(11);
    QApplication::setFont(f);
    return a;
  }();
  return *instance;
}

}  // namespace tandem::gui::test
