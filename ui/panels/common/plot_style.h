// The look every dashboard and timeline plot shares (title, light grid, legend under the plot)
// and the file dialog of their exports, so that the panels stay about their data.
#pragma once

#include <QString>

class QCPTextElement;
class QCustomPlot;
class QWidget;

namespace paralab::ui::plotstyle {

QCPTextElement* addTitle(QCustomPlot* plot, const QString& title);
void styleGrid(QCustomPlot* plot);
// Moves the legend out of the axis rect to a row under it (no curve is ever hidden by it),
// filled row by row, `columns` items wide.
void putLegendBelow(QCustomPlot* plot, int columns);

enum class ExportKind { Image, Csv, ImageOrCsv };
// Asks for a file name; adds the chosen filter's suffix (".png" by default, ".csv" for Csv)
// when the user typed no known suffix. Empty when cancelled.
QString askExportPath(QWidget* parent, const QString& suggestedName, ExportKind kind);
void reportExportFailure(QWidget* parent, const QString& path);

}  // namespace paralab::ui::plotstyle
