// The runs panel on a store filled by real short runs of one spirals experiment (single, ddp
// on 2 devices, zero on 2 devices), offscreen: the table lists them with their strategies, the
// filter narrows, a comparison overlays the selected loss curves, scaling efficiency is taken
// against the single-device run, notes and delete reach the store, CSV and plot exports write
// files, and a damaged or locked store shows a message while the panel stays usable.
#include <QFile>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest>

#include <sqlite3.h>

#include <cmath>

#include "engine/run/experiment_file.h"
#include "engine/run/trainer.h"
#include "engine/store/run_store.h"
#include <QDialog>
#include <QTableWidget>
#include <QAction>
#include <QLabel>
#include "ui/mainwindow/main_window.h"
#include "ui/panels/common/byte_units.h"
#include "ui/panels/runs/runs_panel.h"
#include "ui/session/run_controller.h"
#include "ui/session/runs_model.h"

using namespace paralab;
using paralab::ui::RunsModel;
using paralab::ui::RunsPanel;

namespace {

config::Experiment spirals(const std::string& strategy, int devices, int64_t steps) {
    nlohmann::json device_list = nlohmann::json::array();
    for (int d = 0; d < devices; ++d) device_list.push_back("cpu:" + std::to_string(d));
    const nlohmann::json j = {
        {"paralab", 1},
        {"name", "spirals"},
        {"seed", 7},
        {"data",
         {{"dataset", "spirals"},
          {"samples", 1200},
          {"classes", 3},
          {"noise", 0.2},
          {"batch_size", 64}}},
        {"model",
         {{"input", {2}},
          {"layers", nlohmann::json::array({{{"type", "linear"}, {"out", 32}},
                                            {{"type", "relu"}},
                                            {{"type", "linear"}, {"out", 3}}})}}},
        {"devices", device_list},
        {"strategy", {{"type", strategy}}},
        {"optimizer", {{"type", "adam"}, {"lr", 0.01}}},
        {"train", {{"epochs", 100}, {"max_steps", steps}}},
    };
    return run::parse_experiment(j);
}

// A real run, recorded the way the window and the CLI record theirs.
qint64 recordRun(store::RunStore& db, const config::Experiment& e) {
    store::RunRecorder recorder(db, run::to_json(e));
    const auto summary = run::run_experiment(e, &recorder, nullptr);
    if (summary.status != "finished")
        qFatal("run %s did not finish: %s", e.strategy.type.c_str(), summary.error.c_str());
    return recorder.run_id();
}

struct Filled {
    qint64 single = 0, ddp = 0, zero = 0;
};

// Different step counts, so that a curve's point count says which run it is.
constexpr int kSingleSteps = 30, kDdpSteps = 24, kZeroSteps = 20;

Filled fillStore(const QString& path) {
    store::RunStore db(path.toStdString());
    Filled f;
    f.single = recordRun(db, spirals("single", 1, kSingleSteps));
    f.ddp = recordRun(db, spirals("ddp", 2, kDdpSteps));
    f.zero = recordRun(db, spirals("zero", 2, kZeroSteps));
    return f;
}

// Waits for the panel's first load (started by its constructor, answered on the GUI thread).
bool waitLoaded(RunsPanel& panel) {
    if (!panel.model()->isRefreshing()) return true;
    QSignalSpy spy(panel.model(), &RunsModel::refreshed);
    return spy.wait(15000);
}

bool waitCompared(RunsPanel& panel, const QList<qint64>& ids) {
    QSignalSpy spy(&panel, &RunsPanel::comparisonUpdated);
    panel.selectRuns(ids);
    while (spy.wait(10000))
        if (panel.comparedRunIds().size() == ids.size()) return true;
    return false;
}

}  // namespace

class TestRunsPanel : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void listsTheRunsWithTheirStrategies();
    void filterNarrowsTheTable_data();
    void filterNarrowsTheTable();
    void comparisonOverlaysTheSelectedLossCurves();
    void scalingEfficiencyIsAgainstTheSingleRun();
    void theUserPicksTheBaseline();
    void aRunIsShownBesideItsPlan();
    void runsAreHandedInAndImported();
    void notesRoundTripToTheStore();
    void csvExportWritesTheTable();
    void deleteRemovesTheRunAndItsRecords();
    void aDamagedStoreShowsAnErrorNotACrash();
    void aLockedStoreRefusesANoteWithAClearMessage();
    void theWindowsRunsTabShowsARunWhenItFinishes();
    void screenshot();

