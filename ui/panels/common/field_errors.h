// Form fields with their error line, and placing an experiment's issue under the field of its
// JSON path (config::Issue carries the path as data; no message text is read).
#pragma once

#include <QFormLayout>
#include <QHash>
#include <QLabel>
#include <QString>
#include <QVBoxLayout>
#include <QWidget>

#include "engine/config/issue.h"

namespace paralab::ui {

// The field an issue at `path` belongs to: the longest key that is the path or contains it
// ("strategy.split" for "strategy.split[1]"); "" when none does.
inline QString fieldOfPath(const QString& path, const QStringList& keys) {
    QString best;
    for (const QString& key : keys) {
        if ((path == key || path.startsWith(key + QLatin1Char('[')) ||
             path.startsWith(key + QLatin1Char('.'))) &&
            key.size() > best.size())
            best = key;
    }
    return best;
}

// Shows `issue` ("path: message") in the error label of its field among `errors` (key ->
// label), or in `general` when no field holds its path.
inline void showIssue(const config::Issue& issue, const QHash<QString, QLabel*>& errors, QLabel* general) {
    QLabel* label = errors.value(fieldOfPath(QString::fromStdString(issue.path), errors.keys()), general);
    label->setText(QString::fromStdString(issue.text()));
    label->show();
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
