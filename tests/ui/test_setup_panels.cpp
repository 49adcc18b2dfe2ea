// The setup tabs as a user drives them, offscreen: devices and strategy edits reach the
// window's experiment, options appear per strategy and a bad value shows the parser's message,
// the memory estimate shards ZeRO's optimizer state and stays near a real run's peaks, Pause
// holds a real 2-device run and Resume finishes it, and the window's settings persist.
#include <QAction>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QLineEdit>
#include <QScrollArea>
#include <QSettings>
#include <QSignalSpy>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTabWidget>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>

#include "engine/data/loader.h"
#include "engine/run/trainer.h"
#include "ui/mainwindow/main_window.h"
#include "ui/panels/data/data_panel.h"
#include "ui/panels/designer/model_designer.h"
#include "ui/panels/devices/devices_panel.h"
#include "ui/panels/strategy/strategy_diagram.h"
#include "ui/panels/strategy/strategy_panel.h"
#include "engine/strategy/registry.h"
#include "ui/session/run_controller.h"

using paralab::MemCategory;
using paralab::ui::MainWindow;
using paralab::ui::RunController;

namespace {
const char* kDefault = ":/examples/spirals-mlp.paralab.json";
constexpr auto cat(MemCategory c) {
    return static_cast<size_t>(c);
}

paralab::config::Experiment defaultExperiment() {
    QFile f(kDefault);
    f.open(QIODevice::ReadOnly);
    return paralab::run::parse_experiment(nlohmann::json::parse(f.readAll().toStdString()));
}
}  // namespace

class TestSetupPanels : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void fourCpuDevicesAndDdpUpdateTheExperiment();
    void gpuListHasEachIdOnce_data();
    void gpuListHasEachIdOnce();
    void modelEditsKeepTheSetup();
    void dataPanelEditsTheTextSet();
    void runControlsFollowTheRun();
    void optionsAppearPerStrategy_data();
    void optionsAppearPerStrategy();
    void badValueShowsTheParsersMessage_data();
    void badValueShowsTheParsersMessage();
    void memoryEstimateShardsZeroOptimizerState();
    void memoryEstimateIsNearARealRun_data();
    void memoryEstimateIsNearARealRun();
    void pauseHoldsARunAndResumeFinishesIt();
    void settingsPersist();
    void invalidHybridStaysChosenWhenTheDevicesChange();
    void openingAFileResetsTheFieldsItDoesNotSet();
    void explanationAndDiagramFollowTheChoiceAtOnce();
    void devicesButtonFitsTheMesh();
    void everyInvalidFieldShowsItsErrorAtOnce();
    void aRotatingStragglerIsShownAndEdited();
    void screenshot();

private:
    QTemporaryDir m_dir;
};

void TestSetupPanels::initTestCase() {
    QVERIFY(m_dir.isValid());
    // Settings and runs go to this test's own folder, never the user's.
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_dir.filePath("settings"));
    QCoreApplication::setOrganizationName(QStringLiteral("ParaLabSetupTest"));
    qputenv("XDG_DATA_HOME", m_dir.filePath("data").toUtf8());
}

// The Devices panel's GPU list never shows an id twice, whatever the order in which the
// experiment and discovery arrive, however often each is shown, and when the experiment names a
// GPU several times (virtual devices sharing it) or one this machine lacks. An edit keeps the
// shared GPU's count. Discovery is handed GPUs this machine may not have.
void TestSetupPanels::gpuListHasEachIdOnce_data() {
    QTest::addColumn<QStringList>("devices");  // the experiment's
    QTest::addColumn<QStringList>("found");    // what discovery reports, in order
    QTest::addColumn<bool>("experimentFirst");
    QTest::addColumn<QStringList>("rows");       // the GPU list's ids
    QTest::addColumn<QStringList>("afterEdit");  // the devices after the CPU count is set to 2
    QTest::newRow("experiment, then discovery")
        << QStringList{"cuda:0", "cpu:0"} << QStringList{"cuda:0", "cuda:1"} << true
        << QStringList{"cuda:0", "cuda:1"} << QStringList{"cuda:0", "cpu:0", "cpu:1"};
    QTest::newRow("discovery, then experiment")
        << QStringList{"cuda:1"} << QStringList{"cuda:0", "cuda:1"} << false
        << QStringList{"cuda:0", "cuda:1"} << QStringList{"cuda:1", "cpu:0", "cpu:1"};
    QTest::newRow("discovery names a GPU twice")
        << QStringList{"cuda:0"} << QStringList{"cuda:0", "cuda:1", "cuda:0"} << true
        << QStringList{"cuda:0", "cuda:1"} << QStringList{"cuda:0", "cpu:0", "cpu:1"};
    QTest::newRow("one GPU shared by two virtual devices")
        << QStringList{"cuda:0", "cuda:0", "cpu:0"} << QStringList{"cuda:0"} << true
        << QStringList{"cuda:0"} << QStringList{"cuda:0", "cuda:0", "cpu:0", "cpu:1"};
    QTest::newRow("shared and not found here")
        << QStringList{"cuda:3", "cuda:3"} << QStringList{"cuda:0"} << false
        << QStringList{"cuda:0", "cuda:3"} << QStringList{"cuda:3", "cuda:3", "cpu:0", "cpu:1"};
}

