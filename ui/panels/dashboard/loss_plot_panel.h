// Training loss per step, and test loss / accuracy at each evaluation, on one QCustomPlot.
// Steps arrive in batches; the plot is redrawn with a queued replot, at most once per batch, and
// not while the panel is hidden (it is drawn when shown).
#pragma once

#include <QVector>
#include <QWidget>

#include "engine/run/trainer.h"
#include "ui/panels/common/plot_export.h"

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
    int pointCount() const;        // training-loss points (one per step)
    int evalPointCount() const;    // test-loss points
    bool logarithmicLoss() const { return m_logLoss; }
    // PNG or PDF by the file's suffix; false when the file cannot be written.
    bool exportTo(const QString& path);
    // The plot's curves as CSV (series,x_axis,x,y_axis,y): training loss raw and smoothed, test
    // loss and accuracy.
    bool exportCsv(const QString& path) const;
    QVector<PlotExport> plotExports();

public slots:
    void exportWithDialog();  // PNG, PDF or CSV: asks for a file name; reports a failure
    void setLogarithmicLoss(bool on);
    void fitToData();                        // undoes the user's drag and zoom

protected:
    void showEvent(QShowEvent* event) override;

private:
    void showContextMenu(const QPoint& pos);
    void replot();
    void includeLoss(double loss);  // widens the loss axis's range to take `loss`

    QCustomPlot* m_plot;
    QCPGraph* m_train;
    QCPGraph* m_trainSmooth;  // the trend through the per-step noise
    QCPGraph* m_testLoss;
    QCPGraph* m_accuracy;
    double m_maxLoss = 0;
    double m_minLoss = 0;  // smallest positive loss, for the logarithmic axis
    double m_lastStep = 0;
    double m_ema = 0;          // exponential moving average of the training loss, biased
    double m_emaWeight = 0;    // towards 0 at the start; dividing by this removes the bias
    bool m_logLoss = false;
    bool m_dirty = false;  // changed while hidden
};

}  // namespace paralab::ui
