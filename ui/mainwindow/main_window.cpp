#include "ui/mainwindow/main_window.h"

#include <QAction>
#include <QApplication>
#include <QFile>
#include <QFileDialog>
#include <QLabel>
#include <QLocale>
#include <QMenuBar>
#include <QMessageBox>
#include <QProgressBar>
#include <QSplitter>
#include <QStatusBar>
#include <QStyle>
#include <QTabWidget>
#include <QToolBar>

#include "engine/util/error.h"
#include "ui/panels/dashboard/device_dashboard.h"
#include "ui/panels/dashboard/loss_plot_panel.h"
#include "ui/panels/experiment/experiment_panel.h"
#include "ui/panels/runs/runs_panel.h"
#include "ui/panels/timeline/timeline_panel.h"
#include "ui/session/run_controller.h"

// The examples are compiled into this static library; Qt needs telling once (and outside any
// namespace) that its resources exist.
static void initParalabResources() { Q_INIT_RESOURCE(resources); }

namespace paralab::ui {

namespace {
// Files through the engine's reader (it gives line and column of a syntax error); the
// embedded examples through Qt's resource system.
run::Experiment readExperiment(const QString& path) {
    if (!path.startsWith(QLatin1String(":/"))) return run::load_experiment(path.toStdString());
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        throw ConfigError(path.toStdString() + ": cannot open the experiment file");
    try {
        return run::parse_experiment(nlohmann::json::parse(file.readAll().toStdString()));
    } catch (const std::exception& err) {
        throw ConfigError(path.toStdString() + ": " + err.what());
    }
}
}  // namespace

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent),
      m_panel(new ExperimentPanel),
      m_plot(new LossPlotPanel),
      m_devices(new DeviceDashboard),
      m_timeline(new TimelinePanel),
      m_runs(new RunsPanel),
      m_tabs(new QTabWidget),
      m_controller(new RunController(this)),
      m_status(new QLabel),
      m_progress(new QProgressBar) {
    initParalabResources();
    auto* splitter = new QSplitter;
    splitter->addWidget(m_panel);
    m_tabs->setObjectName(QStringLiteral("viewTabs"));
    m_tabs->setDocumentMode(true);
    m_tabs->addTab(m_plot, tr("Training"));
    m_tabs->addTab(m_devices, tr("Devices"));
    m_tabs->addTab(m_timeline, tr("Timeline"));
    m_tabs->addTab(m_runs, tr("Runs"));
    splitter->addWidget(m_tabs);
    splitter->setStretchFactor(1, 1);
    splitter->setSizes({460, 940});
    setCentralWidget(splitter);

    m_progress->setMaximumWidth(260);
    m_progress->setTextVisible(true);
    statusBar()->addWidget(m_status, 1);
    statusBar()->addPermanentWidget(m_progress);
    buildMenus();
    resize(1400, 900);

    connect(m_controller, &RunController::started, this, [this](qint64 total) {
        m_totalSteps = total;
        m_progress->setRange(0, static_cast<int>(std::min<qint64>(total, INT_MAX)));
        m_progress->setValue(0);
    });
    connect(m_controller, &RunController::stepsArrived, this,
            [this](const QVector<run::StepRecord>& steps) {
                m_plot->addSteps(steps);
                const auto& last = steps.back();
                for (const auto& s : steps) m_samples += s.samples;
                m_progress->setValue(static_cast<int>(last.step));
                const double rate = last.wall_s > 0 ? m_samples / last.wall_s : 0;
                m_status->setText(tr("Epoch %1 · step %2 of %3 · loss %4 · %5 samples/s")
                                      .arg(last.epoch + 1)
                                      .arg(last.step)
                                      .arg(m_totalSteps)
                                      .arg(last.loss, 0, 'f', 4)
                                      .arg(QLocale().toString(rate, 'f', 0)));
            });
    connect(m_controller, &RunController::evalArrived, m_plot, &LossPlotPanel::addEval);
    connect(m_controller, &RunController::stepsArrived, m_devices, &DeviceDashboard::addSteps);
    connect(m_controller, &RunController::deviceStepsArrived, m_devices, &DeviceDashboard::addDeviceSteps);
    connect(m_controller, &RunController::spansArrived, m_timeline, &TimelinePanel::addSpans);
    connect(m_controller, &RunController::stateChanged, this, &MainWindow::updateActions);
    // The runs table shows a run from its start (running) to its end (its summary); runs that
    // `paralab run` added meanwhile appear when the tab is opened.
    connect(m_controller, &RunController::started, m_runs, &RunsPanel::refresh);
    connect(m_controller, &RunController::finished, m_runs, &RunsPanel::refresh);
    connect(m_tabs, &QTabWidget::currentChanged, this, [this](int index) {
        if (m_tabs->widget(index) == m_runs) m_runs->refresh();
    });
    connect(m_controller, &RunController::finished, this, [this](const run::RunSummary& s) {
        QString text = tr("Run %1 after %2 steps in %3 s").arg(QString::fromStdString(s.status)).arg(s.steps).arg(s.wall_s, 0, 'f', 1);
        if (s.test_accuracy) text += tr(" · test accuracy %1").arg(*s.test_accuracy, 0, 'f', 4);
        if (s.test_loss) text += tr(" · test loss %1").arg(*s.test_loss, 0, 'f', 4);
        if (s.status == "failed") {
            text = tr("Run failed after %1 steps: %2").arg(s.steps).arg(QString::fromStdString(s.error));
            if (isVisible()) QMessageBox::warning(this, tr("Run failed"), QString::fromStdString(s.error));
        }
        m_status->setText(text);
    });
    connect(m_controller, &RunController::failed, this, [this](const QString& message) {
        m_status->setText(tr("Could not start: %1").arg(message));
        if (isVisible()) QMessageBox::warning(this, tr("Could not start the run"), message);
    });
    updateActions();
}

