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

void StrategyDiagram::setStrategy(const run::StrategyConfig& strategy, const QStringList& devices) {
    m_strategy = strategy;
    m_devices = devices;
    update();
}

void StrategyDiagram::paintEvent(QPaintEvent*) {
    QPainter p(this);
    p.setRenderHint(QPainter::Antialiasing);
    p.fillRect(rect(), palette().base());
    const QRectF area = QRectF(rect()).adjusted(12, 10, -12, -10);
    const QString& type = QString::fromStdString(m_strategy.type);
    const int n = std::max<int>(1, static_cast<int>(m_devices.size()));
    auto name = [&](int i) {
        return i < m_devices.size() ? m_devices[i] : QStringLiteral("cpu:%1").arg(i);
    };
    auto color = [](int i) { return palette::deviceColor(i); };
    const double boxH = 52;

    if (type == QLatin1String("single") || n == 1) {
        const QRectF box(area.center().x() - 90, area.center().y() - 40, 180, 64);
        drawBox(p, box, name(0), tr("forward → backward → step"), color(0));
        drawCaption(p, QRectF(area.left(), box.bottom() + 8, area.width(), 40),
                    tr("One device does everything: nothing moves between devices."));
        if (n > 1)
            drawCaption(p, QRectF(area.left(), area.top(), area.width(), 30),
                        tr("(only the first of the %1 devices is used)").arg(n), kMuted);
        return;
    }

    if (type == QLatin1String("data_parallel") || type == QLatin1String("param_server") ||
        type == QLatin1String("hogwild")) {
        // A hub on top, the others in a row below.
        const bool ps = type == QLatin1String("param_server");
        const bool hog = type == QLatin1String("hogwild");
        const QRectF hub(area.center().x() - 110, area.top() + 4, 220, boxH + 6);
        const QString hubTitle = ps    ? tr("%1 · server").arg(name(0))
                                 : hog ? tr("shared parameters")
                                       : tr("%1 · device 0").arg(name(0));
        const QString hubSub =
            ps    ? tr("parameters + optimizer, %1").arg(QString::fromStdString(m_strategy.ps_mode))
            : hog ? tr("one set, in %1's memory").arg(name(0))
                  : tr("loss, gathered outputs, optimizer");
        drawBox(p, hub, hubTitle, hubSub, hog ? kMuted : color(0));
        const int first = ps ? 1 : 0;
        QVector<QRectF> boxes = rowOfBoxes(
            QRectF(area.left(), area.bottom() - boxH - 44, area.width(), boxH), n - first, boxH);
        for (int i = first; i < n; ++i) {
            const QRectF& b = boxes[i - first];
            drawBox(p, b, name(i),
                    ps    ? tr("worker")
                    : hog ? tr("own rows, own steps")
                          : tr("replica"),
                    color(i));
            const QPointF hubPoint(hub.left() + hub.width() * (i - first + 1) / (n - first + 1),
                                   hub.bottom());
            const QPointF off(5, 0);
            const bool labelled = i == first;
            if (hog) {
                drawArrow(p, topOf(b), hubPoint, kMuted,
                          labelled ? tr("read, write (no locks)") : QString(), true, true);
            } else {
                drawArrow(p, hubPoint - off, topOf(b) - off, kDown,
                          labelled ? (ps ? tr("pull weights") : tr("replicate, scatter rows"))
                                   : QString());
                drawArrow(p, topOf(b) + off, hubPoint + off, kUp, QString());
            }
        }
        QString caption =
            ps ? tr("↑ push gradients   ↓ pull weights") +
                     (m_strategy.ps_mode == "async"
                          ? tr(" · async: at most %1 steps ahead").arg(m_strategy.staleness)
                          : tr(" · sync: waits for every worker"))
            : hog ? tr("No communication: every device updates the same values whenever it likes.")
                  : tr("↓ parameters and input rows   ↑ outputs, then gradients (reduced on device "
                       "0)");
        drawCaption(p, QRectF(area.left(), area.bottom() - 38, area.width(), 36), caption);
        return;
    }

    if (type == QLatin1String("ddp")) {
        // A ring: each device sends a chunk to the next, N-1 times to reduce, N-1 to share.
        const QPointF c(area.center().x(), area.top() + (area.height() - 40) / 2);
        const double rx = std::min(area.width() / 2 - 75, 200.0),
                     ry = (area.height() - 40) / 2 - 30;
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
                const double tx =
                    std::abs(dir.x()) > 1e-6 ? (r.width() / 2 + 4) / std::abs(dir.x()) : 1e9;
                const double ty =
                    std::abs(dir.y()) > 1e-6 ? (r.height() / 2 + 4) / std::abs(dir.y()) : 1e9;
                return r.center() + dir * std::min(tx, ty);
            };
            drawArrow(p, edge(a, u), edge(b, -u), kUp);
        }
        for (int i = 0; i < n; ++i) drawBox(p, boxes[i], name(i), tr("full replica"), color(i));
        drawCaption(p, QRectF(c.x() - 130, c.y() - 26, 260, 52),
                    tr("ring all-reduce of the gradients\nin %1 MiB buckets%2")
                        .arg(m_strategy.bucket_mb)
                        .arg(m_strategy.overlap ? tr(", during backward") : QString()),
                    kUp.darker(130));
        drawCaption(p, QRectF(area.left(), area.bottom() - 36, area.width(), 34),
                    tr("Every device ends the step with the same summed gradients and takes the "
                       "same step."));
        return;
    }

    if (type == QLatin1String("zero")) {
        // Devices in a row; each box shows the flat parameters cut into N shards, its own filled.
        // centred: caption, bus, boxes with their shards, bus, caption, note (~190 px)
        const double top = area.top() + std::max(40.0, (area.height() - 190) / 2 + 40);
        QVector<QRectF> boxes = rowOfBoxes(QRectF(area.left(), top, area.width(), 80), n, 80, 150);
        const double busUp = top - 22, busDown = top + 80 + 24;
        for (int i = 0; i < n; ++i) {
            const QRectF& b = boxes[i];
            drawBox(
                p, QRectF(b.left(), b.top(), b.width(), 44), name(i),
                m_strategy.zero_stage == 2 ? tr("own optimizer + grads") : tr("owns 1/%1").arg(n),
                color(i));
            // the shards
            const double sw = (b.width() - 8) / n;
            for (int s = 0; s < n; ++s) {
                const QRectF cell(b.left() + 4 + s * sw, b.top() + 52, sw - 1, 20);
                QColor fill = s == i ? color(i) : QColor(0xdd, 0xdd, 0xdd);
                p.fillRect(cell, fill);
            }
            drawArrow(p, QPointF(b.center().x() - 6, b.top() + 72),
                      QPointF(b.center().x() - 6, busDown - 2), kUp);
            drawArrow(p, QPointF(b.center().x() + 6, busUp + 2),
                      QPointF(b.center().x() + 6, b.top() - 2), kDown);
        }
        p.setPen(QPen(kUp, 2.5));
        p.drawLine(QPointF(boxes.first().left(), busDown), QPointF(boxes.last().right(), busDown));
        p.setPen(QPen(kDown, 2.5));
        p.drawLine(QPointF(boxes.first().left(), busUp), QPointF(boxes.last().right(), busUp));
        drawCaption(p, QRectF(area.left(), busUp - 24, area.width(), 22),
                    tr("all-gather: every device sends its updated shard to all"),
                    kDown.darker(130));
        drawCaption(p, QRectF(area.left(), busDown + 2, area.width(), 22),
                    tr("reduce-scatter: shard k of the summed gradients goes to device k"),
                    kUp.darker(130));
        drawCaption(p, QRectF(area.left(), busDown + 26, area.width(), 22),
                    tr("Coloured cell: the shard of optimizer state%1 a device keeps (stage %2).")
                        .arg(m_strategy.zero_stage == 2 ? tr(" and gradients") : QString())
                        .arg(m_strategy.zero_stage),
                    kMuted);
        return;
    }

    // model_parallel, pipeline: a chain of stages.
    const bool pipe = type == QLatin1String("pipeline");
    const double top = area.top() + (area.height() - 60) / 2 - 20;
    QVector<QRectF> boxes = rowOfBoxes(QRectF(area.left(), top, area.width(), boxH), n, boxH, 120);
    for (int i = 0; i < n; ++i) {
        drawBox(p, boxes[i], name(i), tr("stage %1").arg(i + 1), color(i));
        if (i + 1 < n) {
            const QRectF& a = boxes[i];
            const QRectF& b = boxes[i + 1];
            drawArrow(p, QPointF(a.right() + 2, a.center().y() - 9),
                      QPointF(b.left() - 2, b.center().y() - 9), kDown);
            drawArrow(p, QPointF(b.left() - 2, b.center().y() + 9),
                      QPointF(a.right() + 2, a.center().y() + 9), kUp);
        }
    }
    drawCaption(p, QRectF(area.left(), top - 36, area.width(), 32),
                tr("→ activations forward      ← their gradients back"));
    const QString below =
        pipe ? tr("The batch is cut into %1 micro-batches (%2): stages work on different "
                  "micro-batches at once; the idle start and end are the bubble.")
                   .arg(m_strategy.micro_batches)
                   .arg(m_strategy.schedule == "1f1b" ? tr("1F1B") : tr("GPipe"))
             : tr("One batch at a time: while one stage works, the others wait.");
    drawCaption(p, QRectF(area.left(), top + boxH + 8, area.width(), 48), below);
}

}  // namespace paralab::ui
