// Training loss per step (and, for a mixture of experts, the auxiliary losses it includes), and
// test loss / accuracy at each evaluation, on one QCustomPlot, with
// the learning rate in a strip under it; by optimizer step or by wall time (the controls above
// the plot: X axis, log loss, export). Under the plot, for a text model, the text its latest
// evaluation generated (TextSamplePanel).
// Steps arrive in batches; redraws are paced to their cost and skipped while the panel is hidden
// (ReplotPacer), and the per-step curves are DecimatedGraphs (one or two points per pixel
// column), so that a long run costs the GUI thread no more than a short one.
#pragma once

#include <QVector>
#include <QWidget>

#include <optional>

#include "engine/run/trainer.h"
#include "ui/panels/common/plot_export.h"

class QCheckBox;
class QComboBox;
class QCustomPlot;
class QCPAxisRect;
class QCPGraph;

namespace paralab::ui {
class DecimatedGraph;
class ReplotPacer;
class TextSamplePanel;
}  // namespace paralab::ui

namespace paralab::ui {

class LossPlotPanel : public QWidget {
    Q_OBJECT
public:
    enum class XAxis { Step, WallTime };

    explicit LossPlotPanel(QWidget* parent = nullptr);

    void clear();
    void addSteps(const QVector<config::StepRecord>& steps);
    void addEval(const config::EvalResult& eval);
    int pointCount() const;        // training-loss points (one per step)
    int auxPointCount() const;     // auxiliary-loss points (one per step of a mixture of experts)
    int evalPointCount() const;    // test-loss points
    TextSamplePanel* textSample() const { return m_textSample; }
    bool logarithmicLoss() const { return m_logLoss; }
    XAxis xAxis() const { return m_xAxis; }
    // PNG or PDF by the file's suffix; false when the file cannot be written.
    bool exportTo(const QString& path);
    // The plot's curves as CSV (series,x_axis,x,y_axis,y): training loss raw and smoothed, the
    // auxiliary losses, test loss and accuracy.
    bool exportCsv(const QString& path) const;
    QVector<PlotExport> plotExports();

public slots:
    void exportWithDialog();  // PNG, PDF or CSV: asks for a file name; reports a failure
    void setLogarithmicLoss(bool on);
    // Re-plots every point at its step or at its wall time (an evaluation at the wall time of the
    // step it followed).
    void setXAxis(paralab::ui::LossPlotPanel::XAxis axis);
    void fitToData();                        // undoes the user's drag and zoom

private:
    void showContextMenu(const QPoint& pos);
    void fitRanges();  // the axes around the data
    void includeLoss(double loss);  // widens the loss axis's range to take `loss`
    double keyOf(double step, double wall) const { return m_xAxis == XAxis::Step ? step : wall; }
    double wallAtStep(double step) const;  // of the last training step at or before `step`
    void replaceTrainingCurves();          // every training point again, at the current axis
    void replaceEvalPoints();              // every evaluation again, at the current axis

    struct TrainingPoint {
        double step, wall, loss, smoothed;  // smoothed: NaN where the loss is not finite
        double lr;
        double aux;  // the mixture-of-experts layers' load-balancing and z-losses (NaN: none)
    };
    struct EvalPoint {
        double step, loss;
        std::optional<double> accuracy;
    };

    QComboBox* m_xAxisBox;
    QCheckBox* m_logBox;
    QCustomPlot* m_plot;
    DecimatedGraph* m_train;
    DecimatedGraph* m_trainSmooth;  // the trend through the per-step noise
    DecimatedGraph* m_aux;          // the auxiliary losses inside the training loss
    QCPAxisRect* m_lrRect;          // the learning-rate strip
    DecimatedGraph* m_learningRate;
    double m_maxLearningRate = 0;
    QCPGraph* m_testLoss;
    QCPGraph* m_accuracy;
    double m_maxLoss = 0;
    double m_minLoss = 0;  // smallest positive loss, for the logarithmic axis
    QVector<TrainingPoint> m_points;  // every step, in order (the curves are rebuilt from them)
    QVector<EvalPoint> m_evals;
    double m_lastKey = 0;  // the largest x of any point, on the current axis
    double m_ema = 0;          // exponential moving average of the training loss, biased
    double m_emaWeight = 0;    // towards 0 at the start; dividing by this removes the bias
    bool m_logLoss = false;
    XAxis m_xAxis = XAxis::Step;
    ReplotPacer* m_pacer;
    TextSamplePanel* m_textSample;
};

}  // namespace paralab::ui
