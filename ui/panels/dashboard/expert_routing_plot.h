// The Devices tab's view of a mixture-of-experts run (engine/nn/moe.h): the tokens each expert
// computed at the latest step, one group of bars per expert and one bar per MoE layer, titled
// with the step, the auxiliary losses added to the loss and the tokens dropped past capacity.
// Hidden for a run without a mixture of experts.
#pragma once

#include <QString>
#include <QVector>
#include <QWidget>

#include "engine/config/records.h"

class QCustomPlot;
class QCPBars;
class QCPBarsGroup;
class QCPTextElement;

namespace paralab::ui {

class ExpertRoutingPlot : public QWidget {
public:
    explicit ExpertRoutingPlot(QWidget* parent = nullptr);

    // The steps over all devices, in order: the latest with routing is shown at the next
    // replot (the dashboard's pacer calls it, so a hidden tab draws nothing).
    void addSteps(const QVector<config::StepRecord>& steps);
    void clear();
    void replot();

    // What is shown: per layer (the records' order), each expert's tokens; and the title.
    int layerCount() const { return m_bars.size(); }
    QVector<double> tokens(int layer) const;
    QString title() const;

private:
    QCustomPlot* m_plot;
    QCPTextElement* m_title = nullptr;
    QCPBarsGroup* m_group = nullptr;
    QVector<QCPBars*> m_bars;  // one per MoE layer
};

}  // namespace paralab::ui
