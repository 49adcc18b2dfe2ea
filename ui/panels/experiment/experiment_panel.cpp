#include "ui/panels/experiment/experiment_panel.h"

#include <QHeaderView>
#include <QLabel>
#include <QLocale>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>

#include <algorithm>
#include <chrono>

#include "engine/data/dataset.h"
#include "engine/device/device.h"
#include "engine/nn/model.h"

namespace paralab::ui {

ExperimentPanel::ExperimentPanel(QWidget* parent)
    : QWidget(parent),
      m_summary(new QLabel),
      m_layers(new QTableWidget),
      m_totals(new QLabel),
      m_poll(new QTimer(this)) {
    m_poll->setInterval(20);
    connect(m_poll, &QTimer::timeout, this, &ExperimentPanel::poll);
    auto* layout = new QVBoxLayout(this);
    m_summary->setTextFormat(Qt::RichText);
    m_summary->setWordWrap(true);
    m_layers->setColumnCount(4);
    m_layers->setHorizontalHeaderLabels({tr("Layer"), tr("Type"), tr("Output"), tr("Parameters")});
    m_layers->verticalHeader()->hide();
    m_layers->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_layers->setSelectionBehavior(QAbstractItemView::SelectRows);
    // The layer path takes the spare width: nested models have the long names.
    m_layers->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_layers->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
    m_layers->setAlternatingRowColors(true);
    m_totals->setTextFormat(Qt::RichText);
    m_totals->setWordWrap(true);
    layout->addWidget(m_summary);
    layout->addWidget(new QLabel(tr("<b>Model</b>")));
    layout->addWidget(m_layers, 1);
    layout->addWidget(m_totals);
}

// The futures' destructors wait for builds still running: at most one model build each.
ExperimentPanel::~ExperimentPanel() = default;

ExperimentPanel::Built ExperimentPanel::build(const config::Experiment& e) {
    Built b;
    b.input = run::model_input_shape(e);  // reads the data set when model.input is absent
    const nn::ModelSummary model = nn::summarize(e.layers, b.input, e.loss);
    b.rows = model.layers;
    b.parameters = model.parameters;
    b.flops = static_cast<double>(model.flops_per_sample);
    return b;
}

void ExperimentPanel::showExperiment(const config::Experiment& e) {
    if (m_job.valid()) m_stale.push_back(std::move(m_job));
    auto job = std::async(std::launch::async, [e] { return build(e); });
    // A budget of 0 leaves every build to the worker, even one that finished at once (the
    // thread may beat this line): a caller that asked for no waiting gets no exception.
    if (m_syncBudgetMs > 0 &&
        job.wait_for(std::chrono::milliseconds(m_syncBudgetMs)) == std::future_status::ready) {
        const Built b = job.get();  // throws: nothing shown changes
        showSections(e);
        showBuilt(b);
        return;
    }
    m_job = std::move(job);
    m_pending = e;
    showSections(e);
    m_layers->setRowCount(0);
    m_totals->setText(tr("Building the model…"));
    m_poll->start();
}

void ExperimentPanel::poll() {
    m_stale.erase(std::remove_if(m_stale.begin(), m_stale.end(),
                                 [](auto& f) { return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }),
                  m_stale.end());
    if (m_job.valid() && m_job.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
        try {
            showBuilt(m_job.get());
        } catch (const std::exception& err) {
            showUnbuildable(m_pending, QString::fromUtf8(err.what()));
        }
    }
    if (m_stale.empty() && !m_job.valid()) m_poll->stop();
}

void ExperimentPanel::showBuilt(const Built& b) {
    const auto& rows = b.rows;
    const QLocale locale;
    m_layers->setRowCount(static_cast<int>(rows.size()));
    for (int i = 0; i < static_cast<int>(rows.size()); ++i) {
        const auto& r = rows[static_cast<size_t>(i)];
        const QString indent(2 * r.depth, QLatin1Char(' '));
        const QString path = QString::fromStdString(r.path).mid(6);  // drop "model."
        auto* params = new QTableWidgetItem(locale.toString(static_cast<qlonglong>(r.parameters)));
        params->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
        m_layers->setItem(i, 0, new QTableWidgetItem(indent + path));
        // A layer with "repeat": N is one row for its N copies (parameters of them all).
        m_layers->setItem(i, 1,
                          new QTableWidgetItem(
                              QString::fromStdString(r.type) +
                              (r.copies > 1 ? QStringLiteral(" ×%1").arg(r.copies) : QString())));
        m_layers->setItem(i, 2, new QTableWidgetItem(QString::fromStdString(r.output.to_string())));
        m_layers->setItem(i, 3, params);
    }
    m_layers->setCurrentItem(nullptr);  // no cell looks selected before the user picks one
    m_totals->setText(tr("Input %1 · %2 parameters<br>%3 MFLOP per example, forward")
                          .arg(QString::fromStdString(b.input.to_string()))
                          .arg(locale.toString(static_cast<qlonglong>(b.parameters)))
                          .arg(b.flops / 1e6, 0, 'f', 2));
}

void ExperimentPanel::showSections(const config::Experiment& e) {
    QStringList devices;
    for (const auto& d : e.devices) devices << QString::fromStdString(d);
    m_summary->setText(
        tr("<h3>%1</h3><table cellspacing='3'>"
           "<tr><td>Data</td><td><b>%2</b>, batch %3</td></tr>"
           "<tr><td>Devices</td><td>%4</td></tr>"
           "<tr><td>Strategy</td><td>%5</td></tr>"
           "<tr><td>Optimizer</td><td>%6, lr %7, %8 schedule</td></tr>"
           "<tr><td>Training</td><td>%9 epochs%10</td></tr></table>")
            .arg(QString::fromStdString(e.name).toHtmlEscaped(),
                 QString::fromStdString(e.data.dataset), QString::number(e.data.batch_size),
                 devices.join(QStringLiteral(", ")), QString::fromStdString(e.strategy.type),
                 QString::fromStdString(e.optimizer.type), QString::number(e.optimizer.lr),
                 QString::fromStdString(e.schedule.type), QString::number(e.train.epochs))
            .arg(e.train.max_steps ? tr(", at most %1 steps").arg(*e.train.max_steps) : QString()));
}

void ExperimentPanel::showUnbuildable(const config::Experiment& e, const QString& message) {
    if (m_job.valid()) m_stale.push_back(std::move(m_job));  // a build still running is outdated
    showSections(e);
    m_layers->setRowCount(0);
    m_totals->setText(QStringLiteral("<span style='color:#c62828'>%1</span>")
                          .arg(tr("The model does not build: %1").arg(message).toHtmlEscaped()));
}

QString ExperimentPanel::totalsText() const { return m_totals->text(); }

int ExperimentPanel::layerRowCount() const { return m_layers->rowCount(); }

}  // namespace paralab::ui