private:
    QTemporaryDir m_dir;
    QString m_path;
    Filled m_runs;
};

void TestRunsPanel::initTestCase() {
    QVERIFY(m_dir.isValid());
    m_path = m_dir.filePath("runs.db");
    m_runs = fillStore(m_path);
}

void TestRunsPanel::listsTheRunsWithTheirStrategies() {
    RunsPanel panel(m_path);
    QVERIFY(waitLoaded(panel));
    QCOMPARE(panel.model()->errorMessage(), QString());
    QCOMPARE(panel.proxy()->rowCount(), 3);
    QStringList strategies;
    for (int row = 0; row < panel.proxy()->rowCount(); ++row)
        strategies << panel.proxy()->index(row, RunsModel::Strategy).data().toString();
    strategies.sort();
    // Each strategy with what tells its runs apart (the registry's variant).
    QCOMPARE(strategies, QStringList({"ddp · 25 MiB buckets", "single", "zero · stage 1"}));
    QCOMPARE(panel.model()->run(m_runs.zero)->variant, QString("stage 1"));
    QCOMPARE(panel.model()->index(panel.model()->rowOfRun(m_runs.zero), RunsModel::Strategy)
                 .data(RunsModel::StrategyRole)
                 .toString(),
             QString("zero"));
    const auto* ddp = panel.model()->run(m_runs.ddp);
    QVERIFY(ddp);
    QCOMPARE(ddp->devices, QStringList({"cpu:0", "cpu:1"}));
    QCOMPARE(ddp->status, QString("finished"));
    QVERIFY(ddp->samplesPerS > 0);
    QVERIFY(ddp->peakMemoryBytes > 0);
    QVERIFY(std::isfinite(ddp->finalLoss));
    const QModelIndex devices =
        panel.model()->index(panel.model()->rowOfRun(m_runs.ddp), RunsModel::Devices);
    QCOMPARE(devices.data().toString(), QString("2 × cpu"));
    const QModelIndex memory =
        panel.model()->index(panel.model()->rowOfRun(m_runs.ddp), RunsModel::PeakMemory);
    QVERIFY2(memory.data().toString().contains("iB"), qPrintable(memory.data().toString()));
    // Newest first.
    QCOMPARE(panel.proxy()->index(0, 0).data(RunsModel::RunIdRole).toLongLong(), m_runs.zero);
}

void TestRunsPanel::filterNarrowsTheTable_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<int>("rows");
    QTest::newRow("everything") << QString() << 3;
    QTest::newRow("one strategy") << "ddp" << 1;
    QTest::newRow("case-insensitive") << "ZERO" << 1;
    QTest::newRow("experiment name") << "spirals" << 3;
    QTest::newRow("nothing") << "resnet" << 0;
}

void TestRunsPanel::filterNarrowsTheTable() {
    QFETCH(QString, text);
    QFETCH(int, rows);
    RunsPanel panel(m_path);
    QVERIFY(waitLoaded(panel));
    panel.setFilterText(text);
    QCOMPARE(panel.proxy()->rowCount(), rows);
}

void TestRunsPanel::comparisonOverlaysTheSelectedLossCurves() {
    RunsPanel panel(m_path);
    panel.resize(1400, 900);
    QVERIFY(waitLoaded(panel));
    QVERIFY(waitCompared(panel, {m_runs.single, m_runs.ddp}));
    QCOMPARE(panel.comparedRunIds(), QList<qint64>({m_runs.single, m_runs.ddp}));
    QCOMPARE(panel.curvePointCount(m_runs.single), kSingleSteps);
    QCOMPARE(panel.curvePointCount(m_runs.ddp), kDdpSteps);
    QCOMPARE(panel.curvePointCount(m_runs.zero), -1);
    // A strategy has its colour in every comparison.
    QCOMPARE(panel.curveColor(m_runs.single), RunsPanel::strategyColor("single"));
    QCOMPARE(panel.curveColor(m_runs.ddp), RunsPanel::strategyColor("ddp"));
    QVERIFY(RunsPanel::strategyColor("single") != RunsPanel::strategyColor("ddp"));
    // By wall time: the same points on another axis.
    panel.setXAxisIsTime(true);
    QVERIFY(panel.xAxisIsTime());
    QCOMPARE(panel.curvePointCount(m_runs.ddp), kDdpSteps);
    // Three at once, and exports of the comparison.
    QVERIFY(waitCompared(panel, {m_runs.single, m_runs.ddp, m_runs.zero}));
    QCOMPARE(panel.curvePointCount(m_runs.zero), kZeroSteps);
    QTemporaryDir out;
    for (const char* name : {"compare.png", "compare.pdf"}) {
        const QString file = out.filePath(name);
        QVERIFY(panel.exportPlot(file));
        QVERIFY2(QFileInfo(file).size() > 1000, name);
    }
    QVERIFY(!panel.exportPlot("/proc/nowhere/compare.png"));
}

