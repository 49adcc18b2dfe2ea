#include "ui/panels/timeline/timeline_panel.h"

#include <QElapsedTimer>
#include <QFile>
#include <QHBoxLayout>
#include <QLabel>
#include <QLocale>
#include <QMenu>
#include <QSlider>
#include <QSpinBox>
#include <QTextStream>
#include <QTimer>
#include <QToolButton>
#include <QToolTip>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "ui/panels/common/byte_units.h"
#include "ui/panels/common/palette.h"
#include "ui/panels/common/plot_export.h"
#include "ui/panels/common/plot_style.h"

namespace paralab::ui {

namespace {
// A device's row is 1 high, centred on its index (the y axis is reversed: the first device on
// top). The rank thread's lane is the upper part, communication the lower part.
constexpr double kRankLaneTop = -0.40, kRankLaneBottom = 0.04;
constexpr double kCommLaneTop = 0.10, kCommLaneBottom = 0.40;
constexpr double kLaneSplit = (kRankLaneBottom + kCommLaneTop) / 2;

const QString kHoverHint = QStringLiteral(
    "Upper lane of a device: its rank thread · lower lane: communication (also when it overlaps "
    "compute) · hover a span for its details");

}  // namespace

// The rectangles of the chart as one plottable: hundreds of spans per batch drawn in one pass,
// rather than hundreds of QCPItemRects created and destroyed 30 times a second.
class GanttPlottable : public QCPAbstractPlottable {
public:
    struct Rect {
        double x0, x1, y0, y1;  // plot coordinates
        QColor color;
    };
    GanttPlottable(QCPAxis* keyAxis, QCPAxis* valueAxis) : QCPAbstractPlottable(keyAxis, valueAxis) {
        setAntialiased(false);  // crisp edges between adjacent spans
    }
    void setRects(std::vector<Rect> rects) { m_rects = std::move(rects); }
    void setRowColors(QVector<QColor> colors) { m_rowColors = std::move(colors); }
    size_t rectCount() const { return m_rects.size(); }