void TestSetupPanels::gpuListHasEachIdOnce() {
    QFETCH(QStringList, devices);
    QFETCH(QStringList, found);
    QFETCH(bool, experimentFirst);
    QFETCH(QStringList, rows);
    QFETCH(QStringList, afterEdit);
    paralab::ui::DevicesPanel panel;
    QTRY_VERIFY(panel.discovered());  // this machine's own answer first, so it cannot come last
    auto e = defaultExperiment();
    e.devices.clear();
    for (const QString& d : devices) e.devices.push_back(d.toStdString());
    std::vector<paralab::DeviceInfo> discovered(1);  // the CPU
    for (const QString& name : found) {
        paralab::DeviceInfo gpu;
        gpu.name = name.toStdString();
        gpu.kind = paralab::DeviceKind::cuda;
        gpu.description = "Test GPU";
        gpu.memory_bytes = int64_t(16) << 30;
        discovered.push_back(gpu);
    }
    // Each shown twice: a second answer or a second experiment adds no row.
    for (int round = 0; round < 2; ++round) {
        if (experimentFirst) {
            panel.setExperiment(e);
            panel.showDiscovered(discovered);
        } else {
            panel.showDiscovered(discovered);
            panel.setExperiment(e);
        }
        QCOMPARE(panel.gpuIds(), rows);
    }
    const QSet<QString> unique(rows.begin(), rows.end());
    QCOMPARE(unique.size(), rows.size());
    for (const QString& id : rows) QCOMPARE(panel.gpuChecked(id), devices.contains(id));

    QSignalSpy edited(&panel, &paralab::ui::DevicesPanel::experimentEdited);
    panel.cpuCountBox()->setValue(2);
    QCOMPARE(edited.count(), 1);
    QStringList after;
    for (const auto& d : edited.at(0).at(0).value<paralab::config::Experiment>().devices)
        after << QString::fromStdString(d);
    QCOMPARE(after, afterEdit);
    QCOMPARE(panel.gpuIds(), rows);
    // Unticking a GPU drops it, every share of it.
    panel.setGpuChecked(afterEdit.front(), false);
    QCOMPARE(edited.count(), 2);
    after.clear();
    for (const auto& d : edited.at(1).at(0).value<paralab::config::Experiment>().devices)
        after << QString::fromStdString(d);
    QVERIFY2(!after.contains(afterEdit.front()), qPrintable(after.join(',')));
    QCOMPARE(after.filter("cpu:").size(), 2);
}

void TestSetupPanels::fourCpuDevicesAndDdpUpdateTheExperiment() {
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    w.devicesPanel()->cpuCountBox()->setValue(4);
    w.strategyPanel()->strategyBox()->setCurrentText("ddp");
    const auto& e = *w.experiment();
    QCOMPARE(e.devices, (std::vector<std::string>{"cpu:0", "cpu:1", "cpu:2", "cpu:3"}));
    QCOMPARE(QString::fromStdString(e.strategy.type), QString("ddp"));
    QCOMPARE(paralab::strategy::option<double>(e.strategy, "bucket_mb"), 25.0);
    // The other panels were handed the edit: the strategy panel predicts for four devices, the
    // data panel still has the batch, and the data panel's next edit keeps devices and strategy.
    QCOMPARE(w.strategyPanel()->memoryEstimate().size(), size_t(4));
    QVERIFY(w.strategyPanel()->explanation().contains("all-reduce"));
    auto* batch = w.dataPanel()->findChild<QSpinBox*>("batchSize");
    QVERIFY(batch);
    batch->setValue(128);
    QCOMPARE(w.experiment()->data.batch_size, 128);
    QCOMPARE(w.experiment()->devices.size(), size_t(4));
    QCOMPARE(QString::fromStdString(w.experiment()->strategy.type), QString("ddp"));
    QVERIFY(w.findChild<QAction*>("startAction")->isEnabled());
}

// Choosing the text set offers a context length; its path, seq_len and val_fraction survive
// the panel's later edits, and a bad val_fraction shows the parser's message.
void TestSetupPanels::dataPanelEditsTheTextSet() {
    paralab::ui::DataPanel panel;
    panel.setExperiment(defaultExperiment());
    paralab::config::Experiment last;
    int edits = 0;
    connect(&panel, &paralab::ui::DataPanel::experimentEdited, &panel, [&](const paralab::config::Experiment& e) {
        last = e;
        ++edits;
    });
    panel.findChild<QComboBox*>("dataset")->setCurrentText("text");
    QCOMPARE(edits, 1);
    QCOMPARE(QString::fromStdString(last.data.dataset), QString("text"));
    QCOMPARE(last.data.seq_len, int64_t{64});
    QCOMPARE(last.data.val_fraction, 0.1);
    auto* path = panel.findChild<QLineEdit*>("dataPath");
    QVERIFY(path && path->isVisibleTo(&panel));
    // A path is checked as it is entered: one that is not there is refused under its field.
    int edits_before = edits;
    path->setText(QStringLiteral("/nonexistent/corpus.txt"));
    emit path->editingFinished();
    QCOMPARE(edits, edits_before);
    QVERIFY2(panel.errorText().contains("/nonexistent/corpus.txt"), qPrintable(panel.errorText()));
    QVERIFY(QString::fromStdString(last.data.path) != QString("/nonexistent/corpus.txt"));
    // A corpus that is there is taken.
    QTemporaryDir dir;
    const QString corpus = dir.filePath("corpus.txt");
    {
        QFile f(corpus);
        QVERIFY(f.open(QIODevice::WriteOnly));
        for (int i = 0; i < 2000; ++i) f.write("the quick brown fox jumps over the lazy dog. ");
    }
    path->setText(corpus);
    emit path->editingFinished();
    QCOMPARE(edits, edits_before + 1);
    QVERIFY2(panel.errorText().isEmpty(), qPrintable(panel.errorText()));
    QCOMPARE(QString::fromStdString(last.data.path), corpus);
    panel.findChild<QSpinBox*>("seqLen")->setValue(128);
    panel.findChild<QDoubleSpinBox*>("valFraction")->setValue(0.25);
    QCOMPARE(last.data.seq_len, int64_t{128});
    QCOMPARE(last.data.val_fraction, 0.25);
    QCOMPARE(QString::fromStdString(last.data.path), corpus);
    const int before = edits;
    panel.findChild<QDoubleSpinBox*>("valFraction")->setValue(1.0);
    QCOMPARE(edits, before);  // refused, not passed on
    QVERIFY2(panel.errorText().contains("data.val_fraction"), qPrintable(panel.errorText()));
}

