// The look every dashboard and timeline plot shares (title, light grid, legend under the plot)
// and the file dialog of their exports, so that the panels stay about their data.
#pragma once

#include <QString>

class QCheckBox;
class QComboBox;
class QCPAxis;
class QCPTextElement;
class QCustomPlot;
class QHBoxLayout;
class QWidget;

namespace paralab::ui::plotstyle {

QCPTextElement* addTitle(QCustomPlot* plot, const QString& title);
void styleGrid(QCustomPlot* plot);
// Moves the legend out of the axis rect to a row under it (no curve is ever hidden by it),
// filled row by row, `columns` items wide.
void putLegendBelow(QCustomPlot* plot, int columns);

// The start of a loss plot's row of controls, the same on the Training and Devices tabs: "X axis:"
// with "optimizer step" (index 0) and "wall time (s)" (index 1), then the "Log loss" box; named
// xAxisBox and logLossBox for tests.
void addLossControls(QHBoxLayout* row, QComboBox* xAxis, QCheckBox* logLoss);
// A setter called from code shows the value in its control without the control calling back.
void showQuietly(QComboBox* box, int index);
void showQuietly(QCheckBox* box, bool checked);
// An axis to logarithmic scale or back, with the matching ticker.
void setLogarithmic(QCPAxis* axis, bool on);
// A vertical axis's label that fits: `full` where the axis rect is tall enough for it (in the
// label's current font, so presentation mode's larger one counts), else `brief` (a small plot
// at 720 px, say), chosen again before every replot. Calling it again replaces both.
void setFittedLabel(QCPAxis* axis, const QString& full, const QString& brief);

enum class ExportKind { Image, Csv, ImageOrCsv };
// Asks for a file name; adds the chosen filter's suffix (".png" by default, ".csv" for Csv)
// when the user typed no known suffix. Empty when cancelled.
QString askExportPath(QWidget* parent, const QString& suggestedName, ExportKind kind);
void reportExportFailure(QWidget* parent, const QString& path);

}  // namespace paralab::ui::plotstyle
