#include "ui/panels/strategy/strategy_diagram.h"

#include <QPainter>
#include <QPainterPath>
#include <QtMath>

#include "ui/panels/common/palette.h"

namespace paralab::ui {

namespace {

const QColor kInk(0x33, 0x33, 0x33);
const QColor kDown(0x1f, 0x77, 0xb4);  // parameters / inputs going out
const QColor kUp(0xd6, 0x27, 0x28);    // gradients / outputs coming back
const QColor kMuted(0x88, 0x88, 0x88);

void drawBox(QPainter& p, const QRectF& r, const QString& title, const QString& subtitle,
             const QColor& accent) {
    p.save();
    p.setPen(QPen(accent.darker(120), 1.5));
    QColor fill = accent;
    fill.setAlpha(38);
    p.setBrush(fill);
    p.drawRoundedRect(r, 6, 6);
    p.setPen(kInk);
    QFont f = p.font();
    f.setBold(true);
    p.setFont(f);
    const QRectF top(r.left() + 2, r.top() + 3, r.width() - 4, r.height() / 2 - 2);
    p.drawText(subtitle.isEmpty() ? r : top, Qt::AlignCenter, title);
    if (!subtitle.isEmpty()) {
        f.setBold(false);
        f.setPointSizeF(f.pointSizeF() * 0.85);
        p.setFont(f);
        p.drawText(QRectF(r.left() + 2, r.center().y(), r.width() - 4, r.height() / 2 - 3),
                   Qt::AlignHCenter | Qt::AlignTop | Qt::TextWordWrap, subtitle);
    }
    p.restore();
}

// An arrow from a to b, its head at b; `label` beside its middle.
void drawArrow(QPainter& p, QPointF a, QPointF b, const QColor& color, const QString& label = {},
               bool dashed = false, bool both = false) {
    p.save();
    QPen pen(color, 1.8);
    if (dashed) pen.setStyle(Qt::DashLine);
    p.setPen(pen);
    p.drawLine(a, b);
    auto head = [&](QPointF tip, QPointF from) {
        const double angle = std::atan2(tip.y() - from.y(), tip.x() - from.x());
        const double len = 9, spread = 0.45;
        QPolygonF tri;
        tri << tip << tip - QPointF(len * std::cos(angle - spread), len * std::sin(angle - spread))
            << tip - QPointF(len * std::cos(angle + spread), len * std::sin(angle + spread));
        p.setPen(Qt::NoPen);
        p.setBrush(color);
        p.drawPolygon(tri);
    };
    head(b, a);
    if (both) head(a, b);
    if (!label.isEmpty()) {
        QFont f = p.font();
        f.setPointSizeF(f.pointSizeF() * 0.85);
        p.setFont(f);
        p.setPen(color.darker(130));
        const QPointF mid = (a + b) / 2;
        const QRectF box = QFontMetricsF(f).boundingRect(label).adjusted(-3, -1, 3, 1);
        const QRectF at(mid.x() + 6, mid.y() - box.height() / 2, box.width(), box.height());
        QColor back = Qt::white;
        back.setAlpha(225);
        p.fillRect(at, back);  // readable where it crosses another arrow
        p.drawText(at, Qt::AlignCenter, label);
    }
    p.restore();
}

void drawCaption(QPainter& p, const QRectF& r, const QString& text, const QColor& color = kInk) {
    p.save();
    QFont f = p.font();
    f.setPointSizeF(f.pointSizeF() * 0.9);
    p.setFont(f);
    p.setPen(color);
    p.drawText(r, Qt::AlignCenter | Qt::TextWordWrap, text);
    p.restore();
}

// Boxes of `n` devices in one row across `area`, each at most `maxWidth` wide.
QVector<QRectF> rowOfBoxes(const QRectF& area, int n, double height, double maxWidth = 130) {
    QVector<QRectF> boxes;
    const double gap = n > 8 ? 6 : 14;
    const double w = std::min(maxWidth, (area.width() - gap * (n - 1)) / std::max(1, n));
    const double total = n * w + (n - 1) * gap;
    double x = area.center().x() - total / 2;
    for (int i = 0; i < n; ++i, x += w + gap) boxes.append(QRectF(x, area.top(), w, height));
    return boxes;
}

QPointF topOf(const QRectF& r) {
    return {r.center().x(), r.top()};
}

}  // namespace

StrategyDiagram::StrategyDiagram(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("strategyDiagram"));
    setMinimumHeight(220);
}

