#include "ui/mainwindow/main_window.h"

#include "ui/mainwindow/help_dialogs.h"
#include "ui/mainwindow/presentation_mode.h"

#include <QAction>
#include <QCloseEvent>
#include <QApplication>
#include <QFile>
#include <QFileDialog>
#include <QLabel>
#include <QLocale>
#include <QMenuBar>
#include <QMessageBox>
#include <QPushButton>
#include <QFileInfo>
#include <QMenu>
#include <QProgressBar>
#include <QScreen>
#include <QSaveFile>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QStyle>
#include <QTabWidget>
#include <QToolBar>
#include <QVBoxLayout>

#include "engine/run/json_reader.h"
#include "engine/strategy/registry.h"
#include "engine/util/error.h"
#include "ui/panels/dashboard/device_dashboard.h"
#include "ui/panels/data/data_panel.h"
#include "ui/panels/devices/devices_panel.h"
#include "ui/panels/strategy/strategy_panel.h"
#include "ui/panels/dashboard/loss_plot_panel.h"
#include "ui/panels/designer/model_designer.h"
#include "ui/panels/experiment/experiment_panel.h"
#include "ui/panels/lessons/lessons_panel.h"
#include "ui/panels/plan/plan_panel.h"
#include "ui/panels/runs/runs_panel.h"
#include "ui/panels/timeline/timeline_panel.h"
#include "ui/panels/training/training_panel.h"
#include "ui/panels/cluster/cluster_panel.h"
#include "ui/session/cluster_run_controller.h"
#include "ui/session/run_controller.h"

// The examples are compiled into this static library; Qt needs telling once (and outside any
// namespace) that its resources exist.
static void initParalabResources() { Q_INIT_RESOURCE(resources); }

