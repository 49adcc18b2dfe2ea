#include "ui/panels/plan/plan_panel.h"

#include <qcustomplot.h>
#include <QComboBox>
#include <QElapsedTimer>
#include <QFileDialog>
#include <QFile>
#include <QFileInfo>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QMenu>
#include <QPainter>
#include <QPdfWriter>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTabWidget>
#include <QThread>
#include <QTimer>
#include <QVBoxLayout>

#include <algorithm>
#include <limits>
#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include "engine/plan/cluster.h"
#include "engine/plan/goodput.h"
#include "engine/plan/mesh.h"
#include "engine/run/experiment_file.h"
#include "engine/util/error.h"
#include "ui/panels/common/form_widgets.h"
#include "ui/panels/common/palette.h"
#include "ui/panels/common/plot_export.h"
#include "ui/panels/common/plot_style.h"
#include "ui/panels/plan/plan_views.h"
#include "ui/panels/timeline/timeline_panel.h"

namespace paralab::ui {

namespace {

const char* const kFileItem = "File…";
constexpr double kGiB = 1024.0 * 1024 * 1024;
// The predicted timeline draws at most this many operations (each a few pixels at best).
constexpr int64_t kMostDrawnOperations = 50000;

QStringList splitValues(const QString& text) {
    QStringList out;
    for (const QString& v : text.split(QLatin1Char(','))) out << v.trimmed();
    return out;
}

QString seconds(double s) {
    if (s == 0) return QStringLiteral("0");
    if (s < 1e-3) return QStringLiteral("%1 µs").arg(s * 1e6, 0, 'f', 1);
    if (s >= 1) return QStringLiteral("%1 s").arg(s, 0, 'f', s >= 100 ? 0 : 2);
    return QStringLiteral("%1 ms").arg(s * 1e3, 0, 'f', s >= 0.1 ? 0 : 1);
}

plan::PlanFile planFileOf(const config::Experiment& e) {
    return plan::plan_file_from_json(run::to_json(e), "the experiment");
}

// The simulated pipeline as a run's spans (one step, step 0; device "stage K"): forwards and
// backwards as the engine names them (with the chunk under an interleaved schedule), then on every stage the gradient synchronisation left
// exposed and the optimizer, after the pipeline's end.
QVector<config::Span> predictedSpans(const std::vector<plan::PipeSpan>& simulated, int stages,
                                     int chunks, bool splitsBackward, double dpComm, double optimizer) {
    using strategy::stages::Pass;
    QVector<config::Span> spans;
    spans.reserve(static_cast<qsizetype>(simulated.size()) + 2 * stages);
    double end = 0;
    for (const plan::PipeSpan& s : simulated) {
        // As a run names them: "forward", or "forward chunk C" with interleaved chunks; zb_h1's
        // B and W "backward_input" and "backward_weight".
        std::string phase = s.op.pass == Pass::forward  ? "forward"
                            : s.op.pass == Pass::weight ? "backward_weight"
                            : splitsBackward            ? "backward_input"
                                                        : "backward";
        if (chunks > 1) phase += " chunk " + std::to_string(s.op.chunk);
        spans.push_back({0, "stage " + std::to_string(s.device), phase, s.start, s.end, 0});
        end = std::max(end, s.end);
    }
    if (simulated.empty()) return spans;
    for (int d = 0; d < stages; ++d) {
        const std::string device = "stage " + std::to_string(d);
        if (dpComm > 0) spans.push_back({0, device, "all_reduce (exposed)", end, end + dpComm, 0});
        if (optimizer > 0) spans.push_back({0, device, "optimizer", end + dpComm, end + dpComm + optimizer, 0});
    }
    return spans;
}

}  // namespace

struct PlanPanel::Result {
    quint64 generation = 0;
    QString error;
    config::Experiment experiment;  // the window's
    config::Experiment planned;     // as the planner reads it (plan::PlanFile)
    plan::PlanModel model;
    plan::Cluster cluster;
    QString xKey, yKey;
    QStringList xs, ys;
    std::vector<plan::Prediction> cells;
    QString metric = QStringLiteral("tokens/s");
    bool dpFilled = false;  // dp = devices ÷ (tp·pp)
    bool keepRows = false;  // micro_batches = batch ÷ (dp × rows)
    int64_t rows = 1;       // the base mesh's rows per micro-batch
    double seconds = 0;
};

PlanPanel::PlanPanel(QWidget* parent)
    : QWidget(parent),
      m_clusterBox(new QComboBox),
      m_stackBox(new QComboBox),
      m_nodes(new QSpinBox),
      m_gpus(new QSpinBox),
      m_precision(new QLabel),
      m_keys{new QComboBox, new QComboBox},
      m_values{new QLineEdit, new QLineEdit},
      m_status(new QLabel),
      m_error(new QLabel),
      m_heatmap(new PlanHeatmap),
      m_selection(new QLabel),
      m_memoryPlot(new QCustomPlot),
      m_breakdownPlot(new QCustomPlot),
      m_timeline(new TimelinePanel),
      m_pages(new QTabWidget),
      m_runHere(new QPushButton(tr("Run here"))),
      m_runNote(new QLabel),
      m_goodputInputs{new QLineEdit, new QLineEdit, new QLineEdit, new QLineEdit},
      m_goodput(new QLabel),
      m_export(new QPushButton(tr("Export…"))),
      m_debounce(new QTimer(this)) {
    // ---- the inputs: the cluster, then the two sweeps ----
    for (const auto& name : plan::preset_names())
        m_clusterBox->addItem(QString::fromStdString(name));
    m_clusterBox->addItem(tr(kFileItem));
    m_clusterBox->setObjectName(QStringLiteral("clusterBox"));
    m_clusterBox->setToolTip(
        tr("A preset (the vendors' published figures; local: this machine's "
           "virtual CPU devices) or a cluster file (docs/planner.md, \"Clusters\")"));
    m_nodes->setRange(1, 100000);
    connect(m_nodes, &QSpinBox::valueChanged, m_nodes,
            [this](int n) { m_nodes->setSuffix(n == 1 ? tr(" node") : tr(" nodes")); });
    m_nodes->setObjectName(QStringLiteral("nodesBox"));
    m_gpus->setRange(1, 4096);
    m_gpus->setSuffix(tr(" GPUs per node"));
    m_gpus->setObjectName(QStringLiteral("gpusPerNodeBox"));
    m_precision->setObjectName(QStringLiteral("precisionLabel"));
    m_precision->setToolTip(tr("train.precision of the experiment (its Settings tab)"));
    auto* inputs = new QGridLayout;
    inputs->setContentsMargins(6, 4, 6, 0);
    inputs->setHorizontalSpacing(6);
    auto* row1 = new QHBoxLayout;
    row1->addWidget(new QLabel(tr("Cluster:")));
    row1->addWidget(m_clusterBox);
    row1->addSpacing(8);
    row1->addWidget(m_nodes);
    row1->addWidget(new QLabel(tr("×")));
    row1->addWidget(m_gpus);
    row1->addSpacing(8);
    row1->addWidget(new QLabel(tr("Stack:")));
    for (const auto& name : plan::stack_names()) m_stackBox->addItem(QString::fromStdString(name));
    m_stackBox->setCurrentText(QStringLiteral("ideal"));
    m_stackBox->setObjectName(QStringLiteral("stackBox"));
    m_stackBox->setToolTip(
        tr("The training software the plan assumes (docs/planner.md, \"Stacks\"): ideal is the "
           "hardware alone with fused attention; megatron-lm-2021 is calibrated on Narayanan et "
           "al. 2021; paralab is this program's engine"));
    row1->addWidget(m_stackBox);
    connect(m_stackBox, &QComboBox::currentIndexChanged, this, &PlanPanel::schedule);
    row1->addStretch(1);
    auto* row2 = new QHBoxLayout;
    const QStringList defaults{QStringLiteral("1,2,4,8"), QStringLiteral("1,2,4,8")};
    const QStringList defaultKeys{QStringLiteral("tp"), QStringLiteral("pp")};
    for (int axis = 0; axis < 2; ++axis) {
        for (const auto& key : plan::sweep_keys())
            m_keys[axis]->addItem(QString::fromStdString(key));
        m_keys[axis]->setCurrentText(defaultKeys[axis]);
        m_keys[axis]->setObjectName(axis == 0 ? QStringLiteral("sweepKeyX")
                                              : QStringLiteral("sweepKeyY"));
        m_values[axis]->setText(defaults[axis]);
        m_values[axis]->setObjectName(axis == 0 ? QStringLiteral("sweepValuesX")
                                                : QStringLiteral("sweepValuesY"));
        m_values[axis]->setPlaceholderText(tr("values, comma separated"));
        m_values[axis]->setMinimumWidth(70);
        m_keys[axis]->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
        m_keys[axis]->setMinimumContentsLength(8);
        row2->addWidget(new QLabel(axis == 0 ? tr("Sweep") : tr("×")));
        row2->addWidget(m_keys[axis]);
        row2->addWidget(m_values[axis], 1);
        connect(m_keys[axis], &QComboBox::currentIndexChanged, this, &PlanPanel::schedule);
        connect(m_values[axis], &QLineEdit::editingFinished, this, &PlanPanel::schedule);
    }
    inputs->addLayout(row1, 0, 0);
    inputs->addLayout(row2, 1, 0);
    m_status->setObjectName(QStringLiteral("planStatus"));
    m_status->setWordWrap(true);
    m_status->setStyleSheet(QStringLiteral("color: #555555"));
    m_error->setObjectName(QStringLiteral("planError"));
    m_error->setWordWrap(true);
    m_error->setStyleSheet(QStringLiteral("color: #b00020"));
    m_error->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_error->hide();
    auto* row3 = new QHBoxLayout;
    row3->addWidget(m_precision, 0, Qt::AlignTop);
    row3->addSpacing(8);
    row3->addWidget(m_status, 1);
    m_export->setObjectName(QStringLiteral("planExportButton"));
    m_export->setToolTip(tr("The tab as a picture (PNG or PDF), or every configuration of the "
                            "sweep as CSV or JSON"));
    m_export->setEnabled(false);
    connect(m_export, &QPushButton::clicked, this, &PlanPanel::exportWithMenu);
    row3->addWidget(m_export, 0, Qt::AlignTop);
    inputs->addLayout(row3, 2, 0);
    inputs->addWidget(m_error, 3, 0);

    // Goodput at scale: Llama 3's run as the starting values (Dubey et al. 2024, §3.3: 419
    // unexpected interruptions in 54 days on 16,384 GPUs, Tectonic's sustained 2 TB/s; the
    // restart time is an assumption, the paper gives none; 15.6T tokens).
    auto* row4 = new QHBoxLayout;
    const char* goodputLabels[] = {"Goodput: failures per GPU-hour", "storage GB/s", "restart s",
                                   "tokens"};
    const char* goodputNames[] = {"failureRateEdit", "storageEdit", "restartEdit", "tokensEdit"};
    const char* goodputDefaults[] = {"1.97e-5", "2000", "600", "15.6e12"};
    const char* goodputTips[] = {
        "Unexpected failures per GPU and hour (Llama 3's run: 419 / (16,384 GPUs × 1,296 h))",
        "The checkpoint's write bandwidth, all devices together (GB/s)",
        "Seconds from a failure to training again, before the lost work is redone",
        "Tokens to train, for the time (and, where the cluster gives a price, the cost)"};
    for (int i = 0; i < 4; ++i) {
        row4->addWidget(new QLabel(tr(goodputLabels[i])));
        m_goodputInputs[i]->setObjectName(QString::fromLatin1(goodputNames[i]));
        m_goodputInputs[i]->setText(QString::fromLatin1(goodputDefaults[i]));
        m_goodputInputs[i]->setToolTip(tr(goodputTips[i]));
        m_goodputInputs[i]->setMaximumWidth(90);
        connect(m_goodputInputs[i], &QLineEdit::editingFinished, this, &PlanPanel::showGoodput);
        row4->addWidget(m_goodputInputs[i]);
    }
    row4->addStretch(1);
    inputs->addLayout(row4, 4, 0);

    // ---- the selected configuration: memory, breakdown, Run here ----
    m_heatmap->setObjectName(QStringLiteral("planHeatmap"));
    m_selection->setObjectName(QStringLiteral("planSelection"));
    m_selection->setWordWrap(true);
    m_selection->setTextFormat(Qt::RichText);
    m_memoryPlot->setObjectName(QStringLiteral("planMemoryPlot"));
    m_memoryPlot->setMinimumHeight(180);
    plotstyle::styleGrid(m_memoryPlot);
    m_memoryPlot->legend->setVisible(true);
    plotstyle::putLegendBelow(m_memoryPlot, 2);
    m_memoryPlot->yAxis->setTicker(QSharedPointer<QCPAxisTickerText>::create());
    m_breakdownPlot->setObjectName(QStringLiteral("planBreakdownPlot"));
    m_breakdownPlot->setMinimumHeight(170);
    plotstyle::styleGrid(m_breakdownPlot);
    m_breakdownPlot->yAxis->setRangeReversed(true);
    m_breakdownPlot->yAxis->setTicker(QSharedPointer<QCPAxisTickerText>::create());
    m_runHere->setObjectName(QStringLiteral("runHereButton"));
    m_runHere->setEnabled(false);
    m_runHere->setToolTip(
        tr("Runs a scaled-down version of the selected configuration on this "
           "machine's virtual CPU devices: the experiment with this hybrid "
           "mesh, fp32, a few steps; it shows in the Training, Devices and "
           "Timeline tabs and is stored in Runs"));
    m_runNote->setObjectName(QStringLiteral("runHereNote"));
    m_runNote->setWordWrap(true);
    m_runNote->setStyleSheet(QStringLiteral("color: #555555"));
    connect(m_runHere, &QPushButton::clicked, this, &PlanPanel::runHere);

    auto* details = new QWidget;
    auto* detailsLayout = new QVBoxLayout(details);
    detailsLayout->setContentsMargins(4, 0, 4, 0);
    detailsLayout->addWidget(m_selection);
    m_goodput->setObjectName(QStringLiteral("planGoodput"));
    m_goodput->setWordWrap(true);
    m_goodput->setTextFormat(Qt::RichText);
    detailsLayout->addWidget(m_goodput);
    detailsLayout->addWidget(m_memoryPlot, 2);
    detailsLayout->addWidget(m_breakdownPlot, 3);
    auto* runRow = new QHBoxLayout;
    runRow->addWidget(m_runHere);
    runRow->addStretch(1);
    detailsLayout->addLayout(runRow);
    detailsLayout->addWidget(m_runNote);

    // Left: the sweep, and the selected configuration's predicted step as a page beside it (at
    // a projector's 720 lines there is no room for both above each other); right: its memory,
    // where its step goes, Run here.
    m_timeline->setObjectName(QStringLiteral("planTimeline"));
    m_timeline->setStepsControlVisible(false);  // one predicted step
    m_timeline->setTitle(tr("Predicted step"));
    m_pages->setObjectName(QStringLiteral("planPages"));
    m_pages->addTab(m_heatmap, tr("Sweep"));
    m_pages->addTab(m_timeline, tr("Predicted step"));
    auto* top = new QSplitter(Qt::Horizontal);
    m_body = top;
    top->addWidget(m_pages);
    top->addWidget(details);
    top->setStretchFactor(0, 1);
    top->setStretchFactor(1, 1);
    top->setSizes({1000, 1000});
    top->setChildrenCollapsible(false);
    auto* body = top;

    // On a small screen the tab scrolls rather than squeezing the plots.
    auto* content = new QWidget;
    auto* layout = new QVBoxLayout(content);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addLayout(inputs);
    layout->addWidget(body, 1);
    setScrollingContent(this, content);

    m_debounce->setSingleShot(true);
    m_debounce->setInterval(150);
    connect(m_debounce, &QTimer::timeout, this, [this] {
        if (isVisible())
            replan();
        else
            m_dirty = true;
    });
    connect(m_clusterBox, &QComboBox::activated, this, &PlanPanel::clusterChosen);
    connect(m_nodes, &QSpinBox::valueChanged, this, &PlanPanel::schedule);
    connect(m_gpus, &QSpinBox::valueChanged, this, &PlanPanel::schedule);
    connect(m_heatmap, &PlanHeatmap::cellClicked, this, &PlanPanel::showCell);
    setPreset(QStringLiteral("a100-80g"));
    m_status->setText(tr("Open an experiment to plan it."));
}

PlanPanel::~PlanPanel() {
    // The worker posts to this panel: it must end first (a sweep takes a moment at most).
    if (m_thread) {
        m_cancel->store(true);
        m_thread->wait();
    }
}

QString PlanPanel::precisionText() const {
    return m_precision->text();
}
QString PlanPanel::errorText() const {
    return m_error->isHidden() ? QString() : m_error->text();
}
QString PlanPanel::statusText() const {
    return m_status->text();
}
QString PlanPanel::runHereNote() const {
    return m_runNote->text();
}
QString PlanPanel::selectionText() const {
    return m_selection->text();
}
QString PlanPanel::goodputText() const {
    return m_goodput->text();
}

void PlanPanel::showGoodput() {
    m_goodput->clear();
    const int index = m_heatmap->selected();
    if (!m_result || index < 0 || index >= m_heatmap->cellCount()) return;
    const plan::Prediction& p = m_heatmap->cell(index);
    if (!p.skipped.empty()) return;
    const char* options[] = {"--failure-rate", "--storage-gbps", "--restart-s", "--tokens"};
    const char* names[] = {"failures per GPU-hour", "storage GB/s", "restart s", "tokens"};
    double v[4];
    for (int i = 0; i < 4; ++i) {
        bool ok = false;
        v[i] = m_goodputInputs[i]->text().trimmed().toDouble(&ok);
        if (!ok || !std::isfinite(v[i])) {
            m_goodput->setText(tr("<span style='color:#b00020'>Goodput: %1 is not a number</span>")
                                   .arg(QString::fromLatin1(names[i])));
            return;
        }
    }
    plan::GoodputInputs in;
    in.failure_rate_per_gpu_hour = v[0];
    in.storage_bytes_per_s = v[1] * 1e9;
    in.restart_s = v[2];
    in.tokens = v[3];
    in.price_per_gpu_hour = m_result->cluster.price_per_gpu_hour;
    try {
        if (!(in.tokens > 0)) throw ConfigError(options[3], "expected a number of tokens above 0");
        const plan::Goodput g = plan::goodput_of(p, in);
        QString text =
            tr("<b>Goodput %1%</b> · checkpoint of %2 GiB every %3 (written in %4) · a failure "
               "every %5 h · %6 days to train %7 tokens")
                .arg(100 * g.goodput, 0, 'f', 1)
                .arg(g.checkpoint_bytes / kGiB, 0, 'f', 0)
                .arg(seconds(g.checkpoint_interval_s), seconds(g.checkpoint_write_s))
                .arg(g.mtbf_s / 3600, 0, 'g', 3)
                .arg(g.time_to_train_s / 86400, 0, 'g', 4)
                .arg(in.tokens, 0, 'g', 3);
        if (g.cost)
            text += tr(" · cost %1 at %2 per GPU-hour")
                        .arg(QLocale().toString(*g.cost, 'f', 0))
                        .arg(*in.price_per_gpu_hour);
        m_goodput->setText(text);
    } catch (const ConfigError& e) {
        m_goodput->setText(tr("<span style='color:#b00020'>Goodput: %1</span>")
                               .arg(QString::fromStdString(e.what()).toHtmlEscaped()));
    }
}

int PlanPanel::selectedCell() const {
    return m_heatmap->selected();
}

void PlanPanel::selectCell(int index) {
    m_heatmap->setSelected(index);
    showCell(index);
}

void PlanPanel::setExperiment(const config::Experiment& e) {
    std::string key;
    try {
        key = run::to_json(e).dump();
    } catch (const std::exception&) {
    }
    if (m_experiment && !key.empty() && key == m_experimentKey) return;
    const bool first = !m_experiment;
    const std::string before = m_experiment ? m_experiment->strategy.type : std::string();
    m_experiment = e;
    m_experimentKey = key;
    m_precision->setText(tr("Precision: %1").arg(QString::fromStdString(e.train.precision)));
    // A new strategy (or the first experiment) sizes the cluster for its mesh.
    if (first || before != e.strategy.type) fitNodesToMesh();
    schedule();
}

void PlanPanel::schedule() {
    m_debounce->start();
}

void PlanPanel::setSweep(int axis, const QString& key, const QString& values) {
    {
        const QSignalBlocker block(m_keys[axis]);
        m_keys[axis]->setCurrentText(key);
    }
    m_values[axis]->setText(values);
    schedule();
}

void PlanPanel::showEvent(QShowEvent* event) {
    QWidget::showEvent(event);
    if (m_dirty) {
        m_dirty = false;
        replan();
    }
}

std::optional<plan::Cluster> PlanPanel::baseCluster(QString* error) const {
    try {
        if (!m_clusterFile.isEmpty() && m_fileCluster) return *m_fileCluster;
        return plan::preset(m_clusterBox->currentText().toStdString());
    } catch (const std::exception& e) {
        if (error) *error = QString::fromUtf8(e.what());
    }
    return std::nullopt;
}

void PlanPanel::setPreset(const QString& name) {
    const int index = m_clusterBox->findText(name);
    if (index < 0) return;
    m_clusterBox->setCurrentIndex(index);
    m_lastClusterIndex = index;
    m_clusterFile.clear();
    m_fileCluster.reset();
    fitNodesToMesh();
    schedule();
}

QString PlanPanel::loadClusterFile(const QString& path) {
    try {
        plan::Cluster c = plan::load_cluster(path.toStdString());
        m_fileCluster = c;
        m_clusterFile = path;
        const QString item = tr("file: %1").arg(QFileInfo(path).fileName());
        const int fileIndex = m_clusterBox->count() - 1;  // "File…" stays last
        if (m_clusterBox->count() > static_cast<int>(plan::preset_names().size()) + 1)
            m_clusterBox->setItemText(fileIndex - 1, item);
        else
            m_clusterBox->insertItem(fileIndex, item);
        m_clusterBox->setItemData(m_clusterBox->count() - 2, path, Qt::ToolTipRole);
        m_clusterBox->setCurrentIndex(m_clusterBox->count() - 2);
        m_lastClusterIndex = m_clusterBox->currentIndex();
        showSize(c.nodes, c.gpus_per_node);
        schedule();
        return {};
    } catch (const std::exception& e) {
        const QString message = tr("Cluster file not loaded: %1").arg(QString::fromUtf8(e.what()));
        ++m_generation;  // a plan under way is of no use now: the error stays
        showError(message);
        m_clusterBox->setCurrentIndex(m_lastClusterIndex);
        emit planned();
        return message;
    }
}

void PlanPanel::clusterChosen(int index) {
    if (m_clusterBox->itemText(index) == tr(kFileItem)) {
        m_clusterBox->setCurrentIndex(m_lastClusterIndex);
        const QString path = QFileDialog::getOpenFileName(this, tr("Cluster file"), QString(),
                                                          tr("Cluster files (*.json)"));
        if (!path.isEmpty()) loadClusterFile(path);
        return;
    }
    if (index < static_cast<int>(plan::preset_names().size())) {
        setPreset(m_clusterBox->itemText(index));
        return;
    }
    m_lastClusterIndex = index;  // the loaded file again
    if (!m_clusterFile.isEmpty()) loadClusterFile(m_clusterFile);
}

void PlanPanel::fitNodesToMesh() {
    QString error;
    const auto cluster = baseCluster(&error);
    if (!cluster) return;
    int nodes = cluster->nodes, gpus = cluster->gpus_per_node;
    // As `paralab plan` without --nodes: a preset gets as many nodes as the mesh needs (part of
    // one when it needs fewer devices than a node has).
    if (m_experiment && m_clusterFile.isEmpty()) {
        try {
            const int64_t wanted =
                plan::mesh_of(planFileOf(*m_experiment), cluster->devices()).devices();
            if (wanted % gpus == 0)
                nodes = static_cast<int>(std::min<int64_t>(wanted / gpus, std::numeric_limits<int>::max()));
            else if (wanted < gpus)
                gpus = static_cast<int>(wanted), nodes = 1;
        } catch (const std::exception&) {
            // The plan says why (replan shows the error).
        }
    }
    showSize(nodes, gpus);
}

void PlanPanel::showSize(int nodes, int gpus) {
    const QSignalBlocker a(m_nodes), b(m_gpus);
    m_nodes->setValue(nodes);
    m_gpus->setValue(gpus);
    m_nodes->setSuffix(nodes == 1 ? tr(" node") : tr(" nodes"));
}

void PlanPanel::showError(const QString& message) {
    m_error->setText(message);
    m_error->show();
    m_heatmap->clear();
    m_timeline->clear();
    m_memoryPlot->clearPlottables();
    m_memoryPlot->clearItems();
    m_memoryPlot->replot(QCustomPlot::rpQueuedReplot);
    m_breakdownPlot->clearPlottables();
    m_breakdownPlot->clearItems();
    m_breakdownPlot->replot(QCustomPlot::rpQueuedReplot);
    m_selection->clear();
    m_runHere->setEnabled(false);
    m_runNote->clear();
    m_shownBreakdown.clear();
    m_shownMemory.clear();
    m_shownCapacity = 0;
    m_result.reset();
}

void PlanPanel::replan() {
    m_debounce->stop();
    m_dirty = false;
    if (!m_experiment) {
        showError(tr("No experiment to plan: open one."));
        emit planned();
        return;
    }
    if (m_thread) {  // one worker at a time: this plan follows the one under way
        m_again = true;
        m_cancel->store(true);  // its result is stale: the next plan starts when it stops
        return;
    }
    // The inputs, checked here: a bad value is named before anything runs.
    auto job = std::make_shared<Result>();
    job->generation = ++m_generation;
    job->experiment = *m_experiment;
    QString error;
    const auto cluster = baseCluster(&error);
    if (!cluster) {
        showError(error);
        emit planned();
        return;
    }
    job->cluster = *cluster;
    try {
        job->cluster.stack = plan::stack_preset(m_stackBox->currentText().toStdString());
    } catch (const std::exception& e) {
        showError(QString::fromUtf8(e.what()));
        emit planned();
        return;
    }
    job->cluster.nodes = m_nodes->value();
    job->cluster.gpus_per_node = m_gpus->value();
    job->xKey = m_keys[0]->currentText();
    job->yKey = m_keys[1]->currentText();
    if (job->xKey == job->yKey) {
        showError(tr("The two sweeps need different keys (both are %1).").arg(job->xKey));
        emit planned();
        return;
    }
    for (int axis = 0; axis < 2; ++axis) {
        const QString key = axis == 0 ? job->xKey : job->yKey;
        const QStringList values = splitValues(m_values[axis]->text());
        for (const QString& v : values) {
            plan::Mesh probe;
            try {
                if (v.isEmpty())
                    throw ConfigError(
                        tr("an empty value in \"%1\"").arg(m_values[axis]->text()).toStdString());
                plan::set_mesh_key(probe, key.toStdString(), v.toStdString());
            } catch (const ConfigError& e) {
                showError(tr("Sweep of %1: %2").arg(key, QString::fromStdString(e.reason())));
                emit planned();
                return;
            }
        }
        (axis == 0 ? job->xs : job->ys) = values;
    }
    m_status->setText(tr("Planning %1 configurations…").arg(job->xs.size() * job->ys.size()));

    // The destructor waits for the worker, so `this` outlives it; a result posted to a panel
    // that is gone is dropped with it.
    m_cancel = std::make_shared<std::atomic<bool>>(false);
    m_thread = QThread::create([job, this, cancel = m_cancel] {
        QElapsedTimer clock;
        clock.start();
        try {
            const plan::PlanFile file = planFileOf(job->experiment);
            job->planned = file.experiment;
            job->model = plan::plan_model(file.experiment);
            job->metric =
                job->model.seq_len > 1 ? QStringLiteral("tokens/s") : QStringLiteral("samples/s");
            const int devices = job->cluster.devices();
            const plan::Mesh base = plan::mesh_of(file, devices);
            job->dpFilled = job->xKey != QLatin1String("dp") && job->yKey != QLatin1String("dp");
            job->keepRows = job->dpFilled && job->xKey != QLatin1String("micro_batches") &&
                            job->yKey != QLatin1String("micro_batches");
            const int64_t batch = file.experiment.data.batch_size;
            const int64_t replicas = int64_t{base.dp} * base.micro_batches;
            const int64_t rows = std::max<int64_t>(1, (batch + replicas - 1) / replicas);
            job->rows = rows;
            for (const QString& y : job->ys) {
                for (const QString& x : job->xs) {
                    if (cancel->load()) return;  // nothing posted: a newer plan follows
                    plan::Mesh m = base;
                    plan::set_mesh_key(m, job->xKey.toStdString(), x.toStdString());
                    plan::set_mesh_key(m, job->yKey.toStdString(), y.toStdString());
                    if (job->dpFilled) {
                        // dp takes the devices the other axes leave, and the micro-batches
                        // follow it (the planner's own rule for mesh sweeps).
                        plan::Mesh filled = m;
                        const std::string why =
                            plan::fill_dp(filled, devices, batch, rows, job->keepRows);
                        if (!why.empty()) {
                            plan::Prediction p;
                            p.mesh = m;
                            p.devices = devices;
                            p.skipped = why;
                            job->cells.push_back(std::move(p));
                            continue;
                        }
                        m = filled;
                    }
                    job->cells.push_back(
                        plan::predict(file.experiment, job->model, job->cluster, m));
                }
            }
        } catch (const std::exception& e) {
            job->error = QString::fromUtf8(e.what());
            job->cells.clear();
        }
        job->seconds = clock.nsecsElapsed() / 1e9;
        if (cancel->load()) return;
        QMetaObject::invokeMethod(
            this, [this, job] { showResult(job); }, Qt::QueuedConnection);
    });
    connect(m_thread, &QThread::finished, this, [this] {
        m_thread = nullptr;
        if (m_again) {
            m_again = false;
            replan();
        }
    });
    connect(m_thread, &QThread::finished, m_thread, &QObject::deleteLater);
    m_thread->start();
}

void PlanPanel::showResult(const std::shared_ptr<Result>& r) {
    if (r->generation != m_generation) return;  // inputs changed since: another plan follows
    if (!r->error.isEmpty()) {
        showError(
            tr("Cannot plan %1: %2").arg(QString::fromStdString(r->experiment.name), r->error));
        m_status->setText(tr("No plan."));
        m_export->setEnabled(false);
        emit planned();
        return;
    }
    m_error->hide();
    m_error->clear();
    // Keep the selected configuration when the grid still has it.
    QString keepX, keepY;
    if (m_result && m_heatmap->selected() >= 0 && !m_result->xs.isEmpty()) {
        const int i = m_heatmap->selected();
        keepX = m_result->xs.value(i % m_result->xs.size());
        keepY = m_result->ys.value(i / m_result->xs.size());
    }
    m_result = r;
    m_seconds = r->seconds;
    m_export->setEnabled(!r->cells.empty());
    m_heatmap->setGrid(r->xKey, r->xs, r->yKey, r->ys, r->cells, r->metric);
    int select = -1;
    if (!keepX.isEmpty() && r->xs.contains(keepX) && r->ys.contains(keepY))
        select = static_cast<int>(r->ys.indexOf(keepY) * r->xs.size() + r->xs.indexOf(keepX));
    if (select < 0) select = m_heatmap->best();
    for (int i = 0; select < 0 && i < m_heatmap->cellCount(); ++i)
        if (m_heatmap->mark(i) != PlanHeatmap::Mark::skipped) select = i;
    if (select < 0 && m_heatmap->cellCount() > 0) select = 0;
    int fits = 0, oom = 0, skipped = 0;
    for (int i = 0; i < m_heatmap->cellCount(); ++i) {
        const auto m = m_heatmap->mark(i);
        (m == PlanHeatmap::Mark::fits ? fits : m == PlanHeatmap::Mark::oom ? oom : skipped)++;
    }
    const QLocale locale;
    QString status = tr("%1 on %2: %3 × %4 = %5 devices · %6 configurations in %7: %8 fit, %9 out "
                        "of memory, %10 skipped")
                         .arg(QString::fromStdString(r->experiment.name),
                              QString::fromStdString(r->cluster.name))
                         .arg(r->cluster.nodes)
                         .arg(r->cluster.gpus_per_node)
                         .arg(locale.toString(r->cluster.devices()))
                         .arg(r->cells.size())
                         .arg(seconds(r->seconds))
                         .arg(fits)
                         .arg(oom)
                         .arg(skipped);
    if (r->dpFilled) status += tr(" · dp = devices ÷ (tp·pp)");
    if (r->keepRows)
        status +=
            tr(", micro_batches = batch ÷ (dp × b) with the experiment's b = %1 %2 per micro-batch")
                .arg(r->rows)
                .arg(r->rows == 1 ? tr("row") : tr("rows"));
    status += tr(" · click a cell");
    m_status->setText(status);
    m_heatmap->setSelected(select);
    showCell(select);
    emit planned();
}

void PlanPanel::showCell(int index) {
    m_shownBreakdown.clear();
    m_shownMemory.clear();
    m_shownCapacity = 0;
    m_memoryPlot->clearPlottables();
    m_memoryPlot->clearItems();
    m_breakdownPlot->clearPlottables();
    m_breakdownPlot->clearItems();
    m_timeline->clear();
    m_runHere->setEnabled(false);
    m_runNote->clear();
    m_goodput->clear();
    if (!m_result || index < 0 || index >= m_heatmap->cellCount()) {
        m_selection->clear();
        m_memoryPlot->replot(QCustomPlot::rpQueuedReplot);
        m_breakdownPlot->replot(QCustomPlot::rpQueuedReplot);
        return;
    }
    const plan::Prediction& p = m_heatmap->cell(index);
    QString head =
        QStringLiteral("<b>%1</b>")
            .arg(QString::fromStdString(plan::mesh_line(p.mesh, p.micro_batch)).toHtmlEscaped());
    if (!p.skipped.empty()) {
        m_selection->setText(
            head + tr("<br>Skipped: %1").arg(QString::fromStdString(p.skipped).toHtmlEscaped()));
        m_runNote->setText(tr("Nothing to run: this configuration cannot run as planned."));
        m_memoryPlot->replot(QCustomPlot::rpQueuedReplot);
        m_breakdownPlot->replot(QCustomPlot::rpQueuedReplot);
        return;
    }
    const QLocale locale;
    head +=
        tr("<br>step %1 · %2 %3 · MFU %4% · %5")
            .arg(seconds(p.step_time_s), locale.toString(m_heatmap->value(index), 'f', 0),
                 m_result->metric)
            .arg(100 * p.mfu, 0, 'f', 1)
            .arg(p.fits
                     ? tr("fits (%1 of %2 GiB)")
                           .arg(p.memory_total / kGiB, 0, 'f', 1)
                           .arg(p.memory_capacity / kGiB, 0, 'f', 0)
                     : tr("<span style='color:#b00020'><b>out of memory</b> (%1 of %2 GiB)</span>")
                           .arg(p.memory_total / kGiB, 0, 'f', 1)
                           .arg(p.memory_capacity / kGiB, 0, 'f', 0));
    m_selection->setText(head);
    showGoodput();
    plotMemory(p);
    plotBreakdown(p);

    // The pipeline as simulated (a moment's work for one configuration), drawn by the Timeline
    // tab's widget as a run's step is: one row per stage, its forwards and backwards, then the
    // step's tail (the exposed gradient synchronisation and the optimizer, the busiest device's).
    const int chunks = p.mesh.chunks();
    const int64_t operations = int64_t{2} * p.mesh.pp * chunks * p.mesh.micro_batches;
    // Short: a plot's title does not wrap, and the page is half the window.
    QString title = tr("Predicted step · %1, %2 micro-batches")
                        .arg(QString::fromLatin1(strategy::stages::schedule_name(p.mesh.schedule)))
                        .arg(p.mesh.micro_batches);
    if (p.mesh.tp * p.mesh.dp > 1) title += tr(" · a stage = %1 devices").arg(p.mesh.tp * p.mesh.dp);
    if (operations > kMostDrawnOperations) {
        m_timeline->setPipeline(0, 0, {});
        m_timeline->setTitle(tr("%1 forwards and backwards: too many to draw; fewer micro-batches "
                                "or stages draw the pipeline")
                                 .arg(QLocale().toString(static_cast<qlonglong>(operations))));
    } else {
        std::vector<plan::PipeSpan> simulated;
        try {
            plan::predict(m_result->planned, m_result->model, m_result->cluster, p.mesh, &simulated);
        } catch (const std::exception&) {
            simulated.clear();
        }
        m_timeline->setPipeline(
            p.mesh.pp, p.mesh.micro_batches,
            QString::fromLatin1(strategy::stages::schedule_name(p.mesh.schedule)), chunks);
        m_timeline->setTitle(title);
        m_timeline->addSpans(
            predictedSpans(simulated, p.mesh.pp, chunks, strategy::stages::splits_backward(p.mesh.schedule),
                           p.breakdown.dp_comm, p.breakdown.optimizer));
    }

    // Run here: what it would run, or why it cannot.
    const RunHere run = runHereExperiment(m_result->experiment, p.mesh);
    m_runHere->setEnabled(run.experiment.has_value());
    if (run.experiment)
        m_runNote->setText(
            tr("Run here: cpu:0–cpu:%1 of this machine, fp32, at most %2 steps, live in the "
               "Training tab and kept in Runs.")
                .arg(p.mesh.devices() - 1)
                .arg(*run.experiment->train.max_steps));
    else
        m_runNote->setText(tr("Cannot run here: %1").arg(run.why));
}

void PlanPanel::plotMemory(const plan::Prediction& p) {
    QCustomPlot* plot = m_memoryPlot;
    const double unit = kGiB;
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    ticker->addTick(0, tr("stage %1").arg(p.memory_stage));
    plot->yAxis->setTicker(ticker);
    plot->yAxis->setRange(-0.6, 0.6);
    QCPBars* below = nullptr;
    for (size_t c = 0; c < kMemCategoryCount; ++c) {
        auto* bars = new QCPBars(plot->yAxis, plot->xAxis);
        const auto category = static_cast<MemCategory>(c);
        const std::string_view categoryName = mem_category_name(category);
        QString name =
            QString::fromLatin1(categoryName.data(), static_cast<qsizetype>(categoryName.size()))
                .replace(QLatin1Char('_'), QLatin1Char(' '));
        if (category == MemCategory::workspace) name = tr("reserved");
        bars->setName(name);
        const QColor color = palette::memoryCategoryColor(static_cast<int>(c));
        bars->setBrush(color);
        bars->setPen(QPen(color.darker(130)));
        bars->setWidth(0.55);
        bars->addData(0, p.memory[c] / unit);
        if (below) bars->moveAbove(below);
        below = bars;
        m_shownMemory.push_back(p.memory[c]);
    }
    m_shownCapacity = p.memory_capacity;
    const double cap = p.memory_capacity / unit;
    auto* line = new QCPItemStraightLine(plot);
    line->point1->setCoords(cap, -1);
    line->point2->setCoords(cap, 1);
    line->setPen(QPen(QColor(176, 0, 32), 2, Qt::DashLine));
    auto* text = new QCPItemText(plot);
    text->position->setCoords(cap, 0.58);
    text->setPositionAlignment(Qt::AlignRight | Qt::AlignTop);
    text->setText(tr("capacity %1 GiB ").arg(cap, 0, 'f', 0));
    text->setColor(QColor(176, 0, 32));
    plot->xAxis->setRange(0, std::max(cap, p.memory_total / unit) * 1.08);
    plot->xAxis->setLabel(tr("GiB on the most loaded device"));
    plot->replot(QCustomPlot::rpQueuedReplot);
}

void PlanPanel::plotBreakdown(const plan::Prediction& p) {
    QCustomPlot* plot = m_breakdownPlot;
    const plan::Breakdown& b = p.breakdown;
    const std::pair<const char*, double> rows[] = {
        {"compute", b.compute},     {"recompute", b.recompute}, {"tp_comm", b.tp_comm},
        {"pp_bubble", b.pp_bubble}, {"pp_comm", b.pp_comm},     {"dp_comm", b.dp_comm},
        {"optimizer", b.optimizer}};
    const QColor comm = palette::phaseFamilyColor(palette::PhaseFamily::communication);
    const QColor colors[] = {palette::computeColor(),
                             palette::computeColor().lighter(140),
                             comm,
                             palette::phaseFamilyColor(palette::PhaseFamily::idle),
                             comm.darker(130),
                             comm.lighter(135),
                             palette::phaseFamilyColor(palette::PhaseFamily::compute)};
    const bool ms = p.step_time_s < 1;
    const double unit = ms ? 1e-3 : 1.0;
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    double most = 0;
    for (int i = 0; i < 7; ++i) {
        ticker->addTick(i, QString::fromLatin1(rows[i].first));
        most = std::max(most, rows[i].second / unit);
        m_shownBreakdown.push_back(rows[i].second);
    }
    plot->yAxis->setTicker(ticker);
    plot->yAxis->setRange(-0.6, 6.6);
    for (int i = 0; i < 7; ++i) {
        auto* bars = new QCPBars(plot->yAxis, plot->xAxis);
        bars->setBrush(colors[i]);
        bars->setPen(QPen(colors[i].darker(130)));
        bars->setWidth(0.7);
        bars->addData(i, rows[i].second / unit);
        // A long bar carries its label inside (from its end leftwards, in a colour that reads on
        // the bar), so that no label runs past the plot on a narrow window; the others after it.
        const bool inside = rows[i].second / unit > 0.5 * most;
        auto* text = new QCPItemText(plot);
        text->position->setCoords(rows[i].second / unit, i);
        text->setPositionAlignment((inside ? Qt::AlignRight : Qt::AlignLeft) | Qt::AlignVCenter);
        if (inside) text->setColor(colors[i].lightness() < 150 ? Qt::white : Qt::black);
        text->setText(
            (inside ? QStringLiteral("%1 · %2%  ") : QStringLiteral("  %1 · %2%"))
                .arg(seconds(rows[i].second))
                .arg(p.step_time_s > 0 ? 100 * rows[i].second / p.step_time_s : 0.0, 0, 'f', 1));
    }
    plot->xAxis->setRange(0, std::max(most, 1e-9) * 1.05);
    plot->xAxis->setLabel(tr("%1 per step on the busiest device").arg(ms ? tr("ms") : tr("s")));
    plot->replot(QCustomPlot::rpQueuedReplot);
}

PlanPanel::RunHere PlanPanel::runHereExperiment(const config::Experiment& base,
                                                const plan::Mesh& mesh, int maxDevices, int steps) {
    RunHere out;
    const int64_t n = mesh.devices();
    if (n > maxDevices) {
        out.why = tr("dp·tp·pp = %1 devices; this machine runs at most %2 virtual CPU devices")
                      .arg(QLocale().toString(n))
                      .arg(maxDevices);
        return out;
    }
    config::Experiment e = base;
    e.strategy = plan::hybrid_options(mesh);
    e.devices.clear();
    for (int i = 0; i < n; ++i) e.devices.push_back("cpu:" + std::to_string(i));
    e.train.precision = "fp32";  // CPU devices train in fp32
    e.train.recompute = nn::recompute_name(mesh.recompute);
    e.train.max_steps = std::min<int64_t>(base.train.max_steps.value_or(steps), steps);
    std::string name = base.name;
    name += "-dp" + std::to_string(mesh.dp) + "-tp" + std::to_string(mesh.tp) + "-pp" +
            std::to_string(mesh.pp);
    e.name = name;
    const auto issues = run::validate(e);
    if (!issues.empty()) {
        out.why = QString::fromStdString(issues.front().text());
        return out;
    }
    out.experiment = std::move(e);
    return out;
}

void PlanPanel::runHere() {
    const int index = m_heatmap->selected();
    if (!m_result || index < 0 || index >= m_heatmap->cellCount()) return;
    const plan::Prediction& p = m_heatmap->cell(index);
    if (!p.skipped.empty()) return;
    const RunHere run = runHereExperiment(m_result->experiment, p.mesh);
    if (!run.experiment) {
        m_runNote->setText(tr("Cannot run here: %1").arg(run.why));
        return;
    }
    const QString why =
        m_runHereHandler ? m_runHereHandler(*run.experiment) : tr("no run path is connected");
    m_runNote->setText(why.isEmpty() ? tr("Started %1 on %2 CPU devices: see the Training tab.")
                                           .arg(QString::fromStdString(run.experiment->name))
                                           .arg(run.experiment->devices.size())
                                     : tr("Not started: %1").arg(why));
}

// ---- exports ----

namespace {

// `value`'s leaves as "a.b" → text, objects flattened in key order (nlohmann's), in `out`.
void flatten(const nlohmann::json& value, const std::string& prefix, std::vector<std::pair<std::string, std::string>>& out) {
    if (value.is_object()) {
        for (const auto& [key, child] : value.items())
            flatten(child, prefix.empty() ? key : prefix + "." + key, out);
        return;
    }
    out.emplace_back(prefix, value.is_string() ? value.get<std::string>() : value.dump());
}

}  // namespace

QString PlanPanel::planCaption() const {
    if (!m_result) return QString();
    const plan::Cluster& c = m_result->cluster;
    QString caption = tr("Plan of %1 on %2 · %3 × %4 devices")
                          .arg(QString::fromStdString(m_result->experiment.name),
                               QString::fromStdString(c.name))
                          .arg(c.nodes)
                          .arg(c.gpus_per_node);
    const int i = m_heatmap->selected();
    if (i >= 0 && i < static_cast<int>(m_result->cells.size())) {
        const plan::Prediction& p = m_result->cells[static_cast<size_t>(i)];
        caption += tr(" · selected %1").arg(QString::fromStdString(plan::mesh_line(p.mesh, p.micro_batch)));
    }
    return caption;
}

bool PlanPanel::exportTab(const QString& path) {
    if (!m_result || m_result->cells.empty() || !m_body) return false;
    // A tab never shown has no size of its own yet: lay it out at a slide's size first.
    if (!m_body->isVisible()) m_body->resize(m_body->size().expandedTo(QSize(1200, 800)));
    const QSize size = m_body->size();
    const QString caption = planCaption();
    const QFont font = this->font();
    const int captionHeight = QFontMetrics(font).height() * 2;
    const QRect captionArea(0, size.height(), size.width(), captionHeight);
    if (path.endsWith(QStringLiteral(".pdf"), Qt::CaseInsensitive)) {
        QPdfWriter pdf(path);
        pdf.setResolution(72);  // a point per pixel
        pdf.setPageSize(QPageSize(QSizeF(size.width(), size.height() + captionHeight), QPageSize::Point));
        pdf.setPageMargins(QMarginsF(0, 0, 0, 0));
        QPainter painter;
        if (!painter.begin(&pdf)) return false;
        m_body->render(&painter, QPoint(), QRegion(), QWidget::DrawChildren);
        plotexport::drawCaption(painter, captionArea, font, caption);
        return painter.end();
    }
    // PNG at twice the widget's pixels, as the plots' exports (sharp on a slide).
    QImage image((size + QSize(0, captionHeight)) * 2, QImage::Format_RGB32);
    image.fill(Qt::white);
    QPainter painter(&image);
    painter.scale(2, 2);
    m_body->render(&painter, QPoint(), QRegion(), QWidget::DrawChildren);
    plotexport::drawCaption(painter, captionArea, font, caption);
    painter.end();
    return image.save(path);
}

bool PlanPanel::exportConfigurations(const QString& path) {
    if (!m_result || m_result->cells.empty()) return false;
    std::vector<std::string> swept;
    for (const QString& key : {m_result->xKey, m_result->yKey})
        if (!key.isEmpty()) swept.push_back(key.toStdString());
    nlohmann::json all = nlohmann::json::array();
    for (const plan::Prediction& p : m_result->cells) all.push_back(plan::to_json(p, swept));
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) return false;
    if (path.endsWith(QStringLiteral(".json"), Qt::CaseInsensitive)) {
        file.write(QByteArray::fromStdString(all.dump(2) + "\n"));
        return file.error() == QFileDevice::NoError;
    }
    // The columns: every field any configuration has (a skipped one has no figures), in the
    // order they first appear, and `skipped` last.
    std::vector<std::vector<std::pair<std::string, std::string>>> rows;
    std::vector<std::string> columns;
    for (const auto& cell : all) {
        rows.emplace_back();
        nlohmann::json figures = cell;
        figures.erase("skipped");
        flatten(figures, "", rows.back());
        if (cell.contains("skipped")) rows.back().emplace_back("skipped", cell["skipped"].get<std::string>());
        for (const auto& [key, value] : rows.back())
            if (key != "skipped" && std::find(columns.begin(), columns.end(), key) == columns.end())
                columns.push_back(key);
    }
    columns.push_back("skipped");
    QStringList line;
    for (const auto& c : columns) line << plotexport::csvField(QString::fromStdString(c));
    file.write((line.join(QLatin1Char(',')) + QLatin1Char('\n')).toUtf8());
    for (const auto& row : rows) {
        std::map<std::string, std::string> byKey(row.begin(), row.end());
        line.clear();
        for (const auto& c : columns) {
            const auto it = byKey.find(c);
            line << (it == byKey.end() ? QString() : plotexport::csvField(QString::fromStdString(it->second)));
        }
        file.write((line.join(QLatin1Char(',')) + QLatin1Char('\n')).toUtf8());
    }
    return file.error() == QFileDevice::NoError;
}

