// Which field an experiment parser message belongs to: messages start with the JSON path of
// the value ("strategy.split[1]: expected ..."); the field is the longest key that is a prefix
// of that path.
#pragma once

#include <QFormLayout>
#include <QHash>
#include <QLabel>
#include <QString>
#include <QVBoxLayout>
#include <QWidget>

namespace paralab::ui {

inline QString fieldOfMessage(const QString& message, const QStringList& keys) {
    const QString path = message.section(QLatin1Char(':'), 0, 0);
    QString best;
    for (const QString& key : keys) {
        if ((path == key || path.startsWith(key + QLatin1Char('[')) ||
             path.startsWith(key + QLatin1Char('.'))) &&
            key.size() > best.size())
            best = key;
    }
    return best;
}

// A form cell: `editor` with a red error line under it (hidden until a message is shown),
// named "<key>.error" for tests. Returns the cell; the error label through `error`.
inline QWidget* fieldCell(const QString& key, QWidget* editor, QLabel** error) {
    auto* label = new QLabel;
    label->setWordWrap(true);
    label->setStyleSheet(QStringLiteral("color: #c0392b"));
    label->setObjectName(key + QStringLiteral(".error"));
    label->hide();
    auto* cell = new QWidget;
    auto* v = new QVBoxLayout(cell);
    v->setContentsMargins(0, 0, 0, 0);
    v->setSpacing(2);
    v->addWidget(editor);
    v->addWidget(label);
    *error = label;
    return cell;
}

// A fieldCell added to `form` as a row under `label` (the whole width when `label` is empty).
// Returns the cell; the error label through `error`.
inline QWidget* addFieldRow(QFormLayout* form, const QString& key, const QString& label, QWidget* editor,
                            QLabel** error) {
    QWidget* cell = fieldCell(key, editor, error);
    if (label.isEmpty())
        form->addRow(cell);
    else
        form->addRow(label, cell);
    return cell;
}

}  // namespace paralab::ui
