// What the loaded experiment is: data, devices, strategy, optimizer, and the model layer by
// layer (output shape, parameters), as `paralab validate` prints it.
//
// The model is built (and the data set read for its input shape) on a worker thread, never on
// the GUI thread: every designer edit shows here, and a big model takes 100 ms or more to build.
// The GUI thread waits for it up to a budget (50 ms) so that small models show within the edit;
// a slower one shows "Building the model…" until its result arrives, applied only if no newer
// experiment was shown meanwhile.
#pragma once

#include <QWidget>

#include <future>
#include <vector>

#include "engine/nn/model.h"
#include "engine/run/experiment_file.h"

class QLabel;
class QTableWidget;
class QTimer;

namespace paralab::ui {

class ExperimentPanel : public QWidget {
    Q_OBJECT
public:
    explicit ExperimentPanel(QWidget* parent = nullptr);
    ~ExperimentPanel() override;  // waits for a build still running

    // Shows `e`; throws paralab::Error (ConfigError, ShapeError) when its model cannot be built
    // within the budget, leaving what was shown before. A build past the budget shows its rows,
    // or its error in red (as showUnbuildable), when it ends.
    void showExperiment(const config::Experiment& e);
    // Shows `e` whose model does not build: its sections, no layer rows, and `message` in red
    // where the totals go (the designer marks the layer).
    void showUnbuildable(const config::Experiment& e, const QString& message);
    int layerRowCount() const;
    QString totalsText() const;
    bool buildPending() const { return m_job.valid(); }
    // How long showExperiment waits for a build before leaving it to the worker; 0: never (it
    // then never throws).
    void setSynchronousBudget(int ms) { m_syncBudgetMs = ms; }

private:
    struct Built {
        Shape input;
        std::vector<nn::LayerSummary> rows;
        int64_t parameters = 0;
        double flops = 0;
    };
    static Built build(const config::Experiment& e);  // on the worker; throws as nn::Model does
    void showSections(const config::Experiment& e);
    void showBuilt(const Built& b);
    void poll();

    QLabel* m_summary;
    QTableWidget* m_layers;
    QLabel* m_totals;
    std::future<Built> m_job;                 // the newest experiment's build
    std::vector<std::future<Built>> m_stale;  // older ones, left to finish
    config::Experiment m_pending;                // what m_job builds
    QTimer* m_poll;
    int m_syncBudgetMs = 50;
};

}  // namespace paralab::ui
