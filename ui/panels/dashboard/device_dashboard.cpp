#include "ui/panels/dashboard/device_dashboard.h"

#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenu>
#include <QPrinter>
#include <QResizeEvent>
#include <QScrollArea>
#include <QSlider>
#include <QSpinBox>
#include <QTextStream>
#include <QToolButton>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "ui/panels/common/byte_units.h"
#include "ui/panels/common/palette.h"
#include "ui/panels/common/plot_export.h"
#include "ui/panels/common/plot_style.h"
#include "ui/panels/dashboard/decimated_graph.h"
#include "ui/panels/dashboard/expert_routing_plot.h"

namespace paralab::ui {

namespace {

constexpr int kCategories = static_cast<int>(kMemCategoryCount);
constexpr int kTimeParts = 4;
const QString kAll = QStringLiteral("all");
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// The smallest a plot gets: below it the dashboard scrolls.
constexpr QSize kPlotMinimum(220, 170);
// The device-coloured strip under each bar stack: pixels below the value axis's zero.
constexpr int kStripTop = 2, kStripBottom = 8;

// TensorBoard's smoothing: an exponential moving average whose start is debiased by dividing
// by the total weight given so far (1 - w^n), so the first smoothed point is the first value
// rather than (1 - w) times it.
struct DebiasedEma {
    double sum = 0, weight = 0;
    double add(double value, double w) {
        sum = w * sum + (1 - w) * value;
        weight = w * weight + (1 - w);
        return sum / weight;
    }
};

// Byte counts in binary units: the unit follows the range (B, KiB, MiB, GiB), and the ticks are
// round numbers of that unit rather than of bytes.
class ByteTicker : public QCPAxisTicker {
protected:
    double getTickStep(const QCPRange& range) override {
        m_unit = byteUnitFor(std::max(std::abs(range.lower), std::abs(range.upper)));
        return cleanMantissa(range.size() / m_unit.bytes / (mTickCount + 1e-10)) * m_unit.bytes;
    }
    QString getTickLabel(double tick, const QLocale& locale, QChar, int) override {
        return locale.toString(tick / m_unit.bytes, 'g', 4) + QLatin1Char(' ') + m_unit.name;
    }

private:
    ByteUnit m_unit{1, QStringLiteral("B")};
};

QString timePartName(int part) {
    static const char* const kNames[] = {"compute", "communication", "idle", "data wait"};
    return QString::fromLatin1(kNames[part]);
}

QColor timePartColor(int part) {
    using palette::PhaseFamily;
    switch (part) {
        case 0: return palette::computeColor();
        case 1: return palette::phaseFamilyColor(PhaseFamily::communication);
        case 2: return palette::phaseFamilyColor(PhaseFamily::idle);
        default: return palette::phaseFamilyColor(PhaseFamily::data_wait);
    }
}

QString memoryCategoryLabel(int category) {
    return QString::fromLatin1(mem_category_name(static_cast<MemCategory>(category)).data())
        .replace(QLatin1Char('_'), QLatin1Char(' '));
}

QCPBars* addStackedBars(QCustomPlot* plot, QCPBars* below, const QString& name, const QColor& color) {
    auto* bars = new QCPBars(plot->xAxis, plot->yAxis);
    bars->setName(name);
    bars->setWidth(0.6);
    bars->setPen(QPen(color.darker(130), 1));
    bars->setBrush(color);
    bars->setStackingGap(0);
    if (below) bars->moveAbove(below);
    return bars;
}

}  // namespace

struct DeviceDashboard::Series {
    struct Row {
        qint64 step = 0, epoch = 0;
        double wall = 0, loss = 0, samples = 0;
        double rate = kNaN;  // samples per second over this step
        std::array<double, kTimeParts> ms{};
        std::array<qint64, kCategories> memory{};
        qint64 memoryTotal = 0;
    };
    QString device;
    std::vector<Row> rows;
    DebiasedEma lossEma, rateEma;
    DecimatedGraph* lossRaw = nullptr;     // faint, behind the smoothed curve
    DecimatedGraph* lossSmooth = nullptr;
    DecimatedGraph* rate = nullptr;        // smoothed like the loss
    DecimatedGraph* memory = nullptr;      // current total; none for "all"
};

struct DeviceDashboard::Plots {
    QCustomPlot* loss = nullptr;
    QCustomPlot* rate = nullptr;
    QCustomPlot* memory = nullptr;      // stacked by category, one stack per device
    QCustomPlot* memoryTime = nullptr;  // total per device over time
    QCustomPlot* breakdown = nullptr;   // stacked compute / comm / idle / data wait
    QCPTextElement* breakdownTitle = nullptr;
    std::array<QCPBars*, kCategories> memoryBars{};
    std::array<QCPBars*, kTimeParts> timeBars{};
    QList<QCPItemRect*> deviceMarks;  // a device-coloured strip under each stack
    // What the axes must show, kept as the data arrive (a rescale that walks every point of
    // every curve 30 times a second would cost more than drawing them).
    double maxStep = 0, maxWall = 0, maxLoss = 0, minLoss = kNaN, maxRate = 0, maxMemory = 0;

