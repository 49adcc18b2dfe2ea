#include "ui/panels/dashboard/loss_plot_panel.h"

#include <QMenu>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ui/panels/common/replot_pacer.h"
#include "ui/panels/dashboard/decimated_graph.h"

namespace paralab::ui {

namespace {
// Matplotlib's first three colours: familiar to anyone who has plotted a loss curve before.
const QColor kTrainColor(31, 119, 180);
const QColor kTestLossColor(214, 39, 40);
const QColor kAccuracyColor(44, 160, 44);
// TensorBoard's default smoothing: the trend is readable, yet lags only ~10 steps.
constexpr double kSmoothing = 0.9;
}  // namespace

LossPlotPanel::LossPlotPanel(QWidget* parent)
    : QWidget(parent),
      m_plot(new QCustomPlot(this)),
      m_pacer(new ReplotPacer(this, [this] { m_plot->replot(QCustomPlot::rpRefreshHint); })) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(m_plot);

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

    m_plot->setContextMenuPolicy(Qt::CustomContextMenu);
    connect(m_plot, &QWidget::customContextMenuRequested, this, &LossPlotPanel::showContextMenu);
    clear();
}

void LossPlotPanel::clear() {
    m_train->clearPoints();
    m_trainSmooth->clearPoints();
    m_ema = m_emaWeight = 0;
    m_testLoss->data()->clear();
    m_accuracy->data()->clear();
    m_maxLoss = 0;
    m_minLoss = std::numeric_limits<double>::infinity();
    m_lastStep = 0;
    fitToData();
}

void LossPlotPanel::addSteps(const QVector<run::StepRecord>& steps) {
    for (const auto& s : steps) {
        m_train->append(static_cast<double>(s.step), s.loss);
        // The step that ends a diverging run carries an infinite or NaN loss: plotted as a
        // gap, and kept out of the averages and the axis range.
        if (!std::isfinite(s.loss)) continue;
        m_ema = kSmoothing * m_ema + (1 - kSmoothing) * s.loss;
        m_emaWeight = kSmoothing * m_emaWeight + (1 - kSmoothing);
        m_trainSmooth->append(static_cast<double>(s.step), m_ema / m_emaWeight);
        includeLoss(s.loss);
    }
    if (!steps.isEmpty()) m_lastStep = static_cast<double>(steps.back().step);
    fitRanges();
    m_pacer->request();
}

void LossPlotPanel::addEval(const run::EvalResult& eval) {
    m_testLoss->addData(static_cast<double>(eval.step), eval.loss);
    if (std::isfinite(eval.loss)) includeLoss(eval.loss);
    if (eval.accuracy) m_accuracy->addData(static_cast<double>(eval.step), *eval.accuracy);
    m_lastStep = std::max(m_lastStep, static_cast<double>(eval.step));
    fitRanges();
    m_pacer->request();
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
    m_plot->xAxis->setRange(0, std::max(10.0, m_lastStep * 1.02));
    const double top = m_maxLoss > 0 ? m_maxLoss : 1.0;
    if (m_logLoss) {
        const double bottom = std::isfinite(m_minLoss) ? m_minLoss : top / 100;
        m_plot->yAxis->setRange(bottom / 1.5, top * 1.5);
    } else {
        m_plot->yAxis->setRange(0, top * 1.05);
    }
}

void LossPlotPanel::setLogarithmicLoss(bool on) {
    m_logLoss = on;
    m_plot->yAxis->setScaleType(on ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
    if (on) m_plot->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>::create());
    else m_plot->yAxis->setTicker(QSharedPointer<QCPAxisTicker>::create());
    fitToData();
}

int LossPlotPanel::pointCount() const { return m_train->dataCount(); }
int LossPlotPanel::evalPointCount() const { return m_testLoss->dataCount(); }

bool LossPlotPanel::exportTo(const QString& path) {
    return plotexport::saveImage(m_plot, path);
}

bool LossPlotPanel::exportCsv(const QString& path) const {
    return plotexport::saveCsv(m_plot, path);
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
