// One source of truth, offscreen: the Settings tab's edits reach the experiment Start runs (and
// the run itself), a value the parser refuses shows its message under its field and disables
// Start on any tab until it is fixed, an edit on every tab marks the file modified, and a window
// with unsaved changes asks before it closes or opens another file (Cancel keeps everything).
#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTimer>
#include <QtTest>

#include <functional>

#include "ui/mainwindow/main_window.h"
#include "ui/panels/data/data_panel.h"
#include "ui/panels/designer/model_designer.h"
#include "ui/panels/devices/devices_panel.h"
#include "ui/panels/strategy/strategy_panel.h"
#include "ui/panels/training/training_panel.h"
#include "ui/session/run_controller.h"

using paralab::ui::MainWindow;
using paralab::ui::RunController;
using paralab::ui::TrainingPanel;

namespace {

const char* kDefault = ":/examples/spirals-mlp.paralab.json";

template <class T>
T* field(TrainingPanel* panel, const char* key) {
    auto* editor = qobject_cast<T*>(panel->editor(QString::fromLatin1(key)));
    if (!editor) qFatal("no editor %s", key);
    return editor;
}

// As a user types into a line and leaves it.
void type(QLineEdit* line, const QString& text) {
    line->setText(text);
    emit line->editingFinished();
}

// Answers the next message box with `button` once it is the window's modal dialog (checked on
// each turn of the event loop the dialog runs, for at most ~10 s), and keeps what it said.
struct DialogAnswer {
    QString text;
    bool answered = false;
};

void answerNextMessageBox(QMessageBox::StandardButton button, DialogAnswer* answer, int triesLeft = 2000) {
    QTimer::singleShot(triesLeft == 2000 ? 0 : 5, qApp, [=] {
        auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget());
        if (!box || !box->button(button)) {
            if (triesLeft > 0) answerNextMessageBox(button, answer, triesLeft - 1);
            return;
        }
        answer->text = box->text();
        answer->answered = true;
        box->button(button)->click();
    });
}

QString writeExperiment(const QTemporaryDir& dir, const QString& name) {
    QFile in(kDefault);
    in.open(QIODevice::ReadOnly);
    const QString path = dir.filePath(name);
    QFile out(path);
    out.open(QIODevice::WriteOnly);
    out.write(in.readAll());
    return path;
}

// The default example with sgd and a constant learning rate.
paralab::config::Experiment sgdExperiment() {
    QFile f(kDefault);
    f.open(QIODevice::ReadOnly);
    auto e = paralab::run::parse_experiment(nlohmann::json::parse(f.readAll().toStdString()));
    e.optimizer = {};
    e.schedule = {};
    return e;
}

paralab::config::Experiment readBack(const QString& path) {
    return paralab::run::load_experiment(path.toStdString());
}

}  // namespace

class TestTrainingPanel : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void trainingEditsReachTheRun();
    void optionsFollowTheOptimizerAndSchedule();
    void badValueDisablesStart_data();
    void badValueDisablesStart();
    void everyTabMarksTheFileModified_data();
    void everyTabMarksTheFileModified();
    void closingWithUnsavedChangesAsks();
    void openingAnotherFileWithUnsavedChangesAsks();

private:
    QTemporaryDir m_dir;
};

void TestTrainingPanel::initTestCase() {
    QVERIFY(m_dir.isValid());
    // Settings and runs go to this test's own folder, never the user's.
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_dir.filePath("settings"));
    QCoreApplication::setOrganizationName(QStringLiteral("ParaLabTrainingTest"));
    qputenv("XDG_DATA_HOME", m_dir.filePath("data").toUtf8());
}