void TestRunsPanel::scalingEfficiencyIsAgainstTheSingleRun() {
    RunsPanel panel(m_path);
    QVERIFY(waitLoaded(panel));
    const auto* single = panel.model()->run(m_runs.single);
    const auto* ddp = panel.model()->run(m_runs.ddp);
    QVERIFY(single && ddp);
    const auto eff = panel.model()->scalingEfficiency(m_runs.ddp);
    QVERIFY(eff.has_value());
    QCOMPARE(eff->baselineRunId, m_runs.single);
    QCOMPARE(eff->value, ddp->samplesPerS / (2 * single->samplesPerS));
    const auto self = panel.model()->scalingEfficiency(m_runs.single);
    QVERIFY(self.has_value());
    QCOMPARE(self->value, 1.0);
    QCOMPARE(panel.model()->scalingEfficiency(m_runs.zero)->baselineRunId, m_runs.single);
    // Another experiment (another model, or the same model with another batch) has no
    // baseline here...
    ui::RunInfo other = *ddp;
    other.id = 999;
    other.experimentKey = "{\"model\":{\"layers\":[]}}";
    QVERIFY(!ui::scalingEfficiency(other, panel.model()->runs()).has_value());
    // ...and the same experiment under another name does: the name is not its identity.
    other.experimentKey = ddp->experimentKey;
    other.name = "fashion-mlp";
    QCOMPARE(ui::scalingEfficiency(other, panel.model()->runs())->baselineRunId, m_runs.single);
    // The comparison says so, once per baseline.
    QVERIFY(waitCompared(panel, {m_runs.single, m_runs.ddp, m_runs.zero}));
    const QString text = panel.efficiencyText();
    QVERIFY2(text.contains(QString("against single #%1").arg(m_runs.single)), qPrintable(text));
    QCOMPARE(text.count("against"), 1);
}

void TestRunsPanel::theUserPicksTheBaseline() {
    RunsPanel panel(m_path);
    QVERIFY(waitLoaded(panel));
    const auto* single = panel.model()->run(m_runs.single);
    const auto* ddp = panel.model()->run(m_runs.ddp);
    QVERIFY(single && ddp);
    // A newer single-device run of the same experiment is the baseline by default...
    QVector<ui::RunInfo> runs = panel.model()->runs();
    ui::RunInfo newer = *single;
    newer.id = 1000;
    newer.samplesPerS = 2 * single->samplesPerS;
    runs << newer;
    QCOMPARE(ui::scalingEfficiency(*ddp, runs)->baselineRunId, 1000);
    // ...unless the user chose another.
    QCOMPARE(ui::scalingEfficiency(*ddp, runs, m_runs.single)->baselineRunId, m_runs.single);
    // A choice that is not a finished single-device run of the experiment is not taken.
    QCOMPARE(ui::scalingEfficiency(*ddp, runs, m_runs.zero)->baselineRunId, 1000);
    // Through the model: kept in the settings for the experiment.
    QVERIFY(!panel.model()->chooseBaseline(m_runs.ddp));
    QVERIFY(panel.model()->chooseBaseline(m_runs.single));
    QCOMPARE(panel.model()->chosenBaseline(ddp->experimentKey), m_runs.single);
    RunsPanel again(m_path);
    QVERIFY(waitLoaded(again));
    QCOMPARE(again.model()->scalingEfficiency(m_runs.ddp)->baselineRunId, m_runs.single);
    QCOMPARE(again.model()->chosenBaseline(ddp->experimentKey), m_runs.single);
}

