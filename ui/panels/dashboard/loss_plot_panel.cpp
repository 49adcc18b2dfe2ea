#include "ui/panels/dashboard/loss_plot_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QMenu>
#include <QToolButton>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

#include "ui/panels/common/plot_style.h"
#include "ui/panels/common/replot_pacer.h"
#include "ui/panels/dashboard/decimated_graph.h"
#include "ui/panels/dashboard/text_sample_panel.h"

namespace paralab::ui {

namespace {
// Matplotlib's first three colours: familiar to anyone who has plotted a loss curve before.
const QColor kTrainColor(31, 119, 180);
const QColor kTestLossColor(214, 39, 40);
const QColor kAccuracyColor(44, 160, 44);
const QColor kLearningRateColor(148, 103, 189);  // matplotlib's fifth
const QColor kAuxColor(255, 127, 14);            // matplotlib's second
// TensorBoard's default smoothing: the trend is readable, yet lags only ~10 steps.
constexpr double kSmoothing = 0.9;
}  // namespace

LossPlotPanel::LossPlotPanel(QWidget* parent)
    : QWidget(parent),
      m_xAxisBox(new QComboBox),
      m_logBox(new QCheckBox),
      m_plot(new QCustomPlot(this)),
      m_pacer(new ReplotPacer(this, [this] { m_plot->replot(QCustomPlot::rpRefreshHint); })),
      m_textSample(new TextSamplePanel) {
    // The same controls, in the same places, as the Devices tab's.
    auto* controls = new QHBoxLayout;
    plotstyle::addLossControls(controls, m_xAxisBox, m_logBox);
    controls->addStretch(1);
    auto* exportButton = new QToolButton;
    exportButton->setText(tr("Export…"));
    exportButton->setObjectName(QStringLiteral("exportButton"));
    exportButton->setToolTip(tr("The plot as PNG or PDF, or its curves as CSV"));
    connect(exportButton, &QToolButton::clicked, this, &LossPlotPanel::exportWithDialog);
    controls->addWidget(exportButton);

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addLayout(controls);
    layout->addWidget(m_plot, 1);
    layout->addWidget(m_textSample);
    connect(m_xAxisBox, &QComboBox::currentIndexChanged, this,
            [this](int index) { setXAxis(index == 1 ? XAxis::WallTime : XAxis::Step); });
    connect(m_logBox, &QCheckBox::toggled, this, &LossPlotPanel::setLogarithmicLoss);

    m_plot->setAntialiasedElements(QCP::aePlottables | QCP::aeLegendItems);
    m_plot->plotLayout()->insertRow(0);
    QFont titleFont = font();
    titleFont.setPointSizeF(titleFont.pointSizeF() * 1.2);
    titleFont.setBold(true);
    m_plot->plotLayout()->addElement(0, 0, new QCPTextElement(m_plot, tr("Training"), titleFont));

    m_train = new DecimatedGraph(m_plot->xAxis, m_plot->yAxis);
    m_train->setName(tr("training loss (per step)"));
    m_train->setPen(QPen(kTrainColor.lighter(165), 1));

    m_trainSmooth = new DecimatedGraph(m_plot->xAxis, m_plot->yAxis);
    m_trainSmooth->setName(tr("training loss (smoothed)"));
    m_trainSmooth->setPen(QPen(kTrainColor, 2));

    // Part of the training loss above (added to it by each mixture-of-experts layer), shown only
    // for a model that has one.
    m_aux = new DecimatedGraph(m_plot->xAxis, m_plot->yAxis);
    m_aux->setName(tr("auxiliary losses (load balance + router z, in the loss)"));
    m_aux->setPen(QPen(kAuxColor, 1.5));
    m_aux->removeFromLegend();

    m_testLoss = m_plot->addGraph();
    m_testLoss->setName(tr("test loss"));
    m_testLoss->setPen(QPen(kTestLossColor, 2));
    m_testLoss->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, kTestLossColor, Qt::white, 7));

    m_accuracy = m_plot->addGraph(m_plot->xAxis, m_plot->yAxis2);
    m_accuracy->setName(tr("test accuracy (right axis)"));
    m_accuracy->setPen(QPen(kAccuracyColor, 2));
    m_accuracy->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDiamond, kAccuracyColor, Qt::white, 8));

    m_plot->xAxis->setLabel(tr("optimizer step"));
    m_plot->yAxis->setLabel(tr("loss"));
    m_plot->yAxis2->setLabel(tr("test accuracy"));
    m_plot->yAxis2->setVisible(true);
    // A little headroom above 1 so that a point at 100 % is not cut in half by the frame.
    m_plot->yAxis2->setRange(0, 1.04);
    auto percent = QSharedPointer<QCPAxisTickerFixed>::create();
    percent->setTickStep(0.2);
    m_plot->yAxis2->setTicker(percent);
    for (QCPAxis* axis : {m_plot->xAxis, m_plot->yAxis}) {
        axis->grid()->setPen(QPen(QColor(225, 225, 225), 1, Qt::SolidLine));
        axis->grid()->setZeroLinePen(Qt::NoPen);
    }
    m_plot->yAxis2->grid()->setVisible(false);  // one grid is enough; two disagree

    // Loss falls to the bottom and accuracy climbs to the top: the middle right stays free.
    m_plot->legend->setVisible(true);
    m_plot->legend->setBrush(QColor(255, 255, 255, 220));
    m_plot->legend->setBorderPen(QPen(QColor(200, 200, 200)));
    m_plot->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignVCenter | Qt::AlignRight);
    m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    m_plot->axisRect()->setRangeDragAxes(m_plot->xAxis, m_plot->yAxis);
    m_plot->axisRect()->setRangeZoomAxes(m_plot->xAxis, m_plot->yAxis);

    // The learning rate in a strip under the loss, on the same x (its ticks line up with the
    // loss plot's labels just above): a schedule's warm-up and decay beside what they did.
    m_lrRect = new QCPAxisRect(m_plot);
    m_plot->plotLayout()->addElement(2, 0, m_lrRect);
    m_plot->plotLayout()->setRowStretchFactor(1, 5);
    m_plot->plotLayout()->setRowStretchFactor(2, 1);
    auto* margins = new QCPMarginGroup(m_plot);
    m_plot->axisRect()->setMarginGroup(QCP::msLeft | QCP::msRight, margins);
    m_lrRect->setMarginGroup(QCP::msLeft | QCP::msRight, margins);
    QCPAxis* lrX = m_lrRect->axis(QCPAxis::atBottom);
    QCPAxis* lrY = m_lrRect->axis(QCPAxis::atLeft);
    m_lrRect->axis(QCPAxis::atRight)->setVisible(true);  // the same frame as the loss plot's
    m_lrRect->axis(QCPAxis::atRight)->setTicks(false);
    lrX->setTickLabels(false);
    plotstyle::setFittedLabel(lrY, tr("learning rate"), tr("lr"));
    lrY->ticker()->setTickCount(2);
    for (QCPAxis* axis : {lrX, lrY}) {
        axis->grid()->setPen(QPen(QColor(225, 225, 225), 1, Qt::SolidLine));
        axis->grid()->setZeroLinePen(Qt::NoPen);
    }
    m_learningRate = new DecimatedGraph(lrX, lrY);
    m_learningRate->setName(tr("learning rate"));
    m_learningRate->setPen(QPen(kLearningRateColor, 1.5));
    m_learningRate->removeFromLegend();
    // Dragged or zoomed, the loss plot takes the strip along.
    connect(m_plot->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), lrX,
            qOverload<const QCPRange&>(&QCPAxis::setRange));

    m_plot->setContextMenuPolicy(Qt::CustomContextMenu);
    connect(m_plot, &QWidget::customContextMenuRequested, this, &LossPlotPanel::showContextMenu);
    clear();
}