namespace paralab::ui {

namespace {
// Files through the engine's reader (it gives line and column of a syntax error); the
// embedded examples through Qt's resource system.
config::Experiment readExperiment(const QString& path) {
    if (!path.startsWith(QLatin1String(":/"))) return run::load_experiment(path.toStdString());
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        throw ConfigError(path.toStdString() + ": cannot open the experiment file");
    const nlohmann::json j = run::parse_json_text(file.readAll().toStdString(), path.toStdString());
    try {
        return run::parse_experiment(j);
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
      m_planPanel(new PlanPanel),
      m_lessonsPanel(new LessonsPanel),
      m_tabs(new QTabWidget),
      m_controller(new RunController(this)),
      m_cluster(new ClusterRunController(this)),
      m_status(new QLabel),
      m_progress(new QProgressBar) {
    initParalabResources();
    m_active = m_controller;
    auto* splitter = new QSplitter;
    splitter->addWidget(buildDesignerTabs());
    m_splitter = splitter;
    buildSetupTabs(qobject_cast<QTabWidget*>(splitter->widget(0)));
    m_tabs->setObjectName(QStringLiteral("viewTabs"));
    m_tabs->setDocumentMode(true);
    m_tabs->addTab(m_plot, tr("Training"));
    m_tabs->addTab(m_devices, tr("Devices"));
    m_tabs->addTab(m_timeline, tr("Timeline"));
    m_tabs->addTab(m_runs, tr("Runs"));
    m_tabs->addTab(m_planPanel, tr("Plan"));
    m_planPanel->setRunHereHandler([this](const config::Experiment& e) { return runPlanned(e); });
    m_tabs->addTab(m_lessonsPanel, tr("Lessons"));
    m_lessonsPanel->setOpenExperimentHandler([this](const QString& path) {
        if (m_active->isRunning()) return tr("a run is going: stop it first");
        return openExperiment(path);
    });
    splitter->addWidget(m_tabs);
    splitter->setStretchFactor(1, 1);
    // Wide enough for the layer stack's rows ("transformer_block ×4  4 heads, ffn 512").
    splitter->setSizes({540, 860});
    setCentralWidget(splitter);

    m_progress->setMaximumWidth(260);
    m_progress->setTextVisible(true);
    statusBar()->addWidget(m_status, 1);
    statusBar()->addPermanentWidget(m_progress);
    buildMenus();
    new PresentationMode(this, splitter->widget(0));  // View ▸ Presentation (F11)
    // No larger than the screen: a projector's 1280 x 720 or 1024 x 768 shows all of it.
    resize(screen() ? QSize(1400, 900).boundedTo(screen()->availableSize()) : QSize(1400, 900));

    // One wiring for both sources of runs: this machine's threads and a cluster job.
    connectRunSource(m_controller);
    connectRunSource(m_cluster);
    restoreSettings();
    connect(m_tabs, &QTabWidget::currentChanged, this, [this](int index) {
        if (m_tabs->widget(index) == m_runs) m_runs->refresh();
    });
    updateActions();
}

void MainWindow::connectRunSource(RunSource* source) {
    connect(source, &RunSource::started, this, [this](qint64 total) {
        m_totalSteps = total;
        m_progress->setRange(0, static_cast<int>(std::min<qint64>(total, INT_MAX)));
        m_progress->setValue(0);
    });
    connect(source, &RunSource::stepsArrived, this,
            [this](const QVector<config::StepRecord>& steps) {
                m_plot->addSteps(steps);
                for (const auto& s : steps) m_samples += s.samples;
                m_lastStep = steps.back();
                m_progress->setValue(static_cast<int>(m_lastStep->step));
                showProgress();
            });
    connect(source, &RunSource::evalArrived, m_plot, &LossPlotPanel::addEval);
    connect(source, &RunSource::stepsArrived, m_devices, &DeviceDashboard::addSteps);
    connect(source, &RunSource::deviceStepsArrived, m_devices, &DeviceDashboard::addDeviceSteps);
    connect(source, &RunSource::spansArrived, m_timeline, &TimelinePanel::addSpans);
    connect(source, &RunSource::stateChanged, this, &MainWindow::updateActions);
    // The runs table shows a run from its start (running) to its end (its summary); runs that
    // `paralab run` added meanwhile appear when the tab is opened.
    connect(source, &RunSource::started, m_runs, &RunsPanel::refresh);
    connect(source, &RunSource::finished, m_runs, &RunsPanel::refresh);
    if (source == m_controller)  // once: each source is connected once
        connect(m_runs, &RunsPanel::resumeRequested, this, [this](qint64 id) { resumeStoredRun(id); });
    connect(source, &RunSource::finished, this, [this](const config::RunSummary& s) {
        QString text = tr("Run %1 after %2 steps in %3 s").arg(QString::fromStdString(s.status)).arg(s.steps).arg(s.wall_s, 0, 'f', 1);
        if (s.test_accuracy) text += tr(" · test accuracy %1").arg(*s.test_accuracy, 0, 'f', 4);
        if (s.test_loss) text += tr(" · test loss %1").arg(*s.test_loss, 0, 'f', 4);
        if (s.status == "failed") {
            text = tr("Run failed after %1 steps: %2").arg(s.steps).arg(QString::fromStdString(s.error));
            if (isVisible()) QMessageBox::warning(this, tr("Run failed"), QString::fromStdString(s.error));
        }
        m_status->setText(text);
    });
    connect(source, &RunSource::failed, this, [this](const QString& message) {
        // One line in the status bar: the message up to its details (a cluster job's mpirun
        // output follows a blank line); the dialog has all of it.
        const QString summary = message.section(QStringLiteral("\n\n"), 0, 0).replace(QLatin1Char('\n'), QStringLiteral(" — "));
        m_status->setText(tr("Could not start: %1").arg(summary));
        if (isVisible()) QMessageBox::warning(this, tr("Could not start the run"), message);
    });
}

void MainWindow::buildMenus() {
    auto* file = menuBar()->addMenu(tr("&File"));
    m_newAction = file->addAction(style()->standardIcon(QStyle::SP_FileIcon), tr("&New experiment"));
    m_newAction->setObjectName(QStringLiteral("newAction"));
    m_newAction->setShortcut(QKeySequence::New);
    connect(m_newAction, &QAction::triggered, this, [this] { newExperiment(); });
    m_openAction = file->addAction(style()->standardIcon(QStyle::SP_DialogOpenButton), tr("&Open experiment…"));
    m_openAction->setObjectName(QStringLiteral("openAction"));
    m_openAction->setShortcut(QKeySequence::Open);
    connect(m_openAction, &QAction::triggered, this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, tr("Open experiment"), QString(),
                                                          tr("ParaLab experiments (*.paralab.json);;JSON (*.json)"));
        if (!path.isEmpty()) openExperiment(path);
    });
    buildDesignerMenus(file);
    buildExportMenu(file);
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
    buildPauseActions(runMenu, toolbar);
    buildHelpMenu();
}

void MainWindow::buildHelpMenu() {
    auto* help = menuBar()->addMenu(tr("&Help"));
    auto* docs = help->addAction(tr("ParaLab &documentation"));
    docs->setObjectName(QStringLiteral("documentationAction"));
    docs->setShortcut(QKeySequence::HelpContents);
    connect(docs, &QAction::triggered, this, [this] {
        auto* dialog = findChild<DocumentationDialog*>();
        if (!dialog) dialog = new DocumentationDialog(this);  // kept: it opens where it was left
        dialog->show();
        dialog->raise();
    });
    auto* keys = help->addAction(tr("&Keyboard shortcuts"));
    keys->setObjectName(QStringLiteral("shortcutsAction"));
    connect(keys, &QAction::triggered, this, [this] { showShortcuts(this); });
    help->addSeparator();
    auto* about = help->addAction(tr("&About ParaLab"));
    about->setMenuRole(QAction::AboutRole);
    connect(about, &QAction::triggered, this, [this] { showAbout(this); });
}

QString MainWindow::resumeStoredRun(qint64 runId, bool interactive) {
    const RunInfo* r = m_runs->model()->run(runId);
    QString why;
    config::Experiment e;
    if (m_active->isRunning()) why = tr("a run is going: stop it first");
    else if (!r) why = tr("run #%1 is not in the store").arg(runId);
    else if (!r->resumable()) why = tr("run #%1 is %2: only a stopped, interrupted or failed run resumes").arg(runId).arg(r->status);
    if (why.isEmpty()) {
        try {
            e = run::parse_experiment(nlohmann::json::parse(r->config.toStdString()));
        } catch (const std::exception& err) {
            why = tr("the stored experiment of run #%1 does not read: %2").arg(runId).arg(QString::fromUtf8(err.what()));
        }
    }
    if (why.isEmpty() && interactive && !maybeSave()) return tr("not resumed; the unsaved changes are kept");
    if (!why.isEmpty()) {
        showError(tr("Cannot resume"), tr("Cannot resume: %1").arg(why), interactive);
        return why;
    }
    setExperiment(e);
    m_currentPath.clear();
    setWindowModified(false);
    m_plot->clear();
    m_devices->clear();
    m_timeline->clear();
    m_samples = 0;
    m_lastStep.reset();
    m_active = m_controller;
    m_status->setText(tr("Resuming run #%1 from its last checkpoint…").arg(runId));
    updateActions();
    m_controller->resumeStoredRun(e, runId);
    return {};
}

void MainWindow::showHint(const QString& text) {
    m_status->setText(text);
}

bool MainWindow::newExperiment(bool interactive) {
    if (interactive && !maybeSave()) return false;
    config::Experiment e = readExperiment(QStringLiteral(":/examples/spirals-mlp.paralab.json"));
    e.name = "untitled";
    setExperiment(e);
    m_currentPath.clear();
    setWindowModified(false);
    updateTitle();
    return true;
}

QVector<PlotExport> MainWindow::plotExports() const {
    // The Plan tab's once it shows a plan (it plans when first shown).
    return m_plot->plotExports() + m_devices->plotExports() + m_timeline->plotExports() + m_runs->plotExports() +
           (m_planPanel->hasPlan() ? m_planPanel->plotExports() : QVector<PlotExport>{});
}

void MainWindow::buildExportMenu(QMenu* file) {
    // Ctrl+E: the plots of the tab in view (the Devices tab: all of them in one picture).
    auto* current = file->addAction(style()->standardIcon(QStyle::SP_DialogSaveButton), tr("&Export current view…"));
    current->setObjectName(QStringLiteral("exportCurrentAction"));
    current->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_E));
    connect(current, &QAction::triggered, this, [this] {
        QWidget* tab = m_tabs->currentWidget();
        QVector<PlotExport> exports = tab == m_devices    ? m_devices->plotExports()
                                      : tab == m_timeline ? m_timeline->plotExports()
                                      : tab == m_runs     ? m_runs->plotExports()
                                      : tab == m_planPanel ? m_planPanel->plotExports()
                                                          : m_plot->plotExports();
        plotexport::saveWithDialog(this, exports.back());
    });
    // One entry per plot, as PNG, PDF or CSV.
    auto* menu = file->addMenu(tr("Export p&lot"));
    menu->setObjectName(QStringLiteral("exportMenu"));
    connect(menu, &QMenu::aboutToShow, this, [this, menu] {
        menu->clear();
        for (const PlotExport& e : plotExports())
            menu->addAction(e.title + QStringLiteral("…"), this, [this, e] { plotexport::saveWithDialog(this, e); });
    });
}

