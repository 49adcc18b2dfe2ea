// The window's cluster device source: the settings (host list, hostfile, processes,
// mpirun) and their checks, their round trip through QSettings, jobs that cannot start, and a
// real 2-process job on this host started through ClusterRunController and through the window:
// every rank's devices arrive live, Pause stops the flow and Resume restarts it, Stop ends the
// job with the run stopped and every process gone. Waits are bounded (QTRY_*), never timed.
#include <QDir>
#include <QFile>
#include <QSet>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QLineEdit>
#include <QPushButton>
#include <QRadioButton>
#include <QSpinBox>
#include <QTableWidget>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QtTest>

#include <cerrno>
#include <memory>
#include <csignal>

#include <signal.h>
#include <unistd.h>

#include "engine/run/experiment_file.h"
#include "ui/mainwindow/main_window.h"
#include "ui/panels/cluster/cluster_panel.h"
#include "ui/panels/dashboard/device_dashboard.h"
#include "ui/panels/devices/devices_panel.h"
#include "ui/session/cluster_run_controller.h"
#include "ui/session/cluster_settings.h"
#include "ui/session/run_controller.h"

using paralab::ui::ClusterHost;
using paralab::ui::ClusterPanel;
using paralab::ui::ClusterRunController;
using paralab::ui::ClusterSettings;
using paralab::ui::MainWindow;
using paralab::ui::RunSource;

Q_DECLARE_METATYPE(paralab::ui::ClusterSettings)

namespace {

const char* const kSpirals = PARALAB_SOURCE_DIR "/resources/examples/spirals-mlp.paralab.json";

// Spirals, ddp, many steps: a job that runs until it is stopped.
paralab::config::Experiment longDdpExperiment() {
    auto e = paralab::run::load_experiment(kSpirals);
    e.strategy = paralab::config::StrategyConfig{};
    e.strategy.type = "ddp";
    e.devices = {"cpu:0", "cpu:1"};
    e.train.epochs = 100000;
    e.train.max_steps = 10000000;
    e.train.eval_every = 0;
    return e;
}

ClusterSettings localhost(int slotCount) {
    ClusterSettings s;
    s.enabled = true;
    s.hosts = {{QStringLiteral("localhost"), slotCount}};
    return s;
}

// Why a real job cannot run here, or empty.
QString whyNoJob() {
#ifndef PARALAB_HAVE_MPI
    return QStringLiteral("this build has no MPI (Open MPI's development files were not found)");
#else
    if (QStandardPaths::findExecutable(QStringLiteral("mpirun")).isEmpty())
        return QStringLiteral("mpirun is not on PATH");
    return {};
#endif
}

// True while a process whose command line mentions `needle` runs (a rank of the job).
bool processMentioning(const QString& needle) {
    const QDir proc(QStringLiteral("/proc"));
    for (const QString& pid : proc.entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
        bool isPid = false;
        pid.toLongLong(&isPid);
        if (!isPid) continue;
        QFile cmdline(proc.filePath(pid + QStringLiteral("/cmdline")));
        if (!cmdline.open(QIODevice::ReadOnly)) continue;
        QByteArray text = cmdline.readAll();
        text.replace('\0', ' ');
        if (text.contains(needle.toUtf8())) return true;
    }
    return false;
}

}  // namespace

class TestCluster : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void settingsRoundTripThroughQSettings();
    void panelKeepsTheHostList();
    void problemsNameTheirField_data();
    void problemsNameTheirField();
    void panelShowsProblemsUnderTheField();
    void hostfileGivesHostsAndDevices();
    void mpirunArguments();
    void refusedJobsSayWhy_data();
    void refusedJobsSayWhy();
    void jobMpirunCannotLaunchSaysWhy();
    void jobParalabRefusesSaysWhy();
    void twoProcessJobPausesResumesAndStops();
    void twoDevicesPerProcessJobFinishes();
    void stopBeforeTheJobTrains();
    void destroyingTheControllerEndsTheJob();
    void windowRunsAJobOnItsDashboard();

private:
    QTemporaryDir m_dir;
};

