#include "ui/panels/runs/runs_panel.h"

#include <qcustomplot.h>
#include <QAction>
#include <QCheckBox>
#include <QComboBox>
#include <QTableWidget>
#include <QDialog>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QMessageBox>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

#include "engine/strategy/registry.h"
#include <limits>

#include "ui/panels/common/byte_units.h"
#include "ui/panels/common/plot_style.h"

namespace paralab::ui {

namespace {

// Two runs of one strategy share its colour; the line style tells them apart.
const Qt::PenStyle kPenStyles[] = {Qt::SolidLine, Qt::DashLine, Qt::DotLine, Qt::DashDotLine};
// Bars stay readable up to about this many runs side by side.
constexpr int kMaxCompared = 10;
// Loss curves are noisy per step; the comparison is about the trend (TensorBoard's debiased EMA,
// with the dashboard's weight).
constexpr double kSmoothing = 0.9;

// The table's strategy cell carries the strategy's colour: the key to every comparison plot.
class RunsProxy : public QSortFilterProxyModel {
public:
    using QSortFilterProxyModel::QSortFilterProxyModel;
    QVariant data(const QModelIndex& index, int role) const override {
        if (role == Qt::DecorationRole && index.column() == RunsModel::Strategy)
            return RunsPanel::strategyColor(
                QSortFilterProxyModel::data(index, RunsModel::StrategyRole).toString());
        return QSortFilterProxyModel::data(index, role);
    }
};

// "zero · stage 2 ×2 #5"; for a bar's tick, on two lines (narrow bars side by side stay apart).
QString shortLabel(const RunInfo& r, bool twoLines = false) {
    const QString sep = twoLines ? QStringLiteral("\n") : QStringLiteral(" ");
    return r.devices.size() > 1 ? QStringLiteral("%1 ×%2%3#%4")
                                      .arg(r.strategyLabel())
                                      .arg(r.devices.size())
                                      .arg(sep)
                                      .arg(r.id)
                                : QStringLiteral("%1%2#%3").arg(r.strategyLabel(), sep).arg(r.id);
}

QVector<double> smoothed(const QVector<double>& values) {
    QVector<double> out;
    out.reserve(values.size());
    double ema = 0, weight = 0;
    for (double v : values) {
        if (!std::isfinite(v)) {  // a gap in the curve, kept out of the average
            out << v;
            continue;
        }
        ema = kSmoothing * ema + (1 - kSmoothing) * v;
        weight = kSmoothing * weight + (1 - kSmoothing);
        out << ema / weight;
    }
    return out;
}

void styleAxisRect(QCPAxisRect* rect) {
    for (QCPAxis* axis : {rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft)}) {
        axis->grid()->setPen(QPen(QColor(225, 225, 225), 1, Qt::SolidLine));
        axis->grid()->setZeroLinePen(Qt::NoPen);
    }
}

QCPItemText* addText(QCustomPlot* plot, QCPAxisRect* rect, const QString& text, double x,
                     double y) {
    auto* item = new QCPItemText(plot);
    item->setClipAxisRect(rect);
    item->setClipToAxisRect(true);
    item->position->setAxes(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
    item->position->setCoords(x, y);
    item->setText(text);
    return item;
}

}  // namespace

QColor RunsPanel::strategyColor(const QString& strategy) {
    // The registry's colour; a strategy this build does not know (an older store's) is grey.
    const strategy::StrategyDescriptor* d = strategy::find_strategy(strategy.toStdString());
    return d ? QColor(QString::fromStdString(d->color)) : QColor(127, 127, 127);
}

RunsPanel::RunsPanel(const QString& storePath, QWidget* parent)
    : QWidget(parent),
      m_model(new RunsModel(storePath, this)),
      m_proxy(new RunsProxy(this)),
      m_filter(new QLineEdit),
      m_message(new QLabel),
      m_table(new QTableView),
      m_deleteButton(new QPushButton(tr("Delete…"))),
      m_xAxis(new QComboBox),
      m_smooth(new QCheckBox(tr("Smoothed"))),
      m_logLoss(new QCheckBox(tr("Log scale"))),
      m_efficiency(new QLabel),
      m_plot(new QCustomPlot),
      m_compareTimer(new QTimer(this)) {
    m_proxy->setSourceModel(m_model);
    m_proxy->setSortRole(RunsModel::SortRole);
    m_proxy->setFilterKeyColumn(-1);  // name, strategy, devices, status, notes... any column
    m_proxy->setFilterCaseSensitivity(Qt::CaseInsensitive);

    // ---- the table ----
    m_filter->setPlaceholderText(tr("Filter: name, strategy, status, notes…"));
    m_filter->setClearButtonEnabled(true);
    m_filter->setObjectName(QStringLiteral("runsFilter"));
    connect(m_filter, &QLineEdit::textChanged, m_proxy,
            &QSortFilterProxyModel::setFilterFixedString);
    auto* refreshButton = new QPushButton(tr("Refresh"));
    auto* csvButton = new QPushButton(tr("Export CSV…"));
    auto* handInButton = new QPushButton(tr("Export runs…"));
    handInButton->setObjectName(QStringLiteral("exportRunsButton"));
    handInButton->setToolTip(tr("The selected runs, whole, into a new run store file: to hand in, "
                                "or to keep apart"));
    auto* importButton = new QPushButton(tr("Import runs…"));
    importButton->setObjectName(QStringLiteral("importRunsButton"));
    importButton->setToolTip(tr("Every run of another run store file (a class's hand-ins) into "
                                "this one, with its notes and author"));
    connect(handInButton, &QPushButton::clicked, this, &RunsPanel::exportRunsWithDialog);
    connect(importButton, &QPushButton::clicked, this, &RunsPanel::importRunsWithDialog);
    connect(refreshButton, &QPushButton::clicked, this, &RunsPanel::refresh);
    connect(m_deleteButton, &QPushButton::clicked, this, [this] { deleteSelected(true); });
    connect(csvButton, &QPushButton::clicked, this, &RunsPanel::exportTableWithDialog);
    auto* bar = new QHBoxLayout;
    bar->addWidget(m_filter, 1);
    bar->addWidget(refreshButton);
    bar->addWidget(m_deleteButton);
    bar->addWidget(csvButton);
    bar->addWidget(handInButton);
    bar->addWidget(importButton);

    m_message->setObjectName(QStringLiteral("runsMessage"));
    m_message->setWordWrap(true);
    m_message->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_message->setStyleSheet(
        QStringLiteral("QLabel { background: #fdecea; color: #8a1c1c; border: 1px solid #f5c2c0; "
                       "padding: 6px; }"));
    m_message->hide();

    m_table->setModel(m_proxy);
    m_table->setSortingEnabled(true);
    m_table->sortByColumn(RunsModel::Date, Qt::DescendingOrder);  // newest first
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setSelectionMode(QAbstractItemView::ExtendedSelection);
    m_table->setEditTriggers(QAbstractItemView::DoubleClicked | QAbstractItemView::EditKeyPressed |
                             QAbstractItemView::SelectedClicked);
    m_table->setAlternatingRowColors(true);
    m_table->verticalHeader()->hide();
    m_table->horizontalHeader()->setStretchLastSection(true);  // notes
    m_table->setWordWrap(false);
    auto* deleteAction = new QAction(tr("Delete"), m_table);
    deleteAction->setShortcut(QKeySequence::Delete);
    deleteAction->setShortcutContext(Qt::WidgetShortcut);
    connect(deleteAction, &QAction::triggered, this, [this] { deleteSelected(true); });
    m_table->addAction(deleteAction);
    auto* baselineAction = new QAction(tr("Use as the scaling baseline"), m_table);
    baselineAction->setObjectName(QStringLiteral("useAsBaseline"));
    baselineAction->setToolTip(
        tr("Measure the scaling efficiency of every run of this model and data against this "
           "single-device run"));
    connect(baselineAction, &QAction::triggered, this, [this] {
        const QList<qint64> ids = selectedRunIds();
        if (ids.size() == 1 && !m_model->chooseBaseline(ids.front()))
            showMessage(tr("Only a finished run on one device can be the scaling baseline."));
    });
    m_table->addAction(baselineAction);
    auto* resumeAction = new QAction(tr("Resume from its last checkpoint"), m_table);
    resumeAction->setObjectName(QStringLiteral("resumeRun"));
    resumeAction->setToolTip(tr("Continue a stopped, interrupted or failed run under its own id, to "
                                "the end its experiment sets"));
    connect(resumeAction, &QAction::triggered, this, [this] {
        const QList<qint64> ids = selectedRunIds();
        if (ids.size() == 1) emit resumeRequested(ids.front());
    });
    m_table->addAction(resumeAction);
    auto* planAction = new QAction(tr("Planned beside measured…"), m_table);
    planAction->setObjectName(QStringLiteral("planBesideRun"));
    planAction->setToolTip(tr("What the planner predicts for this run's experiment and devices on "
                              "this machine, beside what the run measured"));
    connect(planAction, &QAction::triggered, this, [this] {
        const QList<qint64> ids = selectedRunIds();
        if (ids.size() == 1) m_model->comparePlan(ids.front());
    });
    connect(m_model, &RunsModel::planCompared, this, &RunsPanel::showPlanBesideRun);
    m_table->addAction(planAction);
    m_table->setContextMenuPolicy(Qt::ActionsContextMenu);
    auto updateActions = [this, baselineAction, resumeAction, planAction] {
        const QList<qint64> ids = selectedRunIds();
        const RunInfo* r = ids.size() == 1 ? m_model->run(ids.front()) : nullptr;
        baselineAction->setEnabled(r && r->devices.size() == 1 &&
                                   r->status == QLatin1String("finished"));
        resumeAction->setEnabled(r && r->resumable());
        planAction->setEnabled(r && r->status != QLatin1String("running"));
    };

    auto* top = new QWidget;
    auto* topLayout = new QVBoxLayout(top);
    topLayout->setContentsMargins(0, 0, 0, 0);
    topLayout->addLayout(bar);
    topLayout->addWidget(m_message);
    topLayout->addWidget(m_table, 1);

    // ---- the comparison ----
    m_xAxis->addItem(tr("x: optimizer step"));
    m_xAxis->addItem(tr("x: wall time"));
    m_xAxis->setObjectName(QStringLiteral("compareXAxis"));
    m_smooth->setChecked(true);
    m_smooth->setToolTip(
        tr("Exponential moving average of the per-step loss (weight %1)").arg(kSmoothing));
    auto* plotButton = new QPushButton(tr("Export plot…"));
    connect(plotButton, &QPushButton::clicked, this, &RunsPanel::exportPlotWithDialog);
    connect(m_xAxis, &QComboBox::currentIndexChanged, this, &RunsPanel::redraw);
    connect(m_smooth, &QCheckBox::toggled, this, &RunsPanel::redraw);
    m_logLoss->setToolTip(tr("Logarithmic loss axis: differences late in training stay visible"));
    connect(m_logLoss, &QCheckBox::toggled, this, &RunsPanel::redraw);
    auto* compareBar = new QHBoxLayout;
    // The title on a row of its own, wrapped: the controls' row stays narrow enough for a
    // projector's width.
    auto* compareTitle =
        new QLabel(tr("<b>Compare</b> the selected runs (Ctrl/Shift+click for several)"));
    compareTitle->setWordWrap(true);
    compareBar->addStretch(1);
    compareBar->addWidget(m_xAxis);
    compareBar->addWidget(m_smooth);
    compareBar->addWidget(m_logLoss);
    compareBar->addWidget(plotButton);
    m_efficiency->setObjectName(QStringLiteral("efficiencyLabel"));
    m_efficiency->setWordWrap(true);
    m_efficiency->setTextInteractionFlags(Qt::TextSelectableByMouse);

    auto* bottom = new QWidget;
    auto* bottomLayout = new QVBoxLayout(bottom);
    bottomLayout->setContentsMargins(0, 0, 0, 0);
    bottomLayout->addWidget(compareTitle);
    bottomLayout->addLayout(compareBar);
    bottomLayout->addWidget(m_efficiency);
    bottomLayout->addWidget(m_plot, 1);
    buildPlot();

    auto* splitter = new QSplitter(Qt::Vertical);
    splitter->addWidget(top);
    splitter->addWidget(bottom);
    // Half and half: at 720 pixels high the table still lists several runs.
    splitter->setStretchFactor(0, 1);
    splitter->setStretchFactor(1, 1);
    splitter->setChildrenCollapsible(false);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(splitter);

    // ---- wiring ----
    // The selection is kept across a reload by run id (a reset model forgets it).
    connect(m_model, &QAbstractItemModel::modelAboutToBeReset, this,
            [this] { m_keepSelection = selectedRunIds(); });
    connect(m_model, &QAbstractItemModel::modelReset, this, [this] {
        // Fitted to the first runs shown; afterwards the user's column widths stay.
        if (!m_columnsFitted && m_model->rowCount() > 0) {
            m_columnsFitted = true;
            m_table->resizeColumnsToContents();
            m_table->horizontalHeader()->setStretchLastSection(true);
        }
        selectRuns(m_keepSelection);
        scheduleComparison();  // runs gone, or numbers changed
    });
    connect(m_table->selectionModel(), &QItemSelectionModel::selectionChanged, this,
            &RunsPanel::scheduleComparison);
    connect(m_table->selectionModel(), &QItemSelectionModel::selectionChanged, this, updateActions);
    updateActions();
    // A rubber-band or shift-click selection changes many times in a row: one query at the end.
    m_compareTimer->setSingleShot(true);
    m_compareTimer->setInterval(60);
    connect(m_compareTimer, &QTimer::timeout, this, &RunsPanel::requestComparison);
    connect(m_model, &RunsModel::curvesLoaded, this, &RunsPanel::showCurves);
    connect(m_model, &RunsModel::errorChanged, this, [this](const QString& error) {
        m_loadErrorShown = !error.isEmpty();
        showMessage(error);
    });
    connect(m_model, &RunsModel::operationFailed, this, &RunsPanel::showMessage);
    // Imported runs are selected, so that they are seen at once.
    connect(m_model, &RunsModel::runsImported, this,
            [this](const QString&, const QList<qint64>& ids, const QString& error) {
                if (error.isEmpty() && !ids.isEmpty()) selectRuns(ids);
            });
    connect(m_model, &RunsModel::refreshed, this, [this] {
        if (m_model->errorMessage().isEmpty() && m_loadErrorShown) {
            m_loadErrorShown = false;
            showMessage({});
        }
    });
    redraw();
}

void RunsPanel::exportRunsWithDialog() {
    const QList<qint64> ids = selectedRunIds();
    if (ids.isEmpty()) {
        showMessage(tr("Select the runs to export in the table first."));
        return;
    }
    QString path = QFileDialog::getSaveFileName(this, tr("Export runs to a new run store"),
                                                QStringLiteral("paralab-runs.db"),
                                                tr("ParaLab run stores (*.db)"));
    if (path.isEmpty()) return;
    if (!path.endsWith(QLatin1String(".db"))) path += QStringLiteral(".db");
    // The dialog asked before overwriting another file; never this store itself.
    if (QFileInfo(path) == QFileInfo(m_model->storePath())) {
        showMessage(tr("%1 is the run store the table shows: choose another file.").arg(path));
        return;
    }
    if (QFileInfo::exists(path) && !QFile::remove(path)) {
        showMessage(tr("Could not replace %1.").arg(path));
        return;
    }
    m_model->exportRuns(ids, path);
}

void RunsPanel::importRunsWithDialog() {
    const QString path = QFileDialog::getOpenFileName(this, tr("Import the runs of a run store"), QString(),
                                                      tr("ParaLab run stores (*.db);;All files (*)"));
    if (!path.isEmpty()) m_model->importRuns(path);
}

QSortFilterProxyModel* RunsPanel::proxy() const {
    return m_proxy;
}

void RunsPanel::buildPlot() {
    m_plot->setAntialiasedElements(QCP::aePlottables | QCP::aeLegendItems | QCP::aeItems);
    // Low enough that at 720 pixels the table above still shows its rows.
    m_plot->setMinimumSize(300, 240);
    QFont titleFont = font();
    titleFont.setBold(true);
    auto* layout = m_plot->plotLayout();
    m_lossRect = m_plot->axisRect();  // the default one: it holds the legend
    layout->insertRow(0);
    layout->addElement(
        0, 0,
        new QCPTextElement(m_plot, tr("Training loss (mean over each step's global batch)"),
                           titleFont));
    styleAxisRect(m_lossRect);
    m_lossRect->axis(QCPAxis::atLeft)->setLabel(tr("loss"));
    m_plot->legend->setVisible(true);
    m_plot->legend->setBrush(QColor(255, 255, 255, 225));
    m_plot->legend->setBorderPen(QPen(QColor(200, 200, 200)));
    m_lossRect->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);

