// The latest text a language model wrote at an evaluation (config::EvalResult::prompt and
// sample): the prompt in the normal weight, the model's continuation in bold and colour, in a
// monospace box under the Training plot, with the step it was drawn at. Hidden for runs whose
// evaluations carry no text (every model but a text one).
#pragma once

#include <QWidget>

#include "engine/config/records.h"

class QLabel;
class QPlainTextEdit;

namespace paralab::ui {

class TextSamplePanel : public QWidget {
    Q_OBJECT
public:
    explicit TextSamplePanel(QWidget* parent = nullptr);

    // Shows `eval`'s text when it has any; an evaluation without text changes nothing.
    void showEval(const config::EvalResult& eval);
    void clear();  // a new run: hidden until its first text

    qint64 step() const { return m_step; }  // of the text shown; -1 when none
    QString promptText() const { return m_prompt; }
    QString sampleText() const { return m_sample; }
    QString title() const;
    QPlainTextEdit* textView() const { return m_text; }

private:
    QLabel* m_title;
    QPlainTextEdit* m_text;
    qint64 m_step = -1;
    QString m_prompt, m_sample;
};

}  // namespace paralab::ui
