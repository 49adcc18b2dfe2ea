#include "ui/panels/common/plot_style.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QLabel>
#include <QMessageBox>
#include <qcustomplot.h>

#include <algorithm>

namespace paralab::ui::plotstyle {

QCPTextElement* addTitle(QCustomPlot* plot, const QString& title) {
    plot->plotLayout()->insertRow(0);
    QFont font = plot->font();
    font.setPointSizeF(font.pointSizeF() * 1.1);
    font.setBold(true);
    auto* element = new QCPTextElement(plot, title, font);
    element->setMargins(QMargins(0, 4, 0, 0));
    plot->plotLayout()->addElement(0, 0, element);
    return element;
}

void styleGrid(QCustomPlot* plot) {
    for (QCPAxis* axis : {plot->xAxis, plot->yAxis}) {
        axis->grid()->setPen(QPen(QColor(225, 225, 225), 1, Qt::SolidLine));
        axis->grid()->setZeroLinePen(Qt::NoPen);
    }
}

namespace {
// Keeps a legend under its plot as many items wide as the plot has room for (at most the
// columns asked), so that a narrow plot's legend wraps onto more rows rather than squeezing
// the axes or running past the plot's edge.
class LegendWrap : public QObject {
public:
    LegendWrap(QCustomPlot* plot, int columns) : QObject(plot), m_plot(plot), m_columns(columns) {
        setObjectName(QStringLiteral("legendWrap"));
        plot->installEventFilter(this);
        QObject::connect(plot, &QCustomPlot::beforeReplot, this, [this] { fit(); });
    }

protected:
    bool eventFilter(QObject* watched, QEvent* event) override {
        if (watched == m_plot && event->type() == QEvent::Resize) fit();
        return false;
    }

private:
    void fit() {
        QCPLegend* legend = m_plot->legend;
        int widest = 1;
        for (int i = 0; i < legend->itemCount(); ++i)
            if (QCPAbstractLegendItem* item = legend->item(i))
                widest = std::max(widest, item->minimumOuterSizeHint().width() + legend->columnSpacing());
        const int room = m_plot->width() - legend->margins().left() - legend->margins().right();
        const int columns = std::clamp(room / widest, 1, m_columns);
        if (columns == legend->wrap()) return;
        legend->setWrap(columns);
        legend->setFillOrder(QCPLegend::foColumnsFirst, true);
    }