    QList<QCustomPlot*> all() const { return {loss, rate, memory, memoryTime, breakdown}; }
};

DeviceDashboard::DeviceDashboard(QWidget* parent)
    : QWidget(parent),
      m_plots(std::make_unique<Plots>()),
      m_plotArea(new QWidget),
      m_xAxisBox(new QComboBox),
      m_logBox(new QCheckBox),
      m_smoothingSlider(new QSlider(Qt::Horizontal)),
      m_smoothingLabel(new QLabel),
      m_windowBox(new QSpinBox),
      m_pacer(new ReplotPacer(this, [this] {
          for (QCustomPlot* plot : m_plots->all()) plot->replot(QCustomPlot::rpRefreshHint);
          m_experts->replot();
      })),
      m_experts(new ExpertRoutingPlot) {
    // ---- controls ---------------------------------------------------------------------------
    auto* controls = new QHBoxLayout;
    plotstyle::addLossControls(controls, m_xAxisBox, m_logBox);
    controls->addSpacing(12);
    controls->addWidget(new QLabel(tr("Smoothing:")));
    m_smoothingSlider->setRange(0, 99);
    m_smoothingSlider->setValue(static_cast<int>(std::lround(m_smoothing * 100)));
    m_smoothingSlider->setMaximumWidth(160);
    m_smoothingSlider->setObjectName(QStringLiteral("smoothingSlider"));
    m_smoothingSlider->setToolTip(tr("TensorBoard's debiased exponential moving average of loss and throughput"));
    controls->addWidget(m_smoothingSlider);
    m_smoothingLabel->setMinimumWidth(m_smoothingLabel->fontMetrics().horizontalAdvance(QStringLiteral("0.00 ")));
    controls->addWidget(m_smoothingLabel);
    // The breakdown's window on a second row: the first stays narrow enough for a projector's
    // 1024 pixels with the experiment beside it.
    auto* windowRow = new QHBoxLayout;
    windowRow->setContentsMargins(6, 0, 6, 0);
    windowRow->addWidget(new QLabel(tr("Time breakdown over the last")));
    m_windowBox->setRange(1, 10000);
    m_windowBox->setValue(m_breakdownWindow);
    m_windowBox->setSuffix(tr(" steps"));
    m_windowBox->setObjectName(QStringLiteral("breakdownWindowBox"));
    windowRow->addWidget(m_windowBox);
    windowRow->addStretch(1);
    controls->addStretch(1);
    auto* exportButton = new QToolButton;
    exportButton->setText(tr("Export"));
    exportButton->setPopupMode(QToolButton::InstantPopup);
    auto* exportMenu = new QMenu(exportButton);
    exportMenu->addAction(tr("Plots as PNG or PDF…"), this, &DeviceDashboard::exportWithDialog);
    exportMenu->addAction(tr("Data as CSV…"), this, &DeviceDashboard::exportCsvWithDialog);
    exportButton->setMenu(exportMenu);
    controls->addWidget(exportButton);

    // ---- plots --------------------------------------------------------------------------------
    Plots& p = *m_plots;
    auto makePlot = [this](const QString& title) {
        auto* plot = new QCustomPlot;
        // Each plottable says whether it is antialiased (the raw loss is not: see recolor).
        plot->setAntialiasedElements(QCP::aeLegendItems);
        // Polylines drawn without the raster engine's careful joins: 8 devices x 100k noisy
        // points replot in ~17 ms instead of ~600 ms, for joins no one sees at 2 px.
        plot->setPlottingHint(QCP::phFastPolylines, true);
        plot->setMinimumSize(kPlotMinimum);
        plotstyle::addTitle(plot, title);
        plotstyle::styleGrid(plot);
        plot->setContextMenuPolicy(Qt::CustomContextMenu);
        connect(plot, &QWidget::customContextMenuRequested, this,
                [this, plot](const QPoint& pos) { showPlotMenu(plot, pos); });
        return plot;
    };
    p.loss = makePlot(tr("Training loss per device"));
    p.loss->yAxis->setLabel(tr("loss"));
    p.rate = makePlot(tr("Throughput"));
    p.rate->yAxis->setLabel(tr("samples/s"));
    p.memory = makePlot(tr("Memory by category at the latest step's peak"));
    p.memoryTime = makePlot(tr("Memory at each step's peak"));
    p.breakdown = makePlot(QString());
    p.breakdownTitle = qobject_cast<QCPTextElement*>(p.breakdown->plotLayout()->element(0, 0));
    p.breakdown->yAxis->setLabel(tr("ms per step"));
    for (QCustomPlot* plot : {p.loss, p.rate, p.memoryTime}) {
        plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
        plotstyle::putLegendBelow(plot, plot == p.memoryTime ? 4 : 5);
    }
    p.memory->yAxis->setTicker(QSharedPointer<ByteTicker>::create());
    p.memoryTime->yAxis->setTicker(QSharedPointer<ByteTicker>::create());
    for (QCustomPlot* plot : {p.memory, p.breakdown}) {
        auto ticker = QSharedPointer<QCPAxisTickerText>::create();
        plot->xAxis->setTicker(ticker);
        // The device strips lie in the first kStrip pixels under the axis, the names below them.
        plot->xAxis->setTickLength(0, 0);
        plot->xAxis->setTickLabelPadding(kStripBottom + 3);
        connect(plot, &QCustomPlot::afterLayout, plot, [plot] {
            const double h = std::max(1, plot->axisRect()->height());
            for (int i = 0; i < plot->itemCount(); ++i)
                if (auto* mark = qobject_cast<QCPItemRect*>(plot->item(i))) {
                    mark->topLeft->setCoords(mark->topLeft->key(), 1.0 + kStripTop / h);
                    mark->bottomRight->setCoords(mark->bottomRight->key(), 1.0 + kStripBottom / h);
                }
        });
        plot->xAxis->setSubTicks(false);
        plot->xAxis->grid()->setVisible(false);
    }
    QCPBars* below = nullptr;
    for (int c = 0; c < kCategories; ++c)
        below = p.memoryBars[static_cast<size_t>(c)] =
            addStackedBars(p.memory, below, memoryCategoryLabel(c), palette::memoryCategoryColor(c));
    plotstyle::putLegendBelow(p.memory, 3);
    below = nullptr;
    for (int k = 0; k < kTimeParts; ++k)
        below = p.timeBars[static_cast<size_t>(k)] = addStackedBars(p.breakdown, below, timePartName(k), timePartColor(k));
    plotstyle::putLegendBelow(p.breakdown, 2);

    // The plots in a grid that reflows with the width (reflow), in a scroll area: a narrow or
    // low window scrolls to a plot rather than cutting it.
    m_plotArea->setObjectName(QStringLiteral("dashboardPlotArea"));
    m_scroll = new QScrollArea;
    m_scroll->setObjectName(QStringLiteral("dashboardScroll"));
    m_scroll->setWidget(m_plotArea);
    m_scroll->setWidgetResizable(true);
    m_scroll->setFrameShape(QFrame::NoFrame);
    m_scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    reflow(3);

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(2);
    layout->addLayout(controls);
    layout->addLayout(windowRow);
    layout->addWidget(m_scroll, 1);
    layout->addWidget(m_experts);

    connect(m_xAxisBox, &QComboBox::currentIndexChanged, this,
            [this](int index) { setXAxis(index == 1 ? XAxis::WallTime : XAxis::Step); });
    connect(m_logBox, &QCheckBox::toggled, this, &DeviceDashboard::setLogarithmicLoss);
    connect(m_smoothingSlider, &QSlider::valueChanged, this, [this](int v) { setSmoothing(v / 100.0); });
    connect(m_windowBox, &QSpinBox::valueChanged, this, &DeviceDashboard::setBreakdownWindow);
    clear();
}

DeviceDashboard::~DeviceDashboard() = default;

int DeviceDashboard::columnsFor(int width) const {
    return std::clamp(width / (m_plots->loss->minimumWidth() + 60), 1, 3);
}

void DeviceDashboard::changeEvent(QEvent* event) {
    QWidget::changeEvent(event);
    if (event->type() != QEvent::FontChange || !m_plots->loss) return;
    // Larger text (presentation mode) gets larger plots: fewer side by side, the rest scrolls.
    const double base = QApplication::font().pointSizeF(), now = font().pointSizeF();
    const double scale = base > 0 && now > base ? now / base : 1.0;
    for (QCustomPlot* plot : m_plots->all()) plot->setMinimumSize((QSizeF(kPlotMinimum) * scale).toSize());
    m_columns = 0;  // lay out again
    reflow(columnsFor(width()));
}

void DeviceDashboard::reflow(int columns) {
    columns = std::clamp(columns, 1, 3);
    if (columns == m_columns) return;
    m_columns = columns;
    Plots& p = *m_plots;
    delete m_plotArea->layout();
    auto* grid = new QGridLayout(m_plotArea);
    grid->setContentsMargins(0, 0, 0, 0);
    grid->setSpacing(2);
    if (columns == 3) {
        // Loss and throughput over the width, the three bar and memory plots under them.
        grid->addWidget(p.loss, 0, 0, 1, 3);
        grid->addWidget(p.rate, 0, 3, 1, 3);
        grid->addWidget(p.memory, 1, 0, 1, 2);
        grid->addWidget(p.memoryTime, 1, 2, 1, 2);
        grid->addWidget(p.breakdown, 1, 4, 1, 2);
        grid->setRowStretch(0, 3);
        grid->setRowStretch(1, 2);
    } else if (columns == 2) {
        grid->addWidget(p.loss, 0, 0);
        grid->addWidget(p.rate, 0, 1);
        grid->addWidget(p.memory, 1, 0);
        grid->addWidget(p.breakdown, 1, 1);
        grid->addWidget(p.memoryTime, 2, 0, 1, 2);
    } else {
        int row = 0;
        for (QCustomPlot* plot : p.all()) grid->addWidget(plot, row++, 0);
    }
}

int DeviceDashboard::plotColumns() const { return m_columns; }

void DeviceDashboard::resizeEvent(QResizeEvent* event) {
    QWidget::resizeEvent(event);
    reflow(columnsFor(width()));
}

// ---- data ---------------------------------------------------------------------------------

DeviceDashboard::Series* DeviceDashboard::series(const QString& device) const {
    if (device == kAll) return m_global.get();
    const qsizetype i = m_devices.indexOf(device);
    return i < 0 ? nullptr : m_series[static_cast<size_t>(i)].get();
}

DeviceDashboard::Series& DeviceDashboard::seriesFor(const QString& device) {
    if (Series* s = series(device)) return *s;
    Plots& p = *m_plots;
    auto s = std::make_unique<Series>();
    s->device = device;
    // Curves of up to a run's every step: each replot reads a few points per pixel column.
    auto graph = [](QCustomPlot* plot) { return new DecimatedGraph(plot->xAxis, plot->yAxis); };
    s->lossRaw = graph(p.loss);
    s->lossRaw->removeFromLegend();
    s->lossSmooth = graph(p.loss);
    s->rate = graph(p.rate);
    if (device == kAll) {
        s->lossSmooth->setName(tr("all devices"));
        s->rate->setName(tr("total"));
        m_global = std::move(s);
        recolor();
        return *m_global;
    }
    s->lossSmooth->setName(device);
    s->rate->setName(device);
    s->memory = graph(p.memoryTime);
    s->memory->setName(device);
    const int position = palette::insertDevice(m_devices, device);
    m_series.insert(m_series.begin() + position, std::move(s));
    recolor();
    return *m_series[static_cast<size_t>(position)];
}

void DeviceDashboard::recolor() {
    auto paint = [](Series& s, const QColor& color) {
        // The raw curve in an opaque pale tint, not a translucent pen: a long translucent,
        // antialiased polyline is the slowest thing QPainter draws (600 ms for 8 x 100k points).
        const QColor faint = QColor::fromRgbF(0.25f * color.redF() + 0.75f, 0.25f * color.greenF() + 0.75f,
                                              0.25f * color.blueF() + 0.75f);
        s.lossRaw->setPen(QPen(faint, 1));
        s.lossRaw->setAntialiased(false);
        s.lossSmooth->setPen(QPen(color, 2));
        s.rate->setPen(QPen(color, 2));
        if (s.memory) s.memory->setPen(QPen(color, 2));
    };
    for (size_t i = 0; i < m_series.size(); ++i) paint(*m_series[i], palette::deviceColor(static_cast<int>(i)));
    if (m_global) paint(*m_global, palette::globalColor());
    // The legends in the same order: all devices first, then the devices in palette order.
    Plots& p = *m_plots;
    for (QCustomPlot* plot : {p.loss, p.rate, p.memoryTime}) plot->legend->clearItems();
    auto list = [](Series& s) {
        for (QCPGraph* g : {s.lossSmooth, s.rate, s.memory})
            if (g) g->addToLegend();
    };
    if (m_global) list(*m_global);
    for (auto& s : m_series) list(*s);
}

QColor DeviceDashboard::colorOf(const QString& device) const {
    if (device == kAll) return palette::globalColor();
    const qsizetype i = m_devices.indexOf(device);
    return i < 0 ? QColor() : palette::deviceColor(static_cast<int>(i));
}

void DeviceDashboard::append(Series& s, const config::StepRecord& r) {
    Series::Row row;
    row.step = r.step;
    row.epoch = r.epoch;
    row.wall = r.wall_s;
    row.loss = r.loss;
    row.samples = static_cast<double>(r.samples);
    const double previousWall = s.rows.empty() ? 0.0 : s.rows.back().wall;
    if (r.wall_s > previousWall) row.rate = row.samples / (r.wall_s - previousWall);
    row.ms = {r.compute_ms, r.comm_ms, r.idle_ms, r.data_wait_ms};
    // The step at its peak, activations included (a record without one: what was live at its end).
    const bool peak = r.memory.step_peak_total > 0;
    for (int c = 0; c < kCategories; ++c)
        row.memory[static_cast<size_t>(c)] = (peak ? r.memory.at_step_peak : r.memory.current)[static_cast<size_t>(c)];
    row.memoryTotal = peak ? r.memory.step_peak_total : r.memory.current_total;
    s.rows.push_back(row);

    Plots& p = *m_plots;
    const double x = m_xAxis == XAxis::Step ? static_cast<double>(row.step) : row.wall;
    p.maxStep = std::max(p.maxStep, static_cast<double>(row.step));
    p.maxWall = std::max(p.maxWall, row.wall);
    // NaN: a device that computes no loss (an early pipeline stage); inf: a diverging step.
    if (std::isfinite(row.loss)) {
        s.lossRaw->append(x, row.loss);
        s.lossSmooth->append(x, s.lossEma.add(row.loss, m_smoothing));
        p.maxLoss = std::max(p.maxLoss, row.loss);
        if (row.loss > 0 && !(row.loss >= p.minLoss)) p.minLoss = row.loss;
    }
    if (std::isfinite(row.rate)) {
        const double smoothed = s.rateEma.add(row.rate, m_smoothing);
        s.rate->append(x, smoothed);
        p.maxRate = std::max(p.maxRate, smoothed);
    }
    if (s.memory) {
        s.memory->append(x, static_cast<double>(row.memoryTotal));
        p.maxMemory = std::max(p.maxMemory, static_cast<double>(row.memoryTotal));
    }
}

void DeviceDashboard::addDeviceSteps(const QVector<config::StepRecord>& steps) {
    if (steps.isEmpty()) return;
    for (const auto& r : steps) append(seriesFor(QString::fromStdString(r.device)), r);
    updateBars();
    updateRanges();
    m_pacer->request();
}

void DeviceDashboard::addSteps(const QVector<config::StepRecord>& steps) {
    if (steps.isEmpty()) return;
    Series& global = seriesFor(kAll);
    for (const auto& r : steps) append(global, r);
    m_experts->addSteps(steps);
    updateRanges();
    m_pacer->request();
}

void DeviceDashboard::clear() {
    Plots& p = *m_plots;
    auto drop = [](Series& s) {
        for (QCPGraph* g : {s.lossRaw, s.lossSmooth, s.rate, s.memory})
            if (g) g->parentPlot()->removeGraph(g);
    };
    for (auto& s : m_series) drop(*s);
    if (m_global) drop(*m_global);
    m_series.clear();
    m_global.reset();
    m_devices.clear();
    m_experts->clear();
    p.maxStep = p.maxWall = p.maxLoss = p.maxRate = p.maxMemory = 0;
    p.minLoss = kNaN;
    updateBars();
    updateRanges();
    replotAll();
}

void DeviceDashboard::rebuildCurves() {
    Plots& p = *m_plots;
    p.maxRate = 0;
    auto rebuild = [&](Series& s) {
        s.lossEma = s.rateEma = DebiasedEma{};
        QVector<QCPGraphData> raw, smooth, rate, memory;
        raw.reserve(static_cast<qsizetype>(s.rows.size()));
        smooth.reserve(raw.capacity());
        rate.reserve(raw.capacity());
        if (s.memory) memory.reserve(raw.capacity());
        for (const auto& row : s.rows) {
            const double x = m_xAxis == XAxis::Step ? static_cast<double>(row.step) : row.wall;
            if (std::isfinite(row.loss)) {
                raw.append({x, row.loss});
                smooth.append({x, s.lossEma.add(row.loss, m_smoothing)});
            }
            if (std::isfinite(row.rate)) {
                rate.append({x, s.rateEma.add(row.rate, m_smoothing)});
                p.maxRate = std::max(p.maxRate, rate.back().value);
            }
            if (s.memory) memory.append({x, static_cast<double>(row.memoryTotal)});
        }
        const bool sorted = m_xAxis == XAxis::Step;
        s.lossRaw->setPoints(raw, sorted);
        s.lossSmooth->setPoints(smooth, sorted);
        s.rate->setPoints(rate, sorted);
        if (s.memory) s.memory->setPoints(memory, sorted);
    };
    for (auto& s : m_series) rebuild(*s);
    if (m_global) rebuild(*m_global);
    updateRanges();
    replotAll();
}

void DeviceDashboard::updateBars() {
    Plots& p = *m_plots;
    const int n = static_cast<int>(m_series.size());
    QVector<double> keys;
    for (int d = 0; d < n; ++d) keys.append(d + 1);

    double top = 0;
    for (int c = 0; c < kCategories; ++c) {
        QVector<double> values;
        for (const auto& s : m_series)
            values.append(s->rows.empty() ? 0.0 : static_cast<double>(s->rows.back().memory[static_cast<size_t>(c)]));
        p.memoryBars[static_cast<size_t>(c)]->setData(keys, values, true);
    }
    for (const auto& s : m_series) {
        double total = 0;
        if (!s->rows.empty())
            for (qint64 bytes : s->rows.back().memory) total += static_cast<double>(bytes);
        top = std::max(top, total);
    }

    double timeTop = 0;
    const auto means = breakdownMeans();
    for (const auto& m : means) timeTop = std::max(timeTop, m[0] + m[1] + m[2] + m[3]);
    for (int k = 0; k < kTimeParts; ++k) {
        QVector<double> values;
        for (const auto& m : means) values.append(m[static_cast<size_t>(k)]);
        p.timeBars[static_cast<size_t>(k)]->setData(keys, values, true);
    }
    if (p.breakdownTitle)
        p.breakdownTitle->setText(tr("Time per step (mean of last %n)", nullptr, m_breakdownWindow));

    // Device names under the stacks, and a strip of the device's colour between the stacks and
    // the axis: the link to the same device's curves.
    const bool devicesChanged = p.deviceMarks.size() != 2 * n;
    if (devicesChanged) {
        for (QCPItemRect* mark : std::as_const(p.deviceMarks)) mark->parentPlot()->removeItem(mark);
        p.deviceMarks.clear();
        for (QCustomPlot* plot : {p.memory, p.breakdown}) {
            auto ticker = plot->xAxis->ticker().dynamicCast<QCPAxisTickerText>();
            ticker->clear();
            for (int d = 0; d < n; ++d) {
                ticker->addTick(d + 1, m_devices[d]);
                // Under the axis, between it and the device's name: the value axis starts at
                // zero, and no bar is drawn below it.
                auto* mark = new QCPItemRect(plot);
                mark->setClipToAxisRect(false);
                mark->topLeft->setTypeY(QCPItemPosition::ptAxisRectRatio);
                mark->bottomRight->setTypeY(QCPItemPosition::ptAxisRectRatio);
                mark->topLeft->setCoords(d + 1 - 0.3, 1.0);
                mark->bottomRight->setCoords(d + 1 + 0.3, 1.0);
                mark->setPen(Qt::NoPen);
                mark->setBrush(palette::deviceColor(d));
                p.deviceMarks.append(mark);
            }
        }
    }
    // From zero to above the tallest stack.
    auto fit = [n](QCustomPlot* plot, double highest) {
        plot->yAxis->setRange(0, highest > 0 ? highest * 1.12 : 1.0);
        plot->xAxis->setRange(0.4, std::max(n, 1) + 0.6);
    };
    fit(p.memory, top);
    fit(p.breakdown, timeTop);
}

std::vector<std::array<double, 4>> DeviceDashboard::breakdownMeans() const {
    std::vector<std::array<double, kTimeParts>> means(m_series.size());
    for (size_t d = 0; d < m_series.size(); ++d) {
        const auto& rows = m_series[d]->rows;
        const size_t count = std::min(rows.size(), static_cast<size_t>(m_breakdownWindow));
        for (size_t i = rows.size() - count; i < rows.size(); ++i)
            for (int k = 0; k < kTimeParts; ++k) means[d][static_cast<size_t>(k)] += rows[i].ms[static_cast<size_t>(k)];
        if (count)
            for (double& m : means[d]) m /= static_cast<double>(count);
    }
    return means;
}

void DeviceDashboard::updateRanges() {
    Plots& p = *m_plots;
    const bool byStep = m_xAxis == XAxis::Step;
    const double xMax = byStep ? std::max(10.0, p.maxStep * 1.02) : std::max(1.0, p.maxWall * 1.02);
    for (QCustomPlot* plot : {p.loss, p.rate, p.memoryTime}) {
        plot->xAxis->setRange(0, xMax);
        plot->xAxis->setLabel(byStep ? tr("optimizer step") : tr("wall time (s)"));
    }
    const double top = p.maxLoss > 0 ? p.maxLoss : 1.0;
    if (m_logLoss) {
        const double bottom = std::isfinite(p.minLoss) ? p.minLoss : top / 100;
        p.loss->yAxis->setRange(bottom / 1.5, top * 1.5);
    } else {
        p.loss->yAxis->setRange(0, top * 1.05);
    }
    p.rate->yAxis->setRange(0, p.maxRate > 0 ? p.maxRate * 1.1 : 1.0);
    p.memoryTime->yAxis->setRange(0, p.maxMemory > 0 ? p.maxMemory * 1.1 : 1024.0);
}

void DeviceDashboard::replotAll() {
    m_pacer->drawNow();  // a hidden tab is not drawn: it is when it is next shown
}

void DeviceDashboard::fitToData() {
    updateBars();
    updateRanges();
    replotAll();
}

// ---- settings -----------------------------------------------------------------------------

void DeviceDashboard::setSmoothing(double weight) {
    weight = std::clamp(weight, 0.0, 0.99);
    m_smoothingLabel->setText(QString::number(weight, 'f', 2));
    const int slider = static_cast<int>(std::lround(weight * 100));
    if (m_smoothingSlider->value() != slider) {
        const QSignalBlocker block(m_smoothingSlider);
        m_smoothingSlider->setValue(slider);
    }
    if (weight == m_smoothing) return;
    m_smoothing = weight;
    rebuildCurves();
}

void DeviceDashboard::setXAxis(XAxis axis) {
    plotstyle::showQuietly(m_xAxisBox, axis == XAxis::WallTime ? 1 : 0);
    if (axis == m_xAxis) return;
    m_xAxis = axis;
    rebuildCurves();
}

void DeviceDashboard::setLogarithmicLoss(bool on) {
    plotstyle::showQuietly(m_logBox, on);
    m_logLoss = on;
    plotstyle::setLogarithmic(m_plots->loss->yAxis, on);
    updateRanges();
    replotAll();
}

void DeviceDashboard::setBreakdownWindow(int steps) {
    steps = std::max(1, steps);
    if (m_windowBox->value() != steps) {
        const QSignalBlocker block(m_windowBox);
        m_windowBox->setValue(steps);
    }
    m_breakdownWindow = steps;
    updateBars();
    replotAll();
}

// ---- queries (tests, exports) -----------------------------------------------------------

int DeviceDashboard::lossPointCount(const QString& device) const {
    const Series* s = series(device);
    return s ? s->lossSmooth->dataCount() : 0;
}

int DeviceDashboard::throughputPointCount(const QString& device) const {
    const Series* s = series(device);
    return s ? s->rate->dataCount() : 0;
}

int DeviceDashboard::memoryPointCount(const QString& device) const {
    const Series* s = series(device);
    return s && s->memory ? s->memory->dataCount() : 0;
}

double DeviceDashboard::lossAt(const QString& device, int i, bool smoothed) const {
    const Series* s = series(device);
    if (!s) return kNaN;
    const QCPGraph* graph = smoothed ? s->lossSmooth : s->lossRaw;
    if (i < 0 || i >= graph->dataCount()) return kNaN;
    return graph->data()->at(i)->value;
}

double DeviceDashboard::memoryBar(const QString& device, int category) const {
    const qsizetype d = m_devices.indexOf(device);
    if (d < 0 || category < 0 || category >= kCategories) return kNaN;
    const auto data = m_plots->memoryBars[static_cast<size_t>(category)]->data();
    const auto it = data->findBegin(static_cast<double>(d + 1), false);
    return it != data->constEnd() && it->key == d + 1 ? it->value : kNaN;
}

double DeviceDashboard::breakdownMs(const QString& device, TimePart part) const {
    const qsizetype d = m_devices.indexOf(device);
    if (d < 0) return kNaN;
    const auto data = m_plots->timeBars[static_cast<size_t>(part)]->data();
    const auto it = data->findBegin(static_cast<double>(d + 1), false);
    return it != data->constEnd() && it->key == d + 1 ? it->value : kNaN;
}

int DeviceDashboard::recordCount() const {
    size_t n = m_global ? m_global->rows.size() : 0;
    for (const auto& s : m_series) n += s->rows.size();
    return static_cast<int>(n);
}

// ---- export -------------------------------------------------------------------------------

bool DeviceDashboard::exportTo(const QString& path) {
    // Each plot drawn at its place on screen, into one picture: PDF stays vector, PNG is drawn
    // at twice the screen's pixels (sharp in slides).
    m_plotArea->ensurePolished();
    if (m_plotArea->layout()) m_plotArea->layout()->activate();
    QSize size = m_plotArea->size();
    if (!isVisible() || size.width() < 100 || size.height() < 100) {
        // Never shown (a test, a script): lay the plots out at a readable size first.
        m_plotArea->resize(1200, 760);
        m_plotArea->layout()->setGeometry(QRect(0, 0, 1200, 760));
        size = m_plotArea->size();
    }
    updateRanges();
    // The run's caption on a line under the plots.
    const QString caption = plotexport::runCaption();
    const int plotsHeight = size.height();
    if (!caption.isEmpty()) size.rheight() += plotexport::captionHeight(m_plots->loss);
    auto drawAll = [this, &caption, plotsHeight, size](QCPPainter& painter) {
        for (QCustomPlot* plot : m_plots->all()) {
            painter.save();
            painter.translate(plot->geometry().topLeft());
            plot->toPainter(&painter, plot->width(), plot->height());
            painter.restore();
        }
        if (!caption.isEmpty())
            plotexport::drawCaption(painter, QRect(0, plotsHeight, size.width(), size.height() - plotsHeight),
                                    m_plots->loss->font(), caption);
    };
    if (path.endsWith(QLatin1String(".pdf"), Qt::CaseInsensitive)) {
        QPrinter printer(QPrinter::ScreenResolution);
        printer.setOutputFileName(path);
        printer.setOutputFormat(QPrinter::PdfFormat);
        printer.setColorMode(QPrinter::Color);
        QPageLayout layout;
        layout.setMode(QPageLayout::FullPageMode);
        layout.setOrientation(QPageLayout::Portrait);
        layout.setMargins(QMarginsF(0, 0, 0, 0));
        layout.setPageSize(QPageSize(size, QPageSize::Point, QString(), QPageSize::ExactMatch));
        printer.setPageLayout(layout);
        QCPPainter painter;
        if (!painter.begin(&printer)) return false;
        painter.setMode(QCPPainter::pmVectorized);
        painter.setMode(QCPPainter::pmNoCaching);
        painter.setWindow(QRect(QPoint(0, 0), size));
        drawAll(painter);
        painter.end();
        return QFileInfo(path).size() > 0;
    }
    constexpr int kScale = 2;
    QImage image(size * kScale, QImage::Format_ARGB32);
    image.fill(Qt::white);
    {
        QCPPainter painter(&image);
        painter.setRenderHint(QPainter::Antialiasing);
        painter.scale(kScale, kScale);
        drawAll(painter);
    }
    return image.save(path);
}

bool DeviceDashboard::exportCsv(const QString& path) const {
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) return false;
    QTextStream out(&file);
    out << "device,step,epoch,wall_s,loss,samples,samples_per_s,compute_ms,comm_ms,idle_ms,data_wait_ms";
    for (int c = 0; c < kCategories; ++c)
        out << ",mem_" << mem_category_name(static_cast<MemCategory>(c)).data() << "_bytes";
    out << ",mem_total_bytes\n";
    auto number = [](double v) { return std::isfinite(v) ? QString::number(v, 'g', 10) : QString(); };
    auto write = [&](const Series& s) {
        for (const auto& row : s.rows) {
            out << s.device << ',' << row.step << ',' << row.epoch << ',' << number(row.wall) << ','
                << number(row.loss) << ',' << row.samples << ',' << number(row.rate);
            for (double ms : row.ms) out << ',' << number(ms);
            for (qint64 bytes : row.memory) out << ',' << bytes;
            out << ',' << row.memoryTotal << '\n';
        }
    };
    for (const auto& s : m_series) write(*s);
    if (m_global) write(*m_global);
    out.flush();
    return file.error() == QFileDevice::NoError;
}

