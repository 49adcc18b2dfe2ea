// A QCPGraph for long curves (a run's 100,000 steps per device): beside its points it keeps the
// smallest and largest value of every block of 8, 16, 32, ... consecutive points, so that a
// replot reads a few points per pixel column of the visible range instead of every point in it.
//
// QCustomPlot's own adaptive sampling draws the same picture (per pixel column, the line from
// the lowest to the highest point), but finds it by walking every visible point on each replot.
// Here a replot reads the level whose blocks are one to two pixel columns wide (one or two
// points per column: each stroke from a block's extreme to the next block's covers the band
// once); zooming in reads a finer level, down to the points themselves.
//
// The points are changed only through append() and setPoints() (not data()->add(...), which the
// block extremes would not see). Values that are NaN are left out of the extremes: a gap inside
// a block is not drawn at a zoom where the block is narrower than a pixel.
#pragma once

#include <qcustomplot.h>

#include <vector>

namespace paralab::ui {

class DecimatedGraph : public QCPGraph {
    Q_OBJECT
public:
    DecimatedGraph(QCPAxis* keyAxis, QCPAxis* valueAxis);

    // One point after the last (keys ascending; a smaller key is taken too, at a rebuild's cost).
    void append(double key, double value);
    void setPoints(const QVector<QCPGraphData>& points, bool alreadySorted);
    void clearPoints();

    // For tests: the points a replot of keys [lower, upper] at `pixels` columns would read.
    QVector<QCPGraphData> pointsFor(double lower, double upper, double pixels) const;
    int levelCount() const { return static_cast<int>(m_levels.size()); }

protected:
    // A curve read as block extremes (more points than pixel columns) is drawn one pixel wide
    // and without antialiasing: a band of near-vertical strokes covering every column looks the
    // same either way, and draws ~3x faster.
    void drawLinePlot(QCPPainter* painter, const QVector<QPointF>& lines) const override;
    void getOptimizedLineData(QVector<QCPGraphData>* lineData,
                              const QCPGraphDataContainer::const_iterator& begin,
                              const QCPGraphDataContainer::const_iterator& end) const override;

private:
    struct Extremes {
        int minAt = -1, maxAt = -1;  // indices into the data; -1: no finite value in the block
    };
    static constexpr int kFirstBlock = 8;  // points per block of level 0; each level doubles it
    void fold(int index);                  // takes point `index` into every level's last block
    void rebuildLevels();
    // Block extremes of [i0, i1) at the coarsest level with at least one block per two of the
    // `pixels` columns, or the points themselves when there are fewer than one per column.
    void decimate(QVector<QCPGraphData>* out, int i0, int i1, double pixels) const;

    std::vector<std::vector<Extremes>> m_levels;  // level k: blocks of kFirstBlock << k points
    mutable bool m_dense =
        false;  // the last replot read block extremes (set by getOptimizedLineData)
};

}  // namespace paralab::ui
