#include "ui/panels/dashboard/decimated_graph.h"

#include <algorithm>
#include <cmath>

namespace paralab::ui {

DecimatedGraph::DecimatedGraph(QCPAxis* keyAxis, QCPAxis* valueAxis)
    : QCPGraph(keyAxis, valueAxis) {}

void DecimatedGraph::append(double key, double value) {
    const bool inOrder = mDataContainer->isEmpty() || key >= (mDataContainer->constEnd() - 1)->key;
    addData(key, value);
    if (inOrder)
        fold(mDataContainer->size() - 1);
    else
        rebuildLevels();
}

void DecimatedGraph::setPoints(const QVector<QCPGraphData>& points, bool alreadySorted) {
    mDataContainer->set(points, alreadySorted);
    rebuildLevels();
}

void DecimatedGraph::clearPoints() {
    mDataContainer->clear();
    m_levels.clear();
}

void DecimatedGraph::rebuildLevels() {
    m_levels.clear();
    for (int i = 0; i < mDataContainer->size(); ++i) fold(i);
}

void DecimatedGraph::fold(int index) {
    auto valueAt = [this](int i) { return (mDataContainer->constBegin() + i)->value; };
    const double value = valueAt(index);
    if (m_levels.empty()) m_levels.emplace_back();
    for (size_t level = 0; level < m_levels.size(); ++level) {
        auto& blocks = m_levels[level];
        const auto block = static_cast<size_t>(index / (kFirstBlock << level));
        if (blocks.size() <= block) blocks.resize(block + 1);
        if (std::isnan(value)) continue;
        Extremes& e = blocks[block];
        if (e.minAt < 0 || value < valueAt(e.minAt)) e.minAt = index;
        if (e.maxAt < 0 || value > valueAt(e.maxAt)) e.maxAt = index;
    }
    // A coarser level, made of pairs of blocks of the coarsest, once that has more than two.
    while (m_levels.back().size() > 2) {
        const std::vector<Extremes> finer = m_levels.back();
        std::vector<Extremes> coarser((finer.size() + 1) / 2);
        for (size_t j = 0; j < finer.size(); ++j) {
            Extremes& c = coarser[j / 2];
            const Extremes& f = finer[j];
            if (f.minAt < 0) continue;
            if (c.minAt < 0 || valueAt(f.minAt) < valueAt(c.minAt)) c.minAt = f.minAt;
            if (c.maxAt < 0 || valueAt(f.maxAt) > valueAt(c.maxAt)) c.maxAt = f.maxAt;
        }
        m_levels.push_back(std::move(coarser));
    }
}

void DecimatedGraph::decimate(QVector<QCPGraphData>* out, int i0, int i1, double pixels) const {
    out->clear();
    const auto first = mDataContainer->constBegin();
    const int n = i1 - i0;
    // The coarsest level whose blocks are at most two pixel columns wide: n / block >= pixels / 2.
    int level = -1;
    for (int k = static_cast<int>(m_levels.size()) - 1; k >= 0; --k)
        if (2 * static_cast<double>(n) / static_cast<double>(kFirstBlock << k) >= pixels) {
            level = k;
            break;
        }
    if (level < 0) {
        out->reserve(n);
        for (int i = i0; i < i1; ++i) out->append(*(first + i));
        return;
    }
    const int block = kFirstBlock << level;
    const auto& blocks = m_levels[static_cast<size_t>(level)];
    out->reserve(2 * (n / block) + 2 * block + 2);
    int i = i0;
    // Points before the first whole block and after the last one are taken as they are.
    const int headEnd = std::min(i1, (i0 + block - 1) / block * block);
    for (; i < headEnd; ++i) out->append(*(first + i));
    for (; i + block <= i1; i += block) {
        const Extremes& e = blocks[static_cast<size_t>(i / block)];
        if (e.minAt < 0) continue;
        const int a = std::min(e.minAt, e.maxAt), b = std::max(e.minAt, e.maxAt);
        out->append(*(first + a));
        if (b != a) out->append(*(first + b));
    }
    for (; i < i1; ++i) out->append(*(first + i));
}

void DecimatedGraph::drawLinePlot(QCPPainter* painter, const QVector<QPointF>& lines) const {
    if (!m_dense) {
        QCPGraph::drawLinePlot(painter, lines);  // antialiased as the graph says
        return;
    }
    if (painter->pen().style() == Qt::NoPen || painter->pen().color().alpha() == 0) return;
    // One pixel wide, too: every column is already covered by the strokes between the blocks'
    // extremes, so a wider pen adds nothing but QPainter's stroker (25 % of a Devices replot).
    painter->setAntialiasing(false);
    QPen pen = painter->pen();
    pen.setWidth(0);  // cosmetic: the raster engine's line loop
    painter->setPen(pen);
    drawPolyline(painter, lines);
}

void DecimatedGraph::getOptimizedLineData(QVector<QCPGraphData>* lineData,
                                          const QCPGraphDataContainer::const_iterator& begin,
                                          const QCPGraphDataContainer::const_iterator& end) const {
    if (!lineData) return;
    QCPAxis* keyAxis = mKeyAxis.data();
    m_dense = false;
    if (!keyAxis || !mAdaptiveSampling || lineStyle() != lsLine || begin == end) {
        QCPGraph::getOptimizedLineData(lineData, begin, end);
        return;
    }
    const double pixels = std::max(
        1.0, std::abs(keyAxis->coordToPixel((end - 1)->key) - keyAxis->coordToPixel(begin->key)));
    const auto first = mDataContainer->constBegin();
    const int n = static_cast<int>(end - begin);
    decimate(lineData, static_cast<int>(begin - first), static_cast<int>(end - first), pixels);
    m_dense = lineData->size() < n;
}

QVector<QCPGraphData> DecimatedGraph::pointsFor(double lower, double upper, double pixels) const {
    QVector<QCPGraphData> out;
    const auto first = mDataContainer->constBegin();
    const auto begin = mDataContainer->findBegin(lower, false);
    const auto end = mDataContainer->findEnd(upper, false);
    decimate(&out, static_cast<int>(begin - first), static_cast<int>(end - first),
             std::max(1.0, pixels));
    return out;
}

}  // namespace paralab::ui
