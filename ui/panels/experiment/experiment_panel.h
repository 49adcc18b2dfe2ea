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
    int layerRowCount() const;

private:
    QLabel* m_summary;
    QTableWidget* m_layers;
    QLabel* m_totals;
};

}  // namespace paralab::ui