void TestCluster::initTestCase() {
    QVERIFY(m_dir.isValid());
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_dir.filePath("settings"));
    QCoreApplication::setOrganizationName(QStringLiteral("ParaLabClusterTest"));
    QCoreApplication::setApplicationName(QStringLiteral("ui_cluster_test"));
    qputenv("XDG_DATA_HOME", m_dir.filePath("data").toUtf8());
}

void TestCluster::settingsRoundTripThroughQSettings() {
    ClusterSettings s;
    s.enabled = true;
    s.useHostfile = true;
    s.hosts = {{QStringLiteral("node1"), 4}, {QStringLiteral("node2"), 2}, {QStringLiteral("localhost"), 1}};
    s.hostfile = QStringLiteral("/shared/hosts");
    s.processes = 5;
    s.devicesPerProcess = 3;
    s.oversubscribe = true;
    s.mpirun = QStringLiteral("/opt/openmpi/bin/mpirun");
    s.sharedDir = QStringLiteral("/shared/jobs");
    {
        QSettings settings(m_dir.filePath("roundtrip.ini"), QSettings::IniFormat);
        s.save(settings);
    }
    QSettings settings(m_dir.filePath("roundtrip.ini"), QSettings::IniFormat);
    const ClusterSettings back = ClusterSettings::load(settings);
    QCOMPARE(back, s);
    QCOMPARE(back.hosts.size(), 3);
    QCOMPARE(back.hosts[1].name, QStringLiteral("node2"));
    QCOMPARE(back.hosts[1].slotCount, 2);
    // Never saved: the defaults (this machine's threads, localhost with 2 slots).
    QSettings empty(m_dir.filePath("empty.ini"), QSettings::IniFormat);
    QCOMPARE(ClusterSettings::load(empty), ClusterSettings{});
}

// The panel keeps every edit in QSettings: a panel made afterwards shows the same host list.
void TestCluster::panelKeepsTheHostList() {
    {
        ClusterPanel panel;
        panel.clusterButton()->setChecked(true);
        panel.hostTable()->item(0, 1)->setData(Qt::EditRole, 3);  // localhost: 3 slots
        panel.addHostButton()->click();
        QCOMPARE(panel.hostTable()->rowCount(), 2);
        panel.hostTable()->item(1, 0)->setText(QStringLiteral("node7"));
        panel.hostTable()->item(1, 1)->setData(Qt::EditRole, 2);
        panel.processBox()->setValue(4);
        QCOMPARE(panel.settings().hosts, (QVector<ClusterHost>{{"localhost", 3}, {"node7", 2}}));
    }
    ClusterPanel again;
    QVERIFY(again.useCluster());
    QCOMPARE(again.settings().hosts, (QVector<ClusterHost>{{"localhost", 3}, {"node7", 2}}));
    QCOMPARE(again.settings().processes, 4);
    QCOMPARE(again.hostTable()->rowCount(), 2);
    QCOMPARE(again.hostTable()->item(1, 0)->text(), QStringLiteral("node7"));
    QVERIFY2(again.devicesText().contains("r0/cpu:0 (localhost)") && again.devicesText().contains("r3/cpu:0 (node7)"),
             qPrintable(again.devicesText()));
    // Removing the selected row is kept too.
    again.hostTable()->selectRow(1);
    again.removeHostButton()->click();
    ClusterPanel third;
    QCOMPARE(third.settings().hosts, (QVector<ClusterHost>{{"localhost", 3}}));
    third.setSettings(ClusterSettings{});  // leave the defaults for the tests after
}