namespace {
// Writes `header` and what `rows` writes; false when the file cannot be written.
template <typename Rows>
bool writeCsvFile(const QString& path, const char* header, Rows&& rows) {
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) return false;
    QTextStream out(&file);
    out << header << '\n';
    rows(out);
    out.flush();
    return file.error() == QFileDevice::NoError;
}

QString csvNumber(double v) { return std::isfinite(v) ? QString::number(v, 'g', 10) : QString(); }
}  // namespace

bool DeviceDashboard::writeLossCsv(const QString& path) const {
    return writeCsvFile(path, "device,step,wall_s,loss,loss_smoothed", [this](QTextStream& out) {
        auto write = [&](const Series& s) {
            DebiasedEma ema;
            for (const auto& row : s.rows) {
                if (!std::isfinite(row.loss)) continue;  // not drawn: a gap in the curve
                const double smoothed = ema.add(row.loss, m_smoothing);
                out << s.device << ',' << row.step << ',' << csvNumber(row.wall) << ',' << csvNumber(row.loss) << ','
                    << csvNumber(smoothed) << '\n';
            }
        };
        for (const auto& s : m_series) write(*s);
        if (m_global) write(*m_global);
    });
}

bool DeviceDashboard::writeThroughputCsv(const QString& path) const {
    return writeCsvFile(path, "device,step,wall_s,samples_per_s,samples_per_s_smoothed", [this](QTextStream& out) {
        auto write = [&](const Series& s) {
            DebiasedEma ema;
            for (const auto& row : s.rows) {
                if (!std::isfinite(row.rate)) continue;
                const double smoothed = ema.add(row.rate, m_smoothing);
                out << s.device << ',' << row.step << ',' << csvNumber(row.wall) << ',' << csvNumber(row.rate) << ','
                    << csvNumber(smoothed) << '\n';
            }
        };
        for (const auto& s : m_series) write(*s);
        if (m_global) write(*m_global);
    });
}