// The designer keeps its own copy of the experiment; an edit there changes only the model.
void TestSetupPanels::modelEditsKeepTheSetup() {
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    w.devicesPanel()->cpuCountBox()->setValue(4);
    w.strategyPanel()->strategyBox()->setCurrentText("zero");
    const auto before = w.strategyPanel()->memoryEstimate();
    const size_t layers = w.experiment()->layers.size();
    QVERIFY(w.designer()->addLayer("dropout"));
    QCOMPARE(w.experiment()->layers.size(), layers + 1);
    QCOMPARE(w.experiment()->devices.size(), size_t(4));
    QCOMPARE(QString::fromStdString(w.experiment()->strategy.type), QString("zero"));
    QCOMPARE(w.strategyPanel()->memoryEstimate().size(), size_t(4));
    QCOMPARE(w.designer()->experiment().devices.size(), size_t(4));  // the designer was told
    // a dropout adds activations (its output), no parameters
    QCOMPARE(w.strategyPanel()->memoryEstimate()[0].bytes[cat(MemCategory::parameters)],
             before[0].bytes[cat(MemCategory::parameters)]);
    QVERIFY(w.strategyPanel()->memoryEstimate()[0].bytes[cat(MemCategory::activations)] >
            before[0].bytes[cat(MemCategory::activations)]);
}

// Start is disabled while a run goes; Pause, Resume and Stop are enabled when they apply.
void TestSetupPanels::runControlsFollowTheRun() {
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    auto e = *w.experiment();
    e.train.epochs = 100000;
    w.setExperiment(e);
    auto* start = w.findChild<QAction*>("startAction");
    auto* stop = w.findChild<QAction*>("stopAction");
    QVERIFY(start->isEnabled() && !w.pauseAction()->isEnabled() && !w.resumeAction()->isEnabled());
    QSignalSpy steps(w.controller(), &RunController::stepsArrived);
    QSignalSpy finished(w.controller(), &RunController::finished);
    start->trigger();
    QVERIFY(!start->isEnabled());
    QVERIFY(w.pauseAction()->isEnabled() && stop->isEnabled() && !w.resumeAction()->isEnabled());
    QTRY_VERIFY_WITH_TIMEOUT(steps.count() > 0, 20000);
    QTRY_VERIFY(w.statusText().contains("ETA"));
    // While paused the status bar says so and shows no ETA, also after the steps in flight
    // arrive (checked as each batch arrives, after the window has shown it).
    QStringList pausedTexts;
    const auto watch = connect(w.controller(), &RunController::stepsArrived, &w, [&] {
        if (w.controller()->state() == RunController::State::Paused) pausedTexts << w.statusText();
    });
    w.pauseAction()->trigger();
    QCOMPARE(w.controller()->state(), RunController::State::Paused);
    QVERIFY2(w.statusText().startsWith("Paused") && !w.statusText().contains("ETA"), qPrintable(w.statusText()));
    QVERIFY(!start->isEnabled() && !w.pauseAction()->isEnabled() && w.resumeAction()->isEnabled() &&
            stop->isEnabled());
    QTest::qWait(200);  // lets the steps in flight arrive: checked if they do, not required
    for (const QString& text : pausedTexts)
        QVERIFY2(text.startsWith("Paused") && !text.contains("ETA"), qPrintable(text));
    QVERIFY2(w.statusText().startsWith("Paused"), qPrintable(w.statusText()));
    disconnect(watch);
    const qsizetype beforeResume = steps.count();
    w.resumeAction()->trigger();
    QCOMPARE(w.controller()->state(), RunController::State::Running);
    QVERIFY(!w.statusText().startsWith("Paused"));
    QTRY_VERIFY_WITH_TIMEOUT(steps.count() > beforeResume, 20000);
    QTRY_VERIFY(w.statusText().contains("ETA"));
    w.pauseAction()->trigger();
    stop->trigger();  // a paused run stops too
    QVERIFY(finished.wait(20000));
    QCOMPARE(QString::fromStdString(finished.at(0).at(0).value<paralab::config::RunSummary>().status),
             QString("stopped"));
    QVERIFY(start->isEnabled() && !w.pauseAction()->isEnabled() && !stop->isEnabled());
}