    QCustomPlot* m_plot;
    int m_columns;
};
}  // namespace

void putLegendBelow(QCustomPlot* plot, int columns) {
    QCPLegend* legend = plot->legend;
    legend->setVisible(true);
    plot->axisRect()->insetLayout()->take(legend);
    const int row = plot->plotLayout()->rowCount();
    // In a row of its own beside an empty filler: an empty legend's largest size is its
    // margins, and alone in the plot's column it would hold the axes to their smallest width.
    auto* legendRow = new QCPLayoutGrid;
    plot->plotLayout()->addElement(row, 0, legendRow);
    plot->plotLayout()->setRowStretchFactor(row, 0.001);  // as small as its items allow
    legendRow->addElement(0, 0, legend);
    legendRow->addElement(0, 1, new QCPLayoutElement(plot));
    legendRow->setColumnStretchFactor(1, 0.001);
    legendRow->setColumnSpacing(0);
    legend->setWrap(columns);
    legend->setFillOrder(QCPLegend::foColumnsFirst, true);  // rearranges the items already there
    legend->setBorderPen(Qt::NoPen);
    legend->setBrush(Qt::NoBrush);
    legend->setMargins(QMargins(4, 0, 4, 2));
    legend->setRowSpacing(0);
    legend->setColumnSpacing(10);
    QFont font = plot->font();
    font.setPointSizeF(font.pointSizeF() * 0.9);
    legend->setFont(font);
    legend->setIconSize(18, 10);
    if (!plot->findChild<QObject*>(QStringLiteral("legendWrap"), Qt::FindDirectChildrenOnly)) new LegendWrap(plot, columns);
}

QString askExportPath(QWidget* parent, const QString& suggestedName, ExportKind kind) {
    const bool csv = kind == ExportKind::Csv;
    const QString png = QObject::tr("PNG image (*.png)"), pdf = QObject::tr("PDF document (*.pdf)"),
                  csvFilter = QObject::tr("CSV data (*.csv)");
    QStringList filters;
    if (kind != ExportKind::Csv) filters << png << pdf;
    if (kind != ExportKind::Image) filters << csvFilter;
    QString chosen;
    QString path = QFileDialog::getSaveFileName(
        parent, csv ? QObject::tr("Export data") : QObject::tr("Export plot"),
        suggestedName + (csv ? QLatin1String(".csv") : QLatin1String(".png")), filters.join(QLatin1String(";;")),
        &chosen);
    if (path.isEmpty()) return path;
    for (const QString& suffix : {QStringLiteral(".png"), QStringLiteral(".pdf"), QStringLiteral(".csv")}) {
        const bool allowed = suffix == QLatin1String(".csv") ? kind != ExportKind::Image : kind != ExportKind::Csv;
        if (allowed && path.endsWith(suffix, Qt::CaseInsensitive)) return path;
    }
    if (chosen == pdf) return path + QStringLiteral(".pdf");
    if (chosen == csvFilter || csv) return path + QStringLiteral(".csv");
    return path + QStringLiteral(".png");
}

void reportExportFailure(QWidget* parent, const QString& path) {
    QMessageBox::warning(parent, QObject::tr("Export failed"), QObject::tr("Could not write %1").arg(path));
}

void addLossControls(QHBoxLayout* row, QComboBox* xAxis, QCheckBox* logLoss) {
    row->setContentsMargins(6, 4, 6, 0);
    xAxis->addItem(QObject::tr("optimizer step"));
    xAxis->addItem(QObject::tr("wall time (s)"));
    xAxis->setObjectName(QStringLiteral("xAxisBox"));
    row->addWidget(new QLabel(QObject::tr("X axis:")));
    row->addWidget(xAxis);
    row->addSpacing(12);
    logLoss->setText(QObject::tr("Log loss"));
    logLoss->setObjectName(QStringLiteral("logLossBox"));
    row->addWidget(logLoss);
}

void showQuietly(QComboBox* box, int index) {
    if (box->currentIndex() == index) return;
    const QSignalBlocker block(box);
    box->setCurrentIndex(index);
}

void showQuietly(QCheckBox* box, bool checked) {
    if (box->isChecked() == checked) return;
    const QSignalBlocker block(box);
    box->setChecked(checked);
}

void setLogarithmic(QCPAxis* axis, bool on) {
    axis->setScaleType(on ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
    if (on) axis->setTicker(QSharedPointer<QCPAxisTickerLog>::create());
    else axis->setTicker(QSharedPointer<QCPAxisTicker>::create());
}

namespace {

// setFittedLabel's choice for one axis.
void fitLabel(QCPAxis* axis) {
    const QString full = axis->property("fittedFull").toString();
    const int room = axis->orientation() == Qt::Vertical ? axis->axisRect()->height() : axis->axisRect()->width();
    const int needs = QFontMetrics(axis->labelFont()).horizontalAdvance(full);
    const QString text = room <= 0 || needs <= room ? full : axis->property("fittedBrief").toString();
    if (axis->label() != text) axis->setLabel(text);
}

}  // namespace

void setFittedLabel(QCPAxis* axis, const QString& full, const QString& brief) {
    axis->setProperty("fittedFull", full);
    axis->setProperty("fittedBrief", brief);
    fitLabel(axis);
    QCustomPlot* plot = axis->parentPlot();
    if (plot->property("fittedLabels").toBool()) return;  // one connection per plot, for all its axes
    plot->setProperty("fittedLabels", true);
    QObject::connect(plot, &QCustomPlot::beforeReplot, plot, [plot] {
        for (QCPAxisRect* rect : plot->axisRects())
            for (QCPAxis* axis : rect->axes())
                if (axis->property("fittedFull").isValid()) fitLabel(axis);
    });
}

}  // namespace paralab::ui::plotstyle