// "Planned beside measured…": the run's experiment planned on the local cluster beside what it
// measured, the same figures `paralab plan --compare` prints (plan::compare_run).
void TestRunsPanel::aRunIsShownBesideItsPlan() {
    RunsPanel panel(m_path);
    QVERIFY(waitLoaded(panel));
    auto* action = panel.findChild<QAction*>(QStringLiteral("planBesideRun"));
    QVERIFY(action);
    panel.selectRuns({m_runs.ddp});
    QVERIFY(action->isEnabled());
    QSignalSpy spy(panel.model(), &RunsModel::planCompared);
    action->trigger();
    QVERIFY(spy.wait(15000));
    QCOMPARE(spy.first().at(2).toString(), QString());
    auto* dialog = panel.findChild<QDialog*>(QStringLiteral("planBesideRunDialog"));
    QVERIFY(dialog && dialog->isVisible());
    auto* table = dialog->findChild<QTableWidget*>(QStringLiteral("planBesideRunTable"));
    QVERIFY(table);
    QCOMPARE(table->rowCount(), 3);
    for (int row = 0; row < 3; ++row)
        for (int col = 0; col < 3; ++col) QVERIFY(table->item(row, col) && !table->item(row, col)->text().isEmpty());
    // The measured side is the run's own: its peak memory as the Runs table shows it.
    const auto* ddp = panel.model()->run(m_runs.ddp);
    QCOMPARE(table->item(2, 1)->text(), ui::formatBytes(ddp->peakMemoryBytes));
    QVERIFY(table->item(0, 2)->text().endsWith(QLatin1String("%")));
    const QString header = dialog->findChild<QLabel*>(QStringLiteral("planBesideRunHeader"))->text();
    QVERIFY2(header.contains(QStringLiteral("dp 2 · tp 1 · pp 1")), qPrintable(header));
    if (const QString dir = qEnvironmentVariable("PARALAB_SCREENSHOT_DIR"); !dir.isEmpty())
        QVERIFY(dialog->grab().save(dir + QStringLiteral("/screenshot-plan-beside-run.png")));
    // A run that is not in the store any more says so, without a dialog of stale numbers.
    dialog->close();
    panel.model()->comparePlan(99999);
    QVERIFY(spy.wait(15000));
    QVERIFY(spy.last().at(2).toString().contains(QLatin1String("99999")));
    QVERIFY(!dialog->isVisible());
}

// A student exports two runs to a file; a teacher's window imports it: both runs appear,
// selected, with their author, and their curves load.
void TestRunsPanel::runsAreHandedInAndImported() {
    QTemporaryDir dir;
    const QString handIn = dir.filePath("handin.db");
    {
        RunsPanel student(m_path);
        QVERIFY(waitLoaded(student));
        QSignalSpy exported(student.model(), &RunsModel::runsExported);
        student.model()->exportRuns({m_runs.single, m_runs.ddp}, handIn);
        QVERIFY(exported.wait(15000));
        QCOMPARE(exported.at(0).at(1).toInt(), 2);
        QCOMPARE(exported.at(0).at(2).toString(), QString());
        // Never over an existing file.
        exported.clear();
        student.model()->exportRuns({m_runs.zero}, handIn);
        QVERIFY(exported.wait(15000));
        QVERIFY(exported.at(0).at(2).toString().contains("already exists"));
        QVERIFY(student.messageText().contains("already exists"));
    }
    const QString classStore = dir.filePath("class.db");
    { paralab::store::RunStore create(classStore.toStdString()); }
    RunsPanel teacher(classStore);
    QVERIFY(waitLoaded(teacher));
    QCOMPARE(teacher.model()->rowCount(), 0);
    QSignalSpy imported(teacher.model(), &RunsModel::runsImported);
    teacher.model()->importRuns(handIn);
    QVERIFY(imported.wait(15000));
    QCOMPARE(imported.at(0).at(2).toString(), QString());
    const auto ids = imported.at(0).at(1).value<QList<qint64>>();
    QCOMPARE(ids.size(), 2);
    QCOMPARE(teacher.model()->rowCount(), 2);
    const auto* run = teacher.model()->run(ids[1]);
    QVERIFY(run);
    QCOMPARE(run->strategy, QString("ddp"));
    QCOMPARE(run->author, QString::fromStdString(paralab::store::author_name()));
    QCOMPARE(teacher.selectedRunIds().size(), 2);
    QVERIFY(waitCompared(teacher, ids));
    QCOMPARE(teacher.curvePointCount(ids[1]), kDdpSteps);
    // A file that is not a run store is refused with the reason; nothing changes.
    const QString junk = dir.filePath("junk.db");
    {
        QFile f(junk);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("not a database");
    }
    imported.clear();
    teacher.model()->importRuns(junk);
    QVERIFY(imported.wait(15000));
    QVERIFY(!imported.at(0).at(2).toString().isEmpty());
    QCOMPARE(teacher.model()->rowCount(), 2);
}

