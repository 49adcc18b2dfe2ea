// Exports of one plot.
// Each panel lists its plots as PlotExports; the plot's context menu and File ▸ Export use the
// same list, so every plot drawn can be written both ways.
#pragma once

#include <QSize>
#include <QString>
#include <QVector>

#include <functional>

class QCPTextElement;
class QCustomPlot;
class QFont;
class QPainter;
class QRect;
class QWidget;

namespace paralab::config {
struct Experiment;
}

namespace paralab::ui {

struct PlotExport {
    QString title;     // the File ▸ Export entry: "Devices: throughput"
    QString fileStem;  // the name the dialog suggests: "paralab-throughput"
    std::function<bool(const QString& path)> image;  // PNG or PDF by the suffix
    std::function<bool(const QString& path)> csv;    // the plot's data
};

namespace plotexport {

// The caption line every exported picture carries under its plots, so that a slide says what
// it shows: "Run spirals-mlp #12 · strategy ddp · bucket 25 MB · 4 devices" (the #id when the
// run is stored, the strategy's options as strategy::variant_label gives them).
QString captionText(const QString& runName, qint64 runId, const QString& strategyLabel, int devices);
QString captionFor(const config::Experiment& experiment, qint64 runId = -1);
// The caption of the window's plots: the run they show (the window sets it when an experiment
// opens and when a run starts). Pictures saved without a caption of their own carry it.
void setRunCaption(const QString& caption);
QString runCaption();
// The caption as a row under `plot`'s layout, for as long as the returned guard lives (nothing
// when `caption` is empty).
class CaptionRow {
public:
    CaptionRow(QCustomPlot* plot, const QString& caption);
    ~CaptionRow();
    CaptionRow(const CaptionRow&) = delete;
    CaptionRow& operator=(const CaptionRow&) = delete;

private:
    QCustomPlot* m_plot;
    QCPTextElement* m_element = nullptr;
};
// Height of the caption line drawn by drawCaption under a picture `width` wide.
int captionHeight(QCustomPlot* plot);
void drawCaption(QPainter& painter, const QRect& area, const QFont& font, const QString& caption);

// PNG at twice the plot's pixels (sharp in slides) or PDF (vector), by the suffix, with
// `caption` (runCaption() when null) under it; a plot never shown is laid out at `fallback`
// first. False when the file cannot be written.
bool saveImage(QCustomPlot* plot, const QString& path, QSize fallback = QSize(900, 560),
               const QString& caption = QString());
// Every plottable's points, one row each: series,x_axis,x,y_axis,y. A category axis (text
// ticker) gives its label as x ("cpu:1"), any other axis the number. False when the file
// cannot be written.
bool saveCsv(QCustomPlot* plot, const QString& path);
// A field quoted when it holds a comma, a quote or a line break (RFC 4180).
QString csvField(const QString& text);
// `e.csv` for a ".csv" path, else `e.image`.
bool save(const PlotExport& e, const QString& path);
// Asks for a file (PNG, PDF or CSV), writes it, and reports a failure.
void saveWithDialog(QWidget* parent, const PlotExport& e);

}  // namespace plotexport
}  // namespace paralab::ui
