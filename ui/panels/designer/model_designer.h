// The model designer: a palette of layer types, the layer stack as a tree (residual
// blocks hold their body; a transformer_block shows its parts, read-only), a property editor for
// the selected layer, live shape inference (output shape, parameters, FLOPs, activation memory
// per example), undo/redo, presets.
// It edits the model section only (layers, input, loss) of the experiment it was given, and
// hands the whole experiment back on every edit.
//
// Shape inference after every edit builds the model on a scratch CPU device (parameters and
// workspaces allocated, nothing computed) on a worker thread; the GUI thread waits for it up to
// a budget (50 ms), so that the presets (fashion-cnn, resnet-small: well under 1 ms once warm,
// ~20 ms seen on a first build) update within the edit, and a big stack (eight 256-channel
// convolutions on 224x224: 80-160 ms) shows "…" until its result arrives, applied only if the
// model has not been edited since.
#pragma once

#include <QWidget>
#include <memory>
#include <optional>

#include "engine/run/experiment_file.h"
#include "ui/panels/designer/designed_model.h"

class QAction;
class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QTimer;
class QUndoStack;

namespace paralab::ui {

class LayerPalette;
class LayerPropertyEditor;
class LayerStackView;

class ModelDesigner : public QWidget {
    Q_OBJECT
public:
    explicit ModelDesigner(QWidget* parent = nullptr);
    ~ModelDesigner() override;

    // Starts editing `e`'s model: clears the undo history, emits validityChanged (not modelEdited).
    void setExperiment(const config::Experiment& e);
    // The other sections of the experiment changed elsewhere (data, devices, strategy panels):
    // takes them, keeps the designed model and the undo history; re-infers the shapes (and
    // checks model.input against the data set's examples) when the data section changed. Emits nothing but
    // validityChanged (when the verdict changes).
    void updateContext(const config::Experiment& e);
    // The experiment given, with the designed model in it.
    config::Experiment experiment() const;
    const DesignedModel& model() const { return m_model; }
    bool isValid() const { return m_report.ok; }
    // Why the text in Model ▸ input was not taken ("" when it was): shown under the field, and
    // Start waits until it is fixed (the window's field errors).
    QString inputError() const { return m_inputErrorText; }
    QString validationMessage() const { return m_report.message; }
    const ShapeReport& shapeReport() const { return m_report; }
    // True while the current model's shapes are being inferred past the synchronous budget.
    bool shapesPending() const;
    // How long an edit waits for its shapes on the GUI thread (ms) before going on without them.
    void setSynchronousBudget(int ms) { m_syncBudgetMs = ms; }

    QAction* undoAction() const { return m_undoAction; }
    QAction* redoAction() const { return m_redoAction; }
    QUndoStack* undoStack() const { return m_undo; }

    // Edits, each one undoable; the same the widgets do. They return false (changing nothing)
    // when the path does not exist or the move is impossible.
    bool addLayer(const QString& type, const LayerPath& parent = {}, int index = -1);
    bool removeLayer(const LayerPath& path);
    bool moveLayer(const LayerPath& from, const LayerPath& parent, int index);
    bool moveLayerBy(const LayerPath& path, int delta);  // up (-1) or down (+1) among its siblings
    bool wrapInResidual(const LayerPath& path);
    // Sets option `key` of the layer to `value` (JSON text; null removes the key), validated by
    // the experiment file's parser. Returns its error message (empty when the edit was applied);
    // the property editor shows it.
    QString setLayerOption(const LayerPath& path, const QString& key, const QString& value);
    // model.input as "1, 28, 28" (empty: the data set's), and model.loss.
    QString setInputText(const QString& text);
    QString setLoss(const QString& loss);

    // While a run trains the model, nothing in it may change: every edit (the widgets' and the
    // functions above) is refused, the editors are disabled and a line says why; the layers can
    // still be selected and read.
    void setLocked(bool locked);
    bool isLocked() const { return m_locked; }

    LayerPath selectedPath() const;
    void selectLayer(const LayerPath& path);

    LayerStackView* stackView() const { return m_stack; }
    LayerPalette* palette() const { return m_palette; }
    LayerPropertyEditor* propertyEditor() const { return m_properties; }
    QComboBox* presetBox() const { return m_presets; }

signals:
    void modelEdited(const paralab::config::Experiment& e);
    void validityChanged(bool ok, const QString& message);
    // Model ▸ input's error appeared, changed or went ("" when it went).
    void inputErrorChanged(const QString& message);
    // A preset chosen in the combo box: ":/examples/NAME.paralab.json".
    void presetRequested(const QString& path);

private:
    // Validates `next` through the experiment file's parser, then pushes it as one undo step.
    QString commit(const QString& text, DesignedModel next, const LayerPath& selectAfter,
                   const QString& mergeKey = {});
    void apply(const DesignedModel& m, const LayerPath& select);  // from the undo stack
    void startInference(const LayerPath& select);
    void pollInference();
    void showReport(const LayerPath& select);
    void refresh();        // labels from m_report
    void readDataInput();  // m_dataInput from m_base's data section when model.input is absent
    void rebuildTree(const LayerPath& select);
    void showSelection();
    void updateButtons();

    config::Experiment m_base;
    DesignedModel m_model;
    std::optional<Shape> m_dataInput;  // the data set's example shape, read once per experiment
    QString m_dataInputError;
    ShapeReport m_report;
    bool m_wasValid = false;
    bool m_announceValidity = false;
    bool m_applying = false;
    struct InferenceJobs;
    std::unique_ptr<InferenceJobs> m_jobs;
    QTimer* m_poll;
    int m_syncBudgetMs = 50;

    QUndoStack* m_undo;
    QAction* m_undoAction;
    QAction* m_redoAction;
    QComboBox* m_presets;
    LayerPalette* m_palette;
    LayerStackView* m_stack;
    LayerPropertyEditor* m_properties;
    QLineEdit* m_input;
    QComboBox* m_loss;
    QLabel* m_totals;
    QLabel* m_error;
    QLabel* m_inputError = nullptr;  // under Model ▸ input
    QString m_inputErrorText;
    void showInputError(const QString& message);
    QPushButton* m_up;
    QPushButton* m_down;
    QPushButton* m_delete;
    QPushButton* m_wrap;
    QLabel* m_lockNote;
    bool m_locked = false;
};

}  // namespace paralab::ui