void TestSetupPanels::optionsAppearPerStrategy_data() {
    QTest::addColumn<QString>("strategy");
    QTest::addColumn<QStringList>("shown");
    QTest::addColumn<QStringList>("hidden");
    const QStringList all{"strategy.bucket_mb", "strategy.overlap", "strategy.balance",
                          "strategy.stage",     "strategy.mode",    "strategy.micro_batches",
                          "strategy.schedule",  "strategy.split",   "strategy.sync_batchnorm"};
    auto row = [&](const char* name, QStringList shown) {
        QStringList hidden;
        for (const auto& k : all)
            if (!shown.contains(k)) hidden << k;
        shown << "strategy.straggler";
        QTest::newRow(name) << QString(name) << shown << hidden;
    };
    row("single", {});
    row("data_parallel", {"strategy.sync_batchnorm"});
    row("ddp",
        {"strategy.bucket_mb", "strategy.overlap", "strategy.balance", "strategy.sync_batchnorm"});
    row("zero", {"strategy.stage", "strategy.sync_batchnorm"});
    row("hogwild", {});
    row("param_server", {"strategy.mode"});
    row("model_parallel", {"strategy.split"});
    row("pipeline", {"strategy.micro_batches", "strategy.schedule", "strategy.split"});
}

void TestSetupPanels::optionsAppearPerStrategy() {
    QFETCH(QString, strategy);
    QFETCH(QStringList, shown);
    QFETCH(QStringList, hidden);
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    w.devicesPanel()->cpuCountBox()->setValue(3);
    w.strategyPanel()->strategyBox()->setCurrentText(strategy);
    QCOMPARE(QString::fromStdString(w.experiment()->strategy.type), strategy);
    for (const auto& key : shown) QVERIFY2(w.strategyPanel()->isOptionShown(key), qPrintable(key));
    for (const auto& key : hidden)
        QVERIFY2(!w.strategyPanel()->isOptionShown(key), qPrintable(key));
    QVERIFY(!w.strategyPanel()->explanation().isEmpty());
    QCOMPARE(w.strategyPanel()->memoryEstimate().size(), size_t(3));
}

void TestSetupPanels::badValueShowsTheParsersMessage_data() {
    QTest::addColumn<QString>("strategy");
    QTest::addColumn<QString>("key");
    QTest::addColumn<QString>("value");
    QTest::addColumn<QString>("message");
    QTest::newRow("bucket 0") << "ddp"
                              << "strategy.bucket_mb"
                              << "0"
                              << "strategy.bucket_mb: expected a positive";
    QTest::newRow("micro-batches 0") << "pipeline"
                                     << "strategy.micro_batches"
                                     << "0"
                                     << "strategy.micro_batches: expected";
    QTest::newRow("split not increasing") << "pipeline"
                                          << "strategy.split"
                                          << "3, 1"
                                          << "strategy.split[1]: expected indices in increasing order";
    QTest::newRow("split not numbers") << "model_parallel"
                                       << "strategy.split"
                                       << "two"
                                       << "strategy.split: expected";
    QTest::newRow("batch 0") << "single"
                             << "data.batch_size"
                             << "0"
                             << "data.batch_size: expected a positive integer";
}

void TestSetupPanels::badValueShowsTheParsersMessage() {
    QFETCH(QString, strategy);
    QFETCH(QString, key);
    QFETCH(QString, value);
    QFETCH(QString, message);
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    w.devicesPanel()->cpuCountBox()->setValue(3);
    w.strategyPanel()->strategyBox()->setCurrentText(strategy);
    const std::string before = paralab::run::to_json(*w.experiment()).dump();
    QString shown;
    if (key.startsWith("data.")) {
        w.dataPanel()->findChild<QSpinBox*>("batchSize")->setValue(value.toInt());
        shown = w.dataPanel()->errorText();
        // under its field, named by its key
        auto* label = w.dataPanel()->findChild<QLabel*>(key + ".error");
        QVERIFY(label && !label->isHidden());
    } else {
        QWidget* editor = w.strategyPanel()->optionEditor(key);
        QVERIFY(editor);
        if (auto* d = qobject_cast<QDoubleSpinBox*>(editor))
            d->setValue(value.toDouble());
        else if (auto* i = qobject_cast<QSpinBox*>(editor))
            i->setValue(value.toInt());
        else if (auto* line = qobject_cast<QLineEdit*>(editor)) {
            line->setText(value);
            emit line->editingFinished();
        }
        shown = w.strategyPanel()->errorText();
        auto* label = w.strategyPanel()->findChild<QLabel*>(key + ".error");
        QVERIFY(label && !label->isHidden());
    }
    QVERIFY2(shown.startsWith(message), qPrintable(shown));
    // The bad value is not passed on, and Start waits until it is fixed.
    QCOMPARE(paralab::run::to_json(*w.experiment()).dump(), before);
    QVERIFY(!w.findChild<QAction*>("startAction")->isEnabled());
}

