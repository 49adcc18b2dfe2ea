// Exports of one plot.
// Each panel lists its plots as PlotExports; the plot's context menu and File ▸ Export use the
// same list, so every plot drawn can be written both ways.
#pragma once

#include <QSize>
#include <QString>
#include <QVector>

#include <functional>

class QCustomPlot;
class QWidget;

namespace paralab::ui {

struct PlotExport {
    QString title;     // the File ▸ Export entry: "Devices: throughput"
    QString fileStem;  // the name the dialog suggests: "paralab-throughput"
    std::function<bool(const QString& path)> image;  // PNG or PDF by the suffix
    std::function<bool(const QString& path)> csv;    // the plot's data
};

namespace plotexport {

// PNG at twice the plot's pixels (sharp in slides) or PDF (vector), by the suffix; a plot never
// shown is laid out at `fallback` first. False when the file cannot be written.
bool saveImage(QCustomPlot* plot, const QString& path, QSize fallback = QSize(900, 560));
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
