#include "ui/panels/training/training_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QScrollArea>
#include <QSpinBox>
#include <QVBoxLayout>

#include "engine/util/error.h"
#include "ui/panels/common/field_errors.h"
#include "ui/panels/common/form_widgets.h"

namespace paralab::ui {

namespace {

QComboBox* choiceBox(const QStringList& choices) {
    auto* box = new QComboBox;
    box->addItems(choices);
    return box;
}

// Real numbers are typed as text ("3e-4" is a learning rate as people write it); the parser
// decides what range is allowed, and says so.
QLineEdit* numberEdit() {
    auto* line = new QLineEdit;
    line->setMaximumWidth(160);
    return line;
}

QString numberText(double v) {
    return QString::number(v, 'g', 12);
}

// The number typed under `key`; false (with `issue` set) when the text is not a number.
bool readNumber(const QLineEdit* line, const std::string& key, double& out, config::Issue& issue) {
    bool ok = false;
    const QString text = line->text().trimmed();
    out = text.toDouble(&ok);
    if (!ok) issue = {key, "expected a number, got \"" + text.toStdString() + "\""};
    return ok;
}

// The parser's defaults for a section of another type: `e` with `section` replaced by
// {"type": type}, read back. The defaults live in one place, the parser.
config::Experiment withSectionDefaults(const config::Experiment& e, const char* section, const std::string& type) {
    nlohmann::json j = run::to_json(e);
    j[section] = {{"type", type}};
    return run::parse_experiment(j);
}

}  // namespace

TrainingPanel::TrainingPanel(QWidget* parent)
    : QWidget(parent),
      m_name(new QLineEdit),
      // Loose ranges on purpose: the parser decides, and says why (0 epochs gets its message
      // rather than a silently clamped value).
      m_epochs(spinBox(0, 1000000)),
      m_maxSteps(spinBox(0, 1000000000, tr("no limit (every epoch)"))),
      m_evalEvery(spinBox(0, 1000000000, tr("only at the end"))),
      m_maxStepsPerS(numberEdit()),
      m_precision(choiceBox({QStringLiteral("fp32"), QStringLiteral("bf16"), QStringLiteral("fp16")})),
      m_recompute(choiceBox({QStringLiteral("none"), QStringLiteral("selective"), QStringLiteral("full")})),
      m_optimizer(choiceBox({QStringLiteral("sgd"), QStringLiteral("adam"), QStringLiteral("adamw")})),
      m_lr(numberEdit()),
      m_weightDecay(numberEdit()),
      m_momentum(numberEdit()),
      m_nesterov(new QCheckBox(tr("Nesterov momentum"))),
      m_beta1(numberEdit()),
      m_beta2(numberEdit()),
      m_eps(numberEdit()),
      m_schedule(choiceBox({QStringLiteral("constant"), QStringLiteral("step"), QStringLiteral("cosine")})),
      m_stepSize(spinBox(0, 1000000000)),
      m_gamma(numberEdit()),
      m_warmup(spinBox(0, 1000000000, tr("none"))),
      m_generalError(new QLabel) {
    setObjectName(QStringLiteral("trainingPanel"));
    m_stepSize->setSuffix(tr(" steps"));
    m_warmup->setSuffix(tr(" steps"));
    m_evalEvery->setPrefix(tr("every "));
    m_evalEvery->setSuffix(tr(" steps"));
    m_name->setPlaceholderText(tr("names the runs in the Runs tab"));
    m_maxStepsPerS->setPlaceholderText(tr("no limit"));
    m_maxStepsPerS->setToolTip(tr("At most this many steps a second, so that a short run can be watched as it "
                                  "happens; the waiting does not count in the run's step time or throughput"));
    m_precision->setToolTip(tr("bf16 and fp16 (mixed precision) need CUDA devices"));
    m_recompute->setToolTip(
        tr("Trade compute for memory: selective recomputes attention's probabilities, full runs each "
           "layer's forward again before its backward"));
    m_weightDecay->setToolTip(tr("L2 for sgd and adam, decoupled for adamw"));

    auto* content = new QWidget;
    auto* layout = new QVBoxLayout(content);
    auto* title = new QLabel(
        tr("<b>Training</b> — how long to train, how each step updates the weights, and how the "
           "learning rate changes over the run. One step is one optimizer update on one global "
           "batch."));
    title->setWordWrap(true);
    layout->addWidget(title);

    QFormLayout* form = addSection(layout, tr("Experiment"));
    addField(form, QStringLiteral("name"), tr("Name"), m_name);
    addField(form, QStringLiteral("train.epochs"), tr("Epochs"), m_epochs);
    addField(form, QStringLiteral("train.max_steps"), tr("Max steps"), m_maxSteps);
    addField(form, QStringLiteral("train.eval_every"), tr("Evaluate"), m_evalEvery);
    addField(form, QStringLiteral("train.max_steps_per_s"), tr("Steps per second at most"), m_maxStepsPerS);

    form = addSection(layout, tr("Optimizer"));
    addField(form, QStringLiteral("optimizer.type"), tr("Optimizer"), m_optimizer);
    addField(form, QStringLiteral("optimizer.lr"), tr("Learning rate"), m_lr);
    addField(form, QStringLiteral("optimizer.weight_decay"), tr("Weight decay"), m_weightDecay);
    addField(form, QStringLiteral("optimizer.momentum"), tr("Momentum"), m_momentum);
    addField(form, QStringLiteral("optimizer.nesterov"), QString(), m_nesterov);
    auto* betas = new QWidget;
    auto* betasLayout = new QHBoxLayout(betas);
    betasLayout->setContentsMargins(0, 0, 0, 0);
    betasLayout->addWidget(new QLabel(tr("β₁")));
    betasLayout->addWidget(m_beta1);
    betasLayout->addWidget(new QLabel(tr("β₂")));
    betasLayout->addWidget(m_beta2);
    betasLayout->addStretch(1);
    m_beta1->setObjectName(QStringLiteral("optimizer.beta1"));
    m_beta2->setObjectName(QStringLiteral("optimizer.beta2"));
    m_beta1->setMaximumWidth(90);
    m_beta2->setMaximumWidth(90);
    addField(form, QStringLiteral("optimizer.betas"), tr("Betas"), betas);
    addField(form, QStringLiteral("optimizer.eps"), tr("Epsilon"), m_eps);

    form = addSection(layout, tr("Learning-rate schedule"));
    addField(form, QStringLiteral("schedule.type"), tr("Schedule"), m_schedule);
    addField(form, QStringLiteral("schedule.step_size"), tr("Decay every"), m_stepSize);
    addField(form, QStringLiteral("schedule.gamma"), tr("Decay factor"), m_gamma);
    addField(form, QStringLiteral("schedule.warmup_steps"), tr("Warm-up"), m_warmup);

    form = addSection(layout, tr("Numbers and memory"));
    addField(form, QStringLiteral("train.precision"), tr("Precision"), m_precision);
    addField(form, QStringLiteral("train.recompute"), tr("Recompute"), m_recompute);

    m_generalError->setWordWrap(true);
    m_generalError->setStyleSheet(QStringLiteral("color: #c0392b"));
    m_generalError->setObjectName(QStringLiteral("trainingError"));
    m_generalError->hide();
    layout->addWidget(m_generalError);
    layout->addStretch(1);

    setScrollingContent(this, content);

    for (QLineEdit* line : {m_name, m_maxStepsPerS, m_lr, m_weightDecay, m_momentum, m_beta1, m_beta2, m_eps, m_gamma})
        connect(line, &QLineEdit::editingFinished, this, &TrainingPanel::edited);
    for (QSpinBox* box : {m_epochs, m_maxSteps, m_evalEvery, m_stepSize, m_warmup})
        connect(box, &QSpinBox::valueChanged, this, &TrainingPanel::edited);
    for (QComboBox* box : {m_precision, m_recompute, m_optimizer, m_schedule})
        connect(box, &QComboBox::currentIndexChanged, this, &TrainingPanel::edited);
    connect(m_nesterov, &QCheckBox::toggled, this, &TrainingPanel::edited);
    setExperiment(config::Experiment{});
}

QFormLayout* TrainingPanel::addSection(QVBoxLayout* layout, const QString& title) {
    // One form for every section, so that the editors line up; a section is a heading row.
    auto* form = layout->findChild<QFormLayout*>(QStringLiteral("trainingForm"));
    if (!form) {
        form = new QFormLayout;
        form->setObjectName(QStringLiteral("trainingForm"));
        layout->addLayout(form);
    }
    auto* heading = new QLabel(QStringLiteral("<b>%1</b>").arg(title.toHtmlEscaped()));
    heading->setContentsMargins(0, 8, 0, 0);
    form->addRow(heading);
    return form;
}

void TrainingPanel::addField(QFormLayout* form, const QString& key, const QString& label, QWidget* editor) {
    QLabel* error = nullptr;
    QWidget* cell = addFieldRow(form, key, label, editor, &error);
    editor->setObjectName(key);
    m_forms.insert(key, form);
    m_cells.insert(key, cell);
    m_editors.insert(key, editor);
    m_errors.insert(key, error);
}

void TrainingPanel::updateVisibility() {
    auto show = [this](const char* key, bool visible) {
        const QString k = QString::fromLatin1(key);
        m_forms.value(k)->setRowVisible(m_cells.value(k), visible);
    };
    const bool sgd = m_optimizer->currentText() == QLatin1String("sgd");
    show("optimizer.momentum", sgd);
    show("optimizer.nesterov", sgd);
    show("optimizer.betas", !sgd);
    show("optimizer.eps", !sgd);
    const QString schedule = m_schedule->currentText();
    show("schedule.step_size", schedule == QLatin1String("step"));
    show("schedule.gamma", schedule == QLatin1String("step"));
    show("schedule.warmup_steps", schedule == QLatin1String("cosine"));
}

void TrainingPanel::setExperiment(const config::Experiment& e) {
    m_updating = true;
    m_experiment = e;
    m_name->setText(QString::fromStdString(e.name));
    const auto& t = e.train;
    m_epochs->setValue(static_cast<int>(std::min<int64_t>(t.epochs, m_epochs->maximum())));
    m_maxSteps->setValue(t.max_steps ? static_cast<int>(std::min<int64_t>(*t.max_steps, m_maxSteps->maximum())) : 0);
    m_evalEvery->setValue(static_cast<int>(std::min<int64_t>(t.eval_every, m_evalEvery->maximum())));
    m_maxStepsPerS->setText(t.max_steps_per_s > 0 ? numberText(t.max_steps_per_s) : QString());
    m_precision->setCurrentText(QString::fromStdString(t.precision));
    m_recompute->setCurrentText(QString::fromStdString(t.recompute));
    const auto& o = e.optimizer;
    m_optimizer->setCurrentText(QString::fromStdString(o.type));
    m_lr->setText(numberText(o.lr));
    m_weightDecay->setText(numberText(o.weight_decay));
    m_momentum->setText(numberText(o.momentum));
    m_nesterov->setChecked(o.nesterov);
    m_beta1->setText(numberText(o.beta1));
    m_beta2->setText(numberText(o.beta2));
    m_eps->setText(numberText(o.eps));
    const auto& s = e.schedule;
    m_schedule->setCurrentText(QString::fromStdString(s.type));
    m_stepSize->setValue(static_cast<int>(std::min<int64_t>(s.step_size, m_stepSize->maximum())));
    m_gamma->setText(numberText(s.gamma));
    m_warmup->setValue(static_cast<int>(std::min<int64_t>(s.warmup_steps, m_warmup->maximum())));
    for (QLabel* l : std::as_const(m_errors)) l->hide();
    m_generalError->hide();
    updateVisibility();
    m_updating = false;
}

void TrainingPanel::refuse(const config::Issue& issue) {
    showIssue(issue, m_errors, m_generalError);
    emit editRefused(QString::fromStdString(issue.text()));
}

void TrainingPanel::edited() {
    if (m_updating) return;
    updateVisibility();
    for (QLabel* l : std::as_const(m_errors)) l->hide();
    m_generalError->hide();

    config::Experiment e = m_experiment;
    e.name = m_name->text().trimmed().toStdString();
    auto& t = e.train;
    t.epochs = m_epochs->value();
    t.max_steps = m_maxSteps->value() > 0 ? std::optional<int64_t>(m_maxSteps->value()) : std::nullopt;
    t.eval_every = m_evalEvery->value();
    t.precision = m_precision->currentText().toStdString();
    t.recompute = m_recompute->currentText().toStdString();

    config::Issue issue;
    t.max_steps_per_s = 0;
    if (!m_maxStepsPerS->text().trimmed().isEmpty() &&
        !readNumber(m_maxStepsPerS, "train.max_steps_per_s", t.max_steps_per_s, issue))
        return refuse(issue);
    const std::string optimizer = m_optimizer->currentText().toStdString();
    const std::string schedule = m_schedule->currentText().toStdString();
    const bool newOptimizer = optimizer != m_experiment.optimizer.type;
    const bool newSchedule = schedule != m_experiment.schedule.type;
    auto& o = e.optimizer;
    if (!newOptimizer) {
        if (!readNumber(m_lr, "optimizer.lr", o.lr, issue) ||
            !readNumber(m_weightDecay, "optimizer.weight_decay", o.weight_decay, issue))
            return refuse(issue);
        if (optimizer == "sgd") {
            if (!readNumber(m_momentum, "optimizer.momentum", o.momentum, issue)) return refuse(issue);
            o.nesterov = m_nesterov->isChecked();
        } else if (!readNumber(m_beta1, "optimizer.betas", o.beta1, issue) ||
                   !readNumber(m_beta2, "optimizer.betas", o.beta2, issue) ||
                   !readNumber(m_eps, "optimizer.eps", o.eps, issue)) {
            return refuse(issue);
        }
    }
    auto& s = e.schedule;
    if (!newSchedule) {
        s.step_size = m_stepSize->value();
        s.warmup_steps = m_warmup->value();
        if (!readNumber(m_gamma, "schedule.gamma", s.gamma, issue)) return refuse(issue);
    }
    // Another optimizer or schedule starts from the parser's defaults for it; the rest of the
    // form is checked first, so that its message names its own field.
    if (const auto issues = run::validate(e); !issues.empty()) return refuse(issues.front());
    if (newOptimizer || newSchedule) {
        try {
            if (newOptimizer) e.optimizer = withSectionDefaults(e, "optimizer", optimizer).optimizer;
            if (newSchedule) e.schedule = withSectionDefaults(e, "schedule", schedule).schedule;
        } catch (const ConfigError& err) {
            return refuse(config::Issue{err.path(), err.reason()});
        }
        setExperiment(e);  // shows the new section's defaults
    }
    m_experiment = e;
    emit experimentEdited(e);
}

QWidget* TrainingPanel::editor(const QString& key) const {
    return m_editors.value(key);
}

bool TrainingPanel::isFieldShown(const QString& key) const {
    QWidget* cell = m_cells.value(key);
    return cell && m_forms.value(key)->isRowVisible(cell);
}

QString TrainingPanel::errorText() const {
    for (QLabel* l : m_errors)
        if (!l->isHidden()) return l->text();
    return m_generalError->isHidden() ? QString() : m_generalError->text();
}

}  // namespace paralab::ui
