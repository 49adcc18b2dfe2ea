// The window as a user drives it, offscreen: it opens on the embedded default experiment,
// Start trains and plots in batches, Stop stops promptly, a broken file leaves the previous
// experiment in place while a model that does not fit opens in the designer, and a run that
// cannot start, or fails on the way, reports why.
#include <QAction>
#include <QApplication>
#include <QMessageBox>
#include <QPushButton>
#include <QTimer>
#include <QFile>
#include <QSettings>
#include <QTextBrowser>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTreeWidgetItem>
#include <QUndoStack>
#include <QtTest>

#include "engine/store/run_store.h"
#include "ui/mainwindow/help_dialogs.h"
#include "ui/mainwindow/main_window.h"
#include "ui/panels/dashboard/device_dashboard.h"
#include "ui/panels/dashboard/loss_plot_panel.h"
#include "ui/panels/designer/layer_views.h"
#include "ui/panels/designer/model_designer.h"
#include "ui/panels/devices/devices_panel.h"
#include "ui/panels/experiment/experiment_panel.h"
#include "ui/panels/runs/runs_panel.h"
#include "ui/session/run_controller.h"
#include "ui/session/runs_model.h"

using paralab::ui::DeviceDashboard;
using paralab::ui::ExperimentPanel;
using paralab::ui::LayerStackView;
using paralab::ui::LossPlotPanel;
using paralab::ui::MainWindow;
using paralab::ui::ModelDesigner;
using paralab::ui::RunController;

class TestMainWindow : public QObject {
    Q_OBJECT
private slots:
    void settingsAreTheTestsOwn();  // first: before any test points QSettings elsewhere
    void opensTheDefaultExperiment();
    void newGivesAnUntitledExperiment();
    void helpShowsTheDocumentationAndShortcuts();
    void shortRunPlotsAndFinishes();
    void stopEndsTheRun();
    void quitDuringARunAsks();
    void aStoppedRunResumesFromTheRunsTab();
    void brokenFileKeepsThePreviousExperiment_data();
    void brokenFileKeepsThePreviousExperiment();
    void shapeErrorOpensInTheDesigner_data();
    void shapeErrorOpensInTheDesigner();
    void summaryBuildsTheModelOffTheGuiThread();
    void runThatCannotStartReportsWhy_data();
    void runThatCannotStartReportsWhy();
    void runThatFailsDuringTrainingReportsWhy();
    void exportsThePlot();
    void plotChoicesAreRemembered();
};

static const char* kDefault = ":/examples/spirals-mlp.paralab.json";

void TestMainWindow::opensTheDefaultExperiment() {
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    QVERIFY(w.windowTitle().contains("spirals-mlp"));
    QCOMPARE(w.experimentPanel()->layerRowCount(), 5);
}

void TestMainWindow::newGivesAnUntitledExperiment() {
    MainWindow w;
    QCOMPARE(w.openExperiment(":/examples/fashion-cnn.paralab.json", false), QString());
    QVERIFY(w.windowTitle().contains("fashion-cnn"));
    QVERIFY(w.findChild<QAction*>("newAction"));
    QCOMPARE(w.findChild<QAction*>("newAction")->shortcut(), QKeySequence(QKeySequence::New));
    QVERIFY(w.newExperiment(false));
    QCOMPARE(QString::fromStdString(w.experiment()->name), QString("untitled"));
    QVERIFY(w.windowTitle().contains("untitled"));
    QVERIFY(!w.isWindowModified());
    QCOMPARE(w.experimentPanel()->layerRowCount(), 5);  // the default MLP, not the CNN
}

