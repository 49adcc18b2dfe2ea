#include "ui/panels/plan/plan_views.h"

#include <QHelpEvent>
#include <QLocale>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QToolTip>

#include <algorithm>
#include <cmath>

#include "ui/panels/common/palette.h"

namespace paralab::ui {

namespace {

// Viridis (perceptually uniform, readable in grey and by colour-blind readers), five stops.
QColor viridis(double t) {
    static const QColor stops[] = {QColor(0x44, 0x01, 0x54), QColor(0x3b, 0x52, 0x8b),
                                   QColor(0x21, 0x91, 0x8c), QColor(0x5e, 0xc9, 0x62),
                                   QColor(0xfd, 0xe7, 0x25)};
    t = std::clamp(t, 0.0, 1.0) * 4;
    const int i = std::min(3, static_cast<int>(t));
    const double f = t - i;
    const QColor& a = stops[i];
    const QColor& b = stops[i + 1];
    return QColor::fromRgbF(static_cast<float>(a.redF() + f * (b.redF() - a.redF())),
                            static_cast<float>(a.greenF() + f * (b.greenF() - a.greenF())),
                            static_cast<float>(a.blueF() + f * (b.blueF() - a.blueF())));
}

bool dark(const QColor& c) {
    return 0.299 * c.redF() + 0.587 * c.greenF() + 0.114 * c.blueF() < 0.55;
}

// 1234567 -> "1.23 M", 45600 -> "45.6 k", 12.3 -> "12.3".
QString compact(double v) {
    const char* units[] = {"", " k", " M", " G", " T"};
    int u = 0;
    while (std::abs(v) >= 1000 && u < 4) {
        v /= 1000;
        ++u;
    }
    const int decimals = std::abs(v) >= 100 ? 0 : std::abs(v) >= 10 ? 1 : 2;
    // A narrow no-break space: "44.1 k" stays on one line in a narrow cell.
    return QString::number(v, 'f', decimals) +
           QString::fromLatin1(units[u]).replace(QLatin1Char(' '), QChar(0x202F));
}

QString seconds(double s) {
    if (s == 0) return QStringLiteral("0");
    if (s >= 1) return QStringLiteral("%1 s").arg(s, 0, 'f', s >= 100 ? 0 : 2);
    if (s >= 1e-3) return QStringLiteral("%1 ms").arg(s * 1e3, 0, 'f', s >= 0.1 ? 0 : 1);
    return QStringLiteral("%1 µs").arg(s * 1e6, 0, 'f', 1);
}

constexpr int kLeft = 64, kTop = 40, kRight = 86, kBottom = 12;  // the heatmap's margins

}  // namespace

// ---- the heatmap ------------------------------------------------------------------------------

PlanHeatmap::PlanHeatmap(QWidget* parent) : QWidget(parent) {
    setMouseTracking(true);
    setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding);
}

void PlanHeatmap::setGrid(const QString& xKey, const QStringList& xValues, const QString& yKey,
                          const QStringList& yValues, std::vector<plan::Prediction> cells,
                          const QString& metric) {
    m_xKey = xKey;
    m_yKey = yKey;
    m_xValues = xValues;
    m_yValues = yValues;
    m_cells = std::move(cells);
    m_metric = metric;
    m_min = m_max = 0;
    m_best = -1;
    bool any = false;
    for (int i = 0; i < cellCount(); ++i) {
        if (mark(i) != Mark::fits) continue;
        const double v = value(i);
        m_min = any ? std::min(m_min, v) : v;
        m_max = any ? std::max(m_max, v) : v;
        if (m_best < 0 || v > value(m_best)) m_best = i;
        any = true;
    }
    if (m_selected >= cellCount()) m_selected = -1;
    update();
}

void PlanHeatmap::clear() {
    setGrid({}, {}, {}, {}, {}, m_metric);
    m_selected = -1;
}

PlanHeatmap::Mark PlanHeatmap::mark(int i) const {
    const plan::Prediction& p = cell(i);
    if (!p.skipped.empty()) return Mark::skipped;
    return p.fits ? Mark::fits : Mark::oom;
}

double PlanHeatmap::value(int i) const {
    const plan::Prediction& p = cell(i);
    return m_metric == QLatin1String("samples/s") ? p.samples_per_s : p.tokens_per_s;
}

QString PlanHeatmap::label(int i) const {
    switch (mark(i)) {
        case Mark::skipped:
            return tr("skipped");
        case Mark::oom:
            return tr("OOM\n%1").arg(compact(value(i)));
        case Mark::fits:
            break;
    }
    return tr("%1\nMFU %2%").arg(compact(value(i))).arg(100 * cell(i).mfu, 0, 'f', 0);
}

