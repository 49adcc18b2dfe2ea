#include "ui/mainwindow/gui_main.h"

#include <QApplication>

#include "ui/mainwindow/main_window.h"

namespace paralab::ui {

int gui_main(int argc, char** argv) {
    QApplication app(argc, argv);
    QApplication::setApplicationName(QStringLiteral("ParaLab"));
    QApplication::setOrganizationName(QStringLiteral("ParaLab"));
    MainWindow window;
    window.openExperiment(QStringLiteral(":/examples/spirals-mlp.paralab.json"));
    window.show();
    return QApplication::exec();
}

}  // namespace paralab::ui
