#include "ui/panels/dashboard/text_sample_panel.h"

#include <QFontDatabase>
#include <QLabel>
#include <QPlainTextEdit>
#include <QTextCharFormat>
#include <QTextCursor>
#include <QVBoxLayout>

namespace paralab::ui {

namespace {
// The Training plot's training-loss blue (matplotlib's first colour): the model's words.
const QColor kSampleColor(31, 119, 180);
// A sample is a few hundred characters; a misbehaving stream must not fill the box with more.
constexpr qsizetype kMaxChars = 4000;
constexpr int kVisibleLines = 7;
}  // namespace

TextSamplePanel::TextSamplePanel(QWidget* parent)
    : QWidget(parent), m_title(new QLabel), m_text(new QPlainTextEdit) {
    m_title->setObjectName(QStringLiteral("textSampleTitle"));
    m_text->setObjectName(QStringLiteral("textSample"));
    m_text->setReadOnly(true);
    m_text->setUndoRedoEnabled(false);
    m_text->setLineWrapMode(QPlainTextEdit::WidgetWidth);
    m_text->setWordWrapMode(QTextOption::WrapAtWordBoundaryOrAnywhere);
    m_text->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    m_text->setToolTip(
        tr("The prompt (the start of the test split) in normal weight, then the "
           "model's continuation in blue"));
    // A few lines: the plot above keeps most of the tab.
    const int line = QFontMetrics(m_text->font()).lineSpacing();
    m_text->setFixedHeight(kVisibleLines * line + 2 * m_text->frameWidth() +
                           static_cast<int>(2 * m_text->document()->documentMargin()));
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(2);
    layout->addWidget(m_title);
    layout->addWidget(m_text);
    clear();
}

void TextSamplePanel::clear() {
    m_step = -1;
    m_prompt.clear();
    m_sample.clear();
    m_text->clear();
    m_title->clear();
    hide();
}

QString TextSamplePanel::title() const {
    return m_title->text();
}

void TextSamplePanel::showEval(const config::EvalResult& eval) {
    if (eval.sample.empty()) return;
    m_step = eval.step;
    m_prompt = QString::fromStdString(eval.prompt).left(kMaxChars);
    m_sample = QString::fromStdString(eval.sample).left(kMaxChars);
    m_title->setText(tr("<b>Generated text</b> at step %1 &nbsp;<span style='color:gray'>"
                        "prompt, then <span style='color:%2'><b>the model's continuation</b></span>"
                        "</span>")
                         .arg(eval.step)
                         .arg(kSampleColor.name()));
    m_text->clear();
    QTextCursor cursor(m_text->document());
    cursor.insertText(m_prompt, QTextCharFormat());
    QTextCharFormat generated;
    generated.setFontWeight(QFont::Bold);
    generated.setForeground(kSampleColor);
    cursor.insertText(m_sample, generated);
    show();
}

}  // namespace paralab::ui