bool DeviceDashboard::writeMemoryBarsCsv(const QString& path) const {
    QString header = QStringLiteral("device,step");
    for (int c = 0; c < kCategories; ++c)
        header += QStringLiteral(",mem_%1_bytes").arg(QString::fromLatin1(mem_category_name(static_cast<MemCategory>(c)).data()));
    header += QStringLiteral(",mem_total_bytes");
    return writeCsvFile(path, qPrintable(header), [this](QTextStream& out) {
        for (const auto& s : m_series) {
            if (s->rows.empty()) continue;
            const auto& row = s->rows.back();
            out << s->device << ',' << row.step;
            for (qint64 bytes : row.memory) out << ',' << bytes;
            out << ',' << row.memoryTotal << '\n';
        }
    });
}

bool DeviceDashboard::writeMemoryTimeCsv(const QString& path) const {
    return writeCsvFile(path, "device,step,wall_s,mem_total_bytes", [this](QTextStream& out) {
        for (const auto& s : m_series)
            for (const auto& row : s->rows)
                out << s->device << ',' << row.step << ',' << csvNumber(row.wall) << ',' << row.memoryTotal << '\n';
    });
}

bool DeviceDashboard::writeBreakdownCsv(const QString& path) const {
    return writeCsvFile(path, "device,steps_averaged,compute_ms,communication_ms,idle_ms,data_wait_ms",
                        [this](QTextStream& out) {
                            const auto means = breakdownMeans();
                            for (size_t d = 0; d < m_series.size(); ++d) {
                                const size_t count = std::min(m_series[d]->rows.size(), static_cast<size_t>(m_breakdownWindow));
                                out << m_series[d]->device << ',' << count;
                                for (double ms : means[d]) out << ',' << csvNumber(ms);
                                out << '\n';
                            }
                        });
}