void TestSetupPanels::memoryEstimateShardsZeroOptimizerState() {
    auto e = defaultExperiment();  // Adam: two numbers of state per parameter
    e.devices = {"cpu:0", "cpu:1", "cpu:2", "cpu:3"};
    const auto cost = paralab::strategy::model_cost(e, paralab::run::model_input_shape(e));
    const int64_t p = cost.parameters();
    QCOMPARE(p, int64_t(2 * 64 + 64 + 64 * 64 + 64 + 64 * 3 + 3));
    e.strategy.type = "ddp";
    const auto ddp = paralab::strategy::estimate_memory(e, cost);
    e.strategy.type = "zero";
    e.strategy.options["stage"] = int64_t{1};
    const auto zero1 = paralab::strategy::estimate_memory(e, cost);
    e.strategy.options["stage"] = int64_t{2};
    const auto zero2 = paralab::strategy::estimate_memory(e, cost);
    QCOMPARE(ddp.size(), size_t(4));
    for (size_t r = 0; r < 4; ++r) {
        QCOMPARE(ddp[r].bytes[cat(MemCategory::optimizer_state)], 2 * p * 4);
        // its 1/4 of the flat parameters (the first p mod 4 devices one more)
        QCOMPARE(zero1[r].bytes[cat(MemCategory::optimizer_state)],
                 2 * paralab::data::shard_of_dataset(p, static_cast<int>(r), 4).count * 4);
        QCOMPARE(zero1[r].bytes[cat(MemCategory::parameters)],
                 ddp[r].bytes[cat(MemCategory::parameters)]);
        // stage 1: every gradient (the reduced shard is a view of them); stage 2: the shard and
        // one layer's
        QCOMPARE(zero1[r].bytes[cat(MemCategory::gradients)], p * 4);
        QCOMPARE(zero2[r].bytes[cat(MemCategory::gradients)],
                 paralab::data::shard_of_dataset(p, static_cast<int>(r), 4).count * 4 + (64 * 64 + 64) * 4);
        QCOMPARE(zero1[r].bytes[cat(MemCategory::activations)],
                 ddp[r].bytes[cat(MemCategory::activations)]);
    }
    // And the panel shows the same numbers.
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    w.devicesPanel()->cpuCountBox()->setValue(4);
    w.strategyPanel()->strategyBox()->setCurrentText("zero");
    QCOMPARE(w.strategyPanel()->memoryEstimate()[1].bytes[cat(MemCategory::optimizer_state)],
             (2 * p + 3) / 4 * 4);
}

void TestSetupPanels::memoryEstimateIsNearARealRun_data() {
    QTest::addColumn<QString>("strategy");
    QTest::addColumn<int>("devices");
    QTest::addColumn<int>("stage");
    for (const char* s :
         {"single", "data_parallel", "ddp", "zero", "param_server", "model_parallel", "pipeline"})
        QTest::newRow(s) << QString(s) << (QString(s) == "single" ? 1 : 3) << 1;
    QTest::newRow("zero stage 2") << "zero" << 3 << 2;
    QTest::newRow("pipeline 1f1b") << "pipeline" << 4 << 1;
}

// The estimate against the peaks a real run records, category by category. The factor: within
// ±35% for parameters, gradients, optimizer state and communication, where the engine keeps
// exactly what the rules count (or the estimate is empty and the run near it); activations are
// the rough one (backward's temporaries, the loss's buffers): within a factor of 2.5.
void TestSetupPanels::memoryEstimateIsNearARealRun() {
    QFETCH(QString, strategy);
    QFETCH(int, devices);
    QFETCH(int, stage);
    auto e = defaultExperiment();
    e.strategy = paralab::strategy::default_config(strategy.toStdString());
    if (strategy == QLatin1String("zero")) e.strategy.options["stage"] = int64_t{stage};
    if (QTest::currentDataTag() == QLatin1String("pipeline 1f1b")) e.strategy.options["schedule"] = std::string("1f1b");
    e.devices.clear();
    for (int k = 0; k < devices; ++k) e.devices.push_back("cpu:" + std::to_string(k));
    e.train.max_steps = 3;
    e.train.eval_every = 0;
    const auto estimate = paralab::strategy::estimate_memory(e, paralab::strategy::model_cost(e, paralab::run::model_input_shape(e)));
    paralab::run::RunControl control;
    paralab::run::RunArtifacts artifacts;
    const auto summary = paralab::run::run_experiment(e, nullptr, &control, 1, &artifacts);
    QCOMPARE(QString::fromStdString(summary.status), QString("finished"));
    QString table;
    bool ok = true;
    for (const auto& d : estimate) {
        const auto& peak = artifacts.memory.at(d.device).peak;
        for (size_t c = 0; c + 1 < paralab::kMemCategoryCount; ++c) {  // workspace: not predicted
            const double want = static_cast<double>(d.bytes[c]), got = static_cast<double>(peak[c]);
            const bool activations = c == cat(MemCategory::activations);
            const double factor = activations ? 2.5 : 1.35;
            // Small absolute slack: a few scalars (the loss, a norm) cost 64-byte blocks.
            const bool near = std::abs(want - got) <= 1024 ||
                              (want > 0 && got / want <= factor && want / got <= factor);
            table += QStringLiteral("%1 %2: estimate %3, run %4%5\n")
                         .arg(QString::fromStdString(d.device))
                         .arg(QString::fromLatin1(
                                  paralab::mem_category_name(static_cast<MemCategory>(c)).data()),
                              -16)
                         .arg(want, 9, 'f', 0)
                         .arg(got, 9, 'f', 0)
                         .arg(near ? "" : "   <-- off");
            ok = ok && near;
        }
    }
    if (!ok || qEnvironmentVariableIsSet("PARALAB_PRINT_ESTIMATES"))
        qInfo().noquote() << strategy << "\n" << table;
    QVERIFY2(ok, qPrintable(table));
}

