#include "ui/panels/strategy/strategy_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QRegularExpression>
#include <QScrollArea>
#include <QSpinBox>
#include <QVBoxLayout>

#include <qcustomplot.h>

#include "ui/panels/common/field_errors.h"
#include "ui/panels/common/palette.h"
#include "ui/panels/common/plot_style.h"
#include "ui/panels/strategy/strategy_diagram.h"

namespace paralab::ui {

namespace {

QComboBox* choices(const QStringList& items) {
    auto* box = new QComboBox;
    box->addItems(items);
    return box;
}

bool isDataParallel(const std::string& t) {
    return t == "data_parallel" || t == "ddp" || t == "zero";
}
bool isStaged(const std::string& t) {
    return t == "model_parallel" || t == "pipeline";
}

QStringList deviceNames(const run::Experiment& e) {
    QStringList names;
    for (const auto& d : e.devices) names << QString::fromStdString(d);
    return names;
}

// "2, 4" -> {2, 4}; a token that is not a whole number -> false.
bool parseSplit(const QString& text, std::vector<int64_t>& out) {
    out.clear();
    for (const QString& token :
         text.split(QRegularExpression(QStringLiteral("[,;\\s]+")), Qt::SkipEmptyParts)) {
        bool ok = false;
        const qlonglong v = token.toLongLong(&ok);
        if (!ok) return false;
        out.push_back(v);
    }
    return true;
}

}  // namespace

QString StrategyPanel::explain(const std::string& t) {
    if (t == "single")
        return tr(
            "One device runs forward, backward and the optimizer step on the whole batch. It is "
            "the baseline: every other strategy is compared with it, and the deterministic ones "
            "must end with its parameters.");
    if (t == "data_parallel")
        return tr(
            "torch's <i>nn.DataParallel</i>: every step device 0 copies its parameters to every "
            "device and scatters the batch's rows. Each device runs forward on its rows; the "
            "outputs are gathered on device 0, which computes the loss and sends the output "
            "gradients back. After backward the gradients are reduced onto device 0, which alone "
            "steps the optimizer — watch its extra memory and the others' idle time.");
    if (t == "ddp")
        return tr(
            "Distributed data parallel: every device keeps a full replica (broadcast from "
            "device 0 once, at the start) and runs forward and backward on its share of the "
            "batch. Gradients are summed across devices by all-reduce in buckets of "
            "<i>bucket_mb</i> MiB, last layers first; with <i>overlap</i> a bucket is sent as "
            "soon as the layers that fill it are done, while backward goes on. Every device "
            "then takes the same optimizer step.");
    if (t == "zero")
        return tr(
            "ZeRO: like DDP, but each device keeps the optimizer state of only 1/N of the "
            "parameters and updates only that shard. Gradients are reduce-scattered (each "
            "device receives the sum for its shard) and the updated parameters are "
            "all-gathered. Stage 2 shards the gradients too: each layer's gradients go to their "
            "owners as soon as its backward is done, then are freed.");
    if (t == "hogwild")
        return tr(
            "Hogwild: one parameter set, on device 0, shared by all. Each device trains on its "
            "rows as a mini-batch of its own and updates the shared values with its own "
            "optimizer, without locks and without any communication. Fast, but not "
            "deterministic: updates overwrite each other and the loss is noisier.");
    if (t == "param_server")
        return tr(
            "A parameter server: device 0 holds the parameters and the optimizer and computes "
            "no gradients; the other devices are workers that push gradients and pull weights. "
            "<i>sync</i>: the server sums every worker's push and steps once, so everyone waits "
            "for the slowest. <i>async</i>: each push is applied as it arrives, and a worker may "
            "run at most <i>staleness</i> steps ahead of the slowest.");
    if (t == "model_parallel")
        return tr(
            "Model parallel: consecutive top-level layers are placed on consecutive devices "
            "(balanced by parameter count unless <i>split</i> says where stages begin). "
            "Activations travel forward from stage to stage and their gradients come back. Only "
            "one stage works at a time: the others wait.");
    if (t == "pipeline")
        return tr(
            "Pipeline: the stages of model parallel, with the batch cut into "
            "<i>micro_batches</i> so that stages work on different micro-batches at once. GPipe "
            "runs all forwards, then all backwards; 1F1B alternates one forward and one backward "
            "after a warm-up. The idle bubble is (p−1)/(m+p−1) of the step; GPipe holds every "
            "micro-batch's activations, 1F1B at most as many as there are stages.");
    return {};
}

StrategyPanel::StrategyPanel(QWidget* parent)
    : QWidget(parent),
      m_form(new QFormLayout),
      m_type(new QComboBox),
      m_bucketMb(new QDoubleSpinBox),
      m_overlap(new QCheckBox(tr("Overlap all-reduce with backward"))),
      m_balance(choices({QStringLiteral("even"), QStringLiteral("speed")})),
      m_stage(choices({QStringLiteral("1"), QStringLiteral("2")})),
      m_mode(choices({QStringLiteral("sync"), QStringLiteral("async")})),
      m_staleness(new QSpinBox),
      m_microBatches(new QSpinBox),
      m_schedule(choices({QStringLiteral("gpipe"), QStringLiteral("1f1b")})),
      m_split(new QLineEdit),
      m_syncBatchnorm(new QCheckBox(tr("SyncBatchNorm (statistics over all devices)"))),
      m_straggler(new QComboBox),
      m_stragglerDelay(new QDoubleSpinBox),
      m_generalError(new QLabel),
      m_explanation(new QLabel),
      m_diagram(new StrategyDiagram),
      m_memoryPlot(new QCustomPlot),
      m_memoryNote(new QLabel) {
    setObjectName(QStringLiteral("strategyPanel"));
    for (const auto& t : run::strategy_types()) m_type->addItem(QString::fromStdString(t));
    m_type->setObjectName(QStringLiteral("strategyType"));
    // Loose ranges: the parser has the last word and names the key when it refuses.
    m_bucketMb->setRange(0, 4096);
    m_bucketMb->setDecimals(2);
    m_bucketMb->setSuffix(tr(" MiB"));
    m_staleness->setRange(0, 100000);
    m_microBatches->setRange(0, 4096);
    m_split->setPlaceholderText(tr("balanced by parameters (or e.g. 2, 4)"));
    m_stragglerDelay->setRange(0, 100000);
    m_stragglerDelay->setSuffix(tr(" ms"));
    m_stragglerDelay->setDecimals(1);

    auto* content = new QWidget;
    auto* layout = new QVBoxLayout(content);
    auto* form = new QFormLayout;
    form->addRow(tr("<b>Strategy</b>"), m_type);
    layout->addLayout(form);
    m_explanation->setWordWrap(true);
    m_explanation->setTextFormat(Qt::RichText);
    m_explanation->setObjectName(QStringLiteral("strategyExplanation"));
    m_explanation->setStyleSheet(QStringLiteral(
        "QLabel { background: palette(alternate-base); padding: 6px; border-radius: 4px; }"));
    layout->addWidget(m_explanation);
    layout->addLayout(m_form);
    addOption(QStringLiteral("strategy.bucket_mb"), tr("Bucket size"), m_bucketMb);
    addOption(QStringLiteral("strategy.overlap"), QString(), m_overlap);
    addOption(QStringLiteral("strategy.balance"), tr("Rows per device"), m_balance);
    addOption(QStringLiteral("strategy.stage"), tr("ZeRO stage"), m_stage);
    addOption(QStringLiteral("strategy.mode"), tr("Mode"), m_mode);
    addOption(QStringLiteral("strategy.staleness"), tr("Staleness bound"), m_staleness);
    addOption(QStringLiteral("strategy.micro_batches"), tr("Micro-batches"), m_microBatches);
    addOption(QStringLiteral("strategy.schedule"), tr("Schedule"), m_schedule);
    addOption(QStringLiteral("strategy.split"), tr("Stages start at layers"), m_split);
    addOption(QStringLiteral("strategy.sync_batchnorm"), QString(), m_syncBatchnorm);
    addOption(QStringLiteral("strategy.straggler"), tr("Straggler"), m_straggler);
    addOption(QStringLiteral("strategy.straggler.delay_ms"), tr("Straggler delay"),
              m_stragglerDelay);
    m_balance->setToolTip(
        tr("even: batch / N rows each; speed: rows in proportion to each device's measured speed"));
    m_straggler->setToolTip(
        tr("A device that sleeps inside each forward: a slow device to teach with"));
    m_generalError->setWordWrap(true);
    m_generalError->setStyleSheet(QStringLiteral("color: #c0392b"));
    m_generalError->hide();
    layout->addWidget(m_generalError);

    layout->addWidget(new QLabel(tr("<b>One step: what moves where</b>")));
    m_diagram->setMinimumHeight(250);
    layout->addWidget(m_diagram);

    layout->addWidget(new QLabel(tr("<b>Predicted memory per device</b>")));
    m_memoryPlot->setObjectName(QStringLiteral("memoryEstimatePlot"));
    m_memoryPlot->setMinimumHeight(260);
    plotstyle::styleGrid(m_memoryPlot);
    m_memoryPlot->legend->setVisible(true);
    plotstyle::putLegendBelow(m_memoryPlot, 3);
    layout->addWidget(m_memoryPlot);
    m_memoryNote->setWordWrap(true);
    m_memoryNote->setStyleSheet(QStringLiteral("color: #555555"));
    m_memoryNote->setObjectName(QStringLiteral("memoryNote"));
    layout->addWidget(m_memoryNote);
    layout->addStretch(1);

    auto* scroll = new QScrollArea;
    scroll->setWidget(content);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(0, 0, 0, 0);
    outer->addWidget(scroll);

    connect(m_type, &QComboBox::currentTextChanged, this, [this](const QString& t) {
        showOptionsFor(t.toStdString());
        edited();
    });
    connect(m_bucketMb, &QDoubleSpinBox::valueChanged, this, &StrategyPanel::edited);
    connect(m_stragglerDelay, &QDoubleSpinBox::valueChanged, this, &StrategyPanel::edited);
    for (QSpinBox* box : {m_staleness, m_microBatches})
        connect(box, &QSpinBox::valueChanged, this, &StrategyPanel::edited);
    for (QComboBox* box : {m_balance, m_stage, m_mode, m_schedule, m_straggler})
        connect(box, &QComboBox::currentIndexChanged, this, &StrategyPanel::edited);
    for (QCheckBox* box : {m_overlap, m_syncBatchnorm})
        connect(box, &QCheckBox::toggled, this, &StrategyPanel::edited);
    connect(m_split, &QLineEdit::editingFinished, this, &StrategyPanel::edited);
    showOptionsFor("single");
    refreshViews();
}

void StrategyPanel::addOption(const QString& key, const QString& label, QWidget* editor) {
    QLabel* error = nullptr;
    QWidget* cell = addFieldRow(m_form, key, label, editor, &error);
    editor->setObjectName(key);
    m_rows.insert(key, cell);
    m_editor.insert(key, editor);
    m_errors.insert(key, error);
}

QWidget* StrategyPanel::optionEditor(const QString& key) const {
    return m_editor.value(key);
}

bool StrategyPanel::isOptionShown(const QString& key) const {
    QWidget* row = m_rows.value(key);
    return row && m_form->isRowVisible(row);
}

void StrategyPanel::showOptionsFor(const std::string& t) {
    auto show = [this](const char* key, bool visible) {
        m_form->setRowVisible(m_rows.value(QString::fromLatin1(key)), visible);
    };
    show("strategy.bucket_mb", t == "ddp");
    show("strategy.overlap", t == "ddp");
    show("strategy.balance", t == "ddp");
    show("strategy.stage", t == "zero");
    show("strategy.mode", t == "param_server");
    show("strategy.staleness",
         t == "param_server" && m_mode->currentText() == QLatin1String("async"));
    show("strategy.micro_batches", t == "pipeline");
    show("strategy.schedule", t == "pipeline");
    show("strategy.split", isStaged(t));
    show("strategy.sync_batchnorm", isDataParallel(t));
    show("strategy.straggler", true);
    show("strategy.straggler.delay_ms", m_straggler->currentIndex() > 0);
}

void StrategyPanel::setExperiment(const run::Experiment& e) {
    m_updating = true;
    m_experiment = e;
    const auto& s = e.strategy;
    m_type->setCurrentText(QString::fromStdString(s.type));
    m_bucketMb->setValue(s.bucket_mb);
    m_overlap->setChecked(s.overlap);
    m_balance->setCurrentText(QString::fromStdString(s.balance));
    m_stage->setCurrentIndex(s.zero_stage == 2 ? 1 : 0);
    m_mode->setCurrentText(QString::fromStdString(s.ps_mode));
    m_staleness->setValue(static_cast<int>(s.staleness));
    m_microBatches->setValue(static_cast<int>(s.micro_batches));
    m_schedule->setCurrentText(QString::fromStdString(s.schedule));
    QStringList split;
    for (int64_t b : s.split) split << QString::number(b);
    m_split->setText(split.join(QStringLiteral(", ")));
    m_syncBatchnorm->setChecked(s.sync_batchnorm);
    m_straggler->clear();
    m_straggler->addItem(tr("none"));
    m_straggler->addItems(deviceNames(e));
    m_straggler->setCurrentText(
        s.straggler_device.empty() ? tr("none") : QString::fromStdString(s.straggler_device));
    m_stragglerDelay->setValue(s.straggler_delay_ms);
    for (QLabel* l : std::as_const(m_errors)) l->hide();
    m_generalError->hide();
    showOptionsFor(s.type);
    m_updating = false;
    refreshViews();
}

void StrategyPanel::edited() {
    if (m_updating) return;
    run::Experiment e = m_experiment;
    auto& s = e.strategy;
    s.type = m_type->currentText().toStdString();
    s.bucket_mb = m_bucketMb->value();
    s.overlap = m_overlap->isChecked();
    s.balance = m_balance->currentText().toStdString();
    s.zero_stage = m_stage->currentIndex() + 1;
    s.ps_mode = m_mode->currentText().toStdString();
    s.staleness = m_staleness->value();
    s.micro_batches = m_microBatches->value();
    s.schedule = m_schedule->currentText().toStdString();
    s.sync_batchnorm = m_syncBatchnorm->isChecked();
    s.straggler_device =
        m_straggler->currentIndex() > 0 ? m_straggler->currentText().toStdString() : std::string();
    s.straggler_delay_ms = s.straggler_device.empty() ? 0.0 : m_stragglerDelay->value();
    showOptionsFor(s.type);

    for (QLabel* l : std::as_const(m_errors)) l->hide();
    m_generalError->hide();
    auto fail = [this](const QString& message) {
        QLabel* label = m_errors.value(fieldOfMessage(message, m_errors.keys()), m_generalError);
        label->setText(message);
        label->show();
    };
    std::vector<int64_t> split;
    if (!parseSplit(m_split->text(), split)) {
        fail(tr("strategy.split: expected layer indices such as \"2, 4\", got \"%1\"")
                 .arg(m_split->text()));
        return;
    }
    s.split = isStaged(s.type) ? split : std::vector<int64_t>{};
    try {
        run::parse_experiment(run::to_json(e));
    } catch (const std::exception& err) {
        fail(QString::fromUtf8(err.what()));
        return;
    }
    // What the parser cannot know without the model: a split needs N-1 increasing indices in
    // (0, L), checked again (with the same words) when the run starts.
    if (!s.split.empty()) {
        const auto layers = static_cast<int64_t>(e.layers.size());
        const auto n = static_cast<int64_t>(e.devices.size());
        bool ok = static_cast<int64_t>(s.split.size()) == n - 1;
        for (size_t i = 0; ok && i < s.split.size(); ++i)
            ok = s.split[i] > 0 && s.split[i] < layers && (i == 0 || s.split[i] > s.split[i - 1]);
        if (!ok) {
            fail(tr("strategy.split: expected %1 strictly increasing layer indices in (0, %2) for "
                    "%3 devices, got %4")
                     .arg(n - 1)
                     .arg(layers)
                     .arg(n)
                     .arg(m_split->text()));
            return;
        }
    }
    m_experiment = e;
    refreshViews();
    emit experimentEdited(e);
}

QString StrategyPanel::errorText() const {
    for (QLabel* l : m_errors)
        if (!l->isHidden()) return l->text();
    return m_generalError->isHidden() ? QString() : m_generalError->text();
}

QString StrategyPanel::explanation() const {
    return m_explanation->text();
}

void StrategyPanel::refreshViews() {
    const auto& e = m_experiment;
    m_explanation->setText(explain(e.strategy.type));
    m_diagram->setStrategy(e.strategy, deviceNames(e));

    // The model's shapes change only with the model or the data: cache them.
    const nlohmann::json j = run::to_json(e);
    const std::string key = j["model"].dump() + j["data"].dump();
    if (key != m_costKey) {
        m_costKey = key;
        m_costError.clear();
        try {
            m_cost = model_cost(e);
        } catch (const std::exception& err) {
            m_cost = {};
            m_costError = QString::fromUtf8(err.what());
        }
    }
    m_estimate =
        m_costError.isEmpty() ? estimate_memory(e, m_cost) : std::vector<DeviceMemoryEstimate>{};
    plotMemory();
}

void StrategyPanel::plotMemory() {
    QCustomPlot* plot = m_memoryPlot;
    plot->clearPlottables();
    if (!m_costError.isEmpty()) {
        m_memoryNote->setText(tr("No estimate: %1").arg(m_costError));
        plot->replot(QCustomPlot::rpQueuedReplot);
        return;
    }
    int64_t most = 1;
    for (const auto& d : m_estimate) most = std::max(most, d.total());
    // One unit for the whole chart, the largest that keeps the tallest bar above 1.
    double unit = 1;
    QString unitName = tr("bytes");
    if (most >= (int64_t{1} << 30))
        unit = double(int64_t{1} << 30), unitName = tr("GiB");
    else if (most >= (1 << 20))
        unit = double(1 << 20), unitName = tr("MiB");
    else if (most >= (1 << 10))
        unit = 1024, unitName = tr("KiB");

    QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
    for (int i = 0; i < static_cast<int>(m_estimate.size()); ++i)
        ticker->addTick(i, QString::fromStdString(m_estimate[i].device));
    plot->xAxis->setTicker(ticker);
    plot->xAxis->setRange(-0.6, std::max<double>(0.6, m_estimate.size() - 0.4));
    plot->yAxis->setLabel(tr("predicted peak, %1").arg(unitName));
    QCPBars* below = nullptr;
    for (int c = 0; c < static_cast<int>(kMemCategoryCount); ++c) {
        if (c == static_cast<int>(MemCategory::workspace)) continue;  // not predicted
        auto* bars = new QCPBars(plot->xAxis, plot->yAxis);
        bars->setName(QString::fromLatin1(
                          mem_category_name(static_cast<MemCategory>(c)).data(),
                          static_cast<int>(mem_category_name(static_cast<MemCategory>(c)).size()))
                          .replace(QLatin1Char('_'), QLatin1Char(' ')));
        const QColor color = palette::memoryCategoryColor(c);
        bars->setBrush(color);
        bars->setPen(QPen(color.darker(130)));
        bars->setWidth(0.6);
        for (int i = 0; i < static_cast<int>(m_estimate.size()); ++i)
            bars->addData(i, m_estimate[i].bytes[c] / unit);
        if (below) bars->moveAbove(below);
        below = bars;
    }
    plot->yAxis->setRange(0, most / unit * 1.1);
    plot->replot(QCustomPlot::rpQueuedReplot);

    QStringList roles;
    for (const auto& d : m_estimate)
        if (!d.role.empty() && d.role != "replica" && d.role != "single")
            roles << QStringLiteral("%1: %2").arg(QString::fromStdString(d.device),
                                                  QString::fromStdString(d.role));
    const QLocale locale;
    m_memoryNote->setText(
        tr("An estimate before the run, from the model's shapes (%1 parameters, f32): parameters, "
           "gradients, optimizer state (%2 per parameter), activations for each device's rows, and "
           "communication buffers. Not predicted: per-layer workspace and backward's temporaries, "
           "so "
           "real activations run higher for convolutions and recurrent layers.%3")
            .arg(locale.toString(static_cast<qlonglong>(m_cost.parameters())))
            .arg(optimizer_state_per_parameter(m_experiment.optimizer))
            .arg(roles.isEmpty() ? QString()
                                 : QStringLiteral("<br>") + roles.join(QStringLiteral(" · "))));
}

}  // namespace paralab::ui
