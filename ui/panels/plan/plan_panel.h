// The Plan tab: the planner (engine/plan, docs/planner.md) on the experiment open in the window.
// A cluster (a preset or a cluster file) of nodes × GPUs per node, two swept mesh keys, and the
// sweep as a heatmap of predicted throughput; the selected configuration's memory by category
// against the device's capacity, where its step goes, and its pipeline as simulated. Run here
// runs a scaled-down version of it on this machine's virtual CPU devices through the window's
// normal run path.
//
// The sweep runs on a worker thread (a result carries its generation: a stale one is dropped);
// errors (a malformed cluster file, a strategy or model the planner cannot plan, a bad sweep
// value) are shown in the tab.
#pragma once

#include <QString>
#include <QStringList>
#include <QVector>
#include <QWidget>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "engine/config/experiment.h"
#include "engine/plan/planner.h"
#include "ui/panels/common/plot_export.h"

class QComboBox;
class QCustomPlot;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTabWidget;
class QThread;
class QTimer;

namespace paralab::ui {

class PlanHeatmap;
class TimelinePanel;

class PlanPanel : public QWidget {
    Q_OBJECT
public:
    explicit PlanPanel(QWidget* parent = nullptr);
    ~PlanPanel() override;

    // The experiment to plan: re-planned shortly after (at once when the tab is shown).
    void setExperiment(const config::Experiment& e);

    // Plans now (on the worker thread); planned() is emitted when the result is shown.
    void replan();
    bool isPlanning() const { return m_thread != nullptr; }
    // A cluster file, as File… loads it; its error is shown in the tab (and returned).
    QString loadClusterFile(const QString& path);
    // A preset by name ("h100-80g"): the nodes and GPUs per node follow what the experiment's
    // mesh needs, as `paralab plan` does without --nodes.
    void setPreset(const QString& name);
    void setSweep(int axis, const QString& key, const QString& values);  // axis 0 or 1

    // What the tab shows, for tests and screenshots.
    QComboBox* clusterBox() const { return m_clusterBox; }
    QComboBox* stackBox() const { return m_stackBox; }  // the software stack (plan::stack_names)
    QSpinBox* nodesBox() const { return m_nodes; }
    QSpinBox* gpusBox() const { return m_gpus; }
    QComboBox* keyBox(int axis) const { return m_keys[axis]; }
    QLineEdit* valuesEdit(int axis) const { return m_values[axis]; }
    QString precisionText() const;
    QString errorText() const;   // "" when the last plan worked
    QString statusText() const;  // "16 configurations in 0.05 s ..."
    double lastSweepSeconds() const { return m_seconds; }
    PlanHeatmap* heatmap() const { return m_heatmap; }
    TimelinePanel* timeline() const { return m_timeline; }  // the predicted step
    QTabWidget* pages() const { return m_pages; }            // Sweep | Predicted step
    QCustomPlot* memoryPlot() const { return m_memoryPlot; }
    QCustomPlot* breakdownPlot() const { return m_breakdownPlot; }
    QPushButton* runHereButton() const { return m_runHere; }
    QString runHereNote() const;
    QString selectionText() const;
    // Goodput (docs/planner.md, "Goodput"): its inputs (failures per GPU-hour, the storage's
    // GB/s, the restart's seconds, the tokens to train) and the selected configuration's result,
    // or why there is none.
    QLineEdit* goodputEdit(int which) const { return m_goodputInputs[which]; }
    QString goodputText() const;
    int selectedCell() const;
    void selectCell(int index);
    // The selected configuration's step breakdown as the bars show it (s), in the order
    // compute, recompute, tp_comm, pp_bubble, pp_comm, dp_comm, optimizer.
    std::vector<double> shownBreakdown() const { return m_shownBreakdown; }
    // The memory bars' bytes by category (parameters … workspace) and the capacity line.
    std::vector<double> shownMemory() const { return m_shownMemory; }
    double shownCapacity() const { return m_shownCapacity; }