void TestRunsPanel::notesRoundTripToTheStore() {
    const QString note = "ddp, 2 devices — lr 0.01, \"quoted\"";
    {
        RunsPanel panel(m_path);
        QVERIFY(waitLoaded(panel));
        int row = -1;
        for (int r = 0; r < panel.proxy()->rowCount(); ++r)
            if (panel.proxy()->index(r, 0).data(RunsModel::RunIdRole).toLongLong() == m_runs.ddp)
                row = r;
        QVERIFY(row >= 0);
        const QModelIndex notes = panel.proxy()->index(row, RunsModel::Notes);
        QVERIFY(notes.flags() & Qt::ItemIsEditable);
        QVERIFY(!(panel.proxy()->index(row, RunsModel::Name).flags() & Qt::ItemIsEditable));
        QSignalSpy saved(panel.model(), &RunsModel::notesSaved);
        QVERIFY(panel.proxy()->setData(notes, note));
        QCOMPARE(notes.data().toString(), note);  // at once, before the store has it
        QVERIFY(saved.wait(10000));
        QCOMPARE(saved.at(0).at(0).toLongLong(), m_runs.ddp);
    }
    store::RunStore db(m_path.toStdString());
    QCOMPARE(QString::fromStdString(db.get_run(m_runs.ddp)->notes), note);
    RunsPanel again(m_path);
    QVERIFY(waitLoaded(again));
    QCOMPARE(again.model()->run(m_runs.ddp)->notes, note);
    again.setFilterText("quoted");  // notes are filtered on too
    QCOMPARE(again.proxy()->rowCount(), 1);
    // A note typed just before the window closes is written all the same.
    {
        RunsPanel closing(m_path);
        QVERIFY(waitLoaded(closing));
        const int row = closing.model()->rowOfRun(m_runs.single);
        QVERIFY(
            closing.model()->setData(closing.model()->index(row, RunsModel::Notes), "last words"));
    }
    QCOMPARE(QString::fromStdString(db.get_run(m_runs.single)->notes), QString("last words"));
}

void TestRunsPanel::csvExportWritesTheTable() {
    RunsPanel panel(m_path);
    QVERIFY(waitLoaded(panel));
    QTemporaryDir out;
    const QString file = out.filePath("runs.csv");
    QSignalSpy written(panel.model(), &RunsModel::fileWritten);
    panel.exportTableCsv(file);
    QVERIFY(written.wait(10000));
    QCOMPARE(written.at(0).at(1).toString(), QString());
    QFile f(file);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QList<QByteArray> lines = f.readAll().trimmed().split('\n');
    QCOMPARE(lines.size(), 4);
    QVERIFY(lines[0].startsWith(
        "run_id,name,strategy,variant,devices,status,final_loss,test_accuracy,samples_per_s,"
        "peak_memory_bytes,created_at,author,notes"));
    QVERIFY(lines[1].startsWith(QByteArray::number(m_runs.zero) +
                                ",spirals,zero,stage 1,cpu:0 cpu:1,finished,"));
    // What is shown is what is exported.
    panel.setFilterText("single");
    written.clear();
    panel.exportTableCsv(file);
    QVERIFY(written.wait(10000));
    f.close();
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(f.readAll().trimmed().split('\n').size(), 2);
    // A file that cannot be written is reported.
    QSignalSpy failed(panel.model(), &RunsModel::operationFailed);
    panel.exportTableCsv("/proc/nowhere/runs.csv");
    QVERIFY(failed.wait(10000));
    QVERIFY(panel.messageText().contains("/proc/nowhere/runs.csv"));
}