void MainWindow::buildMenus() {
    auto* file = menuBar()->addMenu(tr("&File"));
    m_openAction = file->addAction(style()->standardIcon(QStyle::SP_DialogOpenButton), tr("&Open experiment…"));
    m_openAction->setObjectName(QStringLiteral("openAction"));
    m_openAction->setShortcut(QKeySequence::Open);
    connect(m_openAction, &QAction::triggered, this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, tr("Open experiment"), QString(),
                                                          tr("ParaLab experiments (*.paralab.json);;JSON (*.json)"));
        if (!path.isEmpty()) openExperiment(path);
    });
    auto* exportPlot = file->addAction(style()->standardIcon(QStyle::SP_DialogSaveButton), tr("&Export plot…"));
    exportPlot->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_E));
    connect(exportPlot, &QAction::triggered, m_plot, &LossPlotPanel::exportWithDialog);
    file->addSeparator();
    auto* quit = file->addAction(tr("&Quit"));
    quit->setShortcut(QKeySequence::Quit);
    connect(quit, &QAction::triggered, this, &QWidget::close);

    auto* runMenu = menuBar()->addMenu(tr("&Run"));
    m_startAction = runMenu->addAction(style()->standardIcon(QStyle::SP_MediaPlay), tr("&Start"));
    m_startAction->setObjectName(QStringLiteral("startAction"));
    m_startAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
    m_stopAction = runMenu->addAction(style()->standardIcon(QStyle::SP_MediaStop), tr("S&top"));
    m_stopAction->setObjectName(QStringLiteral("stopAction"));
    m_stopAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Period));
    connect(m_startAction, &QAction::triggered, this, &MainWindow::startRun);
    connect(m_stopAction, &QAction::triggered, this, &MainWindow::stopRun);

    auto* toolbar = addToolBar(tr("Run"));
    toolbar->setObjectName(QStringLiteral("runToolbar"));
    toolbar->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
    toolbar->addAction(m_openAction);
    toolbar->addSeparator();
    toolbar->addAction(m_startAction);
    toolbar->addAction(m_stopAction);
}

QString MainWindow::openExperiment(const QString& path, bool interactive) {
    QString message;
    try {
        run::Experiment e = readExperiment(path);
        try {
            setExperiment(e);
        } catch (const std::exception& err) {  // a model that does not fit its data
            message = QStringLiteral("%1: %2").arg(path, QString::fromUtf8(err.what()));
        }
    } catch (const std::exception& err) {  // names the file, and the JSON path or line
        message = QString::fromUtf8(err.what());
    }
    if (!message.isEmpty()) showError(tr("Cannot open experiment"), message, interactive);
    return message;
}

void MainWindow::setExperiment(const run::Experiment& e) {
    m_panel->showExperiment(e);  // throws if the model does not build; nothing changes then
    m_experiment = e;
    m_plot->clear();
    m_devices->clear();
    m_timeline->clear();
    setWindowTitle(tr("ParaLab — %1").arg(QString::fromStdString(e.name)));
    m_status->setText(tr("Ready: press Start to train %1").arg(QString::fromStdString(e.name)));
    updateActions();
}

void MainWindow::startRun() {
    if (!m_experiment || m_controller->isRunning()) return;
    m_plot->clear();
    m_devices->clear();
    m_timeline->clear();
    m_samples = 0;
    m_status->setText(tr("Loading data…"));
    m_controller->start(*m_experiment);
}

void MainWindow::stopRun() {
    if (m_controller->state() != RunController::State::Running) return;
    m_controller->stop();
    m_status->setText(tr("Stopping after the current step…"));
}

void MainWindow::updateActions() {
    // Another experiment may be opened only between runs: the plot belongs to the one running.
    m_openAction->setEnabled(!m_controller->isRunning());
    m_startAction->setEnabled(!m_controller->isRunning() && m_experiment.has_value());
    m_stopAction->setEnabled(m_controller->state() == RunController::State::Running);
}

QString MainWindow::statusText() const { return m_status->text(); }

void MainWindow::showError(const QString& title, const QString& message, bool interactive) {
    m_status->setText(message);
    if (interactive) QMessageBox::warning(this, title, message);
}

}  // namespace paralab::ui
