// The ParaLab window: wiring only. The experiment panel on the left, the views in
// tabs in the centre (training loss, every device, the timeline, the stored runs), Start/Stop,
// and progress in the status bar.
#pragma once

#include <QMainWindow>
#include <optional>

#include "engine/config/records.h"
#include "engine/run/experiment_file.h"
#include "ui/panels/common/plot_export.h"

class QAction;
class QLabel;
class QMenu;
class QProgressBar;
class QSplitter;
class QTabWidget;
class QToolBar;

namespace paralab::ui {

class ClusterPanel;
class ClusterRunController;
class DataPanel;
class DeviceDashboard;
class DevicesPanel;
class ExperimentPanel;
class LessonsPanel;
class LossPlotPanel;
class ModelDesigner;
class PlanPanel;
class RunController;
class RunSource;
class RunsPanel;
class StrategyPanel;
class TimelinePanel;
class TrainingPanel;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);

    // Loads an experiment file (or a ":/examples/..." resource). A file the experiment contract
    // refuses (not JSON, unknown keys, bad values) is not opened: the message is returned (and
    // shown in a dialog when `interactive`), and the experiment shown before stays, undo history
    // and all. A model that does not fit its data opens: the designer shows the layer in red and
    // Start stays disabled until it is fixed.
    // When `interactive` and the shown experiment has unsaved changes, asks first (Save /
    // Discard / Cancel); Cancel opens nothing and keeps everything.
    QString openExperiment(const QString& path, bool interactive = true);
    const std::optional<config::Experiment>& experiment() const { return m_experiment; }
    // For tests and scripted runs: the experiment that Start runs (Start disabled while its
    // model does not fit).
    void setExperiment(const config::Experiment& e);

    RunController* controller() const { return m_controller; }
    // Runs across the processes of an mpirun job, when the Devices tab's cluster is chosen; the
    // source of the current (or last) run, one or the other.
    ClusterRunController* clusterController() const { return m_cluster; }
    ClusterPanel* clusterPanel() const { return m_clusterPanel; }
    RunSource* activeSource() const { return m_active; }
    LossPlotPanel* plot() const { return m_plot; }
    DeviceDashboard* deviceDashboard() const { return m_devices; }
    TimelinePanel* timeline() const { return m_timeline; }
    RunsPanel* runsPanel() const { return m_runs; }
    // The Plan tab: the planner's sweep of the current experiment; its Run here comes back
    // through runPlanned.
    PlanPanel* planPanel() const { return m_planPanel; }
    // The Lessons tab: built-in and teachers' lessons; its "Open experiment" is openExperiment.
    LessonsPanel* lessonsPanel() const { return m_lessonsPanel; }
    // Where File ▸ Save writes (empty or an example's ":/..." path: Save asks where).
    QString currentPath() const { return m_currentPath; }
    // Run here: shows `e` (a scaled-down configuration of the Plan tab) as the window's
    // experiment, unsaved and belonging to no file (Save asks where), and starts it on this
    // machine's devices like Start; unsaved changes to the experiment it replaces are asked about
    // first. Returns why it did not start ("" when it did).
    QString runPlanned(const config::Experiment& e);
    // Every plot of the window, tab by tab, with its PNG/PDF and CSV exports (File ▸ Export).
    QVector<PlotExport> plotExports() const;
    // The central tabs: training, devices, timeline (others add theirs).
    QTabWidget* viewTabs() const { return m_tabs; }
    ExperimentPanel* experimentPanel() const { return m_panel; }

    // The model designer (left, first tab): its edits become the experiment Start runs; Start
    // is disabled while its model does not fit.
    ModelDesigner* designer() const { return m_designer; }
    // File ▸ Save: the current experiment as pretty-printed canonical JSON (run::to_json). On an
    // error the message is returned (and shown when `interactive`).
    QString saveExperiment(const QString& path, bool interactive = true);
    // File ▸ Open Recent: newest first, at most 8 (QSettings).
    QStringList recentFiles() const;
    QString statusText() const;

    // The setup tabs beside the model (Data, Devices, Strategy, Training): each shows the current
    // experiment and reports its edits; the window keeps the one experiment and hands it on.
    // Every edit marks the file modified (the title's "*"); a refused edit leaves its message
    // under its field, and Start stays disabled while any field of any tab shows one.
    DataPanel* dataPanel() const { return m_dataPanel; }
    DevicesPanel* devicesPanel() const { return m_devicesPanel; }
    StrategyPanel* strategyPanel() const { return m_strategyPanel; }
    TrainingPanel* trainingPanel() const { return m_trainingPanel; }
    // The first error a field of the setup tabs shows ("" when none): while there is one, Start
    // is disabled, so what runs is what the tabs show.
    QString fieldError() const;
    QTabWidget* experimentTabs() const { return m_experimentTabs; }
    QAction* pauseAction() const { return m_pauseAction; }
    QAction* resumeAction() const { return m_resumeAction; }
    // Window geometry, toolbar, splitter and tab state and the last opened file, in QSettings
    // (the application's organisation and name). Saved on close, restored on construction; the
    // last file is reopened when the application's window is first shown.
    void saveSettings() const;
    void restoreSettings();
    QString lastOpenedFile() const { return m_lastFile; }

    // File ▸ New: an untitled experiment (the default one, a small MLP on the spirals, on one
    // device) with no file yet. Asks first about unsaved changes when `interactive`; false when
    // the user cancelled.
    bool newExperiment(bool interactive = true);
    // A line in the status bar until the next message replaces it (the first launch's hint).
    void showHint(const QString& text);
    // The Runs tab's Resume: shows stored run `runId`'s experiment (asking about unsaved changes
    // when `interactive`) and continues the run from its last checkpoint on this machine. Returns
    // why it did not start ("" when it did).
    QString resumeStoredRun(qint64 runId, bool interactive = true);

