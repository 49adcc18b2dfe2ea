#include "ui/panels/devices/devices_panel.h"

#include <QApplication>
#include <QFormLayout>
#include <QLabel>
#include <QListWidget>
#include <QLocale>
#include <QPointer>
#include <QSpinBox>
#include <QThread>
#include <QVBoxLayout>

#include <algorithm>

namespace paralab::ui {

namespace {
QString memoryText(int64_t bytes) {
    return QLocale().formattedDataSize(bytes, 1, QLocale::DataSizeTraditionalFormat);
}
}  // namespace

DevicesPanel::DevicesPanel(QWidget* parent)
    : QWidget(parent),
      m_cpuInfo(new QLabel(tr("Looking for devices…"))),
      m_gpuInfo(new QLabel),
      m_gpus(new QListWidget),
      m_cpuCount(new QSpinBox),
      m_chosen(new QLabel),
      m_error(new QLabel) {
    setObjectName(QStringLiteral("devicesPanel"));
    auto* layout = new QVBoxLayout(this);
    auto* intro =
        new QLabel(tr("<b>Devices</b> — every device runs one rank thread. Virtual CPU "
                      "devices let every strategy run on a laptop: each is a thread with "
                      "its own memory accounting."));
    intro->setWordWrap(true);
    layout->addWidget(intro);

    layout->addWidget(new QLabel(tr("<b>GPUs</b>")));
    m_gpuInfo->setWordWrap(true);
    layout->addWidget(m_gpuInfo);
    m_gpus->setObjectName(QStringLiteral("gpuList"));
    m_gpus->setMaximumHeight(120);
    m_gpus->hide();
    layout->addWidget(m_gpus);

    layout->addWidget(new QLabel(tr("<b>Virtual CPU devices</b>")));
    m_cpuInfo->setWordWrap(true);
    layout->addWidget(m_cpuInfo);
    auto* form = new QFormLayout;
    m_cpuCount->setObjectName(QStringLiteral("cpuDeviceCount"));
    m_cpuCount->setRange(0, 16);
    m_cpuCount->setSpecialValueText(tr("none"));
    m_cpuCount->setValue(1);
    form->addRow(tr("CPU devices"), m_cpuCount);
    layout->addLayout(form);

    m_chosen->setWordWrap(true);
    layout->addWidget(m_chosen);
    m_error->setWordWrap(true);
    m_error->setStyleSheet(QStringLiteral("color: #c0392b"));
    m_error->hide();
    layout->addWidget(m_error);
    layout->addStretch(1);

    connect(m_cpuCount, &QSpinBox::valueChanged, this, &DevicesPanel::edited);
    connect(m_gpus, &QListWidget::itemChanged, this, &DevicesPanel::edited);

    // The first CUDA call can take seconds: never on the GUI thread. The answer comes back
    // through the application object's queue; a panel closed meanwhile is not touched.
    QPointer<DevicesPanel> self(this);
    QThread* worker = QThread::create([self] {
        std::vector<DeviceInfo> devices;
        try {
            devices = discover_devices();
        } catch (const std::exception&) {  // no devices is an answer too: the CPU is always there
        }
        QMetaObject::invokeMethod(
            qApp,
            [self, devices] {
                if (self) self->showDiscovered(devices);
            },
            Qt::QueuedConnection);
    });
    connect(worker, &QThread::finished, worker, &QObject::deleteLater);
    worker->start();
}

void DevicesPanel::showDiscovered(const std::vector<DeviceInfo>& devices) {
    m_foundGpus.clear();
    for (const auto& d : devices) {
        if (d.kind == DeviceKind::cpu) {
            m_cpuInfo->setText(tr("%1: %2 cores, %3. Compute threads per device are shared out of "
                                  "these.")
                                   .arg(QString::fromStdString(d.description))
                                   .arg(d.cores)
                                   .arg(memoryText(d.memory_bytes)));
            continue;
        }
        const bool seen = std::any_of(m_foundGpus.begin(), m_foundGpus.end(),
                                      [&](const DeviceInfo& g) { return g.name == d.name; });
        if (!seen) m_foundGpus.push_back(d);
    }
    m_gpuInfo->setText(!m_foundGpus.empty() ? tr("Tick the GPUs to train on.")
                       : cuda_backend_built()
                           ? tr("No GPU found on this machine: the virtual CPU devices below run "
                                "every strategy.")
                           : tr("No GPU: this build has no CUDA backend. The virtual CPU devices "
                                "below run every strategy."));
    m_discovered = true;
    rebuildGpuRows();
    emit devicesDiscovered();
}

void DevicesPanel::rebuildGpuRows() {
    const bool updating = m_updating;
    m_updating = true;
    m_gpus->clear();
    auto uses = [this](const std::string& name) {
        return std::count(m_experiment.devices.begin(), m_experiment.devices.end(), name);
    };
    auto addRow = [&](const std::string& name, const QString& text) {
        auto* item = new QListWidgetItem;
        const auto shares = uses(name);
        item->setText(shares > 1 ? tr("%1 (shared by %2 virtual devices)").arg(text).arg(shares)
                                 : text);
        item->setData(Qt::UserRole, QString::fromStdString(name));
        item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
        item->setCheckState(shares > 0 ? Qt::Checked : Qt::Unchecked);
        m_gpus->addItem(item);
    };
    for (const auto& d : m_foundGpus)
        addRow(d.name, tr("%1 — %2, %3, compute capability %4.%5")
                           .arg(QString::fromStdString(d.name),
                                QString::fromStdString(d.description), memoryText(d.memory_bytes))
                           .arg(d.cc_major)
                           .arg(d.cc_minor));
    // The experiment's GPUs this machine does not have, once each, in the experiment's order.
    std::vector<std::string> missing;
    for (const auto& name : m_experiment.devices) {
        DeviceId id;
        try {
            id = parse_device_id(name);
        } catch (const std::exception&) {
            continue;
        }
        if (id.kind == DeviceKind::cpu) continue;
        const bool found = std::any_of(m_foundGpus.begin(), m_foundGpus.end(),
                                       [&](const DeviceInfo& g) { return g.name == name; });
        if (!found && std::find(missing.begin(), missing.end(), name) == missing.end())
            missing.push_back(name);
    }
    for (const auto& name : missing)
        addRow(name, m_discovered
                         ? tr("%1 — not found on this machine").arg(QString::fromStdString(name))
                         : tr("%1 — looking for it…").arg(QString::fromStdString(name)));
    m_gpus->setVisible(m_gpus->count() > 0);
    m_updating = updating;
}

void DevicesPanel::setExperiment(const config::Experiment& e) {
    m_updating = true;
    m_experiment = e;
    // The count shows the highest cpu:K + 1, so that cpu:0..cpu:N-1 come back as they were.
    int cpus = 0;
    for (const auto& name : e.devices) {
        try {
            const DeviceId id = parse_device_id(name);
            if (id.kind == DeviceKind::cpu) cpus = std::max(cpus, id.index + 1);
        } catch (const std::exception&) {
        }
    }
    m_cpuCount->setValue(cpus);
    rebuildGpuRows();
    QStringList names;
    for (const auto& d : e.devices) names << QString::fromStdString(d);
    m_chosen->setText(tr("This run: %1").arg(names.join(QStringLiteral(", "))));
    m_error->hide();
    m_updating = false;
}

void DevicesPanel::edited() {
    if (m_updating) return;
    config::Experiment e = m_experiment;
    e.devices.clear();
    for (int i = 0; i < m_gpus->count(); ++i) {
        if (m_gpus->item(i)->checkState() != Qt::Checked) continue;
        // A GPU shared by N virtual devices stays N devices; a GPU newly ticked is one.
        const std::string name = m_gpus->item(i)->data(Qt::UserRole).toString().toStdString();
        const auto shares =
            std::count(m_experiment.devices.begin(), m_experiment.devices.end(), name);
        for (long k = 0; k < std::max<long>(1, shares); ++k) e.devices.push_back(name);
    }
    for (int k = 0; k < m_cpuCount->value(); ++k) e.devices.push_back("cpu:" + std::to_string(k));
    // A straggler on a device that is gone would fail the run: drop it with the device.
    if (!e.strategy.straggler_device.empty() &&
        std::find(e.devices.begin(), e.devices.end(), e.strategy.straggler_device) ==
            e.devices.end()) {
        e.strategy.straggler_device.clear();
        e.strategy.straggler_delay_ms = 0;
        e.strategy.straggler_rotate = false;
    }
    QStringList names;
    for (const auto& d : e.devices) names << QString::fromStdString(d);
    m_chosen->setText(
        tr("This run: %1")
            .arg(names.isEmpty() ? tr("no device") : names.join(QStringLiteral(", "))));
    if (const auto issues = run::validate(e); !issues.empty()) {
        m_error->setText(QString::fromStdString(issues.front().text()));
        m_error->show();
        emit editRefused(m_error->text());
        return;
    }
    m_error->hide();
    m_experiment = e;
    emit experimentEdited(e);
}

QStringList DevicesPanel::gpuIds() const {
    QStringList ids;
    for (int i = 0; i < m_gpus->count(); ++i) ids << m_gpus->item(i)->data(Qt::UserRole).toString();
    return ids;
}

bool DevicesPanel::gpuChecked(const QString& id) const {
    for (int i = 0; i < m_gpus->count(); ++i)
        if (m_gpus->item(i)->data(Qt::UserRole).toString() == id)
            return m_gpus->item(i)->checkState() == Qt::Checked;
    return false;
}

void DevicesPanel::setGpuChecked(const QString& id, bool checked) {
    for (int i = 0; i < m_gpus->count(); ++i)
        if (m_gpus->item(i)->data(Qt::UserRole).toString() == id)
            m_gpus->item(i)->setCheckState(checked ? Qt::Checked : Qt::Unchecked);
}

QString DevicesPanel::errorText() const {
    return m_error->isHidden() ? QString() : m_error->text();
}

}  // namespace paralab::ui
