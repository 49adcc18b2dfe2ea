// A teaching picture of one step of a strategy: devices as boxes, what moves between them as
// labelled arrows (broadcast / scatter / gather for data_parallel, a ring all-reduce for ddp,
// reduce-scatter + all-gather for zero, one shared parameter set for hogwild, a server and its
// workers, a chain of stages).
#pragma once

#include <QStringList>
#include <QWidget>

#include "engine/run/experiment.h"

namespace paralab::ui {

class StrategyDiagram : public QWidget {
    Q_OBJECT
public:
    explicit StrategyDiagram(QWidget* parent = nullptr);

    void setStrategy(const run::StrategyConfig& strategy, const QStringList& devices);
    QSize sizeHint() const override { return {520, 300}; }
    QSize minimumSizeHint() const override { return {320, 220}; }

protected:
    void paintEvent(QPaintEvent* event) override;

private:
    run::StrategyConfig m_strategy;
    QStringList m_devices;
};

}  // namespace paralab::ui