void TestMainWindow::helpShowsTheDocumentationAndShortcuts() {
    // Every docs page is compiled in, the README first, each with a title.
    const QStringList pages = paralab::ui::documentationPages();
    QVERIFY(pages.size() >= 5);
    QCOMPARE(pages.front(), QString(":/docs/README.md"));
    QVERIFY(pages.contains(":/docs/docs/design.md"));
    paralab::ui::DocumentationDialog docs;
    QCOMPARE(docs.currentPage(), QString(":/docs/README.md"));
    QVERIFY(docs.browser()->toPlainText().contains("ParaLab"));
    docs.showPage(":/docs/docs/strategies.md");
    QCOMPARE(docs.currentPage(), QString(":/docs/docs/strategies.md"));
    QVERIFY(docs.browser()->toPlainText().contains("ddp"));
    // The README's pictures are there too (docs/*.png beside the pages).
    QVERIFY(QFile::exists(":/docs/docs/screenshot-main.png"));
    // The shortcuts are read from the menus: Start is listed with its keys.
    MainWindow w;
    const auto rows = paralab::ui::shortcutsOf(&w);
    const bool start = std::any_of(rows.begin(), rows.end(), [](const paralab::ui::ShortcutRow& r) {
        return r.menu == "Run" && r.action == "Start" && r.keys == QKeySequence(Qt::CTRL | Qt::Key_R).toString(QKeySequence::NativeText);
    });
    QVERIFY(start);
    QVERIFY(std::any_of(rows.begin(), rows.end(), [](const paralab::ui::ShortcutRow& r) { return r.action == "ParaLab documentation"; }));
}

void TestMainWindow::shortRunPlotsAndFinishes() {
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    auto e = *w.experiment();
    e.train.max_steps = 40;
    w.setExperiment(e);
    QSignalSpy steps(w.controller(), &RunController::stepsArrived);
    QSignalSpy finished(w.controller(), &RunController::finished);
    w.startRun();
    QVERIFY(finished.wait(20000));
    const auto summary = finished.at(0).at(0).value<paralab::config::RunSummary>();
    QCOMPARE(QString::fromStdString(summary.status), QString("finished"));
    QCOMPARE(summary.steps, 40);
    QVERIFY(steps.count() >= 1);
    QVERIFY(steps.count() < 40);  // batched, not one signal per step
    qsizetype received = 0;
    for (const auto& args : steps) received += args.at(0).value<QVector<paralab::config::StepRecord>>().size();
    QCOMPARE(received, 40);
    QCOMPARE(w.plot()->pointCount(), 40);
    QVERIFY(w.plot()->evalPointCount() >= 1);  // the evaluation at the end
    QCOMPARE(w.controller()->state(), RunController::State::Finished);
    QVERIFY(w.statusText().contains("test accuracy"));
    // ...and the run is kept in the store.
    paralab::store::RunStore db(paralab::store::RunStore::default_path());
    const auto runs = db.list_runs();
    QVERIFY(!runs.empty());
    QCOMPARE(QString::fromStdString(runs.back().status), QString("finished"));
    QCOMPARE(runs.back().summary["steps"].get<int>(), 40);
}

// Quit (Ctrl+Q) while a run trains asks: Cancel keeps the window and the run; "Stop and quit"
// stops the run (resumable) and closes.
void TestMainWindow::quitDuringARunAsks() {
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    auto e = *w.experiment();
    e.train.epochs = 100000;
    w.setExperiment(e);
    w.setWindowModified(false);  // only the run is asked about here
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QSignalSpy steps(w.controller(), &RunController::stepsArrived);
    QSignalSpy finished(w.controller(), &RunController::finished);
    w.startRun();
    QVERIFY(steps.wait(10000));
    QAction* quit = nullptr;
    for (QAction* a : w.findChildren<QAction*>())
        if (a->text() == QStringLiteral("&Quit")) quit = a;
    QVERIFY(quit);
    // Answers the question when it is asked (the dialog runs its own event loop).
    QString asked;
    auto answer = [&](const char* button) {
        auto* poll = new QTimer(&w);
        connect(poll, &QTimer::timeout, poll, [&asked, poll, button] {
            auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget());
            if (!box) return;
            asked = box->text();
            if (QString(button) == "cancel")
                box->button(QMessageBox::Cancel)->click();
            else
                box->findChild<QPushButton*>(button)->click();
            poll->deleteLater();
        });
        poll->start(10);
    };
    answer("cancel");
    quit->trigger();
    QVERIFY2(asked.contains("A run is training"), qPrintable(QStringLiteral("asked: %1, visible %2, modal %3").arg(asked).arg(w.isVisible()).arg(QApplication::activeModalWidget() != nullptr)));
    QVERIFY(w.isVisible());
    QCOMPARE(w.controller()->state(), RunController::State::Running);
    QCOMPARE(finished.count(), 0);
    asked.clear();
    answer("stopAndQuit");
    quit->trigger();
    QVERIFY(!asked.isEmpty());
    QVERIFY(!w.isVisible());
    QVERIFY(finished.count() == 1 || finished.wait(30000));
    QCOMPARE(QString::fromStdString(finished.at(0).at(0).value<paralab::config::RunSummary>().status), QString("stopped"));
}

