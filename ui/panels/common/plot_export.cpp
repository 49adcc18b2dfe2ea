#include "ui/panels/common/plot_export.h"

#include <qcustomplot.h>
#include <QFile>
#include <QFileInfo>
#include <QTextStream>

#include <cmath>

#include "ui/panels/common/plot_style.h"

namespace paralab::ui::plotexport {

bool saveImage(QCustomPlot* plot, const QString& path, QSize fallback) {
    // savePng/savePdf with a zero size take the widget's: a tab never opened is 0 x 0 or
    // Qt's default 640 x 480 before its first layout.
    const bool laidOut = plot->isVisible() && plot->width() >= 100 && plot->height() >= 100;
    const int w = laidOut ? 0 : fallback.width();
    const int h = laidOut ? 0 : fallback.height();
    if (path.endsWith(QLatin1String(".pdf"), Qt::CaseInsensitive))
        return plot->savePdf(path, w, h) && QFileInfo(path).size() > 0;
    return plot->savePng(path, w, h, 2.0);
}

QString csvField(const QString& text) {
    if (!text.contains(QLatin1Char(',')) && !text.contains(QLatin1Char('"')) &&
        !text.contains(QLatin1Char('\n')))
        return text;
    QString quoted = text;
    quoted.replace(QLatin1Char('"'), QLatin1String("\"\""));
    return QLatin1Char('"') + quoted + QLatin1Char('"');
}

namespace {
QString number(double v) {
    return std::isfinite(v) ? QString::number(v, 'g', 10) : QString();
}

QString keyText(const QCPAxis* axis, double key) {
    if (auto text = axis->ticker().dynamicCast<QCPAxisTickerText>()) {
        const auto it = text->ticks().constFind(key);
        if (it != text->ticks().constEnd())
            return QString(it.value()).replace(QLatin1Char('\n'), QLatin1Char(' '));
    }
    return number(key);
}
}  // namespace

bool saveCsv(QCustomPlot* plot, const QString& path) {
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) return false;
    QTextStream out(&file);
    out << "series,x_axis,x,y_axis,y\n";
    for (int i = 0; i < plot->plottableCount(); ++i) {
        QCPAbstractPlottable* p = plot->plottable(i);
        QCPPlottableInterface1D* data = p->interface1D();
        if (!data || !p->keyAxis() || !p->valueAxis()) continue;
        const QString series =
            csvField(p->name().isEmpty() ? QStringLiteral("series %1").arg(i + 1) : p->name());
        const QString xAxis = csvField(p->keyAxis()->label());
        const QString yAxis = csvField(p->valueAxis()->label());
        for (int k = 0; k < data->dataCount(); ++k)
            out << series << ',' << xAxis << ','
                << csvField(keyText(p->keyAxis(), data->dataMainKey(k))) << ',' << yAxis << ','
                << number(data->dataMainValue(k)) << '\n';
    }
    out.flush();
    return file.error() == QFileDevice::NoError;
}

bool save(const PlotExport& e, const QString& path) {
    if (path.endsWith(QLatin1String(".csv"), Qt::CaseInsensitive)) return e.csv && e.csv(path);
    return e.image && e.image(path);
}

void saveWithDialog(QWidget* parent, const PlotExport& e) {
    const QString path =
        plotstyle::askExportPath(parent, e.fileStem, plotstyle::ExportKind::ImageOrCsv);
    if (!path.isEmpty() && !save(e, path)) plotstyle::reportExportFailure(parent, path);
}

}  // namespace paralab::ui::plotexport
