#include "ui/panels/common/plot_export.h"

#include <qcustomplot.h>
#include <QFile>
#include <QFileInfo>
#include <QTextStream>

#include <cmath>

#include "engine/config/experiment.h"
#include "engine/strategy/registry.h"
#include "ui/panels/common/plot_style.h"

namespace paralab::ui::plotexport {

namespace {
QString& currentCaption() {
    static QString caption;
    return caption;
}
}  // namespace

QString captionText(const QString& runName, qint64 runId, const QString& strategyLabel, int devices) {
    QString text = QObject::tr("Run %1").arg(runName);
    if (runId >= 0) text += QStringLiteral(" #%1").arg(runId);
    text += QStringLiteral(" · ") + QObject::tr("strategy %1").arg(strategyLabel);
    text += QStringLiteral(" · ") + (devices == 1 ? QObject::tr("1 device") : QObject::tr("%1 devices").arg(devices));
    return text;
}

QString captionFor(const config::Experiment& e, qint64 runId) {
    QString strategy = QString::fromStdString(e.strategy.type);
    const std::string variant = strategy::variant_label(e.strategy);
    if (!variant.empty()) strategy += QStringLiteral(" · ") + QString::fromStdString(variant);
    return captionText(QString::fromStdString(e.name), runId, strategy, static_cast<int>(e.devices.size()));
}

void setRunCaption(const QString& caption) { currentCaption() = caption; }
QString runCaption() { return currentCaption(); }

CaptionRow::CaptionRow(QCustomPlot* plot, const QString& caption) : m_plot(plot) {
    if (caption.isEmpty()) return;
    QFont font = plot->font();
    font.setPointSizeF(font.pointSizeF() * 0.9);
    m_element = new QCPTextElement(plot, caption, font);
    m_element->setObjectName(QStringLiteral("exportCaption"));
    m_element->setTextColor(QColor(70, 70, 70));
    m_element->setMargins(QMargins(6, 2, 6, 4));
    QCPLayoutGrid* layout = plot->plotLayout();
    const int row = layout->rowCount();
    layout->addElement(row, 0, m_element);
    layout->setRowStretchFactor(row, 0.001);
}

CaptionRow::~CaptionRow() {
    if (!m_element) return;
    QCPLayoutGrid* layout = m_plot->plotLayout();
    layout->remove(m_element);  // deletes it
    layout->simplify();
}

int captionHeight(QCustomPlot* plot) {
    QFont font = plot->font();
    font.setPointSizeF(font.pointSizeF() * 0.9);
    return QFontMetrics(font).height() + 8;
}

void drawCaption(QPainter& painter, const QRect& area, const QFont& base, const QString& caption) {
    QFont font = base;
    font.setPointSizeF(font.pointSizeF() * 0.9);
    painter.save();
    painter.setFont(font);
    painter.setPen(QColor(70, 70, 70));
    painter.drawText(area, Qt::AlignCenter | Qt::TextSingleLine, caption);
    painter.restore();
}

bool saveImage(QCustomPlot* plot, const QString& path, QSize fallback, const QString& caption) {
    // savePng/savePdf with a zero size take the widget's: a tab never opened is 0 x 0 or
    // Qt's default 640 x 480 before its first layout.
    const bool laidOut = plot->isVisible() && plot->width() >= 100 && plot->height() >= 100;
    const CaptionRow row(plot, caption.isNull() ? runCaption() : caption);
    const int w = laidOut ? 0 : fallback.width();
    const int h = laidOut ? 0 : fallback.height();
    bool ok = false;
    if (path.endsWith(QLatin1String(".pdf"), Qt::CaseInsensitive))
        ok = plot->savePdf(path, w, h) && QFileInfo(path).size() > 0;
    else
        ok = plot->savePng(path, w, h, 2.0);
    return ok;
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
