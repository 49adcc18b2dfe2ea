// The Strategy panel: the strategy and its options (only those that apply to it), a
// plain-language explanation, a diagram of what moves where in one step, and the predicted
// memory per device by category for the current model (an estimate, before the run). All of
// it comes from the strategy registry (engine/strategy/registry.h): the form is made from the
// strategies' option declarations, the rest from their descriptors.
#pragma once

#include <QHash>
#include <QString>
#include <QWidget>

#include <string>
#include <vector>

#include "engine/config/experiment.h"
#include "engine/config/issue.h"
#include "engine/strategy/registry.h"

class QCheckBox;
class QComboBox;
class QPushButton;
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

    // Shows `e`. A choice the panel refused (a hybrid mesh that does not fit the devices) stays
    // chosen, with its error, when `e` differs from the last accepted experiment only outside
    // the strategy (another tab's edit: the device count): it is checked again against `e`, and
    // passed on once it fits. Opening a file first calls discardRefusedEdit().
    void setExperiment(const config::Experiment& e);
    // Forgets a refused choice: the next setExperiment shows its experiment's strategy.
    void discardRefusedEdit() { m_refused = false; }

    // For tests and screenshots.
    QComboBox* strategyBox() const { return m_type; }
    // The editor of an option ("strategy.bucket_mb"), and whether it is shown for the strategy.
    QWidget* optionEditor(const QString& key) const;
    bool isOptionShown(const QString& key) const;
    QString errorText() const;
    QString explanation() const;
    const std::vector<strategy::DeviceMemoryEstimate>& memoryEstimate() const { return m_estimate; }
    StrategyDiagram* diagram() const { return m_diagram; }

    // The plain-language explanation of a strategy (its descriptor's), as rich text.
    static QString explain(const std::string& type);

signals:
    void experimentEdited(const paralab::config::Experiment& e);
    // An edit that was refused: its message is shown under its field, nothing was passed on.
    void editRefused(const QString& message);

private:
    void addOption(const QString& key, const QString& label, QWidget* editor);
    // The editor of a registry option (made once per key, for the first strategy declaring it).
    QWidget* makeEditor(const config::OptionSpec& spec);
    void showOptionsFor(const std::string& type);
    void setEditorValue(const config::OptionSpec& spec, const config::OptionValue& value);
    // The editor's value; false (with `issue` set) when its text is not a value of the kind.
    bool editorValue(const config::OptionSpec& spec, config::OptionValue& value, config::Issue& issue) const;
    void edited();
    // "Devices = dp · cp · tp · pp": the hybrid mesh's product as the device count.
    void fitDevicesToMesh();
    void refuse(const config::Issue& issue);  // shows it under its field, emits editRefused
    void refreshViews();  // explanation, diagram, memory for m_experiment
    void plotMemory();

    config::Experiment m_experiment;  // the last accepted (passed on, or shown) experiment
    bool m_updating = false;
    bool m_refused = false;  // the editors show a choice that was refused: not m_experiment's
    QFormLayout* m_form;
    QComboBox* m_type;
    QComboBox* m_straggler;
    QDoubleSpinBox* m_stragglerDelay;
    QCheckBox* m_stragglerRotate = nullptr;
    QHash<QString, QWidget*> m_rows;    // key -> the row's cell (editor + its error label)
    QHash<QString, QWidget*> m_editor;  // key -> editor
    QHash<QString, QLabel*> m_errors;
    QLabel* m_generalError;
    QPushButton* m_fitDevices = nullptr;
    QLabel* m_explanation;
    StrategyDiagram* m_diagram;
    QCustomPlot* m_memoryPlot;
    QLabel* m_memoryNote;

    std::string m_costKey;  // the model and data the cached cost was computed for
    strategy::ModelCost m_cost;
    QString m_costError;
    std::vector<strategy::DeviceMemoryEstimate> m_estimate;
};

}  // namespace paralab::ui