    auto* bars = new QCPLayoutGrid;
    layout->addElement(2, 0, bars);
    // On two lines: three titles side by side fit a narrow window.
    const QString titles[] = {tr("Throughput"), tr("Peak memory\n(largest device)"),
                              tr("Scaling efficiency\nvs. N × single device")};
    QCPAxisRect** rects[] = {&m_throughputRect, &m_memoryRect, &m_efficiencyRect};
    for (int c = 0; c < 3; ++c) {
        bars->addElement(0, c, new QCPTextElement(m_plot, titles[c], titleFont));
        auto* rect = new QCPAxisRect(m_plot);
        bars->addElement(1, c, rect);
        styleAxisRect(rect);
        rect->axis(QCPAxis::atBottom)->grid()->setVisible(false);
        rect->axis(QCPAxis::atBottom)->setTicker(QSharedPointer<QCPAxisTickerText>::create());
        rect->axis(QCPAxis::atBottom)->setSubTicks(false);
        rect->axis(QCPAxis::atBottom)->setTickLength(0, 4);
        rect->setRangeDrag({});
        rect->setRangeZoom({});
        *rects[c] = rect;
    }
    bars->setRowStretchFactor(0, 0.001);
    layout->setRowStretchFactor(0, 0.001);
    layout->setRowStretchFactor(1, 5);
    layout->setRowStretchFactor(2, 4);
    // The loss plot's left edge lines up with the first bar chart's.
    auto* margins = new QCPMarginGroup(m_plot);
    m_lossRect->setMarginGroup(QCP::msLeft, margins);
    m_throughputRect->setMarginGroup(QCP::msLeft, margins);
    m_throughputRect->axis(QCPAxis::atLeft)->setLabel(tr("samples/s"));
    plotstyle::setFittedLabel(m_efficiencyRect->axis(QCPAxis::atLeft), tr("efficiency (%)"), tr("%"));