void TestSetupPanels::pauseHoldsARunAndResumeFinishesIt() {
    auto e = defaultExperiment();
    e.devices = {"cpu:0", "cpu:1"};
    e.strategy.type = "ddp";
    e.train.epochs = 100;
    e.train.max_steps = 400;
    e.strategy.straggler_device = "cpu:1";  // ~2 ms a step: slow enough to pause mid-run
    e.strategy.straggler_delay_ms = 2;
    RunController controller(nullptr, m_dir.filePath("runs.db"));
    QSignalSpy steps(&controller, &RunController::stepsArrived);
    QSignalSpy finished(&controller, &RunController::finished);
    controller.start(e);
    QTRY_VERIFY_WITH_TIMEOUT(steps.count() > 0, 20000);
    controller.pause();
    QCOMPARE(controller.state(), RunController::State::Paused);
    QVERIFY(controller.isRunning());
    QTest::qWait(300);  // the steps already under way arrive and are drained
    auto received = [&] {
        qsizetype n = 0;
        for (const auto& args : steps)
            n += args.at(0).value<QVector<paralab::config::StepRecord>>().size();
        return n;
    };
    const qsizetype held = received();
    QVERIFY(held < 400);
    QTest::qWait(1000);
    QCOMPARE(received(), held);  // nothing moves while paused
    QCOMPARE(finished.count(), 0);
    controller.resume();
    QCOMPARE(controller.state(), RunController::State::Running);
    QVERIFY(finished.wait(60000));
    const auto summary = finished.at(0).at(0).value<paralab::config::RunSummary>();
    QCOMPARE(QString::fromStdString(summary.status), QString("finished"));
    QCOMPARE(summary.steps, 400);
    QCOMPARE(received(), 400);
}

void TestSetupPanels::settingsPersist() {
    const QString path = m_dir.filePath("mine.paralab.json");
    {
        QFile out(path);
        QVERIFY(out.open(QIODevice::WriteOnly));
        out.write(paralab::run::to_json(defaultExperiment()).dump(2).c_str());
    }
    {
        MainWindow w;
        QCOMPARE(w.openExperiment(path, false), QString());
        w.resize(1234, 777);
        w.viewTabs()->setCurrentIndex(2);
        w.experimentTabs()->setCurrentWidget(static_cast<QWidget*>(w.strategyPanel()));
        QVERIFY(w.close());
    }
    MainWindow again;
    QCOMPARE(again.size(), QSize(1234, 777));
    QCOMPARE(again.viewTabs()->currentIndex(), 2);
    QCOMPARE(again.experimentTabs()->currentWidget(), static_cast<QWidget*>(again.strategyPanel()));
    QCOMPARE(again.lastOpenedFile(), path);
}

// PARALAB_SCREENSHOT_DIR: the README's picture of the Strategy tab (zero on 4 devices).
void TestSetupPanels::screenshot() {
    const QString dir = qEnvironmentVariable("PARALAB_SCREENSHOT_DIR");
    if (dir.isEmpty()) QSKIP("set PARALAB_SCREENSHOT_DIR to take the README's screenshot");
    MainWindow w;
    QCOMPARE(w.openExperiment(":/examples/fashion-mlp-ddp.paralab.json", false), QString());
    w.devicesPanel()->cpuCountBox()->setValue(4);
    w.strategyPanel()->strategyBox()->setCurrentText("zero");
    w.experimentTabs()->setCurrentWidget(static_cast<QWidget*>(w.strategyPanel()));
    w.resize(1600, 1000);
    w.move(0, 0);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    w.findChild<QSplitter*>()->setSizes({720, 880});
    QTest::qWait(400);
    // The whole panel, also what lies below the scroll area's fold.
    QWidget* content = w.strategyPanel()->findChild<QScrollArea*>()->widget();
    QVERIFY(content->grab().save(QDir(dir).filePath("screenshot-strategy.png")));
    QVERIFY(w.grab().save(QDir(dir).filePath("screenshot-strategy-window.png")));
    // The mesh editor: gpt-char on 8 devices as dp 2 · tp 2 · pp 2.
    QCOMPARE(w.openExperiment(":/examples/gpt-char.paralab.json", false), QString());
    auto mesh = *w.experiment();
    mesh.devices.clear();
    for (int d = 0; d < 8; ++d) mesh.devices.push_back("cpu:" + std::to_string(d));
    mesh.strategy = paralab::strategy::default_config("hybrid");
    for (const char* key : {"dp", "tp", "pp"}) mesh.strategy.options[key] = int64_t{2};
    w.setExperiment(mesh);
    w.experimentTabs()->setCurrentWidget(static_cast<QWidget*>(w.strategyPanel()));
    QTest::qWait(200);
    QVERIFY(content->grab().save(QDir(dir).filePath("screenshot-mesh.png")));
    // Every strategy's diagram, to look at.
    for (const auto& type : paralab::strategy::strategy_names()) {
        w.strategyPanel()->strategyBox()->setCurrentText(QString::fromStdString(type));
        QVERIFY(static_cast<QWidget*>(w.strategyPanel()->diagram())
                    ->grab()
                    .save(QDir(dir).filePath(
                        QStringLiteral("diagram-%1.png").arg(QString::fromStdString(type)))));
    }
}