    // Run here: `base` with the hybrid strategy of `mesh` (dp, tp, pp, zero, micro_batches,
    // schedule, interleave, sequence_parallel), train.recompute from it, fp32 (CPU devices train
    // in fp32), devices cpu:0 .. cpu:N-1 with N = dp·tp·pp, at most `steps` optimizer steps. No
    // experiment, and why, when N > maxDevices or the result does not validate.
    struct RunHere {
        std::optional<config::Experiment> experiment;
        QString why;
    };
    static RunHere runHereExperiment(const config::Experiment& base, const plan::Mesh& mesh,
                                     int maxDevices = 8, int steps = 20);
    // What Run here hands the experiment to (the window's run path): returns why it did not
    // start ("" when it did).
    void setRunHereHandler(std::function<QString(const config::Experiment&)> handler) {
        m_runHereHandler = std::move(handler);
    }
    void runHere();

    // The tab's exports, the whole tab last (Ctrl+E): the selected configuration's memory bars
    // and step breakdown (PNG, PDF or CSV of their bars), and the tab as one picture (PNG or
    // PDF) whose CSV is every configuration of the sweep.
    QVector<PlotExport> plotExports();
    bool hasPlan() const;  // a plan is shown (the exports have something to write)
    // The tab (inputs left out: the sweep, the selected configuration's plots and its pipeline)
    // as a PNG at twice its pixels or a PDF, the plan's caption under it. False when there is no
    // plan or the file cannot be written.
    bool exportTab(const QString& path);
    // Every configuration of the sweep: `.json`, an array of the objects `paralab plan --sweep
    // --json` prints; any other suffix, CSV with one row per configuration (the same fields,
    // nested ones as mesh.tp, memory_bytes.total, ...). False when there is no plan or the file
    // cannot be written.
    bool exportConfigurations(const QString& path);
    // The line under exported pictures: "Plan of gpt3-175b on h100-80g · 128 × 8 devices ·
    // selected dp 16 · tp 8 · pp 8, ...".
    QString planCaption() const;

signals:
    void planned();

protected:
    void showEvent(QShowEvent* event) override;

private:
    struct Result;
    void schedule();  // a re-plan soon (debounced), or when shown
    void showResult(const std::shared_ptr<Result>& r);
    void showError(const QString& message);
    void showCell(int index);
    void plotMemory(const plan::Prediction& p);
    void plotBreakdown(const plan::Prediction& p);
    void showGoodput();  // of the selected configuration
    void fitNodesToMesh();
    void showSize(int nodes, int gpus);  // the spin boxes, without a re-plan
    std::optional<plan::Cluster> baseCluster(QString* error) const;
    void clusterChosen(int index);
    void exportWithMenu();

    std::optional<config::Experiment> m_experiment;
    std::string m_experimentKey;  // its JSON: an identical experiment is not re-planned
    QComboBox* m_clusterBox;
    QComboBox* m_stackBox;
    QString m_clusterFile;  // the loaded cluster file ("" : a preset)
    std::optional<plan::Cluster> m_fileCluster;
    int m_lastClusterIndex = 0;
    QSpinBox* m_nodes;
    QSpinBox* m_gpus;
    QLabel* m_precision;
    QComboBox* m_keys[2];
    QLineEdit* m_values[2];
    QLabel* m_status;
    QLabel* m_error;
    PlanHeatmap* m_heatmap;
    QLabel* m_selection;
    QCustomPlot* m_memoryPlot;
    QCustomPlot* m_breakdownPlot;
    TimelinePanel* m_timeline;
    QTabWidget* m_pages;  // the sweep, the predicted step
    QPushButton* m_runHere;
    QLabel* m_runNote;
    QLineEdit* m_goodputInputs[4];  // failures per GPU-hour, storage GB/s, restart s, tokens
    QLabel* m_goodput;
    QPushButton* m_export;
    QWidget* m_body = nullptr;  // what exportTab draws
    QTimer* m_debounce;
    QThread* m_thread = nullptr;
    bool m_again = false;  // inputs changed while the worker ran
    bool m_dirty = false;  // a re-plan waits for the tab to be shown
    quint64 m_generation = 0;
    double m_seconds = 0;
    std::shared_ptr<Result> m_result;
    std::shared_ptr<std::atomic<bool>> m_cancel = std::make_shared<std::atomic<bool>>(false);
    std::vector<double> m_shownBreakdown, m_shownMemory;
    double m_shownCapacity = 0;
    std::function<QString(const config::Experiment&)> m_runHereHandler;
};

}  // namespace paralab::ui