    double selectTest(const QPointF&, bool, QVariant*) const override { return -1; }
    QCPRange getKeyRange(bool& foundRange, QCP::SignDomain) const override {
        foundRange = !m_rects.empty();
        QCPRange range(0, 0);
        for (const Rect& r : m_rects) range.expand(QCPRange(r.x0, r.x1));
        return range;
    }
    QCPRange getValueRange(bool& foundRange, QCP::SignDomain, const QCPRange&) const override {
        foundRange = !m_rowColors.isEmpty();
        return QCPRange(-0.5, std::max<double>(0.5, m_rowColors.size() - 0.5));
    }

protected:
    void draw(QCPPainter* painter) override {
        QCPAxis* x = mKeyAxis.data();
        QCPAxis* y = mValueAxis.data();
        if (!x || !y) return;
        const QRect clip = clipRect();
        for (const Rect& r : m_rects) {
            double left = x->coordToPixel(r.x0), right = x->coordToPixel(r.x1);
            if (right < clip.left() || left > clip.right()) continue;
            const double top = y->coordToPixel(r.y0), bottom = y->coordToPixel(r.y1);
            if (right - left < 1) right = left + 1;  // a short span stays visible
            const QRectF rect(QPointF(left, std::min(top, bottom)), QPointF(right, std::max(top, bottom)));
            painter->fillRect(rect, r.color);
            if (rect.width() > 4) {  // a thin border separates back-to-back spans of one colour
                painter->setPen(QPen(r.color.darker(135), 0));
                painter->setBrush(Qt::NoBrush);
                painter->drawRect(rect);
            }
        }
        // The device's colour down the left edge of its row: the link to its curves.
        for (int row = 0; row < m_rowColors.size(); ++row) {
            const double top = y->coordToPixel(row - 0.45), bottom = y->coordToPixel(row + 0.45);
            painter->fillRect(QRectF(QPointF(clip.left(), std::min(top, bottom)), QPointF(clip.left() + 5, std::max(top, bottom))),
                              m_rowColors[row]);
        }
    }
    void drawLegendIcon(QCPPainter*, const QRectF&) const override {}

private:
    std::vector<Rect> m_rects;
    QVector<QColor> m_rowColors;
};

TimelinePanel::TimelinePanel(QWidget* parent)
    : QWidget(parent),
      m_plot(new QCustomPlot),
      m_hover(new QLabel(kHoverHint)),
      m_bubble(new QLabel),
      m_stepsBox(new QSpinBox),
      m_replayButton(new QToolButton),
      m_slowdownSlider(new QSlider(Qt::Horizontal)),
      m_slowdownLabel(new QLabel),
      m_replayTimer(new QTimer(this)) {
    auto* controls = new QHBoxLayout;
    controls->setContentsMargins(6, 4, 6, 0);
    m_stepsControl = new QWidget;
    auto* stepsRow = new QHBoxLayout(m_stepsControl);
    stepsRow->setContentsMargins(0, 0, 0, 0);
    stepsRow->addWidget(new QLabel(tr("Steps shown:")));
    m_stepsBox->setRange(1, 50);
    m_stepsBox->setValue(m_stepsShown);
    m_stepsBox->setObjectName(QStringLiteral("stepsShownBox"));
    stepsRow->addWidget(m_stepsBox);
    controls->addWidget(m_stepsControl);
    // Slow motion: the button, and the slowdown on a logarithmic slider (1× to 1000×).
    m_replayButton->setText(tr("Replay one step"));
    m_replayButton->setCheckable(true);
    m_replayButton->setObjectName(QStringLiteral("replayButton"));
    m_replayButton->setToolTip(tr("Play the newest complete step again in slow motion: its spans appear in the "
                                  "order they ran"));
    controls->addWidget(m_replayButton);
    m_slowdownSlider->setObjectName(QStringLiteral("slowdownSlider"));
    m_slowdownSlider->setRange(0, 300);  // 100 · log10(slowdown)
    m_slowdownSlider->setMaximumWidth(140);
    m_slowdownSlider->setToolTip(tr("How many times slower than it ran"));
    controls->addWidget(m_slowdownSlider);
    controls->addWidget(m_slowdownLabel);
    connect(m_slowdownSlider, &QSlider::valueChanged, this,
            [this](int v) { setReplaySlowdown(std::pow(10.0, v / 100.0)); });
    setReplaySlowdown(m_replaySlowdown);
    connect(m_replayButton, &QToolButton::toggled, this, [this](bool on) {
        if (on == replaying()) return;
        if (!on) {
            stopReplay();
        } else if (!startReplay()) {
            const QSignalBlocker block(m_replayButton);
            m_replayButton->setChecked(false);
            m_hover->setText(tr("Replay: no step that every device completed has arrived yet"));
        }
    });
    m_replayTimer->setInterval(16);  // about one frame
    connect(m_replayTimer, &QTimer::timeout, this, [this] {
        const double wall = static_cast<double>(m_replayClock.restart()) / 1000.0;
        advanceReplay(wall / m_replaySlowdown);
    });
    controls->addStretch(1);
    auto* exportButton = new QToolButton;
    exportButton->setText(tr("Export"));
    exportButton->setPopupMode(QToolButton::InstantPopup);
    auto* menu = new QMenu(exportButton);
    menu->addAction(tr("Timeline as PNG or PDF…"), this, &TimelinePanel::exportWithDialog);
    menu->addAction(tr("Spans as CSV…"), this, &TimelinePanel::exportCsvWithDialog);
    exportButton->setMenu(menu);
    controls->addWidget(exportButton);

    m_plot->setMinimumSize(300, 160);
    m_title = plotstyle::addTitle(m_plot, tr("Timeline of the last steps"));
    m_gantt = new GanttPlottable(m_plot->xAxis, m_plot->yAxis);
    m_gantt->removeFromLegend();
    // The legend: one empty bar series per phase family, for its swatch.
    for (int f = 0; f < palette::kPhaseFamilyCount; ++f) {
        const auto family = static_cast<palette::PhaseFamily>(f);
        auto* swatch = new QCPBars(m_plot->xAxis, m_plot->yAxis);
        swatch->setName(palette::phaseFamilyName(family));
        swatch->setBrush(palette::phaseFamilyColor(family));
        swatch->setPen(QPen(palette::phaseFamilyColor(family).darker(135)));
    }
    plotstyle::putLegendBelow(m_plot, palette::kPhaseFamilyCount);
    m_plot->xAxis->grid()->setPen(QPen(QColor(235, 235, 235)));
    m_plot->yAxis->grid()->setVisible(false);
    m_plot->yAxis->setRangeReversed(true);
    m_plot->yAxis->setTicker(QSharedPointer<QCPAxisTickerText>::create());
    m_plot->yAxis->setSubTicks(false);
    m_plot->yAxis->setTickLength(0, 0);
    // The top axis marks where each step starts (on its earliest device).
    m_plot->xAxis2->setVisible(true);
    m_plot->xAxis2->setTicker(QSharedPointer<QCPAxisTickerText>::create());
    m_plot->xAxis2->setSubTicks(false);
    m_plot->xAxis2->grid()->setVisible(true);
    m_plot->xAxis2->grid()->setPen(QPen(QColor(120, 120, 120), 1, Qt::DashLine));
    connect(m_plot->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this](const QCPRange& range) {
        m_plot->xAxis2->setRange(range);
        updateStepLabels();  // zooming in makes room for more of them
    });
    m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    m_plot->axisRect()->setRangeDrag(Qt::Horizontal);
    m_plot->axisRect()->setRangeZoom(Qt::Horizontal);
    m_plot->setContextMenuPolicy(Qt::CustomContextMenu);
    connect(m_plot, &QWidget::customContextMenuRequested, this, [this](const QPoint& pos) {
        QMenu context(this);
        context.addAction(tr("Export timeline…"), this, &TimelinePanel::exportWithDialog);
        context.addAction(tr("Export spans as CSV…"), this, &TimelinePanel::exportCsvWithDialog);
        context.addAction(tr("Fit to data"), this, &TimelinePanel::refresh);
        context.exec(m_plot->mapToGlobal(pos));
    });
    connect(m_plot, &QCustomPlot::mouseMove, this, [this](QMouseEvent* e) { onMouseMove(e->pos()); });