public slots:
    void startRun();
    void stopRun();
    void pauseRun();
    void resumeRun();

protected:
    void closeEvent(QCloseEvent* event) override;
    void showEvent(QShowEvent* event) override;

private:
    void buildMenus();
    void buildExportMenu(QMenu* file);
    void buildHelpMenu();
    void updateActions();
    // The running line of the status bar from the last step: progress, throughput and ETA, or
    // "Paused" (and no ETA) while the run is paused.
    void showProgress();
    // The views, the status bar and the runs table follow `source`'s signals.
    void connectRunSource(RunSource* source);
    void showError(const QString& title, const QString& message, bool interactive);
    // The designer's side of the window: its tab, its File and Edit menu entries, its edits.
    QWidget* buildDesignerTabs();
    void buildDesignerMenus(QMenu* file);
    void applyModelEdit(const config::Experiment& e);
    // "ParaLab — name*": the experiment's name, and "*" while it has unsaved changes.
    void updateTitle();
    // Unsaved changes, with the window shown: Save / Discard / Cancel. True when the caller may
    // go on (saved, or discarded); false on Cancel or a save that did not happen.
    bool maybeSave();
    bool save();    // File ▸ Save: to the current file, or as Save As when there is none
    bool saveAs();  // File ▸ Save As: asks where; false when cancelled or it failed
    void rememberFile(const QString& path);
    void rebuildRecentMenu();
    // The setup panels' side: their tabs, their edits, Pause / Resume.
    void buildSetupTabs(QTabWidget* tabs);
    void showInSetupPanels(const config::Experiment& e, QWidget* except = nullptr);
    void applySetupEdit(const config::Experiment& e, QWidget* from);
    void mergeModelEdit(const config::Experiment& e);
    void buildPauseActions(QMenu* runMenu, QToolBar* toolbar);

    std::optional<config::Experiment> m_experiment;
    ExperimentPanel* m_panel;
    LossPlotPanel* m_plot;
    DeviceDashboard* m_devices;
    TimelinePanel* m_timeline;
    RunsPanel* m_runs;
    PlanPanel* m_planPanel;
    LessonsPanel* m_lessonsPanel;
    QTabWidget* m_tabs;
    RunController* m_controller;
    ClusterRunController* m_cluster;
    RunSource* m_active;  // the source Start used last: m_controller or m_cluster
    ClusterPanel* m_clusterPanel = nullptr;
    QAction* m_newAction = nullptr;
    QAction* m_openAction = nullptr;
    ModelDesigner* m_designer = nullptr;
    QMenu* m_recentMenu = nullptr;
    QString m_currentPath;     // where Save writes; empty or ":/..." (an example): Save As
    bool m_modelValid = true;  // the designer's verdict; Start waits for true
    QAction* m_startAction = nullptr;
    QAction* m_stopAction = nullptr;
    DataPanel* m_dataPanel = nullptr;
    DevicesPanel* m_devicesPanel = nullptr;
    StrategyPanel* m_strategyPanel = nullptr;
    TrainingPanel* m_trainingPanel = nullptr;
    QTabWidget* m_experimentTabs = nullptr;
    QSplitter* m_splitter = nullptr;
    QAction* m_pauseAction = nullptr;
    QAction* m_resumeAction = nullptr;
    std::optional<config::Experiment> m_setup;  // the experiment as the setup panels last had it
    QString m_lastFile;
    bool m_shownOnce = false;
    QLabel* m_status;
    QProgressBar* m_progress;
    qint64 m_totalSteps = 0;
    qint64 m_samples = 0;
    std::optional<config::StepRecord> m_lastStep;  // the run's latest step over all devices
};

}  // namespace paralab::ui