// A hybrid mesh that does not fit the devices stays chosen, with its error under its field and
// Start disabled, when the device count changes; it is taken as soon as the count fits it.
void TestSetupPanels::invalidHybridStaysChosenWhenTheDevicesChange() {
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    QAction* start = w.findChild<QAction*>("startAction");
    w.devicesPanel()->cpuCountBox()->setValue(4);
    w.strategyPanel()->strategyBox()->setCurrentText("hybrid");
    auto* dp = qobject_cast<QSpinBox*>(w.strategyPanel()->optionEditor("strategy.dp"));
    QVERIFY(dp);
    dp->setValue(2);  // dp 2 · tp 1 · pp 1 = 2, not 4
    QVERIFY(!w.strategyPanel()->errorText().isEmpty());
    QVERIFY(!start->isEnabled());
    w.devicesPanel()->cpuCountBox()->setValue(6);
    QCOMPARE(w.experiment()->devices.size(), size_t{6});
    // Checked again against six devices: still hybrid, still refused, still not startable.
    QCoreApplication::processEvents();  // the queued check against six devices
    QVERIFY(!w.strategyPanel()->errorText().isEmpty());
    QCOMPARE(w.strategyPanel()->strategyBox()->currentText(), QStringLiteral("hybrid"));
    QCOMPARE(dp->value(), 2);
    QVERIFY(!start->isEnabled());
    QCOMPARE(QString::fromStdString(w.experiment()->strategy.type), QStringLiteral("single"));
    // Two devices fit it: taken, and Start can start it.
    w.devicesPanel()->cpuCountBox()->setValue(2);
    QTRY_VERIFY2(w.experiment()->strategy.type == "hybrid", qPrintable(w.strategyPanel()->errorText()));
    QCOMPARE(w.strategyPanel()->errorText(), QString());
    QCOMPARE(paralab::strategy::option<int64_t>(w.experiment()->strategy, "dp"), int64_t{2});
    QTRY_VERIFY(start->isEnabled());
}

// A file sets what it sets; every other strategy field goes back to its default, so that
// choosing hybrid after opening GPT-3's plan and then a small model shows hybrid's defaults,
// not GPT-3's dp16 · tp8 and 96 micro-batches.
void TestSetupPanels::openingAFileResetsTheFieldsItDoesNotSet() {
    MainWindow w;
    QCOMPARE(w.openExperiment(":/lessons/06-tensor-parallel-mesh/gpt3-175b-tp8.plan.paralab.json", false), QString());
    QCOMPARE(qobject_cast<QSpinBox*>(w.strategyPanel()->optionEditor("strategy.tp"))->value(), 8);
    QCOMPARE(w.openExperiment(":/examples/gpt-char.paralab.json", false), QString());
    QVERIFY(w.experiment()->strategy.type != "hybrid");
    const auto* hybrid = paralab::strategy::find_strategy("hybrid");
    QVERIFY(hybrid);
    for (const auto& o : hybrid->options) {
        QWidget* editor = w.strategyPanel()->optionEditor(QString::fromStdString("strategy." + o.key));
        QVERIFY2(editor, o.key.c_str());
        if (auto* box = qobject_cast<QSpinBox*>(editor); box && std::holds_alternative<int64_t>(o.fallback))
            QVERIFY2(box->value() == std::get<int64_t>(o.fallback), o.key.c_str());
        if (auto* combo = qobject_cast<QComboBox*>(editor); combo && std::holds_alternative<std::string>(o.fallback))
            QVERIFY2(combo->currentText() == QString::fromStdString(std::get<std::string>(o.fallback)), o.key.c_str());
        if (auto* check = qobject_cast<QCheckBox*>(editor); check && std::holds_alternative<bool>(o.fallback))
            QVERIFY2(check->isChecked() == std::get<bool>(o.fallback), o.key.c_str());
    }
}

// Choosing a strategy shows its explanation and diagram at once, also while its options are
// still refused.
void TestSetupPanels::explanationAndDiagramFollowTheChoiceAtOnce() {
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    w.devicesPanel()->cpuCountBox()->setValue(4);
    QCOMPARE(w.strategyPanel()->explanation(), paralab::ui::StrategyPanel::explain("single"));
    auto* tp = qobject_cast<QSpinBox*>(w.strategyPanel()->optionEditor("strategy.tp"));
    QVERIFY(tp);
    tp->setValue(3);  // hybrid with a mesh of 3 on 4 devices: refused when chosen
    w.strategyPanel()->strategyBox()->setCurrentText("hybrid");
    QVERIFY(!w.strategyPanel()->errorText().isEmpty());
    QCOMPARE(w.strategyPanel()->explanation(), paralab::ui::StrategyPanel::explain("hybrid"));
    w.strategyPanel()->strategyBox()->setCurrentText("ddp");
    QCOMPARE(w.strategyPanel()->errorText(), QString());
    QCOMPARE(w.strategyPanel()->explanation(), paralab::ui::StrategyPanel::explain("ddp"));
}

