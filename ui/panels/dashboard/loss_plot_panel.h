// Training loss per step, and test loss / accuracy at each evaluation, on one QCustomPlot.
// Steps arrive in batches; redraws are paced to their cost and skipped while the panel is hidden
// (ReplotPacer), and the per-step curves are DecimatedGraphs (one or two points per pixel
// column), so that a long run costs the GUI thread no more than a short one.
#pragma once

#include <QVector>
#include <QWidget>

#include "engine/run/trainer.h"
#include "ui/panels/common/plot_export.h"

class QCustomPlot;
class QCPGraph;

namespace paralab::ui {
class DecimatedGraph;
class ReplotPacer;
}  // namespace paralab::ui

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

private:
    void showContextMenu(const QPoint& pos);
    void fitRanges();  // the axes around the data
    void includeLoss(double loss);  // widens the loss axis's range to take `loss`

    QCustomPlot* m_plot;
    DecimatedGraph* m_train;
    DecimatedGraph* m_trainSmooth;  // the trend through the per-step noise
    QCPGraph* m_testLoss;
    QCPGraph* m_accuracy;
    double m_maxLoss = 0;
    double m_minLoss = 0;  // smallest positive loss, for the logarithmic axis
    double m_lastStep = 0;
    double m_ema = 0;          // exponential moving average of the training loss, biased
    double m_emaWeight = 0;    // towards 0 at the start; dividing by this removes the bias
    bool m_logLoss = false;
    ReplotPacer* m_pacer;
};

}  // namespace paralab::ui
