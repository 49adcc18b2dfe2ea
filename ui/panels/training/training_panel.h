// The Training panel: the experiment's name and its "train", "optimizer" and "schedule" sections
// (epochs, max steps, evaluation, precision, recompute; the optimizer's type and the options
// that type takes; the learning-rate schedule and its options). Every edit is checked by the
// experiment parser (run::validate); a bad value shows the parser's message under its field and
// is not passed on. Choosing another optimizer or schedule starts from the parser's defaults for
// it (adam's lr is 0.001, sgd's 0.01).
#pragma once

#include <QHash>
#include <QWidget>

#include "engine/run/experiment_file.h"

class QCheckBox;
class QComboBox;
class QFormLayout;
class QLabel;
class QLineEdit;
class QSpinBox;
class QVBoxLayout;

namespace paralab::ui {

class TrainingPanel : public QWidget {
    Q_OBJECT
public:
    explicit TrainingPanel(QWidget* parent = nullptr);

    // Shows `e` without emitting experimentEdited.
    void setExperiment(const config::Experiment& e);
    // For tests and screenshots: the editor of a field ("optimizer.lr"; "optimizer.betas" is a
    // row of two, named "optimizer.beta1" and "optimizer.beta2"), and whether its row is shown.
    QWidget* editor(const QString& key) const;
    bool isFieldShown(const QString& key) const;
    // The parser's message shown under the field it names ("" when every value is valid).
    QString errorText() const;

signals:
    void experimentEdited(const paralab::config::Experiment& e);
    // An edit that was refused: its message is shown under its field, nothing was passed on.
    void editRefused(const QString& message);

private:
    QFormLayout* addSection(QVBoxLayout* layout, const QString& title);
    void addField(QFormLayout* form, const QString& key, const QString& label, QWidget* editor);
    void updateVisibility();
    void edited();
    void refuse(const config::Issue& issue);

    config::Experiment m_experiment;
    bool m_updating = false;
    QLineEdit* m_name;
    QSpinBox* m_epochs;
    QSpinBox* m_maxSteps;
    QSpinBox* m_evalEvery;
    QLineEdit* m_maxStepsPerS;  // empty: no limit
    QComboBox* m_precision;
    QComboBox* m_recompute;
    QComboBox* m_optimizer;
    QLineEdit* m_lr;
    QLineEdit* m_weightDecay;
    QLineEdit* m_momentum;
    QCheckBox* m_nesterov;
    QLineEdit* m_beta1;
    QLineEdit* m_beta2;
    QLineEdit* m_eps;
    QComboBox* m_schedule;
    QSpinBox* m_stepSize;
    QLineEdit* m_gamma;
    QSpinBox* m_warmup;
    QHash<QString, QFormLayout*> m_forms;  // "optimizer.lr" -> the form holding its row
    QHash<QString, QWidget*> m_cells;      // "optimizer.lr" -> its row's cell (editor + error)
    QHash<QString, QWidget*> m_editors;    // "optimizer.lr" -> its editor
    QHash<QString, QLabel*> m_errors;      // "optimizer.lr" -> the label under it
    QLabel* m_generalError;
};

}  // namespace paralab::ui