QString MainWindow::openExperiment(const QString& path, bool interactive) {
    // Only a file the experiment contract refuses (not JSON, unknown keys, bad values) is
    // refused, and then nothing changes. A model that does not fit its data opens in the
    // designer, its layer in red and Start disabled, so that it can be fixed there.
    config::Experiment e;
    try {
        e = readExperiment(path);
    } catch (const std::exception& err) {  // names the file, and the JSON path or line
        const QString message = QString::fromUtf8(err.what());
        showError(tr("Cannot open experiment"), message, interactive);
        return message;
    }
    if (interactive && !maybeSave()) return tr("%1: not opened; the unsaved changes are kept").arg(path);
    setExperiment(e);
    rememberFile(path);
    return {};
}

void MainWindow::setExperiment(const config::Experiment& e) {
    m_strategyPanel->discardRefusedEdit();  // a new experiment: its own strategy, not a refused choice
    try {
        m_panel->showExperiment(e);
    } catch (const std::exception& err) {  // the designer says which layer, and why
        m_panel->showUnbuildable(e, QString::fromUtf8(err.what()));
    }
    m_experiment = e;
    m_planPanel->setExperiment(e);
    m_designer->setExperiment(e);  // its verdict (validityChanged) enables Start or not
    m_modelValid = m_designer->isValid();
    showInSetupPanels(e);
    m_plot->clear();
    m_devices->clear();
    m_timeline->clear();
    plotexport::setRunCaption(plotexport::captionFor(e));
    updateTitle();
    if (m_modelValid)
        m_status->setText(tr("Ready: press Start to train %1").arg(QString::fromStdString(e.name)));
    else if (!m_designer->validationMessage().isEmpty())
        m_status->setText(tr("The model does not fit: %1").arg(m_designer->validationMessage()));
    else
        m_status->setText(tr("Inferring the model's shapes…"));
    updateActions();
}