QVector<PlotExport> DeviceDashboard::plotExports() {
    Plots& p = *m_plots;
    auto image = [this](QCustomPlot* plot) {
        return [this, plot](const QString& path) {
            updateBars();
            updateRanges();
            return plotexport::saveImage(plot, path);
        };
    };
    auto csv = [this](bool (DeviceDashboard::*write)(const QString&) const) {
        return [this, write](const QString& path) { return (this->*write)(path); };
    };
    return {
        {tr("Devices: training loss"), QStringLiteral("paralab-loss-per-device"), image(p.loss), csv(&DeviceDashboard::writeLossCsv)},
        {tr("Devices: throughput"), QStringLiteral("paralab-throughput"), image(p.rate), csv(&DeviceDashboard::writeThroughputCsv)},
        {tr("Devices: memory by category"), QStringLiteral("paralab-memory-by-category"), image(p.memory),
         csv(&DeviceDashboard::writeMemoryBarsCsv)},
        {tr("Devices: memory over time"), QStringLiteral("paralab-memory-over-time"), image(p.memoryTime),
         csv(&DeviceDashboard::writeMemoryTimeCsv)},
        {tr("Devices: time per step"), QStringLiteral("paralab-time-breakdown"), image(p.breakdown),
         csv(&DeviceDashboard::writeBreakdownCsv)},
        {tr("Devices: all plots"), QStringLiteral("paralab-devices"), [this](const QString& path) { return exportTo(path); },
         csv(&DeviceDashboard::exportCsv)},
    };
}