    m_hover->setContentsMargins(8, 0, 8, 4);
    m_hover->setWordWrap(true);  // the hint is wider than a projector's half screen
    m_hover->setTextInteractionFlags(Qt::TextSelectableByMouse);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addLayout(controls);
    layout->addWidget(m_plot, 1);
    m_bubble->setObjectName(QStringLiteral("bubbleLabel"));
    m_bubble->setContentsMargins(8, 0, 8, 0);
    m_bubble->setWordWrap(true);
    m_bubble->hide();
    layout->addWidget(m_bubble);
    layout->addWidget(m_hover);
    connect(m_stepsBox, &QSpinBox::valueChanged, this, &TimelinePanel::setStepsShown);
    refresh();
}

void TimelinePanel::addSpans(const QVector<config::Span>& spans) {
    if (spans.isEmpty()) return;
    for (const auto& s : spans) {
        const QString device = QString::fromStdString(s.device);
        Steps& steps = m_kept[device];
        // A span of a step older than the device's window is not kept (nor the window moved).
        if (static_cast<int>(steps.size()) >= m_stepsShown && s.step < steps.begin()->first) continue;
        if (!m_devices.contains(device)) palette::insertDevice(m_devices, device);
        steps[s.step].push_back({QString::fromStdString(s.phase), s.t_begin, s.t_end, s.bytes});
        dropOldSteps(steps);
    }
    refresh();
}