void StrategyDiagram::setPicture(const strategy::StepPicture& picture, const QStringList& devices) {
    m_picture = picture;
    m_devices = devices;
    update();
}

void StrategyDiagram::paintEvent(QPaintEvent*) {
    using Layout = strategy::StepPicture::Layout;
    QPainter p(this);
    p.setRenderHint(QPainter::Antialiasing);
    p.fillRect(rect(), palette().base());
    const QRectF area = QRectF(rect()).adjusted(12, 10, -12, -10);
    const strategy::StepPicture& pic = m_picture;
    auto q = [](const std::string& s) { return QString::fromStdString(s); };
    const int n = std::max<int>(1, static_cast<int>(m_devices.size()));
    auto name = [&](int i) {
        return i < m_devices.size() ? m_devices[i] : QStringLiteral("cpu:%1").arg(i);
    };
    auto subtitle = [&](int i) {
        return i < static_cast<int>(pic.subtitles.size()) ? q(pic.subtitles[static_cast<size_t>(i)]) : QString();
    };
    auto color = [](int i) { return palette::deviceColor(i); };
    const double boxH = 52;

    switch (pic.layout) {
    case Layout::one: {
        const QRectF box(area.center().x() - 90, area.center().y() - 40, 180, 64);
        drawBox(p, box, name(0), subtitle(0), color(0));
        drawCaption(p, QRectF(area.left(), box.bottom() + 8, area.width(), 40), q(pic.caption));
        if (!pic.note.empty()) drawCaption(p, QRectF(area.left(), area.top(), area.width(), 30), q(pic.note), kMuted);
        return;
    }
    case Layout::hub: {
        // A hub on top, the devices (all, or all but the hub's own) in a row below.
        const QRectF hub(area.center().x() - 110, area.top() + 4, 220, boxH + 6);
        drawBox(p, hub, q(pic.hub_title), q(pic.hub_subtitle), pic.shared ? kMuted : color(0));
        const int first = pic.hub_is_device ? 1 : 0;
        QVector<QRectF> boxes = rowOfBoxes(
            QRectF(area.left(), area.bottom() - boxH - 44, area.width(), boxH), n - first, boxH);
        for (int i = first; i < n; ++i) {
            const QRectF& b = boxes[i - first];
            drawBox(p, b, name(i), subtitle(i), color(i));
            const QPointF hubPoint(hub.left() + hub.width() * (i - first + 1) / (n - first + 1), hub.bottom());
            const QPointF off(5, 0);
            const QString label = i == first ? q(pic.down_label) : QString();
            if (pic.shared) {
                drawArrow(p, topOf(b), hubPoint, kMuted, label, true, true);
            } else {
                drawArrow(p, hubPoint - off, topOf(b) - off, kDown, label);
                drawArrow(p, topOf(b) + off, hubPoint + off, kUp, QString());
            }
        }
        drawCaption(p, QRectF(area.left(), area.bottom() - 38, area.width(), 36), q(pic.caption));
        return;
    }
    case Layout::ring: {
        // A ring: each device sends a chunk to the next, N-1 times to reduce, N-1 to share.
        const QPointF c(area.center().x(), area.top() + (area.height() - 40) / 2);
        const double rx = std::min(area.width() / 2 - 75, 200.0), ry = (area.height() - 40) / 2 - 30;
        QVector<QRectF> boxes;
        const double w = n > 8 ? 72 : 100, h = n > 8 ? 40 : 46;
        for (int i = 0; i < n; ++i) {
            const double a = -M_PI / 2 + 2 * M_PI * i / n;
            const QPointF at(c.x() + rx * std::cos(a), c.y() + ry * std::sin(a));
            boxes.append(QRectF(at.x() - w / 2, at.y() - h / 2, w, h));
        }
        for (int i = 0; i < n; ++i) {
            const QRectF& a = boxes[i];
            const QRectF& b = boxes[(i + 1) % n];
            // from the edge of a towards b, stopping at b's edge
            const QPointF d = b.center() - a.center();
            const double len = std::hypot(d.x(), d.y());
            if (len < 1) continue;
            const QPointF u = d / len;
            auto edge = [&](const QRectF& r, QPointF dir) {
                const double tx = std::abs(dir.x()) > 1e-6 ? (r.width() / 2 + 4) / std::abs(dir.x()) : 1e9;
                const double ty = std::abs(dir.y()) > 1e-6 ? (r.height() / 2 + 4) / std::abs(dir.y()) : 1e9;
                return r.center() + dir * std::min(tx, ty);
            };
            drawArrow(p, edge(a, u), edge(b, -u), kUp);
        }
        for (int i = 0; i < n; ++i) drawBox(p, boxes[i], name(i), subtitle(i), color(i));
        drawCaption(p, QRectF(c.x() - 130, c.y() - 26, 260, 52), q(pic.centre), kUp.darker(130));
        drawCaption(p, QRectF(area.left(), area.bottom() - 36, area.width(), 34), q(pic.caption));
        return;
    }
    case Layout::shards: {
        // Devices in a row; each box shows the flat parameters cut into N shards, its own filled.
        // centred: caption, bus, boxes with their shards, bus, caption, note (~190 px)
        const double top = area.top() + std::max(40.0, (area.height() - 190) / 2 + 40);
        QVector<QRectF> boxes = rowOfBoxes(QRectF(area.left(), top, area.width(), 80), n, 80, 150);
        const double busUp = top - 22, busDown = top + 80 + 24;
        for (int i = 0; i < n; ++i) {
            const QRectF& b = boxes[i];
            drawBox(p, QRectF(b.left(), b.top(), b.width(), 44), name(i), subtitle(i), color(i));
            const double sw = (b.width() - 8) / n;
            for (int s = 0; s < n; ++s) {
                const QRectF cell(b.left() + 4 + s * sw, b.top() + 52, sw - 1, 20);
                p.fillRect(cell, s == i ? color(i) : QColor(0xdd, 0xdd, 0xdd));
            }
            drawArrow(p, QPointF(b.center().x() - 6, b.top() + 72), QPointF(b.center().x() - 6, busDown - 2), kUp);
            drawArrow(p, QPointF(b.center().x() + 6, busUp + 2), QPointF(b.center().x() + 6, b.top() - 2), kDown);
        }
        p.setPen(QPen(kUp, 2.5));
        p.drawLine(QPointF(boxes.first().left(), busDown), QPointF(boxes.last().right(), busDown));
        p.setPen(QPen(kDown, 2.5));
        p.drawLine(QPointF(boxes.first().left(), busUp), QPointF(boxes.last().right(), busUp));
        drawCaption(p, QRectF(area.left(), busUp - 24, area.width(), 22), q(pic.down_label), kDown.darker(130));
        drawCaption(p, QRectF(area.left(), busDown + 2, area.width(), 22), q(pic.up_label), kUp.darker(130));
        drawCaption(p, QRectF(area.left(), busDown + 26, area.width(), 22), q(pic.note), kMuted);
        return;
    }
    case Layout::mesh: {
        // One column per pipeline stage (its colour), in it dp rows (data replicas) of tp devices
        // (tensor shards); activations go right from stage to stage, gradients come back.
        const comm::DeviceMesh grid(pic.mesh);
        const int dp = grid.size(comm::Axis::dp), tp = grid.size(comm::Axis::tp), pp = grid.size(comm::Axis::pp);
        const double captionH = 64, labelH = 18, stageGap = pp > 1 ? 34 : 0;
        const double gridTop = area.top() + labelH + 4;
        const double gridH = std::max(60.0, area.height() - captionH - labelH - 8);
        const double stageW = (area.width() - stageGap * (pp - 1)) / pp;
        const double cellGap = 5;
        const double cellW = std::min(120.0, (stageW - cellGap * (tp - 1) - 12) / tp);
        const double cellH = std::min(48.0, (gridH - cellGap * (dp - 1) - 12) / dp);
        QVector<QRectF> stageBoxes;
        for (int s = 0; s < pp; ++s) {
            const double x0 = area.left() + s * (stageW + stageGap);
            const QColor stageColor = color(s);
            const double w = tp * cellW + (tp - 1) * cellGap + 12, h = dp * cellH + (dp - 1) * cellGap + 12;
            const QRectF box(x0 + (stageW - w) / 2, gridTop + (gridH - h) / 2, w, h);
            stageBoxes.append(box);
            p.save();
            QColor fill = stageColor;
            fill.setAlpha(22);
            p.setPen(QPen(stageColor.darker(110), 1.2, Qt::DashLine));
            p.setBrush(fill);
            p.drawRoundedRect(box, 8, 8);
            p.restore();
            drawCaption(p, QRectF(box.left(), area.top(), box.width(), labelH),
                        pp > 1 ? QStringLiteral("stage %1").arg(s + 1) : QStringLiteral("one stage"),
                        stageColor.darker(130));
            for (int d = 0; d < dp; ++d)
                for (int t = 0; t < tp; ++t) {
                    const int k = grid.rank_of({.dp = d, .tp = t, .pp = s});
                    const QRectF cell(box.left() + 6 + t * (cellW + cellGap), box.top() + 6 + d * (cellH + cellGap),
                                      cellW, cellH);
                    drawBox(p, cell, name(k), QStringLiteral("tp %1 · dp %2").arg(t).arg(d), stageColor);
                }
        }
        for (int s = 0; s + 1 < pp; ++s) {
            const QRectF& a = stageBoxes[s];
            const QRectF& b = stageBoxes[s + 1];
            const double y = (std::max(a.top(), b.top()) + std::min(a.bottom(), b.bottom())) / 2;
            drawArrow(p, QPointF(a.right() + 2, y - 7), QPointF(b.left() - 2, y - 7), kDown);
            drawArrow(p, QPointF(b.left() - 2, y + 7), QPointF(a.right() + 2, y + 7), kUp);
        }
        QStringList lines;
        if (tp > 1) lines << QStringLiteral("Across a row: ") + q(pic.down_label);
        if (dp > 1) lines << QStringLiteral("Down a column: ") + q(pic.up_label);
        if (pp > 1) lines << QStringLiteral("Between stages: activations forward, their gradients back.");
        drawCaption(p, QRectF(area.left(), area.bottom() - captionH, area.width(), captionH),
                    lines.join(QLatin1Char('\n')));
        return;
    }
    case Layout::chain: {
        const double top = area.top() + (area.height() - 60) / 2 - 20;
        QVector<QRectF> boxes = rowOfBoxes(QRectF(area.left(), top, area.width(), boxH), n, boxH, 120);
        for (int i = 0; i < n; ++i) {
            drawBox(p, boxes[i], name(i), subtitle(i), color(i));
            if (i + 1 < n) {
                const QRectF& a = boxes[i];
                const QRectF& b = boxes[i + 1];
                drawArrow(p, QPointF(a.right() + 2, a.center().y() - 9), QPointF(b.left() - 2, b.center().y() - 9), kDown);
                drawArrow(p, QPointF(b.left() - 2, b.center().y() + 9), QPointF(a.right() + 2, a.center().y() + 9), kUp);
            }
        }
        drawCaption(p, QRectF(area.left(), top - 36, area.width(), 32), q(pic.top));
        drawCaption(p, QRectF(area.left(), top + boxH + 8, area.width(), 48), q(pic.caption));
        return;
    }
    }
}

}  // namespace paralab::ui