void MainWindow::startRun() {
    // A model known not to fit is not started (a script may start one whose shapes are still
    // being inferred: the run checks them itself).
    if (!m_experiment || m_active->isRunning() || (!m_modelValid && !m_designer->shapesPending()) ||
        !fieldError().isEmpty())
        return;
    m_plot->clear();
    m_devices->clear();
    m_timeline->clear();
    if (const auto* d = strategy::find_strategy(m_experiment->strategy.type); d && d->pipeline) {
        const strategy::PipelineShape p = d->pipeline(*m_experiment);
        m_timeline->setPipeline(p.stages, p.micro_batches, QString::fromStdString(p.schedule), p.chunks, p.devices);
    } else {
        m_timeline->setPipeline(0, 0, {});
    }
    m_samples = 0;
    m_lastStep.reset();
    plotexport::setRunCaption(plotexport::captionFor(*m_experiment));  // the plots' run from now on
    // The Devices tab's choice: this machine's rank threads, or a job of mpirun's processes.
    if (m_clusterPanel && m_clusterPanel->useCluster()) {
        const ClusterSettings settings = m_clusterPanel->settings();
        m_cluster->setSettings(settings);
        m_active = m_cluster;
        m_status->setText(tr("Starting %1 processes with mpirun…").arg(settings.processCount()));
    } else {
        m_active = m_controller;
        m_status->setText(tr("Loading data…"));
    }
    updateActions();
    m_active->start(*m_experiment);
}

QString MainWindow::runPlanned(const config::Experiment& e) {
    if (m_active->isRunning()) return tr("a run is going: stop it first");
    if (m_clusterPanel && m_clusterPanel->useCluster())
        return tr("the Devices tab runs on a cluster; Run here runs on this machine's CPU devices: choose "
                  "this machine there");
    // The window's experiment is replaced: its unsaved changes are asked about first, and the
    // planned configuration belongs to no file, so that Save asks where (Save As) instead of
    // writing it over the experiment it came from.
    if (!maybeSave()) return tr("not run; the unsaved changes are kept");
    setExperiment(e);
    m_currentPath.clear();
    setWindowModified(true);
    startRun();
    if (!m_active->isRunning()) return fieldError().isEmpty() ? m_status->text() : fieldError();
    m_tabs->setCurrentWidget(m_plot);
    return {};
}

void MainWindow::stopRun() {
    if (m_active->state() != RunSource::State::Running && m_active->state() != RunSource::State::Paused) return;
    m_active->stop();
    m_status->setText(tr("Stopping after the current step…"));
}

void MainWindow::updateActions() {
    // Another experiment may be opened only between runs: the plot belongs to the one running.
    m_openAction->setEnabled(!m_active->isRunning());
    if (m_newAction) m_newAction->setEnabled(!m_active->isRunning());
    // What runs is what the tabs show, for the whole run: nothing of it may change meanwhile.
    m_designer->setLocked(m_active->isRunning());
    for (QWidget* panel : std::initializer_list<QWidget*>{m_dataPanel, m_clusterPanel, m_strategyPanel, m_trainingPanel})
        if (panel) panel->setEnabled(!m_active->isRunning());
    if (m_devicesPanel) m_devicesPanel->setEnabled(!m_active->isRunning() && !m_clusterPanel->useCluster());
    // What runs is what the tabs show: not while a field shows an error.
    m_startAction->setEnabled(!m_active->isRunning() && m_experiment.has_value() && m_modelValid &&
                              fieldError().isEmpty());
    m_stopAction->setEnabled(m_active->state() == RunSource::State::Running ||
                             m_active->state() == RunSource::State::Paused);
    if (m_pauseAction) {
        m_pauseAction->setEnabled(m_active->state() == RunSource::State::Running);
        m_resumeAction->setEnabled(m_active->state() == RunSource::State::Paused);
    }
}