void TestMainWindow::stopEndsTheRun() {
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    auto e = *w.experiment();
    e.train.epochs = 100000;  // far longer than the test
    w.setExperiment(e);
    QSignalSpy steps(w.controller(), &RunController::stepsArrived);
    QSignalSpy finished(w.controller(), &RunController::finished);
    w.startRun();
    QVERIFY(steps.wait(10000));
    QCOMPARE(w.controller()->state(), RunController::State::Running);
    QVERIFY(!w.findChild<QAction*>("startAction")->isEnabled());
    QVERIFY(w.findChild<QAction*>("stopAction")->isEnabled());
    // The model being trained cannot change: no layer deleted, added or edited, nothing undone.
    ModelDesigner* designer = w.findChild<ModelDesigner*>();
    QVERIFY(designer && designer->isLocked());
    const auto layersBefore = designer->model().layers.size();
    QVERIFY(!designer->removeLayer({0}));
    QVERIFY(!designer->addLayer("relu"));
    QVERIFY(!designer->setLayerOption({0}, "out", "3").isEmpty());
    QCOMPARE(designer->model().layers.size(), layersBefore);
    QVERIFY(!designer->undoAction()->isEnabled());
    QVERIFY(!w.findChild<QAction*>("newAction")->isEnabled());
    QVERIFY(!w.devicesPanel()->isEnabled());
    w.stopRun();
    QCOMPARE(w.controller()->state(), RunController::State::Stopping);
    QVERIFY(!w.findChild<QAction*>("stopAction")->isEnabled());
    // Bounded so that a stop that never ends fails here by name (a run stops within a step).
    QVERIFY(finished.count() == 1 || finished.wait(30000));
    const auto summary = finished.at(0).at(0).value<paralab::config::RunSummary>();
    QCOMPARE(QString::fromStdString(summary.status), QString("stopped"));
    QCOMPARE(w.controller()->state(), RunController::State::Stopped);
    QVERIFY(w.findChild<QAction*>("startAction")->isEnabled());
    QVERIFY(!designer->isLocked());
    QVERIFY(designer->addLayer("relu"));
    QCOMPARE(designer->model().layers.size(), layersBefore + 1);
}

// Stopped from the window, resumed from the Runs tab: the same run id goes on from its last
// checkpoint to the end its experiment set, each step recorded once.
void TestMainWindow::aStoppedRunResumesFromTheRunsTab() {
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    auto e = *w.experiment();
    e.train.epochs = 1000;
    e.train.max_steps = 3000;
    w.setExperiment(e);
    QSignalSpy steps(w.controller(), &RunController::stepsArrived);
    QSignalSpy finished(w.controller(), &RunController::finished);
    w.startRun();
    QVERIFY(steps.wait(10000));
    w.stopRun();
    QVERIFY(finished.count() == 1 || finished.wait(30000));
    QCOMPARE(QString::fromStdString(finished.at(0).at(0).value<paralab::config::RunSummary>().status), QString("stopped"));
    paralab::store::RunStore db(paralab::store::RunStore::default_path());
    const qint64 id = db.list_runs().back().run_id;
    QTRY_VERIFY_WITH_TIMEOUT(w.runsPanel()->model()->run(id) && w.runsPanel()->model()->run(id)->status == "stopped", 10000);
    // Not while another run goes, nor a finished run.
    finished.clear();
    QCOMPARE(w.resumeStoredRun(id, false), QString());
    QVERIFY(!w.resumeStoredRun(id, false).isEmpty());  // it is running now
    QVERIFY(finished.wait(60000));
    const auto summary = finished.at(0).at(0).value<paralab::config::RunSummary>();
    QCOMPARE(QString::fromStdString(summary.status), QString("finished"));
    QCOMPARE(summary.steps, 3000);
    const auto runs = db.list_runs();
    QCOMPARE(runs.back().run_id, id);  // the same run, not a new one
    QCOMPARE(runs.back().status, std::string("finished"));
    QCOMPARE(db.loss_curve(id).size(), size_t(3000));
    QTRY_VERIFY_WITH_TIMEOUT(w.runsPanel()->model()->run(id) && w.runsPanel()->model()->run(id)->status == "finished", 10000);
    QVERIFY(w.resumeStoredRun(id, false).contains("finished"));
}

