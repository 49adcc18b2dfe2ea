// What the loaded experiment is: data, devices, strategy, optimizer, and the model layer by
// layer (output shape, parameters), as `paralab validate` prints it.
#pragma once

#include <QWidget>

#include "engine/run/experiment.h"

class QLabel;
class QTableWidget;

namespace paralab::ui {

class ExperimentPanel : public QWidget {
    Q_OBJECT
public:
    explicit ExperimentPanel(QWidget* parent = nullptr);

    // Shows `e`; throws paralab::Error (ConfigError, ShapeError) when its model cannot be built,
    // leaving what was shown before.
    void showExperiment(const run::Experiment& e);
    // Shows `e` whose model does not build: its sections, no layer rows, and `message` in red
    // where the totals go (the designer marks the layer).
    void showUnbuildable(const run::Experiment& e, const QString& message);
    int layerRowCount() const;
    QString totalsText() const;

private:
    void showSections(const run::Experiment& e);

    QLabel* m_summary;
    QTableWidget* m_layers;
    QLabel* m_totals;
};

}  // namespace paralab::ui