QString MainWindow::statusText() const { return m_status->text(); }

void MainWindow::showError(const QString& title, const QString& message, bool interactive) {
    m_status->setText(message);
    if (interactive) QMessageBox::warning(this, title, message);
}

// --- the model designer: its tab, Save / Save As / Open Recent, Edit ▸ Undo / Redo ---------------

QWidget* MainWindow::buildDesignerTabs() {
    m_designer = new ModelDesigner;
    auto* tabs = new QTabWidget;
    tabs->setObjectName(QStringLiteral("experimentTabs"));
    tabs->setDocumentMode(true);
    tabs->addTab(m_designer, tr("Model"));
    tabs->addTab(m_panel, tr("Summary"));
    connect(m_designer, &ModelDesigner::modelEdited, this, &MainWindow::applyModelEdit);
    connect(m_designer, &ModelDesigner::presetRequested, this, [this](const QString& path) { openExperiment(path); });
    connect(m_designer, &ModelDesigner::validityChanged, this, [this](bool ok, const QString& message) {
        m_modelValid = ok;
        if (!ok) m_status->setText(tr("The model does not fit: %1").arg(message));
        else if (m_experiment && !m_active->isRunning())
            m_status->setText(tr("Ready: press Start to train %1").arg(QString::fromStdString(m_experiment->name)));
        updateActions();
    });
    return tabs;
}

void MainWindow::buildDesignerMenus(QMenu* file) {
    auto* save = file->addAction(style()->standardIcon(QStyle::SP_DialogSaveButton), tr("&Save"));
    save->setObjectName(QStringLiteral("saveAction"));
    save->setShortcut(QKeySequence::Save);
    auto* saveAs = file->addAction(tr("Save &As…"));
    saveAs->setObjectName(QStringLiteral("saveAsAction"));
    saveAs->setShortcut(QKeySequence::SaveAs);
    connect(saveAs, &QAction::triggered, this, &MainWindow::saveAs);
    connect(save, &QAction::triggered, this, &MainWindow::save);
    m_recentMenu = file->addMenu(tr("Open &Recent"));
    m_recentMenu->setObjectName(QStringLiteral("recentMenu"));
    connect(m_recentMenu, &QMenu::aboutToShow, this, &MainWindow::rebuildRecentMenu);
    rebuildRecentMenu();

    auto* edit = menuBar()->addMenu(tr("&Edit"));
    edit->addAction(m_designer->undoAction());
    edit->addAction(m_designer->redoAction());
}

void MainWindow::applyModelEdit(const config::Experiment& e) {
    // The designer's experiment is the one Start runs. The summary tab follows while the model
    // builds; a model that does not fit leaves the last good summary there.
    m_experiment = e;
    m_planPanel->setExperiment(e);
    try {
        m_panel->showExperiment(e);
    } catch (const std::exception&) {
    }
    setWindowModified(true);
    updateTitle();
    updateActions();
}

void MainWindow::updateTitle() {
    setWindowTitle(tr("ParaLab — %1[*]").arg(m_experiment ? QString::fromStdString(m_experiment->name) : QString()));
}

bool MainWindow::save() {
    if (m_currentPath.isEmpty() || m_currentPath.startsWith(QLatin1String(":/"))) return saveAs();
    return saveExperiment(m_currentPath).isEmpty();
}

bool MainWindow::saveAs() {
    if (!m_experiment) return false;
    QString path = QFileDialog::getSaveFileName(this, tr("Save experiment"),
                                                QString::fromStdString(m_experiment->name) + QStringLiteral(".paralab.json"),
                                                tr("ParaLab experiments (*.paralab.json)"));
    if (path.isEmpty()) return false;
    if (!path.endsWith(QLatin1String(".json"))) path += QStringLiteral(".paralab.json");
    return saveExperiment(path).isEmpty();
}

bool MainWindow::maybeSave() {
    // A window nobody sees (a test, a script) has nobody to ask.
    if (!isWindowModified() || !m_experiment || !isVisible()) return true;
    const auto answer = QMessageBox::question(
        this, tr("Unsaved changes"),
        tr("The experiment \"%1\" has changes that are not saved.").arg(QString::fromStdString(m_experiment->name)),
        QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel, QMessageBox::Save);
    if (answer == QMessageBox::Cancel) return false;
    if (answer == QMessageBox::Discard) return true;
    return save();
}