void DeviceDashboard::exportWithDialog() {
    const QString path = plotstyle::askExportPath(this, QStringLiteral("paralab-devices"), plotstyle::ExportKind::Image);
    if (!path.isEmpty() && !exportTo(path)) plotstyle::reportExportFailure(this, path);
}

void DeviceDashboard::exportCsvWithDialog() {
    const QString path = plotstyle::askExportPath(this, QStringLiteral("paralab-devices"), plotstyle::ExportKind::Csv);
    if (!path.isEmpty() && !exportCsv(path)) plotstyle::reportExportFailure(this, path);
}

void DeviceDashboard::showPlotMenu(QCustomPlot* plot, const QPoint& pos) {
    QMenu menu(this);
    const QList<QCustomPlot*> plots = m_plots->all();
    const QVector<PlotExport> exports = plotExports();
    const qsizetype index = plots.indexOf(plot);
    if (index >= 0 && index < exports.size()) {
        const PlotExport e = exports[index];
        menu.addAction(tr("Export this plot as PNG, PDF or CSV…"), this, [this, e] { plotexport::saveWithDialog(this, e); });
    }
    menu.addAction(tr("Export all plots…"), this, &DeviceDashboard::exportWithDialog);
    menu.addAction(tr("Export all data as CSV…"), this, &DeviceDashboard::exportCsvWithDialog);
    menu.addSeparator();
    menu.addAction(tr("Fit to data"), this, &DeviceDashboard::fitToData);
    QAction* log = menu.addAction(tr("Logarithmic loss axis"));
    log->setCheckable(true);
    log->setChecked(m_logLoss);
    connect(log, &QAction::toggled, this, &DeviceDashboard::setLogarithmicLoss);
    menu.exec(plot->mapToGlobal(pos));
}

}  // namespace paralab::ui