void TestCluster::problemsNameTheirField_data() {
    QTest::addColumn<ClusterSettings>("settings");
    QTest::addColumn<QString>("field");
    QTest::addColumn<QString>("message");  // a part of it
    ClusterSettings s = localhost(2);
    s.hosts.clear();
    QTest::newRow("no hosts") << s << "hosts" << "add at least one host";
    s = localhost(0);
    QTest::newRow("no slots") << s << "hosts" << "slots must be at least 1, not 0";
    s = localhost(2);
    s.hosts.push_back({QStringLiteral("two words"), 1});
    QTest::newRow("a bad host name") << s << "hosts" << "row 2: 'two words' is not a host name";
    s = localhost(2);
    s.hosts.push_back({QString(), 1});
    QTest::newRow("an empty row") << s << "hosts" << "row 2: the host name is empty";
    s = localhost(2);
    s.processes = 5;
    QTest::newRow("more processes than slots") << s << "processes" << "5 processes but 2 slots";
    s = localhost(1);
    QTest::newRow("one process") << s << "processes" << "at least 2 processes";
    s = localhost(2);
    s.devicesPerProcess = 0;
    QTest::newRow("no devices per process") << s << "devicesPerProcess" << "1 to 64 virtual CPU devices, got 0";
    s = localhost(2);
    s.mpirun = QStringLiteral("/nonexistent/bin/mpirun");
    QTest::newRow("mpirun missing") << s << "mpirun" << "/nonexistent/bin/mpirun does not exist";
    s = localhost(2);
    s.useHostfile = true;
    s.hostfile = QStringLiteral("/nonexistent/hosts");
    QTest::newRow("hostfile missing") << s << "hostfile" << "/nonexistent/hosts: cannot read the hostfile";
    s = localhost(2);
    s.hosts.push_back({QStringLiteral("node2"), 2});
    QTest::newRow("another host, no shared folder") << s << "sharedDir" << "give a folder they all see";
}

void TestCluster::problemsNameTheirField() {
    QFETCH(ClusterSettings, settings);
    QFETCH(QString, field);
    QFETCH(QString, message);
    const auto problems = settings.problems();
    QVERIFY2(problems.contains(field), qPrintable(settings.problemText()));
    QVERIFY2(problems.value(field).contains(message), qPrintable(problems.value(field)));
    // And a good host list has none (mpirun is on PATH when the machine has Open MPI).
    if (!QStandardPaths::findExecutable(QStringLiteral("mpirun")).isEmpty())
        QCOMPARE(localhost(2).problemText(), QString());
}

// A slot count below 1 typed in the table shows under the host list, and the devices line says
// there are none until it is fixed.
void TestCluster::panelShowsProblemsUnderTheField() {
    ClusterPanel panel;
    panel.setSettings(localhost(2));
    QCOMPARE(panel.fieldError("hosts"), QString());
    QVERIFY2(panel.devicesText().contains("r1/cpu:0 (localhost)"), qPrintable(panel.devicesText()));
    panel.hostTable()->item(0, 1)->setData(Qt::EditRole, 0);
    QVERIFY2(panel.fieldError("hosts").contains("slots must be at least 1"), qPrintable(panel.fieldError("hosts")));
    QVERIFY2(panel.devicesText().contains("no devices"), qPrintable(panel.devicesText()));
    panel.mpirunEdit()->setText(QStringLiteral("/nonexistent/bin/mpirun"));
    QVERIFY2(panel.fieldError("mpirun").contains("does not exist"), qPrintable(panel.fieldError("mpirun")));
    panel.hostTable()->item(0, 1)->setData(Qt::EditRole, 3);
    panel.mpirunEdit()->clear();
    QCOMPARE(panel.fieldError("hosts"), QString());
    QVERIFY2(panel.devicesText().contains("r2/cpu:0 (localhost)"), qPrintable(panel.devicesText()));
    panel.setSettings(ClusterSettings{});
}

void TestCluster::hostfileGivesHostsAndDevices() {
    const QString path = m_dir.filePath("hosts");
    QFile file(path);
    QVERIFY(file.open(QIODevice::WriteOnly | QIODevice::Text));
    file.write("# the lab's machines\nnode1 slots=2 max_slots=4\n\nnode2   # one slot\n");
    file.close();
    ClusterSettings s;
    s.enabled = true;
    s.useHostfile = true;
    s.hostfile = path;
    QString error;
    QCOMPARE(s.jobHosts(&error), (QVector<ClusterHost>{{"node1", 2}, {"node2", 1}}));
    QCOMPARE(error, QString());
    QCOMPARE(s.processCount(), 3);
    QCOMPARE(s.placedDeviceNames(), (QStringList{"r0/cpu:0 (node1)", "r1/cpu:0 (node1)", "r2/cpu:0 (node2)"}));
    QVERIFY(!s.allLocal());
    const QStringList args = s.mpirunArguments();
    QCOMPARE(args.mid(0, 4), (QStringList{"--hostfile", path, "-np", "3"}));

    QVERIFY(file.open(QIODevice::WriteOnly | QIODevice::Text | QIODevice::Truncate));
    file.write("node1 slots=zero\n");
    file.close();
    QVERIFY(s.jobHosts(&error).isEmpty());
    QVERIFY2(error.contains("line 1: slots must be a whole number of at least 1, not 'zero'"), qPrintable(error));
}