    m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    m_plot->setContextMenuPolicy(Qt::ActionsContextMenu);
    auto* exportAction = new QAction(tr("Export plot…"), m_plot);
    connect(exportAction, &QAction::triggered, this, &RunsPanel::exportPlotWithDialog);
    m_plot->addAction(exportAction);
}

void RunsPanel::refresh() {
    m_model->refresh();
}

void RunsPanel::setFilterText(const QString& text) {
    m_filter->setText(text);
}

void RunsPanel::selectRuns(const QList<qint64>& ids) {
    QItemSelection selection;
    for (int row = 0; row < m_proxy->rowCount(); ++row) {
        const QModelIndex index = m_proxy->index(row, 0);
        if (ids.contains(index.data(RunsModel::RunIdRole).toLongLong()))
            selection.select(index, m_proxy->index(row, RunsModel::ColumnCount - 1));
    }
    m_table->selectionModel()->select(
        selection, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
}

QList<qint64> RunsPanel::selectedRunIds() const {
    QList<qint64> ids;
    QModelIndexList rows = m_table->selectionModel()->selectedRows();
    std::sort(rows.begin(), rows.end(),
              [](const QModelIndex& a, const QModelIndex& b) { return a.row() < b.row(); });
    for (const QModelIndex& index : rows) ids << index.data(RunsModel::RunIdRole).toLongLong();
    return ids;
}

void RunsPanel::scheduleComparison() {
    m_compareTimer->start();
}

void RunsPanel::requestComparison() {
    QList<qint64> ids = selectedRunIds();
    // The table is newest first; the comparison reads better oldest (the baseline) first.
    std::sort(ids.begin(), ids.end());
    if (ids.size() > kMaxCompared) ids = ids.mid(0, kMaxCompared);
    m_curveRequest = m_model->loadCurves(ids);
}

void RunsPanel::showCurves(quint64 request, const QVector<LossCurve>& curves) {
    if (request != m_curveRequest) return;  // the selection has moved on
    m_curves = curves;
    redraw();
    emit comparisonUpdated();
}

void RunsPanel::redraw() {
    m_plot->clearPlottables();
    m_plot->clearItems();
    const bool byTime = xAxisIsTime();
    QCPAxis* lossX = m_lossRect->axis(QCPAxis::atBottom);
    QCPAxis* lossY = m_lossRect->axis(QCPAxis::atLeft);
    lossX->setLabel(byTime ? tr("wall time (s)") : tr("optimizer step"));

    QVector<const RunInfo*> runs;
    QVector<const LossCurve*> curves;
    for (const LossCurve& c : m_curves)
        if (const RunInfo* r = m_model->run(c.runId)) {
            runs << r;
            curves << &c;
        }

    // ---- loss curves ----
    QHash<QString, int> seen;  // runs per strategy variant so far: the line style
    double maxX = 0, maxLoss = 0, minLoss = std::numeric_limits<double>::infinity();
    for (int i = 0; i < runs.size(); ++i) {
        const RunInfo& r = *runs[i];
        const QColor color = strategyColor(r.strategy);
        QCPGraph* g = m_plot->addGraph(lossX, lossY);
        g->setName(QStringLiteral("%1 · %2 on %3 device%4  #%5")
                       .arg(r.name, r.strategyLabel())
                       .arg(r.devices.size())
                       .arg(r.devices.size() == 1 ? QString() : QStringLiteral("s"))
                       .arg(r.id));
        // Deterministic strategies follow the single device's curve step for step
        // (docs/strategies.md): earlier runs are drawn wider, so that curves on top of each other all show.
        const double width = std::min(1.6 + 1.2 * static_cast<double>(runs.size() - 1 - i), 5.2);
        g->setPen(QPen(color, width, kPenStyles[seen[r.strategyLabel()]++ % 4]));
        const QVector<double>& keys = byTime ? curves[i]->wallS : curves[i]->steps;
        const QVector<double> values =
            m_smooth->isChecked() ? smoothed(curves[i]->loss) : curves[i]->loss;
        g->setData(keys, values, !byTime);  // steps are sorted; wall times almost always
        for (double v : values)
            if (std::isfinite(v)) {
                maxLoss = std::max(maxLoss, v);
                if (v > 0) minLoss = std::min(minLoss, v);
            }
        if (!keys.isEmpty()) maxX = std::max(maxX, keys.back());
    }
    lossX->setRange(0, maxX > 0 ? maxX * 1.02 : (byTime ? 1.0 : 10.0));
    if (m_logLoss->isChecked()) {
        lossY->setScaleType(QCPAxis::stLogarithmic);
        if (!qSharedPointerDynamicCast<QCPAxisTickerLog>(lossY->ticker()))
            lossY->setTicker(QSharedPointer<QCPAxisTickerLog>::create());
        const double top = maxLoss > 0 ? maxLoss : 1.0;
        lossY->setRange(std::isfinite(minLoss) ? minLoss / 1.5 : top / 100, top * 1.5);
    } else {
        lossY->setScaleType(QCPAxis::stLinear);
        if (qSharedPointerDynamicCast<QCPAxisTickerLog>(lossY->ticker()))
            lossY->setTicker(QSharedPointer<QCPAxisTicker>::create());
        lossY->setRange(0, maxLoss > 0 ? maxLoss * 1.05 : 1.0);
    }
    m_plot->legend->setVisible(!runs.isEmpty());
    if (runs.isEmpty()) {
        auto* hint = new QCPItemText(m_plot);
        hint->setClipAxisRect(m_lossRect);
        hint->position->setType(QCPItemPosition::ptAxisRectRatio);
        hint->position->setAxisRect(m_lossRect);
        hint->position->setCoords(0.5, 0.5);
        hint->setColor(QColor(110, 110, 110));
        hint->setText(m_model->rowCount() == 0
                          ? tr("No runs in the store yet: runs started in this window appear here")
                          : tr("Select runs in the table to compare them"));
    }

    // ---- bars: one per run, in the run's strategy colour ----
    qint64 maxBytes = 0;
    double maxRate = 0;
    for (const RunInfo* r : runs) {
        maxBytes = std::max(maxBytes, r->peakMemoryBytes);
        maxRate = std::max(maxRate, r->samplesPerS);
    }
    const ByteUnit byteUnit = byteUnitFor(static_cast<double>(maxBytes));
    const double unit = byteUnit.bytes;
    plotstyle::setFittedLabel(m_memoryRect->axis(QCPAxis::atLeft), tr("peak memory (%1)").arg(byteUnit.name),
                              byteUnit.name);

    const QLocale locale;
    QStringList efficiencyLines, withoutBaseline;
    QList<qint64> baselines;  // in the order the runs name them
    QHash<qint64, QStringList> byBaseline;
    QHash<qint64, double> baselineRate;
    double maxEfficiency = 1.0;
    for (QCPAxisRect* rect : {m_throughputRect, m_memoryRect, m_efficiencyRect}) {
        auto ticker =
            qSharedPointerDynamicCast<QCPAxisTickerText>(rect->axis(QCPAxis::atBottom)->ticker());
        ticker->clear();
        for (int i = 0; i < runs.size(); ++i) ticker->addTick(i + 1, shortLabel(*runs[i], true));
        QCPAxis* x = rect->axis(QCPAxis::atBottom);
        x->setRange(0.4, std::max<qsizetype>(runs.size(), 1) + 0.6);
        // Labels wider than a bar's slot would run into each other: turned, they stay apart.
        const QFontMetrics metrics(x->tickLabelFont());
        int widest = 0;
        for (const RunInfo* r : runs)
            for (const QString& line : shortLabel(*r, true).split(QLatin1Char('\n')))
                widest = std::max(widest, metrics.horizontalAdvance(line));
        const int slot = rect->width() / static_cast<int>(std::max<qsizetype>(runs.size(), 1));
        x->setTickLabelRotation(widest + 8 > slot ? 30 : 0);
    }
    auto addBar = [&](QCPAxisRect* rect, int i, double value, const QString& label) {
        const QColor color = strategyColor(runs[i]->strategy);
        auto* bars = new QCPBars(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
        bars->removeFromLegend();
        bars->setName(shortLabel(*runs[i]));  // the CSV export's series
        bars->setWidth(0.6);
        bars->setPen(QPen(color.darker(130)));
        bars->setBrush(color);
        bars->addData(i + 1, value);
        QCPItemText* text = addText(m_plot, rect, label, i + 1, value);
        text->setPositionAlignment(Qt::AlignHCenter | Qt::AlignBottom);
        text->setPadding(QMargins(0, 0, 0, 3));
    };
    for (int i = 0; i < runs.size(); ++i) {
        const RunInfo& r = *runs[i];
        if (r.samplesPerS > 0)
            addBar(m_throughputRect, i, r.samplesPerS, locale.toString(r.samplesPerS, 'f', 0));
        if (r.peakMemoryBytes > 0)
            addBar(m_memoryRect, i, static_cast<double>(r.peakMemoryBytes) / unit,
                   formatBytes(r.peakMemoryBytes));
        const auto eff = m_model->scalingEfficiency(r.id);
        if (eff) {
            addBar(m_efficiencyRect, i, 100 * eff->value,
                   QStringLiteral("%1 %").arg(locale.toString(100 * eff->value, 'f', 0)));
            maxEfficiency = std::max(maxEfficiency, eff->value);
            if (!baselines.contains(eff->baselineRunId)) baselines << eff->baselineRunId;
            byBaseline[eff->baselineRunId] << QStringLiteral("%1 %2 %").arg(
                shortLabel(r), locale.toString(100 * eff->value, 'f', 0));
            baselineRate[eff->baselineRunId] = eff->baselineSamplesPerS;
        } else {
            QCPItemText* text =
                addText(m_plot, m_efficiencyRect, tr("no single-device\nbaseline"), i + 1, 4);
            text->setPositionAlignment(Qt::AlignHCenter | Qt::AlignBottom);
            text->setColor(QColor(120, 120, 120));
            withoutBaseline << shortLabel(r);
        }
    }
    // One line per baseline (its throughput once), one for the runs without any.
    for (qint64 id : baselines) {
        const RunInfo* base = m_model->run(id);
        const QString name = base ? shortLabel(*base) : QStringLiteral("#%1").arg(id);
        efficiencyLines << tr("against %1 (%2 samples/s): %3")
                               .arg(name, locale.toString(baselineRate[id], 'f', 0),
                                    byBaseline[id].join(QStringLiteral(", ")));
    }
    if (!withoutBaseline.isEmpty())
        efficiencyLines << tr("no finished single-device run of the same model and data for %1")
                               .arg(withoutBaseline.join(QStringLiteral(", ")));
    // Headroom for the value labels above the bars.
    m_throughputRect->axis(QCPAxis::atLeft)->setRange(0, maxRate > 0 ? maxRate * 1.18 : 1.0);
    m_memoryRect->axis(QCPAxis::atLeft)
        ->setRange(0, maxBytes > 0 ? static_cast<double>(maxBytes) / unit * 1.18 : 1.0);
    m_efficiencyRect->axis(QCPAxis::atLeft)->setRange(0, 100 * maxEfficiency * 1.18);
    if (!runs.isEmpty()) {  // perfect scaling
        auto* line = new QCPItemStraightLine(m_plot);
        line->setClipAxisRect(m_efficiencyRect);
        for (QCPItemPosition* p : {line->point1, line->point2})
            p->setAxes(m_efficiencyRect->axis(QCPAxis::atBottom),
                       m_efficiencyRect->axis(QCPAxis::atLeft));
        line->point1->setCoords(0, 100);
        line->point2->setCoords(1, 100);
        line->setPen(QPen(QColor(120, 120, 120), 1, Qt::DashLine));
    }
    m_efficiency->setText(
        efficiencyLines.isEmpty()
            ? QString()
            : tr("Scaling efficiency %1").arg(efficiencyLines.join(QStringLiteral("; "))));
    m_efficiency->setVisible(!efficiencyLines.isEmpty());
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

QList<qint64> RunsPanel::comparedRunIds() const {
    QList<qint64> ids;
    for (const LossCurve& c : m_curves)
        if (m_model->run(c.runId)) ids << c.runId;
    return ids;
}

int RunsPanel::curvePointCount(qint64 runId) const {
    const QList<qint64> ids = comparedRunIds();
    const int i = static_cast<int>(ids.indexOf(runId));
    return i < 0 || i >= m_plot->graphCount() ? -1 : m_plot->graph(i)->dataCount();
}

QColor RunsPanel::curveColor(qint64 runId) const {
    const QList<qint64> ids = comparedRunIds();
    const int i = static_cast<int>(ids.indexOf(runId));
    return i < 0 || i >= m_plot->graphCount() ? QColor() : m_plot->graph(i)->pen().color();
}

bool RunsPanel::xAxisIsTime() const {
    return m_xAxis->currentIndex() == 1;
}
void RunsPanel::setXAxisIsTime(bool byTime) {
    m_xAxis->setCurrentIndex(byTime ? 1 : 0);
}
void RunsPanel::setLogarithmicLoss(bool on) {
    m_logLoss->setChecked(on);
}
QString RunsPanel::efficiencyText() const {
    return m_efficiency->text();
}
QString RunsPanel::messageText() const {
    return m_message->isHidden() ? QString() : m_message->text();
}

void RunsPanel::showMessage(const QString& message) {
    m_message->setText(message);
    m_message->setVisible(!message.isEmpty());
}

void RunsPanel::deleteSelected(bool confirm) {
    const QList<qint64> ids = selectedRunIds();
    if (ids.isEmpty()) return;
    if (confirm) {
        QStringList names;
        for (qint64 id : ids)
            if (const RunInfo* r = m_model->run(id))
                names << QStringLiteral("%1 #%2").arg(r->name).arg(id);
        const auto answer =
            QMessageBox::question(this, tr("Delete runs"),
                                  tr("Delete %n run(s) and all their recorded steps, evaluations "
                                     "and timeline from the store?\n\n%1\n\n"
                                     "This cannot be undone.",
                                     nullptr, static_cast<int>(ids.size()))
                                      .arg(names.join(QLatin1Char('\n'))),
                                  QMessageBox::Yes | QMessageBox::Cancel, QMessageBox::Cancel);
        if (answer != QMessageBox::Yes) return;
    }
    m_model->deleteRuns(ids);
}

bool RunsPanel::exportPlot(const QString& path) {
    // The caption names the runs compared: each one's name, id, strategy and devices.
    QStringList runs;
    for (qint64 id : selectedRunIds())
        if (const RunInfo* r = m_model->run(id))
            runs << plotexport::captionText(r->name, r->id, r->strategyLabel(), static_cast<int>(r->devices.size()));
    return plotexport::saveImage(m_plot, path, QSize(1100, 760), runs.join(QStringLiteral("; ")));
}

bool RunsPanel::exportPlotCsv(const QString& path) const {
    return plotexport::saveCsv(m_plot, path);
}

QVector<PlotExport> RunsPanel::plotExports() {
    return {{tr("Runs: comparison of the selected runs"), QStringLiteral("paralab-comparison"),
             [this](const QString& path) { return exportPlot(path); },
             [this](const QString& path) { return exportPlotCsv(path); }}};
}

void RunsPanel::exportTableCsv(const QString& path) {
    QList<int> rows;
    for (int row = 0; row < m_proxy->rowCount(); ++row)
        rows << m_proxy->mapToSource(m_proxy->index(row, 0)).row();
    m_model->writeFile(path, m_model->csv(rows));
}

void RunsPanel::exportPlotWithDialog() {
    const QString path = plotstyle::askExportPath(this, QStringLiteral("paralab-comparison"), plotstyle::ExportKind::ImageOrCsv);
    if (!path.isEmpty() && !plotexport::save(plotExports().front(), path)) showMessage(tr("Could not write %1").arg(path));
}

void RunsPanel::exportTableWithDialog() {
    QString path = QFileDialog::getSaveFileName(
        this, tr("Export runs table"), QStringLiteral("paralab-runs.csv"), tr("CSV (*.csv)"));
    if (path.isEmpty()) return;
    if (!path.endsWith(QLatin1String(".csv"), Qt::CaseInsensitive)) path += QLatin1String(".csv");
    exportTableCsv(path);
}

void RunsPanel::showPlanBesideRun(qint64 id, const PlanBesideRun& c, const QString& error) {
    if (!error.isEmpty()) {
        showMessage(error);
        return;
    }
    if (!m_planDialog) {
        m_planDialog = new QDialog(this);
        m_planDialog->setObjectName(QStringLiteral("planBesideRunDialog"));
        auto* layout = new QVBoxLayout(m_planDialog);
        auto* header = new QLabel(m_planDialog);
        header->setObjectName(QStringLiteral("planBesideRunHeader"));
        header->setWordWrap(true);
        header->setTextInteractionFlags(Qt::TextSelectableByMouse);
        auto* table = new QTableWidget(3, 3, m_planDialog);
        table->setObjectName(QStringLiteral("planBesideRunTable"));
        table->setHorizontalHeaderLabels({tr("Predicted"), tr("Measured"), tr("Error")});
        table->setVerticalHeaderLabels({tr("Step time"), tr("Samples/s"), tr("Peak memory (busiest device)")});
        table->setEditTriggers(QAbstractItemView::NoEditTriggers);
        table->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
        table->verticalHeader()->setSectionResizeMode(QHeaderView::Stretch);
        auto* note = new QLabel(m_planDialog);
        note->setObjectName(QStringLiteral("planBesideRunNote"));
        note->setWordWrap(true);
        auto* close = new QPushButton(tr("Close"), m_planDialog);
        connect(close, &QPushButton::clicked, m_planDialog, &QDialog::close);
        layout->addWidget(header);
        layout->addWidget(table);
        layout->addWidget(note);
        layout->addWidget(close, 0, Qt::AlignRight);
        m_planDialog->resize(640, 260);
    }
    const RunInfo* r = m_model->run(id);
    m_planDialog->setWindowTitle(tr("Run %1 beside its plan").arg(id));
    m_planDialog->findChild<QLabel*>(QStringLiteral("planBesideRunHeader"))
        ->setText(tr("Run %1%2, planned on the %3 cluster as %4.")
                      .arg(id)
                      .arg(r ? QStringLiteral(" (%1, %2)").arg(r->name, r->strategy) : QString())
                      .arg(c.cluster, c.mesh));
    const QLocale locale;
    const auto seconds = [&](double s) {
        return s >= 1 ? tr("%1 s").arg(locale.toString(s, 'g', 4)) : tr("%1 ms").arg(locale.toString(1e3 * s, 'g', 4));
    };
    const auto percent = [&](double e) {
        return std::isfinite(e) ? QStringLiteral("%1%2 %").arg(e >= 0 ? QStringLiteral("+") : QString(),
                                                               locale.toString(100 * e, 'f', 1))
                                : QStringLiteral("—");
    };
    const QString cells[3][3] = {
        {seconds(c.predictedStep), seconds(c.measuredStep), percent(c.stepError)},
        {locale.toString(c.predictedRate, 'f', 0), locale.toString(c.measuredRate, 'f', 0), percent(c.rateError)},
        {formatBytes(static_cast<qint64>(c.predictedPeak)), formatBytes(static_cast<qint64>(c.measuredPeak)),
         percent(c.memoryError)}};
    auto* table = m_planDialog->findChild<QTableWidget*>(QStringLiteral("planBesideRunTable"));
    for (int row = 0; row < 3; ++row)
        for (int col = 0; col < 3; ++col) {
            auto* item = new QTableWidgetItem(cells[row][col]);
            item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
            table->setItem(row, col, item);
        }
    m_planDialog->findChild<QLabel*>(QStringLiteral("planBesideRunNote"))
        ->setText(tr("Measured step time: %1. Error = (predicted − measured) / measured. The same "
                     "comparison on the command line: paralab plan --compare %2.")
                      .arg(c.stepFrom)
                      .arg(id));
    m_planDialog->show();
    m_planDialog->raise();
}

}  // namespace paralab::ui
