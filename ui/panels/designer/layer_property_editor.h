// The options of the selected layer, one editor per option of its type (docs/experiment-format.md):
// integers in spin boxes, floats in line edits, bool in a check box, lstm/gru `return` in a
// combo box; `repeat` (copies) for every layer. Editors do not range-check: the designer
// validates every edit with the file format's own parser, so the message a person sees is the
// one the file would give.
#pragma once

#include <QWidget>

#include "engine/nn/spec.h"

class QFormLayout;
class QLabel;

namespace paralab::ui {

class LayerPropertyEditor : public QWidget {
    Q_OBJECT
public:
    explicit LayerPropertyEditor(QWidget* parent = nullptr);

    // Shows the options of `spec` (nullptr: nothing selected); `path` is its JSON path.
    void showLayer(const nn::LayerSpec* spec, const QString& path);
    // The parser's message for an edit that was refused (empty: none).
    void showError(const QString& message);
    QString errorText() const;

signals:
    // `value` is JSON text: 128, 0.25, true, "sequence"; null removes the key.
    void optionEdited(const QString& key, const QString& value);

private:
    void addIntEditor(const QString& key, qint64 value, const QString& tip);
    void addFloatEditor(const QString& key, double value, const QString& tip);
    void addBoolEditor(const QString& key, bool value, const QString& tip);
    void addChoiceEditor(const QString& key, const QStringList& choices, const QString& value);
    void addNote(const QString& text);  // a line of explanation across the form
    void addMixtureOfExpertsEditors(const nn::LayerSpec& spec);

    QLabel* m_title;
    QWidget* m_form;
    QFormLayout* m_formLayout;
    QLabel* m_error;
};

}  // namespace paralab::ui