QString MainWindow::saveExperiment(const QString& path, bool interactive) {
    if (!m_experiment) return tr("no experiment to save");
    QSaveFile file(path);
    const std::string text = run::to_json(*m_experiment).dump(2) + "\n";
    QString message;
    if (!file.open(QIODevice::WriteOnly) || file.write(text.data(), static_cast<qint64>(text.size())) < 0 || !file.commit())
        message = tr("%1: cannot save: %2").arg(path, file.errorString());
    if (!message.isEmpty()) {
        showError(tr("Cannot save experiment"), message, interactive);
        return message;
    }
    rememberFile(path);
    m_status->setText(tr("Saved %1").arg(path));
    return {};
}

QStringList MainWindow::recentFiles() const {
    return QSettings(QStringLiteral("ParaLab"), QStringLiteral("ParaLab")).value(QStringLiteral("recentFiles")).toStringList();
}

void MainWindow::rememberFile(const QString& path) {
    m_currentPath = path;
    setWindowModified(false);
    if (path.startsWith(QLatin1String(":/"))) return;  // the examples are in the preset box
    QStringList files = recentFiles();
    files.removeAll(path);
    files.prepend(path);
    while (files.size() > 8) files.removeLast();
    QSettings(QStringLiteral("ParaLab"), QStringLiteral("ParaLab")).setValue(QStringLiteral("recentFiles"), files);
}

void MainWindow::rebuildRecentMenu() {
    m_recentMenu->clear();
    const QStringList files = recentFiles();
    for (const QString& path : files) {
        auto* action = m_recentMenu->addAction(QFileInfo(path).fileName());
        action->setToolTip(path);
        action->setStatusTip(path);
        connect(action, &QAction::triggered, this, [this, path] { openExperiment(path); });
    }
    if (files.isEmpty()) m_recentMenu->addAction(tr("No recent files"))->setEnabled(false);
}

// --- the setup tabs (Data, Devices, Strategy), Pause / Resume, settings ---------------------------

void MainWindow::buildSetupTabs(QTabWidget* tabs) {
    m_experimentTabs = tabs;
    m_dataPanel = new DataPanel;
    m_devicesPanel = new DevicesPanel;
    m_strategyPanel = new StrategyPanel;
    m_trainingPanel = new TrainingPanel;
    // The Devices tab: where the devices run (this machine or a cluster), then this machine's
    // devices, which a cluster job does not use.
    m_clusterPanel = new ClusterPanel;
    auto* devicesTab = new QWidget;
    auto* devicesLayout = new QVBoxLayout(devicesTab);
    devicesLayout->addWidget(m_clusterPanel);
    devicesLayout->addWidget(m_devicesPanel, 1);
    m_devicesPanel->setEnabled(!m_clusterPanel->useCluster());
    connect(m_clusterPanel, &ClusterPanel::sourceChanged, m_devicesPanel, [this](bool cluster) { m_devicesPanel->setEnabled(!cluster); });
    if (tabs) {
        tabs->addTab(m_dataPanel, tr("Data"));
        tabs->addTab(devicesTab, tr("Devices"));
        tabs->addTab(m_strategyPanel, tr("Strategy"));
        tabs->addTab(m_trainingPanel, tr("Settings"));
    }
    connect(m_dataPanel, &DataPanel::experimentEdited, this, [this](const config::Experiment& e) { applySetupEdit(e, m_dataPanel); });
    connect(m_devicesPanel, &DevicesPanel::experimentEdited, this,
            [this](const config::Experiment& e) { applySetupEdit(e, m_devicesPanel); });
    connect(m_strategyPanel, &StrategyPanel::experimentEdited, this,
            [this](const config::Experiment& e) { applySetupEdit(e, m_strategyPanel); });
    connect(m_trainingPanel, &TrainingPanel::experimentEdited, this,
            [this](const config::Experiment& e) { applySetupEdit(e, m_trainingPanel); });
    // A refused edit is not passed on, and Start waits until it is fixed.
    const auto refused = [this](const QString& message) {
        m_status->setText(tr("%1 — Start waits until it is fixed").arg(message));
        updateActions();
    };
    connect(m_dataPanel, &DataPanel::editRefused, this, refused);
    connect(m_devicesPanel, &DevicesPanel::editRefused, this, refused);
    connect(m_strategyPanel, &StrategyPanel::editRefused, this, refused);
    connect(m_trainingPanel, &TrainingPanel::editRefused, this, refused);
    connect(m_designer, &ModelDesigner::inputErrorChanged, this, [this, refused](const QString& message) {
        if (message.isEmpty())
            updateActions();
        else
            refused(tr("Model ▸ input: %1").arg(message));
    });
    // The cluster's settings are not the experiment's, but a job they cannot place cannot start.
    connect(m_clusterPanel, &ClusterPanel::settingsChanged, this, &MainWindow::updateActions);
    // Connected after the designer's own handler: that one takes the designer's copy of the
    // experiment, whose data, devices and strategy may be older than the setup panels' edits.
    connect(m_designer, &ModelDesigner::modelEdited, this, &MainWindow::mergeModelEdit);
}