void LossPlotPanel::clear() {
    m_train->clearPoints();
    m_trainSmooth->clearPoints();
    m_aux->clearPoints();
    m_aux->removeFromLegend();
    m_learningRate->clearPoints();
    m_maxLearningRate = 0;
    m_ema = m_emaWeight = 0;
    m_testLoss->data()->clear();
    m_accuracy->data()->clear();
    m_points.clear();
    m_evals.clear();
    m_maxLoss = 0;
    m_minLoss = std::numeric_limits<double>::infinity();
    m_lastKey = 0;
    m_textSample->clear();
    fitToData();
}

void LossPlotPanel::addSteps(const QVector<config::StepRecord>& steps) {
    if (steps.isEmpty()) return;
    for (const auto& s : steps) {
        TrainingPoint p{static_cast<double>(s.step), s.wall_s, s.loss,
                        std::numeric_limits<double>::quiet_NaN(), s.lr, std::numeric_limits<double>::quiet_NaN()};
        const double key = keyOf(p.step, p.wall);
        m_train->append(key, s.loss);
        if (!s.moe.empty()) {
            p.aux = 0;
            for (const config::MoERecord& m : s.moe) p.aux += m.aux_loss + m.router_z_loss;
            if (m_aux->dataCount() == 0) m_aux->addToLegend();
            m_aux->append(key, p.aux);
            if (std::isfinite(p.aux)) includeLoss(p.aux);
        }
        m_learningRate->append(key, s.lr);
        if (std::isfinite(s.lr)) m_maxLearningRate = std::max(m_maxLearningRate, s.lr);
        // The step that ends a diverging run carries an infinite or NaN loss: plotted as a
        // gap, and kept out of the averages and the axis range.
        if (std::isfinite(s.loss)) {
            m_ema = kSmoothing * m_ema + (1 - kSmoothing) * s.loss;
            m_emaWeight = kSmoothing * m_emaWeight + (1 - kSmoothing);
            p.smoothed = m_ema / m_emaWeight;
            m_trainSmooth->append(key, p.smoothed);
            includeLoss(s.loss);
        }
        m_lastKey = std::max(m_lastKey, key);
        m_points.append(p);
    }
    // By wall time, an evaluation that came before the step it followed moves to that step's
    // time (evaluations are a few per run: placing them all again costs nothing).
    if (m_xAxis == XAxis::WallTime && !m_evals.isEmpty()) replaceEvalPoints();
    fitRanges();
    m_pacer->request();
}