void TestRunsPanel::deleteRemovesTheRunAndItsRecords() {
    QTemporaryDir dir;  // a store of its own: the other tests keep all three runs
    const QString path = dir.filePath("runs.db");
    const Filled runs = fillStore(path);
    RunsPanel panel(path);
    QVERIFY(waitLoaded(panel));
    QVERIFY(waitCompared(panel, {runs.ddp, runs.zero}));
    QSignalSpy deleted(panel.model(), &RunsModel::runsDeleted);
    panel.selectRuns({runs.ddp});
    panel.deleteSelected(false);  // no confirmation dialog offscreen
    QVERIFY(deleted.wait(10000));
    QCOMPARE(deleted.at(0).at(0).value<QList<qint64>>(), QList<qint64>({runs.ddp}));
    QCOMPARE(panel.proxy()->rowCount(), 2);
    QVERIFY(!panel.model()->run(runs.ddp));
    store::RunStore db(path.toStdString());
    QVERIFY(!db.get_run(runs.ddp));
    QVERIFY(db.loss_curve(runs.ddp).empty());
    QVERIFY(db.device_stats(runs.ddp).empty());
    QVERIFY(db.spans(runs.ddp, 0, 1000000).empty());
    QCOMPARE(static_cast<int>(db.loss_curve(runs.zero).size()),
             kZeroSteps);  // the others keep theirs
    QCOMPARE(static_cast<int>(db.loss_curve(runs.single).size()), kSingleSteps);
}

void TestRunsPanel::aDamagedStoreShowsAnErrorNotACrash() {
    QTemporaryDir dir;
    const QString path = dir.filePath("runs.db");
    {
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(QByteArray("SQLite format 3\0", 16) +
                QByteArray(4096, '\x5a'));  // a damaged header
    }
    RunsPanel panel(path);
    QVERIFY(waitLoaded(panel));
    QVERIFY2(panel.messageText().contains("not a ParaLab run store"),
             qPrintable(panel.messageText()));
    QCOMPARE(panel.proxy()->rowCount(), 0);
    // Still usable: refresh, filter and compare do nothing harmful...
    QSignalSpy refreshed(panel.model(), &RunsModel::refreshed);
    panel.refresh();
    QVERIFY(refreshed.wait(10000));
    QVERIFY(!panel.messageText().isEmpty());
    panel.setFilterText("ddp");
    panel.selectRuns({1});
    QVERIFY(panel.comparedRunIds().isEmpty());
    // ...and once the file is replaced by a good store, the next refresh reads it.
    QVERIFY(QFile::remove(path));
    fillStore(path);
    panel.setFilterText({});
    refreshed.clear();
    panel.refresh();
    QVERIFY(refreshed.wait(10000));
    QCOMPARE(panel.messageText(), QString());
    QCOMPARE(panel.proxy()->rowCount(), 3);
}