void TestCluster::mpirunArguments() {
    ClusterSettings s = localhost(2);
    s.hosts.push_back({QStringLiteral("127.0.0.1"), 1});
    s.processes = 4;
    s.oversubscribe = true;
    QVERIFY(s.allLocal());
    const QStringList args = s.mpirunArguments({QStringLiteral("OMPI_MCA_btl")});
    QStringList expected{"--host", "localhost:2,127.0.0.1:1", "-np", "4", "--oversubscribe"};
    if (geteuid() == 0) expected << "--allow-run-as-root";
    expected << "-x" << "OMPI_MCA_btl";
    QCOMPARE(args, expected);
    QCOMPARE(s.deviceNames(), (QStringList{"r0/cpu:0", "r1/cpu:0", "r2/cpu:0", "r3/cpu:0"}));
    QCOMPARE(s.processDevices(), QStringLiteral("cpu:0"));
    s.devicesPerProcess = 2;
    s.processes = 2;
    QCOMPARE(s.processDevices(), QStringLiteral("cpu:0,cpu:1"));
    QCOMPARE(s.deviceNames(), (QStringList{"r0/cpu:0", "r0/cpu:1", "r1/cpu:0", "r1/cpu:1"}));
    QCOMPARE(s.placedDeviceNames(), (QStringList{"r0/cpu:0 (localhost)", "r0/cpu:1 (localhost)",
                                                 "r1/cpu:0 (localhost)", "r1/cpu:1 (localhost)"}));
}

// Two processes of two devices each: the job's four devices report, and it finishes.
void TestCluster::twoDevicesPerProcessJobFinishes() {
    if (const QString why = whyNoJob(); !why.isEmpty()) QSKIP(qPrintable(why));
    auto e = longDdpExperiment();
    e.train.epochs = 1;
    e.train.max_steps = 20;
    ClusterRunController controller(nullptr, m_dir.filePath("two-per-process.db"));
    ClusterSettings s = localhost(2);
    s.devicesPerProcess = 2;
    controller.setSettings(s);
    controller.setProgram(PARALAB_EXE);
    QSet<QString> devices;
    connect(&controller, &RunSource::deviceStepsArrived, this, [&](const QVector<paralab::config::StepRecord>& steps) {
        for (const auto& r : steps) devices.insert(QString::fromStdString(r.device));
    });
    QSignalSpy failed(&controller, &RunSource::failed);
    QSignalSpy finished(&controller, &RunSource::finished);
    controller.start(e);
    QTRY_VERIFY_WITH_TIMEOUT(failed.count() + finished.count() > 0, 120000);
    QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.at(0).at(0).toString()));
    const auto summary = finished.at(0).at(0).value<paralab::config::RunSummary>();
    QCOMPARE(QString::fromStdString(summary.status), QString("finished"));
    QCOMPARE(summary.steps, 20);
    QCOMPARE(devices, (QSet<QString>{"r0/cpu:0", "r0/cpu:1", "r1/cpu:0", "r1/cpu:1"}));
}

// A job that cannot start says why at once: failed(), state Failed, nothing started.
void TestCluster::refusedJobsSayWhy_data() {
    QTest::addColumn<ClusterSettings>("settings");
    QTest::addColumn<QString>("message");
    ClusterSettings s = localhost(2);
    s.mpirun = QStringLiteral("/nonexistent/bin/mpirun");
    QTest::newRow("mpirun missing") << s << "mpirun: /nonexistent/bin/mpirun does not exist";
    s = localhost(2);
    s.hosts.clear();
    QTest::newRow("no hosts") << s << "hosts: add at least one host";
    s = localhost(0);
    QTest::newRow("no slots") << s << "slots must be at least 1";
}