QString PlanHeatmap::toolTipText(int i) const {
    const plan::Prediction& p = cell(i);
    const int col = i % std::max<qsizetype>(1, m_xValues.size());
    const int row = i / std::max<qsizetype>(1, m_xValues.size());
    QString head = QStringLiteral("%1 = %2, %3 = %4")
                       .arg(m_xKey, m_xValues.value(col), m_yKey, m_yValues.value(row));
    head += tr(" (dp %1 · tp %2 · pp %3)").arg(p.mesh.dp).arg(p.mesh.tp).arg(p.mesh.pp);
    if (!p.skipped.empty())
        return head + tr("\nskipped: %1").arg(QString::fromStdString(p.skipped));
    const QLocale locale;
    return head + tr("\n%1 %2 · step %3 · MFU %4%\nmemory %5 of %6 GiB%7")
                      .arg(locale.toString(value(i), 'f', 0), m_metric, seconds(p.step_time_s))
                      .arg(100 * p.mfu, 0, 'f', 1)
                      .arg(p.memory_total / (1024.0 * 1024 * 1024), 0, 'f', 1)
                      .arg(p.memory_capacity / (1024.0 * 1024 * 1024), 0, 'f', 0)
                      .arg(p.fits ? QString() : tr(": out of memory"));
}

QRect PlanHeatmap::gridRect() const {
    return QRect(kLeft, kTop, std::max(10, width() - kLeft - kRight),
                 std::max(10, height() - kTop - kBottom));
}

QRect PlanHeatmap::cellRect(int i) const {
    if (m_xValues.isEmpty() || m_yValues.isEmpty() || i < 0 || i >= cellCount()) return {};
    const QRect g = gridRect();
    const int col = i % m_xValues.size(), row = i / m_xValues.size();
    const double w = g.width() / static_cast<double>(m_xValues.size());
    const double h = g.height() / static_cast<double>(m_yValues.size());
    const int x0 = g.left() + static_cast<int>(std::lround(col * w));
    const int x1 = g.left() + static_cast<int>(std::lround((col + 1) * w));
    const int y0 = g.top() + static_cast<int>(std::lround(row * h));
    const int y1 = g.top() + static_cast<int>(std::lround((row + 1) * h));
    return QRect(QPoint(x0, y0), QPoint(x1 - 1, y1 - 1));
}

int PlanHeatmap::cellAt(const QPoint& pos) const {
    for (int i = 0; i < cellCount(); ++i)
        if (cellRect(i).contains(pos)) return i;
    return -1;
}

void PlanHeatmap::setSelected(int i) {
    m_selected = i >= 0 && i < cellCount() ? i : -1;
    update();
}

void PlanHeatmap::mousePressEvent(QMouseEvent* event) {
    const int i = cellAt(event->position().toPoint());
    if (i < 0 || event->button() != Qt::LeftButton) return QWidget::mousePressEvent(event);
    setSelected(i);
    emit cellClicked(i);
}

bool PlanHeatmap::event(QEvent* event) {
    if (event->type() == QEvent::ToolTip) {
        auto* help = static_cast<QHelpEvent*>(event);
        const int i = cellAt(help->pos());
        if (i >= 0)
            QToolTip::showText(help->globalPos(), toolTipText(i), this, cellRect(i));
        else
            QToolTip::hideText();
        return true;
    }
    return QWidget::event(event);
}