void TestRunsPanel::aLockedStoreRefusesANoteWithAClearMessage() {
    RunsPanel panel(m_path);
    QVERIFY(waitLoaded(panel));
    const int row = panel.model()->rowOfRun(m_runs.zero);
    const QString before = panel.model()->run(m_runs.zero)->notes;
    // Another program holds the write lock for longer than SQLite waits (5 s).
    sqlite3* other = nullptr;
    QCOMPARE(sqlite3_open(m_path.toUtf8().constData(), &other), SQLITE_OK);
    QCOMPARE(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
    QSignalSpy failed(panel.model(), &RunsModel::operationFailed);
    QVERIFY(panel.model()->setData(panel.model()->index(row, RunsModel::Notes), "never saved"));
    // The GUI thread did not wait for the lock: the write is still in the worker's hands
    // (SQLite gives up only after its 5 s busy wait), so nothing has failed yet.
    QCOMPARE(failed.count(), 0);
    QVERIFY(failed.wait(15000));
    sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_close(other);
    QVERIFY2(panel.messageText().contains("busy"), qPrintable(panel.messageText()));
    QCOMPARE(panel.model()->run(m_runs.zero)->notes, before);  // what the store holds
    // Usable again once the lock is gone.
    QSignalSpy saved(panel.model(), &RunsModel::notesSaved);
    QVERIFY(panel.model()->setData(panel.model()->index(row, RunsModel::Notes), "saved now"));
    QVERIFY(saved.wait(10000));
}

void TestRunsPanel::theWindowsRunsTabShowsARunWhenItFinishes() {
    QTemporaryDir home;  // the window records into the default store: a fresh one here
    qputenv("XDG_DATA_HOME", home.path().toUtf8());
    ui::MainWindow w;
    QVERIFY(waitLoaded(*w.runsPanel()));
    QCOMPARE(w.runsPanel()->model()->rowCount(), 0);
    QCOMPARE(w.runsPanel()->model()->storePath(), home.filePath("ParaLab/runs.db"));
    w.setExperiment(spirals("ddp", 2, 12));
    QSignalSpy finished(w.controller(), &ui::RunController::finished);
    w.startRun();
    QVERIFY(finished.wait(20000));
    QTRY_COMPARE_WITH_TIMEOUT(w.runsPanel()->model()->rowCount(), 1, 10000);
    QTRY_COMPARE_WITH_TIMEOUT(w.runsPanel()->model()->runs().at(0).status, QString("finished"),
                              10000);
    QCOMPARE(w.runsPanel()->model()->runs().at(0).strategy, QString("ddp"));
    qunsetenv("XDG_DATA_HOME");
}

// Not a check: the README's picture of the Runs tab (docs/screenshot-compare.png): the default
// spirals experiment run on one device and with ddp, zero and a 1F1B pipeline on two, compared by
// wall time. Run under a display (xvfb-run -s "-screen 0 1600x1000x24" ui_runs_panel_test
// screenshot -platform xcb) with PARALAB_SCREENSHOT_DIR set to the folder to write it into.
void TestRunsPanel::screenshot() {
    const QString dir = qEnvironmentVariable("PARALAB_SCREENSHOT_DIR");
    if (dir.isEmpty()) QSKIP("set PARALAB_SCREENSHOT_DIR to take the README's screenshot");
    QTemporaryDir home;  // the window's default store, fresh
    qputenv("XDG_DATA_HOME", home.path().toUtf8());
    QFile file(":/examples/spirals-mlp.paralab.json");
    QVERIFY(file.open(QIODevice::ReadOnly));
    const auto base = nlohmann::json::parse(file.readAll().toStdString());
    struct Variant {
        nlohmann::json devices, strategy;
        const char* notes;
    };
    const std::vector<Variant> variants = {
        {{"cpu:0"}, {{"type", "single"}}, "baseline"},
        {{"cpu:0", "cpu:1"}, {{"type", "ddp"}}, "25 MB buckets, overlap on"},
        {{"cpu:0", "cpu:1"}, {{"type", "zero"}, {"stage", 1}}, "stage 1"},
        {{"cpu:0", "cpu:1"}, {{"type", "pipeline"}, {"schedule", "1f1b"}, {"micro_batches", 4}},
         "1F1B, 4 micro-batches"},
    };
    QList<qint64> ids;
    {
        store::RunStore db(store::RunStore::default_path());
        for (const Variant& v : variants) {
            auto j = base;
            j["devices"] = v.devices;
            j["strategy"] = v.strategy;
            ids.append(recordRun(db, run::parse_experiment(j)));
            QVERIFY(db.set_notes(ids.back(), v.notes));
        }
    }
    ui::MainWindow w;
    QCOMPARE(w.openExperiment(":/examples/spirals-mlp.paralab.json", false), QString());
    w.resize(1600, 1000);
    w.move(0, 0);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    w.viewTabs()->setCurrentWidget(w.runsPanel());
    QVERIFY(waitLoaded(*w.runsPanel()));
    w.runsPanel()->setXAxisIsTime(true);
    QVERIFY(waitCompared(*w.runsPanel(), ids));
    QTest::qWait(500);
    QVERIFY(w.grab().save(QDir(dir).filePath("screenshot-compare.png")));
    qunsetenv("XDG_DATA_HOME");
}

QTEST_MAIN(TestRunsPanel)
#include "test_runs_panel.moc"