void TestCluster::refusedJobsSayWhy() {
    QFETCH(ClusterSettings, settings);
    QFETCH(QString, message);
    ClusterRunController controller(nullptr, m_dir.filePath("refused.db"));
    controller.setSettings(settings);
    QSignalSpy failed(&controller, &RunSource::failed);
    QSignalSpy finished(&controller, &RunSource::finished);
    controller.start(longDdpExperiment());
    QCOMPARE(failed.count(), 1);
    const QString text = failed.at(0).at(0).toString();
    QVERIFY2(text.contains("The cluster settings are not complete") && text.contains(message), qPrintable(text));
    QCOMPARE(controller.state(), RunSource::State::Failed);
    QCOMPARE(controller.processId(), 0);
    QCOMPARE(finished.count(), 0);
}

// mpirun starts but cannot launch the job (the host does not exist): failed(), with mpirun's
// own words.
void TestCluster::jobMpirunCannotLaunchSaysWhy() {
    if (const QString why = whyNoJob(); !why.isEmpty()) QSKIP(qPrintable(why));
    ClusterSettings s = localhost(1);
    s.hosts.push_back({QStringLiteral("no-such-host.invalid"), 1});
    s.sharedDir = m_dir.path();
    ClusterRunController controller(nullptr, m_dir.filePath("badhost.db"));
    controller.setSettings(s);
    controller.setProgram(PARALAB_EXE);
    QSignalSpy failed(&controller, &RunSource::failed);
    QSignalSpy finished(&controller, &RunSource::finished);
    controller.start(longDdpExperiment());
    QCOMPARE(controller.state(), RunSource::State::Running);
    QTRY_VERIFY_WITH_TIMEOUT(failed.count() + finished.count() > 0, 120000);
    QCOMPARE(finished.count(), 0);
    const QString text = failed.at(0).at(0).toString();
    qInfo().noquote() << "the message:" << text;
    QVERIFY2(text.contains("The job ended without reporting its result") && text.contains("mpirun's last output"),
             qPrintable(text));
    QVERIFY2(!controller.stderrTail().isEmpty(), "mpirun said nothing on stderr");
    QCOMPARE(controller.state(), RunSource::State::Failed);
    QCOMPARE(controller.processId(), 0);
}

// paralab refuses the job on every process (hogwild shares one process's memory): failed(),
// with paralab's reason first.
void TestCluster::jobParalabRefusesSaysWhy() {
    if (const QString why = whyNoJob(); !why.isEmpty()) QSKIP(qPrintable(why));
    auto e = longDdpExperiment();
    e.strategy.type = "hogwild";
    ClusterRunController controller(nullptr, m_dir.filePath("hogwild.db"));
    controller.setSettings(localhost(2));
    controller.setProgram(PARALAB_EXE);
    QSignalSpy failed(&controller, &RunSource::failed);
    QSignalSpy finished(&controller, &RunSource::finished);
    controller.start(e);
    QTRY_VERIFY_WITH_TIMEOUT(failed.count() + finished.count() > 0, 120000);
    QCOMPARE(finished.count(), 0);
    const QString text = failed.at(0).at(0).toString();
    qInfo().noquote() << "the message:" << text;
    QVERIFY2(text.contains("\nparalab: ") && text.contains("hogwild"), qPrintable(text));
    QCOMPARE(controller.state(), RunSource::State::Failed);
}

