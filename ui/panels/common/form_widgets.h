// What the setup panels build their forms from: a spin box as they all configure it, and a
// panel whose form scrolls when the window is too small for it.
#pragma once

#include <QFrame>
#include <QScrollArea>
#include <QSpinBox>
#include <QString>
#include <QVBoxLayout>
#include <QWidget>

namespace paralab::ui {

// A spin box over [min, max]; `special` is shown for min (e.g. "all" for 0).
inline QSpinBox* spinBox(int min, int max, const QString& special = {}) {
    auto* box = new QSpinBox;
    box->setRange(min, max);
    if (!special.isEmpty()) box->setSpecialValueText(special);
    box->setAccelerated(true);
    return box;
}

// Makes `content` the whole of `panel`, in a frameless scroll area.
inline void setScrollingContent(QWidget* panel, QWidget* content) {
    auto* scroll = new QScrollArea;
    scroll->setWidget(content);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    auto* outer = new QVBoxLayout(panel);
    outer->setContentsMargins(0, 0, 0, 0);
    outer->addWidget(scroll);
}

}  // namespace paralab::ui