void TestMainWindow::brokenFileKeepsThePreviousExperiment_data() {
    QTest::addColumn<QByteArray>("content");
    QTest::addColumn<QString>("expected");
    QTest::newRow("missing file") << QByteArray() << "cannot open the experiment file";
    QTest::newRow("syntax") << QByteArray("{ \"paralab\": 1, ") << "broken.paralab.json:1:17: not valid JSON";
    QTest::newRow("negative size")
        << QByteArray(R"({"paralab":1,"data":{"dataset":"spirals"},"model":{"layers":[{"type":"linear","out":-4}]}})")
        << "model.layers[0].out: expected a positive integer, got -4";
    QTest::newRow("unknown key")
        << QByteArray(R"({"paralab":1,"data":{"dataset":"spirals"},"model":{"layers":[{"type":"linear","out":4}]},"devcies":["cpu:0"]})")
        << "devcies";
}

void TestMainWindow::brokenFileKeepsThePreviousExperiment() {
    QFETCH(QByteArray, content);
    QFETCH(QString, expected);
    MainWindow w;
    w.openExperiment(kDefault, false);
    QTemporaryDir dir;
    const QString path = dir.filePath("broken.paralab.json");
    if (!content.isNull()) {
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(content);
    }
    // An edit in the designer first: the refused file must leave it, and its undo step, alone.
    ModelDesigner* d = w.designer();
    d->setSynchronousBudget(60000);
    QVERIFY(d->addLayer("dropout", {}, 1));
    QCOMPARE(d->undoStack()->count(), 1);
    const QString error = w.openExperiment(path, false);
    QVERIFY2(error.contains(expected), qPrintable(error));
    QVERIFY2(error.contains("broken.paralab.json"), qPrintable(error));  // names the file
    QCOMPARE(QString::fromStdString(w.experiment()->name), QString("spirals-mlp"));
    QCOMPARE(w.experiment()->layers.size(), size_t(6));
    QCOMPARE(d->model().layers.size(), size_t(6));
    QCOMPARE(d->undoStack()->count(), 1);
    QVERIFY(d->isValid());
    QVERIFY(w.findChild<QAction*>("startAction")->isEnabled());
    QVERIFY(w.windowTitle().contains("spirals-mlp"));
    QVERIFY(!w.recentFiles().contains(path));
}

// A model that does not fit its data is the designer's to fix: the file opens, the layer is red,
// Start is disabled, and fixing the layer enables it.
void TestMainWindow::shapeErrorOpensInTheDesigner_data() {
    QTest::addColumn<QByteArray>("content");
    QTest::addColumn<QString>("expected");
    QTest::addColumn<int>("errorRow");
    QTest::newRow("conv2d on a flat input")
        << QByteArray(R"({"paralab":1,"name":"bad-conv","data":{"dataset":"spirals"},"model":{"input":[2],)"
                      R"("layers":[{"type":"linear","out":8},{"type":"conv2d","out_channels":2,"kernel":3},{"type":"linear","out":3}]}})")
        << "model.layers[1] (conv2d)" << 1;
    QTest::newRow("input that is not the data's")
        << QByteArray(R"({"paralab":1,"name":"bad-input","data":{"dataset":"spirals"},"model":{"input":[5],)"
                      R"("layers":[{"type":"linear","out":3}]}})")
        << "model.input" << -1;
}

void TestMainWindow::shapeErrorOpensInTheDesigner() {
    QFETCH(QByteArray, content);
    QFETCH(QString, expected);
    QFETCH(int, errorRow);
    MainWindow w;
    w.designer()->setSynchronousBudget(60000);
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    auto* start = w.findChild<QAction*>("startAction");
    QVERIFY(start->isEnabled());
    QTemporaryDir dir;
    const QString path = dir.filePath("misfit.paralab.json");
    {
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(content);
    }
    QCOMPARE(w.openExperiment(path, false), QString());
    QVERIFY(w.windowTitle().contains(QString::fromStdString(w.experiment()->name)));
    QVERIFY(QString::fromStdString(w.experiment()->name).startsWith("bad-"));
    QVERIFY(w.recentFiles().contains(path));
    ModelDesigner* d = w.designer();
    QVERIFY(!d->isValid());
    QVERIFY2(d->validationMessage().contains(expected), qPrintable(d->validationMessage()));
    QVERIFY(!start->isEnabled());
    QVERIFY2(w.statusText().contains(expected), qPrintable(w.statusText()));
    if (errorRow >= 0) {
        // The summary says so too, rather than showing the previous model's layers.
        QCOMPARE(w.experimentPanel()->layerRowCount(), 0);
        QVERIFY2(w.experimentPanel()->totalsText().contains("does not build"),
                 qPrintable(w.experimentPanel()->totalsText()));
        auto* row = d->stackView()->topLevelItem(errorRow);
        QVERIFY(row);
        QCOMPARE(row->foreground(0).color(), QColor(0xc6, 0x28, 0x28));
        QCOMPARE(row->text(LayerStackView::OutputColumn), QString("shape error"));
        QVERIFY(d->removeLayer({errorRow}));  // the fix
    } else {
        QCOMPARE(d->setInputText(QString()), QString());  // the data set's own shape
    }
    QVERIFY2(d->isValid(), qPrintable(d->validationMessage()));
    QVERIFY(start->isEnabled());
    QVERIFY(w.statusText().startsWith("Ready"));
    QVERIFY(w.experimentPanel()->layerRowCount() > 0);
}