void TestCluster::twoProcessJobPausesResumesAndStops() {
    if (const QString why = whyNoJob(); !why.isEmpty()) QSKIP(qPrintable(why));
    const QString store = m_dir.filePath("job.db");
    ClusterRunController controller(nullptr, store);
    controller.setSettings(localhost(2));
    controller.setProgram(PARALAB_EXE);
    QSignalSpy started(&controller, &RunSource::started);
    QSignalSpy failed(&controller, &RunSource::failed);
    QSignalSpy finished(&controller, &RunSource::finished);
    QSet<QString> devices;
    qint64 steps = 0, lastStep = 0, spans = 0;
    connect(&controller, &RunSource::deviceStepsArrived, this, [&](const QVector<paralab::config::StepRecord>& records) {
        for (const auto& r : records) devices.insert(QString::fromStdString(r.device));
    });
    connect(&controller, &RunSource::stepsArrived, this, [&](const QVector<paralab::config::StepRecord>& records) {
        steps += records.size();
        lastStep = records.back().step;
    });
    connect(&controller, &RunSource::spansArrived, this,
            [&](const QVector<paralab::config::Span>& s) { spans += s.size(); });

    controller.start(longDdpExperiment());
    QCOMPARE(controller.state(), RunSource::State::Running);
    const qint64 pid = controller.processId();
    QVERIFY(pid > 0);
    QVERIFY2(controller.commandLine().contains("--stream"), qPrintable(controller.commandLine().join(' ')));
    QTRY_VERIFY2_WITH_TIMEOUT(started.count() == 1 || failed.count() > 0, "no start event", 120000);
    QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
    QVERIFY(started.at(0).at(0).toLongLong() > 100000);
    QTRY_VERIFY_WITH_TIMEOUT(devices.contains("r0/cpu:0") && devices.contains("r1/cpu:0") && steps > 20, 120000);
    QCOMPARE(devices, (QSet<QString>{"r0/cpu:0", "r1/cpu:0"}));
    QVERIFY(spans > 0);

    // Pause: the flow stops at a step boundary. What the ranks had batched still arrives, so
    // wait for one quiet second, then the flow must stay stopped.
    controller.pause();
    QCOMPARE(controller.state(), RunSource::State::Paused);
    bool quiet = false;
    for (int i = 0; i < 30 && !quiet; ++i) {
        const qint64 before = steps;
        QTest::qWait(1000);
        quiet = steps == before;
    }
    QVERIFY2(quiet, "steps still arrive 30 s after Pause");
    const qint64 pausedAt = lastStep;
    QTest::qWait(1500);
    QCOMPARE(lastStep, pausedAt);
    QVERIFY(finished.isEmpty() && failed.isEmpty());

    controller.resume();
    QCOMPARE(controller.state(), RunSource::State::Running);
    QTRY_VERIFY_WITH_TIMEOUT(lastStep > pausedAt + 10, 60000);

    controller.stop();
    QCOMPARE(controller.state(), RunSource::State::Stopping);
    QTRY_VERIFY_WITH_TIMEOUT(finished.count() + failed.count() > 0, 60000);
    QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
    const auto summary = finished.at(0).at(0).value<paralab::config::RunSummary>();
    QCOMPARE(QString::fromStdString(summary.status), QStringLiteral("stopped"));
    QVERIFY(summary.steps >= lastStep);
    QCOMPARE(summary.devices, (std::vector<std::string>{"r0/cpu:0", "r1/cpu:0"}));
    QCOMPARE(controller.state(), RunSource::State::Stopped);
    QCOMPARE(controller.processId(), 0);
    // mpirun is gone (reaped: no such process), and so is every rank.
    QVERIFY(::kill(static_cast<pid_t>(pid), 0) == -1 && errno == ESRCH);
    QTRY_VERIFY_WITH_TIMEOUT(!processMentioning(store), 10000);
}

// Stop at once, before rank 0 has said the run started (the ranks may not handle SIGALRM yet):
// the job ends, as stopped, and mpirun is gone.
void TestCluster::stopBeforeTheJobTrains() {
    if (const QString why = whyNoJob(); !why.isEmpty()) QSKIP(qPrintable(why));
    ClusterRunController controller(nullptr, m_dir.filePath("early.db"));
    controller.setSettings(localhost(2));
    controller.setProgram(PARALAB_EXE);
    QSignalSpy started(&controller, &RunSource::started);
    QSignalSpy failed(&controller, &RunSource::failed);
    QSignalSpy finished(&controller, &RunSource::finished);
    controller.start(longDdpExperiment());
    const qint64 pid = controller.processId();
    QVERIFY(pid > 0);
    controller.stop();
    QCOMPARE(controller.state(), RunSource::State::Stopping);
    QTRY_VERIFY_WITH_TIMEOUT(finished.count() + failed.count() > 0, 60000);
    QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
    QCOMPARE(QString::fromStdString(finished.at(0).at(0).value<paralab::config::RunSummary>().status),
             QStringLiteral("stopped"));
    QCOMPARE(controller.state(), RunSource::State::Stopped);
    QVERIFY(::kill(static_cast<pid_t>(pid), 0) == -1 && errno == ESRCH);
    QTRY_VERIFY_WITH_TIMEOUT(!processMentioning(m_dir.filePath("early.db")), 10000);
}