// "Devices = dp · tp · pp" (hybrid's mesh axes) sets the device count to the mesh's product: a refused mesh is
// taken, the Devices tab shows the count, and Start can start it.
void TestSetupPanels::devicesButtonFitsTheMesh() {
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    QAction* start = w.findChild<QAction*>("startAction");
    w.devicesPanel()->cpuCountBox()->setValue(4);
    auto* button = w.strategyPanel()->findChild<QPushButton*>("fitDevicesToMesh");
    QVERIFY(button);
    QVERIFY(!button->isVisibleTo(w.strategyPanel()));  // single: no mesh
    w.strategyPanel()->strategyBox()->setCurrentText("hybrid");
    QVERIFY(button->isVisibleTo(w.strategyPanel()));
    auto* dp = qobject_cast<QSpinBox*>(w.strategyPanel()->optionEditor("strategy.dp"));
    auto* pp = qobject_cast<QSpinBox*>(w.strategyPanel()->optionEditor("strategy.pp"));
    QVERIFY(dp && pp);
    dp->setValue(3);
    pp->setValue(2);  // 6 devices, not 4
    QVERIFY(!w.strategyPanel()->errorText().isEmpty());
    QVERIFY(!start->isEnabled());
    button->click();
    QCOMPARE(w.strategyPanel()->errorText(), QString());
    QCOMPARE(w.experiment()->strategy.type, std::string("hybrid"));
    QCOMPARE(w.experiment()->devices.size(), size_t{6});
    QCOMPARE(w.experiment()->devices.back(), std::string("cpu:5"));
    QCOMPARE(w.devicesPanel()->cpuCountBox()->value(), 6);
    QTRY_VERIFY(start->isEnabled());
}

// Model ▸ input "abc", a batch of 0 and a refused mesh: each shows its
// error under its own field at the same time, and Start waits until all are fixed.
void TestSetupPanels::everyInvalidFieldShowsItsErrorAtOnce() {
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    QAction* start = w.findChild<QAction*>("startAction");
    QVERIFY(start->isEnabled());
    auto* input = w.findChild<QLineEdit*>("inputEdit");
    QVERIFY(input);
    input->setText("abc");
    emit input->editingFinished();
    auto* inputError = w.findChild<QLabel*>("model.input.error");
    QVERIFY(inputError && !inputError->isHidden());
    QVERIFY2(inputError->text().contains("abc"), qPrintable(inputError->text()));
    QCOMPARE(input->text(), QStringLiteral("abc"));  // what was typed stays beside its error
    QVERIFY(!start->isEnabled());
    w.devicesPanel()->cpuCountBox()->setValue(4);
    w.strategyPanel()->strategyBox()->setCurrentText("hybrid");  // dp·tp·pp = 1, not 4
    QVERIFY(!w.strategyPanel()->errorText().isEmpty());
    auto* batch = w.dataPanel()->findChild<QSpinBox*>("batchSize");
    batch->setValue(0);
    auto* batchError = w.dataPanel()->findChild<QLabel*>("data.batch_size.error");
    QVERIFY(batchError && !batchError->isHidden());
    // All three at once.
    QVERIFY(!inputError->isHidden());
    QVERIFY(!w.strategyPanel()->errorText().isEmpty());
    QVERIFY(!start->isEnabled());
    // Fixed one by one: Start waits for the last.
    batch->setValue(32);
    QVERIFY(batchError->isHidden());
    w.strategyPanel()->strategyBox()->setCurrentText("ddp");
    QCOMPARE(w.strategyPanel()->errorText(), QString());
    QVERIFY(!start->isEnabled());
    input->setText("2");
    emit input->editingFinished();
    QVERIFY(inputError->isHidden());
    QTRY_VERIFY(start->isEnabled());
}

// A file's rotating straggler shows in the Strategy tab, and the box edits it.
void TestSetupPanels::aRotatingStragglerIsShownAndEdited() {
    MainWindow w;
    QCOMPARE(w.openExperiment(":/lessons/05-stragglers-async/ps-sync.paralab.json", false), QString());
    QVERIFY(w.experiment()->strategy.straggler_rotate);
    auto* rotate = w.strategyPanel()->optionEditor("strategy.straggler.rotate");
    auto* box = qobject_cast<QCheckBox*>(rotate);
    QVERIFY(box);
    QVERIFY(box->isChecked());
    QVERIFY(w.strategyPanel()->isOptionShown("strategy.straggler.rotate"));
    box->setChecked(false);
    QVERIFY(!w.experiment()->strategy.straggler_rotate);
    QCOMPARE(w.experiment()->strategy.straggler_device, std::string("cpu:1"));
    box->setChecked(true);
    QVERIFY(w.experiment()->strategy.straggler_rotate);
    // Opening a file without one: unchecked.
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    QVERIFY(!box->isChecked());
    QVERIFY(!w.strategyPanel()->isOptionShown("strategy.straggler.rotate"));
}

QTEST_MAIN(TestSetupPanels)
#include "test_setup_panels.moc"
