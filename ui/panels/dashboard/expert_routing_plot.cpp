#include "ui/panels/dashboard/expert_routing_plot.h"

#include <QVBoxLayout>

#include <qcustomplot.h>

#include <algorithm>
#include "ui/panels/common/palette.h"
#include "ui/panels/common/plot_style.h"

namespace paralab::ui {

ExpertRoutingPlot::ExpertRoutingPlot(QWidget* parent) : QWidget(parent), m_plot(new QCustomPlot) {
    setObjectName(QStringLiteral("expertRoutingPlot"));
    m_plot->setMinimumHeight(180);
    m_title = plotstyle::addTitle(m_plot, QString());
    plotstyle::styleGrid(m_plot);
    m_plot->xAxis->setLabel(tr("expert"));
    m_plot->yAxis->setLabel(tr("tokens"));
    m_plot->xAxis->setSubTicks(false);
    m_plot->xAxis->grid()->setVisible(false);
    m_group = new QCPBarsGroup(m_plot);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(m_plot);
    clear();
}

void ExpertRoutingPlot::clear() {
    for (QCPBars* b : std::as_const(m_bars)) m_plot->removePlottable(b);
    m_bars.clear();
    m_title->setText(QString());
    setVisible(false);
}

// moe[l].tokens_per_expert[e] -> bar l of expert e's group (keys 0 .. E-1).
void ExpertRoutingPlot::addSteps(const QVector<config::StepRecord>& steps) {
    const config::StepRecord* last = nullptr;
    for (const config::StepRecord& r : steps)
        if (!r.moe.empty()) last = &r;
    if (!last) return;
    while (m_bars.size() < static_cast<int>(last->moe.size())) {
        auto* bars = new QCPBars(m_plot->xAxis, m_plot->yAxis);
        const QColor c = palette::deviceColor(m_bars.size());
        bars->setPen(QPen(c.darker(130)));
        bars->setBrush(c);
        bars->setWidth(0.8 / static_cast<double>(last->moe.size()));
        bars->setBarsGroup(m_group);
        m_bars.append(bars);
    }
    double aux = 0, z = 0, top = 1;
    int64_t dropped = 0;
    size_t experts = 0;
    for (size_t l = 0; l < last->moe.size(); ++l) {
        const config::MoERecord& m = last->moe[l];
        QVector<double> keys, values;
        for (size_t e = 0; e < m.tokens_per_expert.size(); ++e) {
            keys.append(static_cast<double>(e));
            values.append(static_cast<double>(m.tokens_per_expert[e]));
            top = std::max(top, values.back());
        }
        m_bars[static_cast<int>(l)]->setName(QString::fromStdString(m.layer));
        m_bars[static_cast<int>(l)]->setData(keys, values, true);
        experts = std::max(experts, m.tokens_per_expert.size());
        aux += m.aux_loss;
        z += m.router_z_loss;
        dropped += m.dropped_tokens;
    }
    m_title->setText(tr("Tokens per expert at step %1 · auxiliary losses %2 · dropped %3")
                         .arg(last->step)
                         .arg(aux + z, 0, 'g', 4)
                         .arg(dropped));
    m_plot->xAxis->setRange(-0.6, static_cast<double>(experts) - 0.4);
    m_plot->yAxis->setRange(0, top * 1.1);
    setVisible(true);
}

void ExpertRoutingPlot::replot() {
    if (!isHidden()) m_plot->replot(QCustomPlot::rpRefreshHint);
}

QVector<double> ExpertRoutingPlot::tokens(int layer) const {
    QVector<double> out;
    if (layer < 0 || layer >= m_bars.size()) return out;
    for (auto it = m_bars[layer]->data()->constBegin(); it != m_bars[layer]->data()->constEnd(); ++it)
        out.append(it->value);
    return out;
}

QString ExpertRoutingPlot::title() const { return m_title->text(); }

}  // namespace paralab::ui