// A controller destroyed mid-run (the window closed) stops the job and waits for it.
void TestCluster::destroyingTheControllerEndsTheJob() {
    if (const QString why = whyNoJob(); !why.isEmpty()) QSKIP(qPrintable(why));
    const QString store = m_dir.filePath("closed.db");
    auto controller = std::make_unique<ClusterRunController>(nullptr, store);
    controller->setSettings(localhost(2));
    controller->setProgram(PARALAB_EXE);
    qint64 steps = 0;
    connect(controller.get(), &RunSource::stepsArrived, this,
            [&](const QVector<paralab::config::StepRecord>& records) { steps += records.size(); });
    controller->start(longDdpExperiment());
    QTRY_VERIFY_WITH_TIMEOUT(steps > 10 || controller->state() == RunSource::State::Failed, 120000);
    QCOMPARE(controller->state(), RunSource::State::Running);
    const qint64 pid = controller->processId();
    controller.reset();
    QVERIFY(::kill(static_cast<pid_t>(pid), 0) == -1 && errno == ESRCH);
    QTRY_VERIFY_WITH_TIMEOUT(!processMentioning(store), 10000);
}

// The window: the cluster chosen in the Devices tab, Start runs the job, the dashboard draws
// every rank's devices, Stop ends it (the same wiring as a run on this machine's threads).
// Under PARALAB_SCREENSHOT_DIR (and a display), a 3-process job, photographed mid-run.
void TestCluster::windowRunsAJobOnItsDashboard() {
    if (const QString why = whyNoJob(); !why.isEmpty()) QSKIP(qPrintable(why));
    const QString shots = qEnvironmentVariable("PARALAB_SCREENSHOT_DIR");
    const int processes = shots.isEmpty() ? 2 : 3;
    MainWindow w;
    QCOMPARE(w.openExperiment(kSpirals, false), QString());
    auto e = longDdpExperiment();
    e.name = "spirals-cluster";
    w.setExperiment(e);
    w.clusterController()->setProgram(PARALAB_EXE);
    w.clusterPanel()->setSettings(localhost(processes));
    QVERIFY(w.clusterPanel()->useCluster());
    QVERIFY(!w.devicesPanel()->isEnabled());  // this machine's devices are not the job's
    if (!shots.isEmpty()) {
        w.resize(1600, 1000);
        w.move(0, 0);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        w.experimentTabs()->setCurrentIndex(w.experimentTabs()->indexOf(w.clusterPanel()->parentWidget()));
        w.viewTabs()->setCurrentWidget(w.deviceDashboard());
    }
    QSignalSpy failed(w.clusterController(), &RunSource::failed);
    QSignalSpy finished(w.clusterController(), &RunSource::finished);
    w.startRun();
    QCOMPARE(w.activeSource(), static_cast<RunSource*>(w.clusterController()));
    QVERIFY(w.controller()->state() == RunSource::State::Idle);
    QStringList expected;
    for (int r = 0; r < processes; ++r) expected << QStringLiteral("r%1/cpu:0").arg(r);
    const int enough = shots.isEmpty() ? 30 : 400;
    QTRY_VERIFY2_WITH_TIMEOUT((w.deviceDashboard()->devices().size() == processes &&
                               w.deviceDashboard()->lossPointCount("all") >= enough) ||
                                  failed.count() > 0,
                              qPrintable(w.deviceDashboard()->devices().join(',')), 240000);
    QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
    QStringList shown = w.deviceDashboard()->devices();
    shown.sort();
    QCOMPARE(shown, expected);
    QVERIFY2(w.statusText().contains("step"), qPrintable(w.statusText()));
    if (!shots.isEmpty()) {
        QTest::qWait(500);
        QVERIFY(w.grab().save(QDir(shots).filePath("screenshot-cluster.png")));
    }
    w.stopRun();
    QTRY_VERIFY_WITH_TIMEOUT(finished.count() + failed.count() > 0, 60000);
    QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
    QCOMPARE(QString::fromStdString(finished.at(0).at(0).value<paralab::config::RunSummary>().status), QStringLiteral("stopped"));
    QVERIFY2(w.statusText().startsWith("Run stopped"), qPrintable(w.statusText()));
    w.clusterPanel()->setSettings(ClusterSettings{});
}

QTEST_MAIN(TestCluster)
#include "test_cluster.moc"