// The Summary tab builds the model on a worker: past its budget it says so, shows the rows when
// the build ends (or the error, in red), and a build overtaken by a newer experiment is dropped.
void TestMainWindow::summaryBuildsTheModelOffTheGuiThread() {
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    const auto good = *w.experiment();  // 5 layers
    auto bad = good;
    paralab::nn::LayerSpec conv;  // on the flat [64] output of the first layer
    conv.type = "conv2d";
    conv.out_channels = 2;
    conv.kernel = 3;
    bad.layers.insert(bad.layers.begin() + 1, conv);

    ExperimentPanel p;
    p.setSynchronousBudget(0);  // every build is left to the worker
    bool threw = false;
    try {
        p.showExperiment(good);
    } catch (const std::exception&) {
        threw = true;
    }
    QVERIFY(!threw);
    if (p.buildPending()) QCOMPARE(p.totalsText(), QString("Building the model…"));
    QTRY_COMPARE(p.layerRowCount(), 5);
    QVERIFY(!p.buildPending());

    // A model that does not build: the error, in red, when the worker finds it (budget 0: never
    // thrown here, however fast the worker is).
    p.showExperiment(bad);
    QTRY_VERIFY2(p.totalsText().contains("does not build"), qPrintable(p.totalsText()));

    // A slow build overtaken by a newer experiment shown at once: the newer one stays.
    p.showExperiment(bad);
    p.setSynchronousBudget(60000);
    auto two = good;
    two.layers.resize(3);
    p.showExperiment(two);
    QCOMPARE(p.layerRowCount(), 3);
    QTest::qWait(200);
    QCOMPARE(p.layerRowCount(), 3);
    QVERIFY(p.totalsText().contains("MFLOP"));
}

// Each row is a JSON merge patch (RFC 7386) on the default experiment.
void TestMainWindow::runThatCannotStartReportsWhy_data() {
    QTest::addColumn<QByteArray>("patch");
    QTest::addColumn<QString>("expected");
    QTest::newRow("missing data files")
        << QByteArray(R"({"data":{"dataset":"mnist","path":"/nonexistent/mnist","samples":null,"classes":null,"noise":null,"test_fraction":null}})")
        << "/nonexistent/mnist";
    QTest::newRow("input does not match the data")
        << QByteArray(R"({"model":{"input":[5]}})") << "model.input: [5] does not match";
    QTest::newRow("layer does not fit the data")
        << QByteArray(R"({"model":{"input":null,"layers":[{"type":"conv2d","out_channels":2,"kernel":3}]}})")
        << "model.layers[0] (conv2d)";
}

void TestMainWindow::runThatCannotStartReportsWhy() {
    QFETCH(QByteArray, patch);
    QFETCH(QString, expected);
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    auto json = paralab::run::to_json(*w.experiment());
    json.merge_patch(nlohmann::json::parse(patch.toStdString()));
    const auto e = paralab::run::parse_experiment(json);
    QSignalSpy failed(w.controller(), &RunController::failed);
    QSignalSpy finished(w.controller(), &RunController::finished);
    w.controller()->start(e);
    QVERIFY(failed.wait(10000));
    QVERIFY2(failed.at(0).at(0).toString().contains(expected), qPrintable(failed.at(0).at(0).toString()));
    QCOMPARE(finished.count(), 0);
    QCOMPARE(w.controller()->state(), RunController::State::Failed);
    QVERIFY(w.statusText().contains(expected));
}