bool PlanPanel::hasPlan() const {
    return m_result && !m_result->cells.empty() && m_error->isHidden();
}

QVector<PlotExport> PlanPanel::plotExports() {
    return {{tr("Plan: memory of the selected configuration"), QStringLiteral("paralab-plan-memory"),
             [this](const QString& path) {
                 return m_result && plotexport::saveImage(m_memoryPlot, path, QSize(900, 560), planCaption());
             },
             [this](const QString& path) { return m_result && plotexport::saveCsv(m_memoryPlot, path); }},
            {tr("Plan: step time of the selected configuration"), QStringLiteral("paralab-plan-breakdown"),
             [this](const QString& path) {
                 return m_result && plotexport::saveImage(m_breakdownPlot, path, QSize(900, 560), planCaption());
             },
             [this](const QString& path) { return m_result && plotexport::saveCsv(m_breakdownPlot, path); }},
            {tr("Plan: the sweep, the selected configuration and its pipeline"), QStringLiteral("paralab-plan"),
             [this](const QString& path) { return exportTab(path); },
             [this](const QString& path) { return exportConfigurations(path); }}};
}

void PlanPanel::exportWithMenu() {
    QMenu menu(this);
    QAction* picture = menu.addAction(tr("The tab as a picture (PNG or PDF)…"));
    QAction* csv = menu.addAction(tr("Every configuration as CSV…"));
    menu.addAction(tr("Every configuration as JSON (as paralab plan --json)…"));
    QAction* chosen = menu.exec(m_export->mapToGlobal(QPoint(0, m_export->height())));
    if (!chosen) return;
    QString path;
    if (chosen == picture) {
        path = plotstyle::askExportPath(this, QStringLiteral("paralab-plan"), plotstyle::ExportKind::Image);
        if (!path.isEmpty() && !exportTab(path)) plotstyle::reportExportFailure(this, path);
        return;
    }
    if (chosen == csv) {
        path = plotstyle::askExportPath(this, QStringLiteral("paralab-plan"), plotstyle::ExportKind::Csv);
    } else {
        path = QFileDialog::getSaveFileName(this, tr("Export the configurations"),
                                            QStringLiteral("paralab-plan.json"), tr("JSON (*.json)"));
        if (!path.isEmpty() && QFileInfo(path).suffix().isEmpty()) path += QStringLiteral(".json");
    }
    if (!path.isEmpty() && !exportConfigurations(path)) plotstyle::reportExportFailure(this, path);
}

}  // namespace paralab::ui