// Every field of the tab, set as a user sets it, is in the experiment Start runs; a short run
// then takes exactly the max steps the tab says.
void TestTrainingPanel::trainingEditsReachTheRun() {
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    QVERIFY(!w.isWindowModified());
    TrainingPanel* t = w.trainingPanel();
    type(field<QLineEdit>(t, "name"), QStringLiteral("spirals-adamw"));
    field<QSpinBox>(t, "train.epochs")->setValue(3);
    field<QSpinBox>(t, "train.max_steps")->setValue(7);
    field<QSpinBox>(t, "train.eval_every")->setValue(5);
    field<QComboBox>(t, "train.recompute")->setCurrentText("selective");
    field<QComboBox>(t, "optimizer.type")->setCurrentText("adamw");
    // another optimizer starts from the parser's defaults for it
    QCOMPARE(w.experiment()->optimizer.lr, 0.001);
    QCOMPARE(w.experiment()->optimizer.weight_decay, 0.01);
    QCOMPARE(field<QLineEdit>(t, "optimizer.lr")->text(), QString("0.001"));
    type(field<QLineEdit>(t, "optimizer.lr"), QStringLiteral("3e-4"));
    type(field<QLineEdit>(t, "optimizer.weight_decay"), QStringLiteral("0.05"));
    type(t->findChild<QLineEdit*>("optimizer.beta2"), QStringLiteral("0.95"));
    type(field<QLineEdit>(t, "optimizer.eps"), QStringLiteral("1e-6"));
    field<QComboBox>(t, "schedule.type")->setCurrentText("step");
    field<QSpinBox>(t, "schedule.step_size")->setValue(4);
    type(field<QLineEdit>(t, "schedule.gamma"), QStringLiteral("0.5"));
    QCOMPARE(t->errorText(), QString());

    const auto& e = *w.experiment();
    QCOMPARE(QString::fromStdString(e.name), QString("spirals-adamw"));
    QCOMPARE(e.train.epochs, int64_t{3});
    QCOMPARE(e.train.max_steps, std::optional<int64_t>(7));
    QCOMPARE(e.train.eval_every, int64_t{5});
    QCOMPARE(QString::fromStdString(e.train.recompute), QString("selective"));
    QCOMPARE(QString::fromStdString(e.optimizer.type), QString("adamw"));
    QCOMPARE(e.optimizer.lr, 3e-4);
    QCOMPARE(e.optimizer.weight_decay, 0.05);
    QCOMPARE(e.optimizer.beta1, 0.9);
    QCOMPARE(e.optimizer.beta2, 0.95);
    QCOMPARE(e.optimizer.eps, 1e-6);
    QCOMPARE(QString::fromStdString(e.schedule.type), QString("step"));
    QCOMPARE(e.schedule.step_size, int64_t{4});
    QCOMPARE(e.schedule.gamma, 0.5);
    // The other tabs still have theirs, and the window says the file changed and its new name.
    QCOMPARE(e.layers.size(), size_t(5));
    QCOMPARE(QString::fromStdString(e.data.dataset), QString("spirals"));
    QVERIFY(w.isWindowModified());
    QVERIFY2(w.windowTitle().contains("spirals-adamw"), qPrintable(w.windowTitle()));
    // The file format keeps every value.
    const auto reread = paralab::run::parse_experiment(paralab::run::to_json(e));
    QCOMPARE(paralab::run::to_json(reread).dump(), paralab::run::to_json(e).dump());

    auto* start = w.findChild<QAction*>("startAction");
    QTRY_VERIFY(start->isEnabled());
    QSignalSpy finished(w.controller(), &RunController::finished);
    start->trigger();
    QVERIFY(finished.wait(30000));
    const auto summary = finished.at(0).at(0).value<paralab::config::RunSummary>();
    QCOMPARE(QString::fromStdString(summary.status), QString("finished"));
    QCOMPARE(summary.steps, 7);
}

// Only the options of the chosen optimizer and schedule are shown.
void TestTrainingPanel::optionsFollowTheOptimizerAndSchedule() {
    TrainingPanel panel;
    auto e = sgdExperiment();
    panel.setExperiment(e);
    QVERIFY(panel.isFieldShown("optimizer.momentum"));
    QVERIFY(panel.isFieldShown("optimizer.nesterov"));
    QVERIFY(!panel.isFieldShown("optimizer.betas"));
    QVERIFY(!panel.isFieldShown("schedule.gamma"));
    e.optimizer.type = "adam";
    e.schedule.type = "cosine";
    panel.setExperiment(e);
    QVERIFY(!panel.isFieldShown("optimizer.momentum"));
    QVERIFY(panel.isFieldShown("optimizer.betas"));
    QVERIFY(panel.isFieldShown("optimizer.eps"));
    QVERIFY(panel.isFieldShown("schedule.warmup_steps"));
    QVERIFY(!panel.isFieldShown("schedule.step_size"));
    // nesterov needs momentum: the parser's message, under the box
    e = sgdExperiment();
    panel.setExperiment(e);
    int edits = 0;
    connect(&panel, &TrainingPanel::experimentEdited, &panel, [&] { ++edits; });
    field<QCheckBox>(&panel, "optimizer.nesterov")->setChecked(true);
    QCOMPARE(edits, 0);
    QVERIFY2(panel.errorText().startsWith("optimizer.nesterov: needs a momentum"), qPrintable(panel.errorText()));
    QVERIFY(!panel.findChild<QLabel*>("optimizer.nesterov.error")->isHidden());
    type(field<QLineEdit>(&panel, "optimizer.momentum"), QStringLiteral("0.9"));
    QCOMPARE(edits, 1);
    QCOMPARE(panel.errorText(), QString());
}