void TestMainWindow::runThatFailsDuringTrainingReportsWhy() {
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    auto e = *w.experiment();
    e.optimizer.type = "sgd";
    e.optimizer.lr = 1e30;  // the weights, and then the loss, overflow within a few steps
    e.schedule.type = "constant";
    w.setExperiment(e);
    QSignalSpy finished(w.controller(), &RunController::finished);
    w.startRun();
    QVERIFY(finished.wait(10000));
    const auto summary = finished.at(0).at(0).value<paralab::config::RunSummary>();
    QCOMPARE(QString::fromStdString(summary.status), QString("failed"));
    QCOMPARE(w.controller()->state(), RunController::State::Failed);
    QVERIFY2(w.statusText().contains("Run failed"), qPrintable(w.statusText()));
    QVERIFY(w.statusText().contains(QString::fromStdString(summary.error)));
    QVERIFY(w.findChild<QAction*>("startAction")->isEnabled());  // and it can be run again
}

void TestMainWindow::exportsThePlot() {
    MainWindow w;
    w.openExperiment(kDefault, false);
    QTemporaryDir dir;
    QVERIFY(w.plot()->exportTo(dir.filePath("plot.png")));
    QVERIFY(QFileInfo(dir.filePath("plot.png")).size() > 1000);
    QVERIFY(w.plot()->exportTo(dir.filePath("plot.pdf")));
    QVERIFY(QFileInfo(dir.filePath("plot.pdf")).size() > 500);
}

// Runs go to a store in a temporary folder, never into the user's own.
static void useTemporaryStore() {
    static QTemporaryDir dir;
    qputenv("XDG_DATA_HOME", dir.path().toUtf8());
}
Q_CONSTRUCTOR_FUNCTION(useTemporaryStore)

// How the user reads the plots (x axis, log loss, smoothing) is kept for the next window.
void TestMainWindow::plotChoicesAreRemembered() {
    static QTemporaryDir settingsDir;  // this program's settings from here on: never the user's
    QVERIFY(settingsDir.isValid());
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, settingsDir.path());
    {
        MainWindow w;
        QCOMPARE(w.plot()->xAxis(), LossPlotPanel::XAxis::Step);
        QVERIFY(!w.deviceDashboard()->logarithmicLoss());
        w.plot()->setXAxis(LossPlotPanel::XAxis::WallTime);
        w.plot()->setLogarithmicLoss(true);
        w.deviceDashboard()->setXAxis(DeviceDashboard::XAxis::WallTime);
        w.deviceDashboard()->setLogarithmicLoss(true);
        w.deviceDashboard()->setSmoothing(0.3);
        w.show();
        QVERIFY(w.close());  // as the user closes it: the settings are saved
    }
    MainWindow again;
    QCOMPARE(again.plot()->xAxis(), LossPlotPanel::XAxis::WallTime);
    QVERIFY(again.plot()->logarithmicLoss());
    QCOMPARE(again.deviceDashboard()->xAxis(), DeviceDashboard::XAxis::WallTime);
    QVERIFY(again.deviceDashboard()->logarithmicLoss());
    QCOMPARE(again.deviceDashboard()->smoothing(), 0.3);
    // Back to the defaults for the tests after this one.
    again.plot()->setXAxis(LossPlotPanel::XAxis::Step);
    again.plot()->setLogarithmicLoss(false);
    again.deviceDashboard()->setXAxis(DeviceDashboard::XAxis::Step);
    again.deviceDashboard()->setLogarithmicLoss(false);
    again.deviceDashboard()->setSmoothing(0.6);
    again.show();
    QVERIFY(again.close());
}

// The suite never writes into the user's settings (it once left its temporary files in Open
// Recent): under CTest every window test has a settings folder of its own in the build tree.
void TestMainWindow::settingsAreTheTestsOwn() {
    // Run by hand, give it XDG_CONFIG_HOME as CTest does (tests/ui/CMakeLists.txt).
    const QString file = QSettings(QStringLiteral("ParaLab"), QStringLiteral("ParaLab")).fileName();
    QVERIFY2(!file.startsWith(QDir::homePath() + QStringLiteral("/.config/")), qPrintable(file));
}

QTEST_MAIN(TestMainWindow)
#include "test_main_window.moc"