void LossPlotPanel::addEval(const config::EvalResult& eval) {
    const EvalPoint e{static_cast<double>(eval.step), eval.loss, eval.accuracy};
    m_evals.append(e);
    const double key = keyOf(e.step, wallAtStep(e.step));
    m_testLoss->addData(key, e.loss);
    if (std::isfinite(e.loss)) includeLoss(e.loss);
    if (e.accuracy) m_accuracy->addData(key, *e.accuracy);
    m_lastKey = std::max(m_lastKey, key);
    m_textSample->showEval(eval);
    fitRanges();
    m_pacer->request();
}

double LossPlotPanel::wallAtStep(double step) const {
    const auto after = std::upper_bound(m_points.begin(), m_points.end(), step,
                                        [](double s, const TrainingPoint& p) { return s < p.step; });
    return after == m_points.begin() ? 0.0 : std::prev(after)->wall;
}

void LossPlotPanel::replaceTrainingCurves() {
    QVector<QCPGraphData> raw, smooth, lr, aux;
    raw.reserve(m_points.size());
    smooth.reserve(m_points.size());
    lr.reserve(m_points.size());
    for (const TrainingPoint& p : m_points) {
        const double key = keyOf(p.step, p.wall);
        raw.append({key, p.loss});
        lr.append({key, p.lr});
        if (std::isfinite(p.smoothed)) smooth.append({key, p.smoothed});
        if (!std::isnan(p.aux)) aux.append({key, p.aux});
    }
    // Steps arrive in order; wall times do too, but a merged job's are not promised to.
    const bool sorted = m_xAxis == XAxis::Step;
    m_train->setPoints(raw, sorted);
    m_trainSmooth->setPoints(smooth, sorted);
    m_aux->setPoints(aux, sorted);
    m_learningRate->setPoints(lr, sorted);
}

void LossPlotPanel::replaceEvalPoints() {
    m_testLoss->data()->clear();
    m_accuracy->data()->clear();
    for (const EvalPoint& e : m_evals) {
        const double key = keyOf(e.step, wallAtStep(e.step));
        m_testLoss->addData(key, e.loss);
        if (e.accuracy) m_accuracy->addData(key, *e.accuracy);
    }
}

