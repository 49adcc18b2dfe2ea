#include "ui/panels/strategy/strategy_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QLocale>
#include <QRegularExpression>
#include <QScrollArea>
#include <QSpinBox>
#include <QVBoxLayout>

#include <cmath>

#include <qcustomplot.h>

#include "engine/run/experiment_file.h"
#include "ui/panels/common/form_widgets.h"
#include "ui/panels/common/byte_units.h"
#include "ui/panels/common/field_errors.h"
#include "ui/panels/common/palette.h"
#include "ui/panels/common/plot_style.h"
#include "ui/panels/strategy/strategy_diagram.h"

namespace paralab::ui {

namespace {

// The mesh's axes, as strategy options, in the order a mesh names them.
constexpr const char* kMeshAxes[] = {"dp", "cp", "tp", "pp"};

using config::OptionKind;
using config::OptionSpec;
using config::OptionValue;

QString keyOf(const std::string& option) {
    return QStringLiteral("strategy.") + QString::fromStdString(option);
}

QStringList deviceNames(const config::Experiment& e) {
    QStringList names;
    for (const auto& d : e.devices) names << QString::fromStdString(d);
    return names;
}

// "2, 4" -> {2, 4}; a token that is not a whole number -> false.
bool parseIndices(const QString& text, std::vector<int64_t>& out) {
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

// An integer option with a few values (ZeRO's stage) is a list to pick from.
bool isSmallRange(const OptionSpec& o) {
    return o.kind == OptionKind::integer && std::isfinite(o.max) && o.max - o.min <= 3;
}

}  // namespace

QString StrategyPanel::explain(const std::string& t) {
    const strategy::StrategyDescriptor* d = strategy::find_strategy(t);
    if (!d) return {};
    // `option` -> <i>option</i>
    QString text = QString::fromStdString(d->explanation).toHtmlEscaped();
    text.replace(QRegularExpression(QStringLiteral("`([^`]*)`")), QStringLiteral("<i>\\1</i>"));
    return text;
}

StrategyPanel::StrategyPanel(QWidget* parent)
    : QWidget(parent),
      m_form(new QFormLayout),
      m_type(new QComboBox),
      m_straggler(new QComboBox),
      m_stragglerDelay(new QDoubleSpinBox),
      m_generalError(new QLabel),
      m_explanation(new QLabel),
      m_diagram(new StrategyDiagram),
      m_memoryPlot(new QCustomPlot),
      m_memoryNote(new QLabel) {
    setObjectName(QStringLiteral("strategyPanel"));
    for (const auto& d : strategy::registry()) m_type->addItem(QString::fromStdString(d.name));
    m_type->setObjectName(QStringLiteral("strategyType"));
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
    // Every strategy's options, one editor per key: a key several strategies declare (such as
    // sync_batchnorm or split) is one field shown for each of them, placed after the options
    // of one strategy only.
    QHash<QString, int> declared;
    for (const auto& d : strategy::registry())
        for (const auto& o : d.options) ++declared[keyOf(o.key)];
    m_updating = true;  // the editors' first values are no edit
    for (const bool shared : {false, true})
        for (const auto& d : strategy::registry())
            for (const auto& o : d.options)
                if ((declared.value(keyOf(o.key)) > 1) == shared && !m_editor.contains(keyOf(o.key))) {
                    addOption(keyOf(o.key),
                              o.kind == OptionKind::boolean ? QString() : QString::fromStdString(o.label),
                              makeEditor(o));
                    setEditorValue(o, o.fallback);
                }
    m_updating = false;
    addOption(QStringLiteral("strategy.straggler"), tr("Straggler"), m_straggler);
    addOption(QStringLiteral("strategy.straggler.delay_ms"), tr("Straggler delay"), m_stragglerDelay);
    m_stragglerRotate = new QCheckBox(tr("The slow role rotates over the devices, one a step"));
    m_stragglerRotate->setToolTip(tr("strategy.straggler.rotate: each device is slow one step in N, "
                                     "starting at the straggler chosen above"));
    addOption(QStringLiteral("strategy.straggler.rotate"), QString(), m_stragglerRotate);
    m_straggler->setToolTip(
        tr("A device that sleeps inside each forward: a slow device to teach with"));
    m_generalError->setWordWrap(true);
    m_generalError->setStyleSheet(QStringLiteral("color: #c0392b"));
    m_generalError->hide();
    layout->addWidget(m_generalError);
    m_fitDevices = new QPushButton;  // named by the chosen strategy's mesh axes (showOptionsFor)
    m_fitDevices->setObjectName(QStringLiteral("fitDevicesToMesh"));
    m_fitDevices->setToolTip(tr("Sets the device count to the mesh's product (devices of the first device's kind)"));
    connect(m_fitDevices, &QPushButton::clicked, this, &StrategyPanel::fitDevicesToMesh);
    layout->addWidget(m_fitDevices, 0, Qt::AlignLeft);

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

    setScrollingContent(this, content);

    connect(m_type, &QComboBox::currentTextChanged, this, [this](const QString& t) {
        showOptionsFor(t.toStdString());
        edited();
    });
    connect(m_stragglerDelay, &QDoubleSpinBox::valueChanged, this, &StrategyPanel::edited);
    connect(m_stragglerRotate, &QCheckBox::toggled, this, &StrategyPanel::edited);
    connect(m_straggler, &QComboBox::currentIndexChanged, this, &StrategyPanel::edited);
    showOptionsFor(strategy::registry().front().name);
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

QWidget* StrategyPanel::makeEditor(const OptionSpec& o) {
    QWidget* editor = nullptr;
    // Loose ranges: the registry's check has the last word and names the key when it refuses.
    const double top = std::isfinite(o.max) ? o.max : 100000;
    switch (o.kind) {
        case OptionKind::boolean: {
            auto* box = new QCheckBox(QString::fromStdString(o.label));
            connect(box, &QCheckBox::toggled, this, &StrategyPanel::edited);
            editor = box;
            break;
        }
        case OptionKind::integer:
            if (isSmallRange(o)) {
                auto* box = new QComboBox;
                for (auto v = static_cast<int64_t>(o.min); v <= static_cast<int64_t>(o.max); ++v)
                    box->addItem(QString::number(v));
                connect(box, &QComboBox::currentIndexChanged, this, &StrategyPanel::edited);
                editor = box;
            } else {
                auto* box = new QSpinBox;
                box->setRange(0, static_cast<int>(std::min(top, 1e9)));
                if (!o.unit.empty()) box->setSuffix(QStringLiteral(" ") + QString::fromStdString(o.unit));
                connect(box, &QSpinBox::valueChanged, this, &StrategyPanel::edited);
                editor = box;
            }
            break;
        case OptionKind::number: {
            auto* box = new QDoubleSpinBox;
            box->setRange(0, std::min(top, 4096.0));
            box->setDecimals(2);
            if (!o.unit.empty()) box->setSuffix(QStringLiteral(" ") + QString::fromStdString(o.unit));
            connect(box, &QDoubleSpinBox::valueChanged, this, &StrategyPanel::edited);
            editor = box;
            break;
        }
        case OptionKind::choice: {
            auto* box = new QComboBox;
            for (const auto& c : o.choices) box->addItem(QString::fromStdString(c));
            connect(box, &QComboBox::currentIndexChanged, this, &StrategyPanel::edited);
            editor = box;
            break;
        }
        case OptionKind::index_list: {
            auto* line = new QLineEdit;
            line->setPlaceholderText(tr("automatic (or e.g. 2, 4)"));
            connect(line, &QLineEdit::editingFinished, this, &StrategyPanel::edited);
            editor = line;
            break;
        }
    }
    editor->setToolTip(QString::fromStdString(o.help));
    return editor;
}

void StrategyPanel::setEditorValue(const OptionSpec& o, const OptionValue& v) {
    QWidget* editor = m_editor.value(keyOf(o.key));
    if (auto* box = qobject_cast<QCheckBox*>(editor)) box->setChecked(std::get<bool>(v));
    else if (auto* spin = qobject_cast<QSpinBox*>(editor)) spin->setValue(static_cast<int>(std::get<int64_t>(v)));
    else if (auto* dspin = qobject_cast<QDoubleSpinBox*>(editor)) dspin->setValue(std::get<double>(v));
    else if (auto* combo = qobject_cast<QComboBox*>(editor))
        combo->setCurrentText(o.kind == OptionKind::integer ? QString::number(std::get<int64_t>(v))
                                                            : QString::fromStdString(std::get<std::string>(v)));
    else if (auto* line = qobject_cast<QLineEdit*>(editor)) {
        QStringList items;
        for (int64_t b : std::get<std::vector<int64_t>>(v)) items << QString::number(b);
        line->setText(items.join(QStringLiteral(", ")));
    }
}

bool StrategyPanel::editorValue(const OptionSpec& o, OptionValue& v, config::Issue& issue) const {
    QWidget* editor = m_editor.value(keyOf(o.key));
    if (auto* box = qobject_cast<QCheckBox*>(editor)) v = box->isChecked();
    else if (auto* spin = qobject_cast<QSpinBox*>(editor)) v = int64_t{spin->value()};
    else if (auto* dspin = qobject_cast<QDoubleSpinBox*>(editor)) v = dspin->value();
    else if (auto* combo = qobject_cast<QComboBox*>(editor)) {
        if (o.kind == OptionKind::integer) v = int64_t{combo->currentText().toLongLong()};
        else v = combo->currentText().toStdString();
    } else if (auto* line = qobject_cast<QLineEdit*>(editor)) {
        std::vector<int64_t> indices;
        if (!parseIndices(line->text(), indices)) {
            issue = {"strategy." + o.key,
                     "expected layer indices such as \"2, 4\", got \"" + line->text().toStdString() + "\""};
            return false;
        }
        v = indices;
    }
    return true;
}

QWidget* StrategyPanel::optionEditor(const QString& key) const {
    return m_editor.value(key);
}

bool StrategyPanel::isOptionShown(const QString& key) const {
    QWidget* row = m_rows.value(key);
    return row && m_form->isRowVisible(row);
}

void StrategyPanel::showOptionsFor(const std::string& t) {
    const strategy::StrategyDescriptor* d = strategy::find_strategy(t);
    for (auto it = m_rows.cbegin(); it != m_rows.cend(); ++it) {
        if (!it.key().startsWith(QStringLiteral("strategy.")) || it.key().startsWith(QStringLiteral("strategy.straggler")))
            continue;
        const OptionSpec* o = d ? d->option(it.key().mid(9).toStdString()) : nullptr;
        bool visible = o != nullptr;
        if (visible && !o->shown_when_key.empty()) {
            auto* when = qobject_cast<QComboBox*>(m_editor.value(keyOf(o->shown_when_key)));
            visible = when && when->currentText() == QString::fromStdString(o->shown_when_value);
        }
        m_form->setRowVisible(it.value(), visible);
    }
    m_form->setRowVisible(m_rows.value(QStringLiteral("strategy.straggler")), true);
    // A strategy whose options are mesh axes sets its device count to their product.
    QStringList axes;
    for (const char* axis : kMeshAxes)
        if (d && d->option(axis)) axes << QString::fromLatin1(axis);
    m_fitDevices->setText(tr("Devices = %1").arg(axes.join(QStringLiteral(" · "))));
    m_fitDevices->setVisible(axes.size() > 1);
    m_form->setRowVisible(m_rows.value(QStringLiteral("strategy.straggler.delay_ms")), m_straggler->currentIndex() > 0);
    m_form->setRowVisible(m_rows.value(QStringLiteral("strategy.straggler.rotate")), m_straggler->currentIndex() > 0);
}

void StrategyPanel::setExperiment(const config::Experiment& e) {
    if (m_refused && run::to_json(e)["strategy"] == run::to_json(m_experiment)["strategy"]) {
        // Another tab changed the experiment under a refused choice: the choice stays and is
        // checked again, after the window has finished handing this edit round (queued).
        m_experiment = e;
        m_updating = true;
        const QString straggler = m_straggler->currentText();
        m_straggler->clear();
        m_straggler->addItem(tr("none"));
        m_straggler->addItems(deviceNames(e));
        m_straggler->setCurrentText(m_straggler->findText(straggler) >= 0 ? straggler : tr("none"));
        m_updating = false;
        QMetaObject::invokeMethod(this, &StrategyPanel::edited, Qt::QueuedConnection);
        return;
    }
    m_refused = false;
    m_updating = true;
    m_experiment = e;
    const auto& s = e.strategy;
    m_type->setCurrentText(QString::fromStdString(s.type));
    // Every editor: the file's value for its strategy's options, the default for the others
    // (an option another file set must not reappear when its strategy is chosen). Editors are
    // shared by key, so the chosen strategy's values are set last.
    for (const auto& d : strategy::registry())
        if (d.name != s.type)
            for (const auto& o : d.options) setEditorValue(o, o.fallback);
    if (const strategy::StrategyDescriptor* d = strategy::find_strategy(s.type))
        for (const auto& o : d->options) setEditorValue(o, strategy::option_value(s, o.key));
    m_straggler->clear();
    m_straggler->addItem(tr("none"));
    m_straggler->addItems(deviceNames(e));
    m_straggler->setCurrentText(
        s.straggler_device.empty() ? tr("none") : QString::fromStdString(s.straggler_device));
    m_stragglerDelay->setValue(s.straggler_delay_ms);
    m_stragglerRotate->setChecked(s.straggler_rotate);
    for (QLabel* l : std::as_const(m_errors)) l->hide();
    m_generalError->hide();
    showOptionsFor(s.type);
    m_updating = false;
    refreshViews();
}

void StrategyPanel::edited() {
    if (m_updating) return;
    config::Experiment e = m_experiment;
    auto& s = e.strategy;
    const std::string type = m_type->currentText().toStdString();
    const strategy::StrategyDescriptor* d = strategy::find_strategy(type);
    if (!d) return;
    showOptionsFor(type);
    for (QLabel* l : std::as_const(m_errors)) l->hide();
    m_generalError->hide();

    // The explanation follows the choice at once, also while its options are refused.
    m_explanation->setText(explain(type));
    s.type = type;
    s.options.clear();
    for (const auto& o : d->options) {
        OptionValue v;
        config::Issue issue;
        if (!editorValue(o, v, issue)) return refuse(issue);
        // An empty index list is "automatic": not written.
        if (o.kind == OptionKind::index_list && std::get<std::vector<int64_t>>(v).empty()) continue;
        s.options[o.key] = v;
    }
    s.straggler_device =
        m_straggler->currentIndex() > 0 ? m_straggler->currentText().toStdString() : std::string();
    s.straggler_delay_ms = s.straggler_device.empty() ? 0.0 : m_stragglerDelay->value();
    s.straggler_rotate = !s.straggler_device.empty() && m_stragglerRotate->isChecked();

    const auto issues = run::validate(e);
    if (!issues.empty()) {
        // The diagram shows the chosen strategy too, where it can be drawn for these devices.
        try {
            m_diagram->setPicture(strategy::step_picture(e), deviceNames(e));
        } catch (const std::exception&) {
        }
        return refuse(issues.front());
    }
    m_refused = false;
    m_experiment = e;
    refreshViews();
    emit experimentEdited(e);
}

void StrategyPanel::fitDevicesToMesh() {
    int64_t product = 1;
    for (const char* key : kMeshAxes)
        if (auto* box = qobject_cast<QSpinBox*>(m_editor.value(keyOf(key)))) product *= box->value();
    if (product < 1 || product > 1024) return;
    // Devices of the first device's kind ("cpu:" or "cuda:"), numbered from 0.
    const std::string first = m_experiment.devices.empty() ? std::string("cpu:0") : m_experiment.devices.front();
    const std::string kind = first.substr(0, first.find(':') + 1);
    std::vector<std::string> devices;
    for (int64_t k = 0; k < product; ++k) devices.push_back(kind + std::to_string(k));
    m_experiment.devices = std::move(devices);
    if (std::find(m_experiment.devices.begin(), m_experiment.devices.end(), m_experiment.strategy.straggler_device) ==
        m_experiment.devices.end()) {
        m_experiment.strategy.straggler_device.clear();
        m_experiment.strategy.straggler_delay_ms = 0;
        m_experiment.strategy.straggler_rotate = false;
    }
    const QString straggler = m_straggler->currentText();
    m_updating = true;
    m_straggler->clear();
    m_straggler->addItem(tr("none"));
    m_straggler->addItems(deviceNames(m_experiment));
    m_straggler->setCurrentText(m_straggler->findText(straggler) >= 0 ? straggler : tr("none"));
    m_updating = false;
    edited();  // checked, and passed on with the new devices when it fits
}

void StrategyPanel::refuse(const config::Issue& issue) {
    m_refused = true;
    ui::showIssue(issue, m_errors, m_generalError);
    emit editRefused(QString::fromStdString(issue.text()));
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
    m_diagram->setPicture(strategy::step_picture(e), deviceNames(e));

    // The model's shapes change only with the model or the data: cache them.
    const nlohmann::json j = run::to_json(e);
    const std::string key = j["model"].dump() + j["data"].dump();
    if (key != m_costKey) {
        m_costKey = key;
        m_costError.clear();
        try {
            m_cost = strategy::model_cost(e, run::model_input_shape(e));
        } catch (const std::exception& err) {
            m_cost = {};
            m_costError = QString::fromUtf8(err.what());
        }
    }
    m_estimate = m_costError.isEmpty() ? strategy::estimate_memory(e, m_cost)
                                       : std::vector<strategy::DeviceMemoryEstimate>{};
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
    const ByteUnit byteUnit = byteUnitFor(static_cast<double>(most));
    const double unit = byteUnit.bytes;

    QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
    for (int i = 0; i < static_cast<int>(m_estimate.size()); ++i)
        ticker->addTick(i, QString::fromStdString(m_estimate[i].device));
    plot->xAxis->setTicker(ticker);
    plot->xAxis->setRange(-0.6, std::max<double>(0.6, m_estimate.size() - 0.4));
    plot->yAxis->setLabel(tr("predicted peak, %1").arg(byteUnit.name));
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
        if (!d.role.empty())
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
            .arg(strategy::optimizer_state_per_parameter(m_experiment.optimizer))
            .arg(roles.isEmpty() ? QString()
                                 : QStringLiteral("<br>") + roles.join(QStringLiteral(" · "))));
}

}  // namespace paralab::ui
