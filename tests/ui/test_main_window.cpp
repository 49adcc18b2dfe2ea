// The window as a user drives it, offscreen: it opens on the embedded default experiment,
// Start trains and plots in batches, Stop stops promptly, a broken file leaves the previous
// experiment in place, and a run that cannot start reports why.
#include <QFile>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include "ui/mainwindow/main_window.h"
#include "ui/panels/dashboard/loss_plot_panel.h"
#include "ui/panels/experiment/experiment_panel.h"
#include "engine/store/run_store.h"
#include "ui/session/run_controller.h"

using paralab::ui::MainWindow;
using paralab::ui::RunController;

class TestMainWindow : public QObject {
    Q_OBJECT
private slots:
    void opensTheDefaultExperiment();
    void shortRunPlotsAndFinishes();
    void stopEndsTheRunPromptly();
    void brokenFileKeepsThePreviousExperiment_data();
    void brokenFileKeepsThePreviousExperiment();
    void runThatCannotStartReportsWhy();
    void exportsThePlot();
};

static const char* kDefault = ":/examples/spirals-mlp.paralab.json";

void TestMainWindow::opensTheDefaultExperiment() {
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    QVERIFY(w.windowTitle().contains("spirals-mlp"));
    QCOMPARE(w.experimentPanel()->layerRowCount(), 5);
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
    const auto summary = finished.at(0).at(0).value<paralab::run::RunSummary>();
    QCOMPARE(QString::fromStdString(summary.status), QString("finished"));
    QCOMPARE(summary.steps, 40);
    QVERIFY(steps.count() >= 1);
    QVERIFY(steps.count() < 40);  // batched, not one signal per step
    QCOMPARE(w.plot()->pointCount(), 40);
    QVERIFY(w.statusText().contains("test accuracy"));
    // ...and the run is kept in the store.
    paralab::store::RunStore db(paralab::store::RunStore::default_path());
    const auto runs = db.list_runs();
    QVERIFY(!runs.empty());
    QCOMPARE(QString::fromStdString(runs.back().status), QString("finished"));
    QCOMPARE(runs.back().summary["steps"].get<int>(), 40);
}

void TestMainWindow::stopEndsTheRunPromptly() {
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    auto e = *w.experiment();
    e.train.epochs = 100000;  // far longer than the test
    w.setExperiment(e);
    QSignalSpy steps(w.controller(), &RunController::stepsArrived);
    QSignalSpy finished(w.controller(), &RunController::finished);
    w.startRun();
    QVERIFY(steps.wait(10000));
    QElapsedTimer t;
    t.start();
    w.stopRun();
    QVERIFY(finished.wait(5000));
    QVERIFY(t.elapsed() < 5000);
    const auto summary = finished.at(0).at(0).value<paralab::run::RunSummary>();
    QCOMPARE(QString::fromStdString(summary.status), QString("stopped"));
    QVERIFY(!w.controller()->isRunning());
}

void TestMainWindow::brokenFileKeepsThePreviousExperiment_data() {
    QTest::addColumn<QByteArray>("content");
    QTest::addColumn<QString>("expected");
    QTest::newRow("syntax") << QByteArray("{ \"paralab\": 1, ") << "parse error";
    QTest::newRow("negative size")
        << QByteArray(R"({"paralab":1,"data":{"dataset":"spirals"},"model":{"layers":[{"type":"linear","out":-4}]}})")
        << "model.layers[0].out: expected a positive integer, got -4";
    QTest::newRow("shape")
        << QByteArray(R"({"paralab":1,"data":{"dataset":"spirals"},"model":{"input":[2],"layers":[{"type":"conv2d","out_channels":2,"kernel":3}]}})")
        << "model.layers[0] (conv2d)";
}

void TestMainWindow::brokenFileKeepsThePreviousExperiment() {
    QFETCH(QByteArray, content);
    QFETCH(QString, expected);
    MainWindow w;
    w.openExperiment(kDefault, false);
    QTemporaryDir dir;
    const QString path = dir.filePath("broken.paralab.json");
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(content);
    f.close();
    const QString error = w.openExperiment(path, false);
    QVERIFY2(error.contains(expected), qPrintable(error));
    QCOMPARE(QString::fromStdString(w.experiment()->name), QString("spirals-mlp"));
    QCOMPARE(w.experimentPanel()->layerRowCount(), 5);
}

void TestMainWindow::runThatCannotStartReportsWhy() {
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    auto e = *w.experiment();
    e.data.dataset = "mnist";
    e.data.path = "/nonexistent/mnist";
    QSignalSpy failed(w.controller(), &RunController::failed);
    w.controller()->start(e);
    QVERIFY(failed.wait(10000));
    QVERIFY(failed.at(0).at(0).toString().contains("/nonexistent/mnist"));
    QVERIFY(!w.controller()->isRunning());
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

QTEST_MAIN(TestMainWindow)
#include "test_main_window.moc"
