// The Data panel: the experiment's "data" section (data set, path, limits, batch size,
// workers, shuffle, and the synthetic, CSV and text sets' options where they apply). Every edit is
// checked by the experiment parser; a bad value shows the parser's message under its field and is
// not passed on.
#pragma once

#include <QHash>
#include <QWidget>

#include "engine/run/experiment_file.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QFormLayout;
class QLabel;
class QLineEdit;
class QSpinBox;

namespace paralab::ui {

class DataPanel : public QWidget {
    Q_OBJECT
public:
    explicit DataPanel(QWidget* parent = nullptr);

    // Shows `e` without emitting experimentEdited.
    void setExperiment(const config::Experiment& e);
    // The parser's message shown under the field it names ("" when every value is valid).
    QString errorText() const;

signals:
    void experimentEdited(const paralab::config::Experiment& e);
    // An edit that was refused: its message is shown under its field, nothing was passed on.
    void editRefused(const QString& message);

private:
    void addField(const QString& key, const QString& label, QWidget* editor);
    void updateVisibility();
    void edited();
    void chooseFile();
    void chooseFolder();

    config::Experiment m_experiment;
    bool m_updating = false;
    QFormLayout* m_form;
    QComboBox* m_dataset;
    QLineEdit* m_path;
    QWidget* m_pathRow;
    QSpinBox* m_trainLimit;
    QSpinBox* m_testLimit;
    QSpinBox* m_batch;
    QSpinBox* m_workers;
    QCheckBox* m_shuffle;
    QSpinBox* m_samples;
    QSpinBox* m_classes;
    QDoubleSpinBox* m_noise;
    QSpinBox* m_seqLen;
    QSpinBox* m_features;
    QLineEdit* m_labelColumn;
    QDoubleSpinBox* m_testFraction;
    QDoubleSpinBox* m_valFraction;
    QHash<QString, QWidget*> m_editors;  // "data.batch_size" -> its editor
    QHash<QString, QLabel*> m_errors;    // "data.batch_size" -> the label under it
    QLabel* m_generalError;
};

}  // namespace paralab::ui