void TestTrainingPanel::badValueDisablesStart_data() {
    QTest::addColumn<QString>("tab");
    QTest::addColumn<QString>("key");
    QTest::addColumn<QString>("value");
    QTest::addColumn<QString>("message");
    QTest::newRow("lr 0") << "training" << "optimizer.lr" << "0" << "optimizer.lr: expected a positive";
    QTest::newRow("lr not a number") << "training" << "optimizer.lr" << "fast" << "optimizer.lr: expected a number";
    QTest::newRow("epochs 0") << "training" << "train.epochs" << "0" << "train.epochs: expected";
    QTest::newRow("momentum 1") << "training" << "optimizer.momentum" << "1" << "optimizer.momentum: expected";
    QTest::newRow("batch 0") << "data" << "data.batch_size" << "0" << "data.batch_size: expected a positive integer";
    QTest::newRow("micro-batches 0") << "strategy" << "strategy.micro_batches" << "0" << "strategy.micro_batches: expected";
}

// A refused value stays on screen with its message under its field; Start is disabled (what
// runs is what the tabs show) until the value is fixed.
void TestTrainingPanel::badValueDisablesStart() {
    QFETCH(QString, tab);
    QFETCH(QString, key);
    QFETCH(QString, value);
    QFETCH(QString, message);
    MainWindow w;
    QCOMPARE(w.openExperiment(kDefault, false), QString());
    auto* start = w.findChild<QAction*>("startAction");
    QTRY_VERIFY(start->isEnabled());
    const std::string before = paralab::run::to_json(*w.experiment()).dump();
    QWidget* panel = nullptr;
    std::function<void()> fix;
    if (tab == "training") {
        panel = w.trainingPanel();
        QWidget* editor = w.trainingPanel()->editor(key);
        if (auto* line = qobject_cast<QLineEdit*>(editor)) {
            const QString good = line->text();
            if (key == "optimizer.momentum")  // the example uses adam: momentum is sgd's
                field<QComboBox>(w.trainingPanel(), "optimizer.type")->setCurrentText("sgd");
            type(line, value);
            fix = [line, good] { type(line, good); };
        } else if (auto* spin = qobject_cast<QSpinBox*>(editor)) {
            const int good = spin->value();
            spin->setValue(value.toInt());
            fix = [spin, good] { spin->setValue(good); };
        } else if (auto* combo = qobject_cast<QComboBox*>(editor)) {
            const QString good = combo->currentText();
            combo->setCurrentText(value);
            fix = [combo, good] { combo->setCurrentText(good); };
        }
    } else if (tab == "data") {
        panel = w.dataPanel();
        auto* batch = w.dataPanel()->findChild<QSpinBox*>("batchSize");
        const int good = batch->value();
        batch->setValue(value.toInt());
        fix = [batch, good] { batch->setValue(good); };
    } else {
        panel = w.strategyPanel();
        w.devicesPanel()->cpuCountBox()->setValue(2);
        w.strategyPanel()->strategyBox()->setCurrentText("pipeline");
        auto* box = qobject_cast<QSpinBox*>(w.strategyPanel()->optionEditor(key));
        QVERIFY(box);
        const int good = box->value();
        box->setValue(value.toInt());
        fix = [box, good] { box->setValue(good); };
    }
    QVERIFY(fix);
    auto* label = panel->findChild<QLabel*>(key + ".error");
    QVERIFY2(label && !label->isHidden(), qPrintable(key));
    QVERIFY2(label->text().startsWith(message), qPrintable(label->text()));
    QVERIFY2(w.fieldError().startsWith(message), qPrintable(w.fieldError()));
    QVERIFY(!start->isEnabled());
    if (tab != "strategy" && key != "optimizer.momentum")
        QCOMPARE(paralab::run::to_json(*w.experiment()).dump(), before);  // not passed on
    fix();
    QCOMPARE(w.fieldError(), QString());
    QVERIFY(label->isHidden());
    QVERIFY(start->isEnabled());
}

void TestTrainingPanel::everyTabMarksTheFileModified_data() {
    QTest::addColumn<QString>("tab");
    for (const char* tab : {"model", "data", "devices", "strategy", "training"}) QTest::newRow(tab) << tab;
}