void MainWindow::showInSetupPanels(const config::Experiment& e, QWidget* except) {
    m_setup = e;
    // Each panel shows without emitting, so handing an edit on starts no loop.
    if (except != m_dataPanel) m_dataPanel->setExperiment(e);
    if (except != m_devicesPanel) m_devicesPanel->setExperiment(e);
    if (except != m_strategyPanel) m_strategyPanel->setExperiment(e);
    if (except != m_trainingPanel) m_trainingPanel->setExperiment(e);
}

QString MainWindow::fieldError() const {
    for (const QString& error : {m_designer->inputError(), m_dataPanel->errorText(), m_devicesPanel->errorText(),
                                 m_strategyPanel->errorText(), m_trainingPanel->errorText()})
        if (!error.isEmpty()) return error;
    if (m_clusterPanel->useCluster()) return m_clusterPanel->settings().problemText();
    return {};
}

void MainWindow::applySetupEdit(const config::Experiment& e, QWidget* from) {
    m_experiment = e;
    m_planPanel->setExperiment(e);
    showInSetupPanels(e, from);
    m_designer->updateContext(e);  // its model and undo history stay; a new data set re-infers
    try {
        m_panel->showExperiment(e);
    } catch (const std::exception&) {  // the designer shows why the model does not build
    }
    setWindowModified(true);
    updateTitle();
    updateActions();
}

void MainWindow::mergeModelEdit(const config::Experiment& e) {
    config::Experiment merged = m_setup ? *m_setup : e;
    merged.layers = e.layers;
    merged.input = e.input;
    merged.loss = e.loss;
    m_experiment = merged;
    m_planPanel->setExperiment(merged);
    showInSetupPanels(merged);
    try {
        m_panel->showExperiment(merged);
    } catch (const std::exception&) {
    }
}

void MainWindow::buildPauseActions(QMenu* runMenu, QToolBar* toolbar) {
    m_pauseAction = new QAction(style()->standardIcon(QStyle::SP_MediaPause), tr("&Pause"), this);
    m_pauseAction->setObjectName(QStringLiteral("pauseAction"));
    m_pauseAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_P));
    m_resumeAction = new QAction(style()->standardIcon(QStyle::SP_MediaSeekForward), tr("Res&ume"), this);
    m_resumeAction->setObjectName(QStringLiteral("resumeAction"));
    m_resumeAction->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_P));
    // Between Start and Stop, as on a media player.
    runMenu->insertAction(m_stopAction, m_pauseAction);
    runMenu->insertAction(m_stopAction, m_resumeAction);
    toolbar->insertAction(m_stopAction, m_pauseAction);
    toolbar->insertAction(m_stopAction, m_resumeAction);
    connect(m_pauseAction, &QAction::triggered, this, &MainWindow::pauseRun);
    connect(m_resumeAction, &QAction::triggered, this, &MainWindow::resumeRun);
}

void MainWindow::pauseRun() {
    if (m_active->state() != RunSource::State::Running) return;
    m_active->pause();
    showProgress();
}

void MainWindow::resumeRun() {
    if (m_active->state() != RunSource::State::Paused) return;
    m_active->resume();
    if (m_lastStep) showProgress();
    else m_status->setText(tr("Resumed"));
}

void MainWindow::showProgress() {
    // Paused: the steps in flight still arrive, and the line keeps saying so, with no ETA.
    const bool paused = m_active->state() == RunSource::State::Paused;
    const QString hint = tr("Resume goes on, Stop ends the run");
    if (!m_lastStep) {
        if (paused) m_status->setText(tr("Paused · %1").arg(hint));
        return;
    }
    const config::StepRecord& last = *m_lastStep;
    // wall_s excludes the time the run was paused: the rate and the ETA are of training.
    const double rate = last.wall_s > 0 ? m_samples / last.wall_s : 0;
    const QString progress = tr("Epoch %1 · step %2 of %3 · loss %4 · %5 samples/s")
                                 .arg(last.epoch + 1)
                                 .arg(last.step)
                                 .arg(m_totalSteps)
                                 .arg(last.loss, 0, 'f', 4)
                                 .arg(QLocale().toString(rate, 'f', 0));
    if (paused) {
        m_status->setText(tr("Paused · %1 · %2").arg(progress, hint));
        return;
    }
    // ETA from the mean step time so far.
    const double eta = last.step > 0 ? (m_totalSteps - last.step) * last.wall_s / last.step : 0;
    m_status->setText(tr("%1 · ETA %2")
                          .arg(progress, eta >= 60 ? tr("%1 min %2 s").arg(int(eta) / 60).arg(int(eta) % 60)
                                                   : tr("%1 s").arg(eta, 0, 'f', 0)));
}

