// The Plan tab's painted view of a sweep: a heatmap, one cell per combination of the two swept
// keys, coloured by predicted throughput. (The selected configuration's predicted step is drawn
// by the Timeline tab's widget.)
#pragma once

#include <QString>
#include <QStringList>
#include <QWidget>

#include <vector>

#include "engine/plan/planner.h"

namespace paralab::ui {

// Rows are the second key's values, columns the first's; cell i is at (row i / columns,
// column i % columns). A configuration that fits is filled by its throughput on a viridis
// scale (legend on the right) and labelled with it and its MFU; one that does not fit is grey,
// hatched and labelled "OOM" with its throughput; a skipped one (the mesh cannot run: wrong
// device count, heads not divisible, ...) is pale, labelled "skipped", its reason in the
// tooltip. The best configuration that fits carries a star; the selected cell a black frame.
class PlanHeatmap : public QWidget {
    Q_OBJECT
public:
    explicit PlanHeatmap(QWidget* parent = nullptr);

    enum class Mark { fits, oom, skipped };
    // `cells` has xValues.size() · yValues.size() predictions, row by row; `metric` names the
    // value ("tokens/s" or "samples/s").
    void setGrid(const QString& xKey, const QStringList& xValues, const QString& yKey,
                 const QStringList& yValues, std::vector<plan::Prediction> cells,
                 const QString& metric);
    void clear();

    int cellCount() const { return static_cast<int>(m_cells.size()); }
    int columns() const { return m_xValues.size(); }
    int rows() const { return m_yValues.size(); }
    const plan::Prediction& cell(int i) const { return m_cells[static_cast<size_t>(i)]; }
    Mark mark(int i) const;
    double value(int i) const;            // the coloured value (tokens/s or samples/s)
    QString label(int i) const;           // the text drawn in the cell
    QString toolTipText(int i) const;     // the hover text (the reason of a skipped cell)
    QRect cellRect(int i) const;          // where cell i is drawn (widget coordinates)
    int cellAt(const QPoint& pos) const;  // -1 outside the grid
    int best() const { return m_best; }   // the fitting cell of most throughput, -1 when none
    int selected() const { return m_selected; }
    void setSelected(int i);

    QSize minimumSizeHint() const override { return {260, 180}; }
    QSize sizeHint() const override { return {520, 360}; }

signals:
    void cellClicked(int index);

protected:
    void paintEvent(QPaintEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    bool event(QEvent* event) override;

private:
    QRect gridRect() const;
    QString xKeyTitle() const;

    QString m_xKey, m_yKey, m_metric;
    QStringList m_xValues, m_yValues;
    std::vector<plan::Prediction> m_cells;
    double m_min = 0, m_max = 0;  // over the cells that fit
    int m_best = -1, m_selected = -1;
};

}  // namespace paralab::ui