void TimelinePanel::setPipeline(int stages, int microBatches, const QString& schedule, int chunks, int devices) {
    m_pipelineStages = stages > 1 ? stages : 0;
    m_pipelineDevices = m_pipelineStages > 0 ? std::max(devices, m_pipelineStages) : 0;
    m_microBatches = microBatches;
    m_schedule = schedule;
    m_chunks = std::max(chunks, 1);
    refresh();
}

double TimelinePanel::idealBubble(int stages, int microBatches, int chunks) {
    if (stages < 1 || microBatches < 1 || chunks < 1) return std::numeric_limits<double>::quiet_NaN();
    return static_cast<double>(stages - 1) /
           static_cast<double>(static_cast<int64_t>(chunks) * microBatches + stages - 1);
}

double TimelinePanel::idealZeroBubble(int stages, int microBatches) {
    if (stages < 1 || microBatches < 1) return std::numeric_limits<double>::quiet_NaN();
    const double busy = 3.0 * microBatches;
    return 1 - busy / (busy + stages - 1 + std::max(0, stages - microBatches));
}

void TimelinePanel::setTitle(const QString& title) {
    if (m_title) m_title->setText(title);
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void TimelinePanel::setStepsControlVisible(bool visible) {
    m_stepsControl->setVisible(visible);
    // One predicted step (the Plan tab) has no recorded step to replay.
    for (QWidget* replay : {static_cast<QWidget*>(m_replayButton), static_cast<QWidget*>(m_slowdownSlider),
                            static_cast<QWidget*>(m_slowdownLabel)})
        replay->setVisible(visible);
}

double TimelinePanel::measuredBubble() const {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    if (m_pipelineStages < 2 || static_cast<int>(m_kept.size()) != m_pipelineDevices) return nan;
    // The steps every stage keeps.
    std::map<qint64, int> stagesWith;
    for (const auto& [device, steps] : m_kept)
        for (const auto& [step, spans] : steps) ++stagesWith[step];
    double idle = 0, window = 0;
    for (const auto& [step, count] : stagesWith) {
        if (count != m_pipelineDevices) continue;
        double first = std::numeric_limits<double>::infinity(), last = -first, busy = 0;
        bool complete = true;
        for (const auto& [device, steps] : m_kept) {
            int forwards = 0, backwards = 0;
            for (const Kept& k : steps.at(step)) {
                const auto family = palette::phaseFamilyOf(k.phase, k.bytes);  // "forward chunk 1" too
                const bool fwd = family == palette::PhaseFamily::forward;
                const bool bwd = family == palette::PhaseFamily::backward;
                // A zero-bubble pipeline's W is busy time too.
                if (!fwd && !bwd && family != palette::PhaseFamily::weight_grad) continue;
                forwards += fwd;
                backwards += bwd;
                first = std::min(first, k.t_begin);
                last = std::max(last, k.t_end);
                busy += k.t_end - k.t_begin;
            }
            const int expected = m_microBatches * m_chunks;
            complete = complete && forwards == expected && backwards == expected;
        }
        if (!complete || last <= first) continue;
        const double span = m_pipelineDevices * (last - first);
        window += span;
        idle += span - busy;
    }
    return window > 0 ? idle / window : nan;
}

QString TimelinePanel::bubbleText() const {
    if (m_pipelineStages < 2) return {};
    const bool zeroBubble = m_schedule == QLatin1String("zb_h1");
    const double ideal = zeroBubble ? idealZeroBubble(m_pipelineStages, m_microBatches)
                                    : idealBubble(m_pipelineStages, m_microBatches, m_chunks);
    const double measured = measuredBubble();
    const QLocale locale;
    QString text =
        zeroBubble
            ? tr("Pipeline bubble (%1 stages, %2 micro-batches, zb_h1): ideal %3 = %4 % (forward, B "
                 "and W alike)")
                  .arg(m_pipelineStages)
                  .arg(m_microBatches)
                  .arg(m_microBatches >= m_pipelineStages ? QStringLiteral("(p−1)/(3m+p−1)")
                                                          : QStringLiteral("(2p−m−1)/(2m+2p−1)"),
                       locale.toString(100 * ideal, 'f', 0))
        : m_chunks > 1
            ? tr("Pipeline bubble (%1 stages, %2 micro-batches, %3 × %4 chunks): ideal "
                 "(p−1)/(v·m+p−1) = %5 %")
                  .arg(m_pipelineStages)
                  .arg(m_microBatches)
                  .arg(m_schedule)
                  .arg(m_chunks)
                  .arg(locale.toString(100 * ideal, 'f', 0))
            : tr("Pipeline bubble (%1 stages, %2 micro-batches, %3): ideal (p−1)/(m+p−1) = %4 %")
                  .arg(m_pipelineStages)
                  .arg(m_microBatches)
                  .arg(m_schedule, locale.toString(100 * ideal, 'f', 0));
    text += std::isfinite(measured)
                ? tr(" · measured %1 % over the steps shown (sends and waits count as bubble)")
                      .arg(locale.toString(100 * measured, 'f', 0))
                : tr(" · measured: once a whole step has arrived");
    return text;
}

// ---- slow motion ----------------------------------------------------------------------------

qint64 TimelinePanel::newestCompleteStep() const {
    // A step is complete on a device once a newer one has begun there (the newest may still be
    // arriving); the newest step that every device completed.
    qint64 best = -1;
    bool first = true;
    for (const auto& [device, steps] : m_kept) {
        if (steps.size() < 2) return -1;
        const qint64 done = std::prev(steps.end(), 2)->first;
        best = first ? done : std::min(best, done);
        first = false;
    }
    if (first) return -1;
    for (const auto& [device, steps] : m_kept)
        if (!steps.count(best)) return -1;
    return best;
}

bool TimelinePanel::startReplay() {
    const qint64 step = newestCompleteStep();
    if (step < 0) return false;
    double begin = std::numeric_limits<double>::infinity(), end = -begin;
    for (const auto& [device, steps] : m_kept)
        for (const Kept& k : steps.at(step)) {
            begin = std::min(begin, k.t_begin);
            end = std::max(end, k.t_end);
        }
    m_replayStep = step;
    m_replayTime = 0;
    m_replayLength = std::max(end - begin, 0.0);
    {
        const QSignalBlocker block(m_replayButton);
        m_replayButton->setChecked(true);
    }
    m_replayClock.start();
    m_replayTimer->start();
    drawReplay();
    return true;
}

void TimelinePanel::stopReplay() {
    if (!replaying()) return;
    m_replayStep = -1;
    m_replayTimer->stop();
    {
        const QSignalBlocker block(m_replayButton);
        m_replayButton->setChecked(false);
    }
    refresh();
}

void TimelinePanel::advanceReplay(double stepSeconds) {
    if (!replaying()) return;
    m_replayTime += std::max(stepSeconds, 0.0);
    if (m_replayTime > m_replayLength) {
        stopReplay();
        return;
    }
    drawReplay();
}

void TimelinePanel::setReplaySlowdown(double times) {
    m_replaySlowdown = std::clamp(times, 1.0, 1000.0);
    const int v = static_cast<int>(std::lround(100 * std::log10(m_replaySlowdown)));
    if (m_slowdownSlider->value() != v) {
        const QSignalBlocker block(m_slowdownSlider);
        m_slowdownSlider->setValue(v);
    }
    m_slowdownLabel->setText(tr("%1× slower").arg(QLocale().toString(m_replaySlowdown, 'f', 0)));
}

int TimelinePanel::drawnSpanCount() const { return static_cast<int>(m_gantt->rectCount()); }

void TimelinePanel::drawReplay() {
    // The step's spans that have begun by the replay's time, each cut there.
    double origin = std::numeric_limits<double>::infinity();
    for (const auto& [device, steps] : m_kept)
        if (const auto it = steps.find(m_replayStep); it != steps.end())
            for (const Kept& k : it->second) origin = std::min(origin, k.t_begin);
    const double now = origin + m_replayTime;
    std::vector<GanttPlottable::Rect> rects;
    for (const auto& [device, steps] : m_kept) {
        const auto it = steps.find(m_replayStep);
        if (it == steps.end()) continue;
        for (const Kept& k : it->second) {
            if (k.t_begin > now) continue;
            const SpanView s = view(device, m_replayStep, k);
            const double y0 = s.row + (s.commLane ? kCommLaneTop : kRankLaneTop);
            const double y1 = s.row + (s.commLane ? kCommLaneBottom : kRankLaneBottom);
            rects.push_back({(k.t_begin - origin) * 1000, (std::min(k.t_end, now) - origin) * 1000, y0, y1, s.color});
        }
    }
    m_gantt->setRects(std::move(rects));
    m_plot->xAxis->setRange(-m_replayLength * 10, m_replayLength * 1010);  // ms, the whole step in view
    m_stepStarts.clear();
    updateStepLabels();
    m_plot->xAxis->setLabel(tr("replay of step %1: %2 of %3 ms, %4× slower")
                                .arg(m_replayStep)
                                .arg(QLocale().toString(m_replayTime * 1000, 'f', 2),
                                     QLocale().toString(m_replayLength * 1000, 'f', 2),
                                     QLocale().toString(m_replaySlowdown, 'f', 0)));
    if (isVisible()) m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void TimelinePanel::dropOldSteps(Steps& steps) const {
    while (static_cast<int>(steps.size()) > m_stepsShown) steps.erase(steps.begin());
}

void TimelinePanel::clear() {
    if (replaying()) {
        m_replayStep = -1;
        m_replayTimer->stop();
        const QSignalBlocker block(m_replayButton);
        m_replayButton->setChecked(false);
    }
    m_kept.clear();
    m_devices.clear();
    m_hover->setText(kHoverHint);
    refresh();
}

void TimelinePanel::setStepsShown(int steps) {
    steps = std::clamp(steps, 1, 50);
    if (m_stepsBox->value() != steps) {
        const QSignalBlocker block(m_stepsBox);
        m_stepsBox->setValue(steps);
    }
    m_stepsShown = steps;
    for (auto& [device, kept] : m_kept) dropOldSteps(kept);
    refresh();
}

TimelinePanel::SpanView TimelinePanel::view(const QString& device, qint64 step, const Kept& k) const {
    SpanView v;
    v.device = device;
    v.phase = k.phase;
    v.step = step;
    v.t_begin = k.t_begin;
    v.t_end = k.t_end;
    v.bytes = k.bytes;
    v.row = static_cast<int>(m_devices.indexOf(device));
    const auto family = palette::phaseFamilyOf(k.phase, k.bytes);
    v.commLane = family == palette::PhaseFamily::communication;
    v.color = palette::phaseFamilyColor(family);
    return v;
}

QVector<TimelinePanel::SpanView> TimelinePanel::spans() const {
    QVector<SpanView> out;
    for (const QString& device : m_devices) {
        const auto it = m_kept.find(device);
        if (it == m_kept.end()) continue;
        for (const auto& [step, kept] : it->second)
            for (const Kept& k : kept) out.append(view(device, step, k));
    }
    return out;
}

QVector<qint64> TimelinePanel::keptSteps() const {
    std::set<qint64> steps;
    for (const auto& [device, kept] : m_kept)
        for (const auto& [step, spans] : kept) steps.insert(step);
    return QVector<qint64>(steps.begin(), steps.end());
}

QVector<qint64> TimelinePanel::keptSteps(const QString& device) const {
    QVector<qint64> out;
    const auto it = m_kept.find(device);
    if (it != m_kept.end())
        for (const auto& [step, spans] : it->second) out.append(step);
    return out;
}

void TimelinePanel::refresh() {
    m_bubble->setText(bubbleText());
    m_bubble->setVisible(m_pipelineStages > 1);
    if (replaying()) {  // new spans are kept meanwhile; the plot stays on the replayed step
        bool kept = true;
        for (const auto& [device, steps] : m_kept) kept = kept && steps.count(m_replayStep);
        if (kept && !m_kept.empty()) {
            drawReplay();
            return;
        }
        m_replayStep = -1;  // the window moved past it
        m_replayTimer->stop();
        const QSignalBlocker block(m_replayButton);
        m_replayButton->setChecked(false);
    }
    const QVector<SpanView> all = spans();
    m_origin = std::numeric_limits<double>::infinity();
    double end = -std::numeric_limits<double>::infinity();
    std::map<qint64, double> stepStart;  // the earliest begin of each step over the devices
    for (const SpanView& s : all) {
        m_origin = std::min(m_origin, s.t_begin);
        end = std::max(end, s.t_end);
        auto [it, inserted] = stepStart.emplace(s.step, s.t_begin);
        if (!inserted) it->second = std::min(it->second, s.t_begin);
    }
    if (all.isEmpty()) m_origin = end = 0;

    std::vector<GanttPlottable::Rect> rects;
    rects.reserve(static_cast<size_t>(all.size()));
    for (const SpanView& s : all) {
        const double y0 = s.row + (s.commLane ? kCommLaneTop : kRankLaneTop);
        const double y1 = s.row + (s.commLane ? kCommLaneBottom : kRankLaneBottom);
        rects.push_back({(s.t_begin - m_origin) * 1000, (s.t_end - m_origin) * 1000, y0, y1, s.color});
    }
    m_gantt->setRects(std::move(rects));
    QVector<QColor> rowColors;
    auto rows = m_plot->yAxis->ticker().dynamicCast<QCPAxisTickerText>();
    rows->clear();
    for (int d = 0; d < m_devices.size(); ++d) {
        rowColors.append(palette::deviceColor(d));
        rows->addTick(d, m_devices[d]);
    }
    m_gantt->setRowColors(rowColors);

    m_stepStarts.clear();
    for (const auto& [step, start] : stepStart) m_stepStarts.emplace_back(step, (start - m_origin) * 1000);

    const double widthMs = std::max((end - m_origin) * 1000, 1e-3);
    m_plot->xAxis->setRange(-widthMs * 0.01, widthMs * 1.01);
    updateStepLabels();
    m_plot->yAxis->setRange(-0.5, std::max<qsizetype>(1, m_devices.size()) - 0.5);
    m_plot->xAxis->setLabel(stepStart.empty() ? tr("time (ms)")
                                              : tr("time (ms) from the start of step %1").arg(stepStart.begin()->first));
    if (!isVisible()) {
        m_dirty = true;
        return;
    }
    m_dirty = false;
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void TimelinePanel::updateStepLabels() {
    auto ticker = m_plot->xAxis2->ticker().dynamicCast<QCPAxisTickerText>();
    ticker->clear();
    // Before the first layout the axis rect has no width yet: assume an export's 1200 pixels.
    const int widthPx = m_plot->axisRect()->width() > 50 ? m_plot->axisRect()->width() : 1080;
    const double pxPerMs = widthPx / std::max(m_plot->xAxis->range().size(), 1e-9);
    const double gapPx = m_plot->fontMetrics().horizontalAdvance(QStringLiteral("step 000000")) + 6;
    double lastPx = -std::numeric_limits<double>::infinity();
    for (const auto& [step, ms] : m_stepStarts) {
        const double px = ms * pxPerMs;
        const bool room = px - lastPx >= gapPx;
        if (room) lastPx = px;
        ticker->addTick(ms, room ? tr("step %1").arg(step) : QString());  // its line stays
    }
}

void TimelinePanel::showEvent(QShowEvent* event) {
    QWidget::showEvent(event);
    if (m_dirty) refresh();
}

bool TimelinePanel::spanAt(double timeMs, double row, SpanView* found) const {
    const int r = static_cast<int>(std::lround(row));
    if (r < 0 || r >= m_devices.size()) return false;
    const auto it = m_kept.find(m_devices[r]);
    if (it == m_kept.end()) return false;
    const bool commLane = row - r > kLaneSplit;
    const double t = m_origin + timeMs / 1000;
    // The lane under the pointer first; a span in the other lane of the row will do.
    for (const bool lane : {commLane, !commLane}) {
        for (const auto& [step, kept] : it->second) {
            for (const Kept& k : kept) {
                if (t < k.t_begin || t > k.t_end) continue;
                const SpanView v = view(m_devices[r], step, k);
                if (v.commLane != lane) continue;
                if (found) *found = v;
                return true;
            }
        }
    }
    return false;
}

QString TimelinePanel::describeAt(double timeMs, double row) const {
    SpanView s;
    if (!spanAt(timeMs, row, &s)) return {};
    QString text = tr("%1 · step %2 · %3 (%4) · %5 ms")
                       .arg(s.device)
                       .arg(s.step)
                       .arg(s.phase, palette::phaseFamilyName(palette::phaseFamilyOf(s.phase, s.bytes)))
                       .arg((s.t_end - s.t_begin) * 1000, 0, 'f', 3);
    if (s.bytes > 0) text += tr(" · %1").arg(formatBytes(s.bytes));
    return text;
}

void TimelinePanel::onMouseMove(const QPoint& pos) {
    const QString text = describeAt(m_plot->xAxis->pixelToCoord(pos.x()), m_plot->yAxis->pixelToCoord(pos.y()));
    m_hover->setText(text.isEmpty() ? kHoverHint : text);
    if (text.isEmpty()) QToolTip::hideText();
    else QToolTip::showText(m_plot->mapToGlobal(pos), text, m_plot);
}

bool TimelinePanel::exportTo(const QString& path) {
    // A panel never shown (a test, a script) has no size of its own yet.
    refresh();
    return plotexport::saveImage(m_plot, path, QSize(1200, 200 + 70 * static_cast<int>(m_devices.size())));
}

bool TimelinePanel::exportCsv(const QString& path) const {
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) return false;
    QTextStream out(&file);
    out << "device,step,phase,family,t_begin_s,t_end_s,duration_ms,bytes\n";
    for (const SpanView& s : spans()) {
        out << s.device << ',' << s.step << ',' << s.phase << ','
            << palette::phaseFamilyName(palette::phaseFamilyOf(s.phase, s.bytes)).replace(QLatin1String(" / "), QLatin1String("/"))
            << ',' << QString::number(s.t_begin, 'f', 6) << ',' << QString::number(s.t_end, 'f', 6) << ','
            << QString::number((s.t_end - s.t_begin) * 1000, 'f', 4) << ',' << s.bytes << '\n';
    }
    out.flush();
    return file.error() == QFileDevice::NoError;
}

QVector<PlotExport> TimelinePanel::plotExports() {
    return {{tr("Timeline of the last steps"), QStringLiteral("paralab-timeline"),
             [this](const QString& path) { return exportTo(path); },
             [this](const QString& path) { return exportCsv(path); }}};
}

void TimelinePanel::exportWithDialog() {
    const QString path = plotstyle::askExportPath(this, QStringLiteral("paralab-timeline"), plotstyle::ExportKind::Image);
    if (!path.isEmpty() && !exportTo(path)) plotstyle::reportExportFailure(this, path);
}

void TimelinePanel::exportCsvWithDialog() {
    const QString path = plotstyle::askExportPath(this, QStringLiteral("paralab-timeline"), plotstyle::ExportKind::Csv);
    if (!path.isEmpty() && !exportCsv(path)) plotstyle::reportExportFailure(this, path);
}

}  // namespace paralab::ui