void LossPlotPanel::setXAxis(XAxis axis) {
    plotstyle::showQuietly(m_xAxisBox, axis == XAxis::WallTime ? 1 : 0);
    if (axis == m_xAxis) return;
    m_xAxis = axis;
    m_plot->xAxis->setLabel(axis == XAxis::Step ? tr("optimizer step") : tr("wall time (s)"));
    replaceTrainingCurves();
    replaceEvalPoints();
    m_lastKey = 0;
    for (const TrainingPoint& p : m_points) m_lastKey = std::max(m_lastKey, keyOf(p.step, p.wall));
    for (const EvalPoint& e : m_evals) m_lastKey = std::max(m_lastKey, keyOf(e.step, wallAtStep(e.step)));
    fitToData();
}

void LossPlotPanel::includeLoss(double loss) {
    m_maxLoss = std::max(m_maxLoss, loss);
    if (loss > 0) m_minLoss = std::min(m_minLoss, loss);
}

void LossPlotPanel::fitToData() {
    fitRanges();
    m_pacer->drawNow();
}

void LossPlotPanel::fitRanges() {
    // At least 10 steps or 1 s wide, so that a run's first points do not fill the plot.
    m_plot->xAxis->setRange(0, std::max(m_xAxis == XAxis::Step ? 10.0 : 1.0, m_lastKey * 1.02));
    m_lrRect->axis(QCPAxis::atLeft)->setRange(0, m_maxLearningRate > 0 ? m_maxLearningRate * 1.1 : 1.0);
    const double top = m_maxLoss > 0 ? m_maxLoss : 1.0;
    if (m_logLoss) {
        const double bottom = std::isfinite(m_minLoss) ? m_minLoss : top / 100;
        m_plot->yAxis->setRange(bottom / 1.5, top * 1.5);
    } else {
        m_plot->yAxis->setRange(0, top * 1.05);
    }
}

void LossPlotPanel::setLogarithmicLoss(bool on) {
    plotstyle::showQuietly(m_logBox, on);
    m_logLoss = on;
    plotstyle::setLogarithmic(m_plot->yAxis, on);
    fitToData();
}

int LossPlotPanel::pointCount() const { return m_train->dataCount(); }
int LossPlotPanel::auxPointCount() const { return m_aux->dataCount(); }
int LossPlotPanel::evalPointCount() const { return m_testLoss->dataCount(); }

bool LossPlotPanel::exportTo(const QString& path) {
    return plotexport::saveImage(m_plot, path);
}

bool LossPlotPanel::exportCsv(const QString& path) const {
    // On screen the strip's x axis has no label (the loss plot's is just above it); in the file
    // its rows name their axis like every other series'.
    QCPAxis* lrX = m_lrRect->axis(QCPAxis::atBottom);
    lrX->setLabel(m_plot->xAxis->label());
    const bool ok = plotexport::saveCsv(m_plot, path);
    lrX->setLabel(QString());
    return ok;
}

QVector<PlotExport> LossPlotPanel::plotExports() {
    return {{tr("Training: loss and accuracy"), QStringLiteral("paralab-training"),
             [this](const QString& path) { return exportTo(path); },
             [this](const QString& path) { return exportCsv(path); }}};
}

void LossPlotPanel::exportWithDialog() {
    plotexport::saveWithDialog(this, plotExports().front());
}

void LossPlotPanel::showContextMenu(const QPoint& pos) {
    QMenu menu(this);
    menu.addAction(tr("Export plot as PNG, PDF or CSV…"), this, &LossPlotPanel::exportWithDialog);
    menu.addAction(tr("Fit to data"), this, &LossPlotPanel::fitToData);
    QAction* log = menu.addAction(tr("Logarithmic loss axis"));
    log->setCheckable(true);
    log->setChecked(m_logLoss);
    connect(log, &QAction::toggled, this, &LossPlotPanel::setLogarithmicLoss);
    menu.exec(m_plot->mapToGlobal(pos));
}

}  // namespace paralab::ui
