// A teaching picture of one step of a strategy: devices as boxes, what moves between them as
// labelled arrows. The strategy describes its picture as data (strategy::StepPicture: a layout
// and its words, from the registry); this widget draws each layout (a hub and its devices, a
// ring, shards on two buses, a chain of stages, one box).
#pragma once

#include <QStringList>
#include <QWidget>

#include "engine/strategy/registry.h"

namespace paralab::ui {

class StrategyDiagram : public QWidget {
    Q_OBJECT
public:
    explicit StrategyDiagram(QWidget* parent = nullptr);

    void setPicture(const strategy::StepPicture& picture, const QStringList& devices);
    QSize sizeHint() const override { return {520, 300}; }
    QSize minimumSizeHint() const override { return {320, 220}; }

protected:
    void paintEvent(QPaintEvent* event) override;

private:
    strategy::StepPicture m_picture;
    QStringList m_devices;
};

}  // namespace paralab::ui