void PlanHeatmap::paintEvent(QPaintEvent*) {
    QPainter painter(this);
    painter.fillRect(rect(), palette().base());
    painter.setRenderHint(QPainter::Antialiasing, false);
    if (m_cells.empty()) {
        painter.setPen(palette().color(QPalette::PlaceholderText));
        painter.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap, tr("No sweep yet"));
        return;
    }
    const QRect g = gridRect();
    QFont font = painter.font();
    QFont bold = font;
    bold.setBold(true);

    // Axis titles and values: x across the top, y down the left.
    painter.setPen(palette().color(QPalette::WindowText));
    painter.setFont(bold);
    painter.drawText(QRect(g.left(), 0, g.width(), 18), Qt::AlignCenter,
                     m_xKey + QStringLiteral(" →"));
    painter.save();
    painter.translate(12, g.center().y());
    painter.rotate(90);  // read downwards, as the values grow
    painter.drawText(QRect(-g.height() / 2, -10, g.height(), 20), Qt::AlignCenter,
                     m_yKey + QStringLiteral(" →"));
    painter.restore();
    painter.setFont(font);
    for (int c = 0; c < m_xValues.size(); ++c) {
        const QRect r = cellRect(c);
        painter.drawText(QRect(r.left(), 18, r.width(), kTop - 20), Qt::AlignCenter, m_xValues[c]);
    }
    for (int row = 0; row < m_yValues.size(); ++row) {
        const QRect r = cellRect(row * static_cast<int>(m_xValues.size()));
        painter.drawText(QRect(24, r.top(), kLeft - 28, r.height()),
                         Qt::AlignRight | Qt::AlignVCenter, m_yValues[row]);
    }

    for (int i = 0; i < cellCount(); ++i) {
        const QRect r = cellRect(i).adjusted(1, 1, -1, -1);
        const Mark m = mark(i);
        QColor fill;
        if (m == Mark::fits)
            fill = viridis(m_max > m_min ? (value(i) - m_min) / (m_max - m_min) : 1.0);
        else if (m == Mark::oom)
            fill = QColor(205, 205, 205);
        else
            fill = QColor(243, 243, 243);
        painter.fillRect(r, fill);
        if (m == Mark::oom) {  // hatched, so that it reads without colour too
            painter.fillRect(r, QBrush(QColor(120, 120, 120), Qt::BDiagPattern));
            painter.setPen(QPen(QColor(180, 40, 40), 2));
            painter.drawRect(r.adjusted(1, 1, -1, -1));
        }
        QColor text = m == Mark::fits && dark(fill) ? Qt::white : QColor(30, 30, 30);
        if (m == Mark::skipped) text = QColor(150, 150, 150);
        painter.setPen(text);
        if (m == Mark::oom) {
            // The label on a plate, readable over the hatching.
            const QFontMetrics fm(bold);
            const QStringList lines = label(i).split(QLatin1Char('\n'));
            const int w = std::max(fm.horizontalAdvance(lines.value(0)),
                                   fm.horizontalAdvance(lines.value(1))) +
                          10;
            const int h = fm.height() * lines.size() + 4;
            const QRect plate(r.center().x() - w / 2, r.center().y() - h / 2, w, h);
            painter.fillRect(plate & r, QColor(255, 255, 255, 225));
            painter.setFont(bold);
            painter.drawText(plate, Qt::AlignCenter, label(i));
            painter.setFont(font);
        } else {
            QString text = label(i);
            QFont f = m == Mark::fits ? bold : font;
            if (m == Mark::skipped && QFontMetrics(f).horizontalAdvance(text) > r.width() - 4)
                text = QStringLiteral("—");  // too narrow a cell: the tooltip says why
            // A narrow cell: the value alone, in a smaller font if need be, rather than clipped.
            const auto widest = [&] {
                int w = 0;
                for (const QString& line : text.split(QLatin1Char('\n')))
                    w = std::max(w, QFontMetrics(f).horizontalAdvance(line));
                return w;
            };
            if (widest() > r.width() - 4) text = text.section(QLatin1Char('\n'), 0, 0);
            if (const int w = widest(); w > r.width() - 4 && w > 0)
                f.setPixelSize(std::max(7, QFontInfo(f).pixelSize() * (r.width() - 4) / w));
            painter.setFont(f);
            painter.drawText(r, Qt::AlignCenter, text);
            painter.setFont(font);
        }
        if (i == m_best) {
            painter.setPen(text);
            painter.drawText(r.adjusted(4, 2, -4, -2), Qt::AlignTop | Qt::AlignRight,
                             QStringLiteral("★"));
        }
    }
    if (m_selected >= 0) {
        painter.setPen(QPen(Qt::black, 3));
        painter.setBrush(Qt::NoBrush);
        painter.drawRect(cellRect(m_selected).adjusted(1, 1, -1, -1));
        painter.setPen(QPen(Qt::white, 1));
        painter.drawRect(cellRect(m_selected).adjusted(3, 3, -3, -3));
    }

    // The colour scale, with its ends.
    const QRect bar(g.right() + 14, g.top() + 16, 14, std::max(20, g.height() - 32));
    for (int y = 0; y < bar.height(); ++y)
        painter.fillRect(QRect(bar.left(), bar.bottom() - y, bar.width(), 1),
                         viridis(y / static_cast<double>(std::max(1, bar.height() - 1))));
    painter.setPen(palette().color(QPalette::WindowText));
    painter.drawRect(bar.adjusted(0, 0, -1, -1));
    painter.drawText(QRect(bar.left() - 8, g.top() - 18, kRight + 4, 16),
                     Qt::AlignLeft | Qt::AlignVCenter, m_metric);
    if (m_best >= 0) {
        const int h = painter.fontMetrics().height();
        painter.drawText(QRect(bar.right() + 4, bar.top(), kRight - 30, h),
                         Qt::AlignLeft | Qt::AlignTop, compact(m_max));
        painter.drawText(QRect(bar.right() + 4, bar.bottom() - h, kRight - 30, h),
                         Qt::AlignLeft | Qt::AlignBottom, compact(m_min));
    }
}

}  // namespace paralab::ui
