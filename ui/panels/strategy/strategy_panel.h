// The Strategy panel: the strategy and its options (only those that apply to it), a
// plain-language explanation, a diagram of what moves where in one step, and the predicted
// memory per device by category for the current model (an estimate, before the run).
#pragma once

#include <QHash>
#include <QString>
#include <QWidget>

#include <string>
#include <vector>

#include "engine/run/experiment.h"
#include "ui/session/memory_estimate.h"

class QCheckBox;
class QComboBox;
class QCustomPlot;
class QDoubleSpinBox;
class QFormLayout;
class QLabel;
class QLineEdit;
class QSpinBox;

namespace paralab::ui {

class StrategyDiagram;

class StrategyPanel : public QWidget {
    Q_OBJECT
public:
    explicit StrategyPanel(QWidget* parent = nullptr);

    void setExperiment(const run::Experiment& e);

    // For tests and screenshots.
    QComboBox* strategyBox() const { return m_type; }
    // The editor of an option ("strategy.bucket_mb"), and whether it is shown for the strategy.
    QWidget* optionEditor(const QString& key) const;
    bool isOptionShown(const QString& key) const;
    QString errorText() const;
    QString explanation() const;
    const std::vector<DeviceMemoryEstimate>& memoryEstimate() const { return m_estimate; }
    StrategyDiagram* diagram() const { return m_diagram; }

    // The plain-language explanation of a strategy (docs/strategies.md, in 2-4 sentences).
    static QString explain(const std::string& type);

signals:
    void experimentEdited(const paralab::run::Experiment& e);

private:
    void addOption(const QString& key, const QString& label, QWidget* editor);
    void showOptionsFor(const std::string& type);
    void edited();
    void refreshViews();  // explanation, diagram, memory for m_experiment
    void plotMemory();

    run::Experiment m_experiment;
    bool m_updating = false;
    QFormLayout* m_form;
    QComboBox* m_type;
    QDoubleSpinBox* m_bucketMb;
    QCheckBox* m_overlap;
    QComboBox* m_balance;
    QComboBox* m_stage;
    QComboBox* m_mode;
    QSpinBox* m_staleness;
    QSpinBox* m_microBatches;
    QComboBox* m_schedule;
    QLineEdit* m_split;
    QCheckBox* m_syncBatchnorm;
    QComboBox* m_straggler;
    QDoubleSpinBox* m_stragglerDelay;
    QHash<QString, QWidget*> m_rows;    // key -> the row's cell (editor + its error label)
    QHash<QString, QWidget*> m_editor;  // key -> editor
    QHash<QString, QLabel*> m_errors;
    QLabel* m_generalError;
    QLabel* m_explanation;
    StrategyDiagram* m_diagram;
    QCustomPlot* m_memoryPlot;
    QLabel* m_memoryNote;

    std::string m_costKey;  // the model and data the cached cost was computed for
    ModelCost m_cost;
    QString m_costError;
    std::vector<DeviceMemoryEstimate> m_estimate;
};

}  // namespace paralab::ui
