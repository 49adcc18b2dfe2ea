// Training loss per step, and test loss / accuracy at each evaluation, on one QCustomPlot.
// Steps arrive in batches; the plot is redrawn with a queued replot, at most once per batch.
#pragma once

#include <QVector>
#include <QWidget>

#include "engine/run/trainer.h"

class QCustomPlot;
class QCPGraph;

namespace paralab::ui {

class LossPlotPanel : public QWidget {
    Q_OBJECT
public:
    explicit LossPlotPanel(QWidget* parent = nullptr);

    void clear();
    void addSteps(const QVector<run::StepRecord>& steps);
    void addEval(const run::EvalResult& eval);
    int pointCount() const;
    // PNG or PDF by the file's suffix; false when the file cannot be written.
    bool exportTo(const QString& path);

private:
    QCustomPlot* m_plot;
    QCPGraph* m_train;
    QCPGraph* m_testLoss;
    QCPGraph* m_accuracy;
    double m_maxLoss = 0;
};

}  // namespace paralab::ui