void MainWindow::saveSettings() const {
    QSettings settings;
    settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
    settings.setValue(QStringLiteral("window/state"), saveState());
    if (m_splitter) settings.setValue(QStringLiteral("window/splitter"), m_splitter->saveState());
    settings.setValue(QStringLiteral("window/viewTab"), m_tabs->currentIndex());
    if (m_experimentTabs) settings.setValue(QStringLiteral("window/experimentTab"), m_experimentTabs->currentIndex());
    const QString last = m_currentPath.startsWith(QLatin1String(":/")) ? QString() : m_currentPath;
    if (!last.isEmpty()) settings.setValue(QStringLiteral("lastFile"), last);
    // How the plots are read: kept for the next window.
    settings.setValue(QStringLiteral("plots/trainingWallTime"), m_plot->xAxis() == LossPlotPanel::XAxis::WallTime);
    settings.setValue(QStringLiteral("plots/trainingLogLoss"), m_plot->logarithmicLoss());
    settings.setValue(QStringLiteral("plots/devicesWallTime"),
                      m_devices->xAxis() == DeviceDashboard::XAxis::WallTime);
    settings.setValue(QStringLiteral("plots/devicesLogLoss"), m_devices->logarithmicLoss());
    settings.setValue(QStringLiteral("plots/devicesSmoothing"), m_devices->smoothing());
}

void MainWindow::restoreSettings() {
    QSettings settings;
    if (settings.contains(QStringLiteral("window/geometry")))
        restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray());
    restoreState(settings.value(QStringLiteral("window/state")).toByteArray());
    if (m_splitter) m_splitter->restoreState(settings.value(QStringLiteral("window/splitter")).toByteArray());
    m_tabs->setCurrentIndex(settings.value(QStringLiteral("window/viewTab"), 0).toInt());
    if (m_experimentTabs)
        m_experimentTabs->setCurrentIndex(settings.value(QStringLiteral("window/experimentTab"), 0).toInt());
    m_lastFile = settings.value(QStringLiteral("lastFile")).toString();
    if (settings.value(QStringLiteral("plots/trainingWallTime"), false).toBool())
        m_plot->setXAxis(LossPlotPanel::XAxis::WallTime);
    m_plot->setLogarithmicLoss(settings.value(QStringLiteral("plots/trainingLogLoss"), false).toBool());
    if (settings.value(QStringLiteral("plots/devicesWallTime"), false).toBool())
        m_devices->setXAxis(DeviceDashboard::XAxis::WallTime);
    m_devices->setLogarithmicLoss(settings.value(QStringLiteral("plots/devicesLogLoss"), false).toBool());
    if (settings.contains(QStringLiteral("plots/devicesSmoothing")))
        m_devices->setSmoothing(settings.value(QStringLiteral("plots/devicesSmoothing")).toDouble());
}

void MainWindow::closeEvent(QCloseEvent* event) {
    // Quit (Ctrl+Q) or the window's close button while a run trains: asked, never silent.
    if (m_active->isRunning() && isVisible()) {
        QMessageBox box(QMessageBox::Question, tr("A run is training"),
                        tr("A run is training. Stop it and quit? A stopped run can be resumed from the Runs tab."),
                        QMessageBox::NoButton, this);
        box.setObjectName(QStringLiteral("quitDuringRun"));
        QPushButton* stop = box.addButton(tr("Stop and quit"), QMessageBox::AcceptRole);
        stop->setObjectName(QStringLiteral("stopAndQuit"));
        box.addButton(QMessageBox::Cancel);
        box.setDefaultButton(QMessageBox::Cancel);
        box.exec();
        if (box.clickedButton() != stop) {
            event->ignore();
            return;
        }
        stopRun();
    }
    if (!maybeSave()) {
        event->ignore();
        return;
    }
    saveSettings();
    QMainWindow::closeEvent(event);
}

void MainWindow::showEvent(QShowEvent* event) {
    QMainWindow::showEvent(event);
    if (m_shownOnce) return;
    m_shownOnce = true;
    // Only the application's own window reopens the last file (main sets the organisation);
    // test programs and tools that embed the window start from what they open.
    if (QCoreApplication::organizationName() != QLatin1String("ParaLab") || m_lastFile.isEmpty() ||
        !QFileInfo::exists(m_lastFile) || m_active->isRunning())
        return;
    openExperiment(m_lastFile, false);
}

}  // namespace paralab::ui