void TestTrainingPanel::everyTabMarksTheFileModified() {
    QFETCH(QString, tab);
    const QString path = writeExperiment(m_dir, tab + ".paralab.json");
    MainWindow w;
    QCOMPARE(w.openExperiment(path, false), QString());
    QVERIFY(!w.isWindowModified());
    QVERIFY2(w.windowTitle().contains("[*]"), qPrintable(w.windowTitle()));  // where the "*" shows
    if (tab == "model")
        QVERIFY(w.designer()->addLayer("dropout"));
    else if (tab == "data")
        w.dataPanel()->findChild<QSpinBox*>("batchSize")->setValue(w.experiment()->data.batch_size + 1);
    else if (tab == "devices")
        w.devicesPanel()->cpuCountBox()->setValue(2);
    else if (tab == "strategy")
        w.strategyPanel()->strategyBox()->setCurrentText("data_parallel");
    else
        field<QSpinBox>(w.trainingPanel(), "train.epochs")->setValue(2);
    QVERIFY(w.isWindowModified());
    QCOMPARE(w.fieldError(), QString());
}

// Closing with unsaved changes asks: Cancel keeps the window and every change, Discard closes
// without writing, Save writes the file and closes.
void TestTrainingPanel::closingWithUnsavedChangesAsks() {
    const QString path = writeExperiment(m_dir, "close.paralab.json");
    const int epochsOnDisk = static_cast<int>(readBack(path).train.epochs);
    for (const auto answer : {QMessageBox::Cancel, QMessageBox::Discard, QMessageBox::Save}) {
        MainWindow w;
        QCOMPARE(w.openExperiment(path, false), QString());
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        const int epochs = static_cast<int>(w.experiment()->train.epochs) + 5;
        field<QSpinBox>(w.trainingPanel(), "train.epochs")->setValue(epochs);
        QVERIFY(w.isWindowModified());
        DialogAnswer asked;
        answerNextMessageBox(answer, &asked);
        const bool closed = w.close();
        QVERIFY(asked.answered);
        QVERIFY2(asked.text.contains("not saved"), qPrintable(asked.text));
        if (answer == QMessageBox::Cancel) {
            QVERIFY(!closed);
            QVERIFY(w.isVisible());
            QVERIFY(w.isWindowModified());
            QCOMPARE(w.experiment()->train.epochs, int64_t{epochs});
            QCOMPARE(field<QSpinBox>(w.trainingPanel(), "train.epochs")->value(), epochs);
            QCOMPARE(static_cast<int>(readBack(path).train.epochs), epochsOnDisk);
            // and an unchanged window closes without asking
            QVERIFY(w.openExperiment(path, false).isEmpty());
            QVERIFY(w.close());
        } else if (answer == QMessageBox::Discard) {
            QVERIFY(closed);
            QCOMPARE(static_cast<int>(readBack(path).train.epochs), epochsOnDisk);
        } else {
            QVERIFY(closed);
            QCOMPARE(static_cast<int>(readBack(path).train.epochs), epochs);
        }
    }
}

// Opening another file (File ▸ Open, Open Recent, a preset) with unsaved changes asks: Cancel
// keeps the experiment shown, Discard opens the other.
void TestTrainingPanel::openingAnotherFileWithUnsavedChangesAsks() {
    const QString path = writeExperiment(m_dir, "open.paralab.json");
    MainWindow w;
    QCOMPARE(w.openExperiment(path, false), QString());
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    type(field<QLineEdit>(w.trainingPanel(), "name"), QStringLiteral("mine"));
    QVERIFY(w.isWindowModified());
    DialogAnswer asked;
    answerNextMessageBox(QMessageBox::Cancel, &asked);
    QVERIFY(!w.openExperiment(":/examples/fashion-mlp.paralab.json").isEmpty());
    QVERIFY(asked.answered);
    QCOMPARE(QString::fromStdString(w.experiment()->name), QString("mine"));
    QCOMPARE(field<QLineEdit>(w.trainingPanel(), "name")->text(), QString("mine"));
    QVERIFY(w.isWindowModified());

    DialogAnswer again;
    answerNextMessageBox(QMessageBox::Discard, &again);
    QCOMPARE(w.openExperiment(":/examples/fashion-mlp.paralab.json"), QString());
    QVERIFY(again.answered);
    QCOMPARE(QString::fromStdString(w.experiment()->name), QString("fashion-mlp"));
    QVERIFY(!w.isWindowModified());
    QVERIFY(w.close());
}

QTEST_MAIN(TestTrainingPanel)
#include "test_training_panel.moc"
