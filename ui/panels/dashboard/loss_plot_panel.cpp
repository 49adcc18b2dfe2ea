#include "ui/panels/dashboard/loss_plot_panel.h"

#include <QVBoxLayout>
#include <qcustomplot.h>

#include <algorithm>

namespace paralab::ui {

LossPlotPanel::LossPlotPanel(QWidget* parent) : QWidget(parent), m_plot(new QCustomPlot(this)) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(m_plot);

    m_plot->setAntialiasedElements(QCP::aePlottables);
    m_plot->plotLayout()->insertRow(0);
    m_plot->plotLayout()->addElement(0, 0, new QCPTextElement(m_plot, tr("Training"), QFont("sans", 11, QFont::Bold)));

    m_train = m_plot->addGraph();
    m_train->setName(tr("training loss"));
    m_train->setPen(QPen(QColor(31, 119, 180), 1.5));

    m_testLoss = m_plot->addGraph();
    m_testLoss->setName(tr("test loss"));
    m_testLoss->setPen(QPen(QColor(214, 39, 40), 1.5));
    m_testLoss->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 6));

    m_accuracy = m_plot->addGraph(m_plot->xAxis, m_plot->yAxis2);
    m_accuracy->setName(tr("test accuracy"));
    m_accuracy->setPen(QPen(QColor(44, 160, 44), 1.5));
    m_accuracy->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDiamond, 7));

    m_plot->xAxis->setLabel(tr("optimizer step"));
    m_plot->yAxis->setLabel(tr("loss"));
    m_plot->yAxis2->setLabel(tr("accuracy"));
    m_plot->yAxis2->setVisible(true);
    m_plot->yAxis2->setRange(0, 1);
    for (QCPAxis* axis : {m_plot->xAxis, m_plot->yAxis, m_plot->yAxis2})
        axis->grid()->setPen(QPen(QColor(220, 220, 220), 1, Qt::DotLine));
    m_plot->legend->setVisible(true);
    m_plot->legend->setBrush(QColor(255, 255, 255, 200));
    m_plot->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
    m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    clear();
}

void LossPlotPanel::clear() {
    m_train->data()->clear();
    m_testLoss->data()->clear();
    m_accuracy->data()->clear();
    m_maxLoss = 0;
    m_plot->xAxis->setRange(0, 10);
    m_plot->yAxis->setRange(0, 1);
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void LossPlotPanel::addSteps(const QVector<run::StepRecord>& steps) {
    for (const auto& s : steps) {
        m_train->addData(static_cast<double>(s.step), s.loss);
        m_maxLoss = std::max(m_maxLoss, s.loss);
    }
    if (!steps.isEmpty()) {
        m_plot->xAxis->setRange(0, std::max(10.0, static_cast<double>(steps.back().step) * 1.02));
        m_plot->yAxis->setRange(0, m_maxLoss * 1.05);
    }
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void LossPlotPanel::addEval(const run::EvalResult& eval) {
    m_testLoss->addData(static_cast<double>(eval.step), eval.loss);
    m_maxLoss = std::max(m_maxLoss, eval.loss);
    if (eval.accuracy) m_accuracy->addData(static_cast<double>(eval.step), *eval.accuracy);
    m_plot->yAxis->setRange(0, m_maxLoss * 1.05);
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

int LossPlotPanel::pointCount() const { return m_train->dataCount(); }

bool LossPlotPanel::exportTo(const QString& path) {
    if (path.endsWith(QLatin1String(".pdf"), Qt::CaseInsensitive)) return m_plot->savePdf(path);
    return m_plot->savePng(path, 0, 0, 2.0);
}

}  // namespace paralab::ui
