#include "ui/mainwindow/gui_main.h"

#include <QApplication>

#include "ui/mainwindow/main_window.h"

namespace paralab::ui {

int gui_main(int argc, char** argv) {
    QApplication app(argc, argv);
    QApplication::setApplicationName(QStringLiteral("ParaLab"));
    QApplication::setApplicationVersion(QStringLiteral(PARALAB_VERSION));
    QApplication::setOrganizationName(QStringLiteral("ParaLab"));
    MainWindow window;
    // The default first, so that a file that does not load leaves a working window behind
    // (its error is shown once the window is up).
    // The first look: about half a minute of two devices training, long enough to watch.
    window.openExperiment(QStringLiteral(":/examples/first-look.paralab.json"));
    window.showHint(QObject::tr(
        "First look: press Start (Ctrl+R). Two virtual devices train one model with DDP — in the "
        "Devices tab their losses fall together; in the Timeline each step's all-reduce runs "
        "while backward is still going."));
    window.show();
    // QApplication has taken its own options (-platform, -style...) out of the arguments by now:
    // what is left after the program's name is `paralab [FILE.paralab.json]`.
    const QStringList args = QApplication::arguments();
    for (qsizetype i = 1; i < args.size(); ++i) {
        if (!args[i].startsWith(QLatin1Char('-'))) {
            window.openExperiment(args[i]);
            break;
        }
    }
    return QApplication::exec();
}

}  // namespace paralab::ui
