#include "ui/panels/cluster/cluster_panel.h"

#include <algorithm>
#include <functional>

#include <QButtonGroup>
#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRadioButton>
#include <QSettings>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTableWidget>
#include <QVBoxLayout>

#include "ui/panels/common/field_errors.h"

namespace paralab::ui {

ClusterPanel::ClusterPanel(QWidget* parent)
    : QWidget(parent),
      m_local(new QRadioButton(tr("This machine (threads)"))),
      m_cluster(new QRadioButton(tr("Cluster (mpirun)"))),
      m_clusterBox(new QWidget),
      m_hostMode(new QComboBox),
      m_hosts(new QTableWidget(0, 2)),
      m_addHost(new QPushButton(tr("Add host"))),
      m_removeHost(new QPushButton(tr("Remove"))),
      m_hostfile(new QLineEdit),
      m_processes(new QSpinBox),
      m_devicesPerProcess(new QSpinBox),
      m_oversubscribe(new QCheckBox(tr("Allow more processes than slots (--oversubscribe)"))),
      m_mpirun(new QLineEdit),
      m_sharedDir(new QLineEdit),
      m_devices(new QLabel) {
    setObjectName(QStringLiteral("clusterPanel"));
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(new QLabel(tr("<b>Where the devices run</b>")));
    m_local->setObjectName(QStringLiteral("sourceLocal"));
    m_cluster->setObjectName(QStringLiteral("sourceCluster"));
    m_local->setToolTip(tr("Every device is a rank thread of this window's process"));
    m_cluster->setToolTip(tr("The devices are those of the processes of an Open MPI job (r0/cpu:0, "
                             "r1/cpu:0, ...), on this machine or on the hosts listed"));
    auto* group = new QButtonGroup(this);
    group->addButton(m_local);
    group->addButton(m_cluster);
    auto* choice = new QHBoxLayout;
    choice->addWidget(m_local);
    choice->addWidget(m_cluster);
    choice->addStretch(1);
    layout->addLayout(choice);

    auto* form = new QFormLayout(m_clusterBox);
    form->setContentsMargins(0, 0, 0, 0);
    m_hostMode->setObjectName(QStringLiteral("hostMode"));
    m_hostMode->addItems({tr("Host list"), tr("Hostfile")});
    form->addRow(tr("Hosts from"), m_hostMode);

    m_hosts->setObjectName(QStringLiteral("hostTable"));
    m_hosts->setHorizontalHeaderLabels({tr("Host"), tr("Slots")});
    m_hosts->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
    m_hosts->horizontalHeader()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
    m_hosts->verticalHeader()->hide();
    m_hosts->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_hosts->setMaximumHeight(130);
    m_addHost->setObjectName(QStringLiteral("addHost"));
    m_removeHost->setObjectName(QStringLiteral("removeHost"));
    auto* hostList = new QWidget;
    auto* hostLayout = new QVBoxLayout(hostList);
    hostLayout->setContentsMargins(0, 0, 0, 0);
    hostLayout->addWidget(m_hosts);
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(m_addHost);
    buttons->addWidget(m_removeHost);
    buttons->addStretch(1);
    hostLayout->addLayout(buttons);
    QLabel* error = nullptr;
    m_hostListCell = addFieldRow(form, QStringLiteral("hosts"), tr("Host list"), hostList, &error);
    m_errors[QStringLiteral("hosts")] = error;

    m_hostfile->setObjectName(QStringLiteral("hostfile"));
    m_hostfile->setPlaceholderText(tr("an Open MPI hostfile: one \"host slots=N\" a line"));
    auto* browse = new QPushButton(tr("Browse…"));
    auto* hostfileRow = new QWidget;
    auto* hostfileLayout = new QHBoxLayout(hostfileRow);
    hostfileLayout->setContentsMargins(0, 0, 0, 0);
    hostfileLayout->addWidget(m_hostfile, 1);
    hostfileLayout->addWidget(browse);
    m_hostfileCell = addFieldRow(form, QStringLiteral("hostfile"), tr("Hostfile"), hostfileRow, &error);
    m_errors[QStringLiteral("hostfile")] = error;

    m_processes->setObjectName(QStringLiteral("processCount"));
    m_processes->setRange(0, 4096);
    addFieldRow(form, QStringLiteral("processes"), tr("Processes"), m_processes, &error);
    m_errors[QStringLiteral("processes")] = error;
    form->addRow(QString(), m_oversubscribe);

    m_devicesPerProcess->setObjectName(QStringLiteral("devicesPerProcess"));
    m_devicesPerProcess->setRange(1, 64);
    m_devicesPerProcess->setToolTip(tr("Virtual CPU devices each process runs (cpu:0, cpu:1, ...): "
                                       "their collectives go through the process first, then over MPI"));
    addFieldRow(form, QStringLiteral("devicesPerProcess"), tr("Devices per process"), m_devicesPerProcess, &error);
    m_errors[QStringLiteral("devicesPerProcess")] = error;

    m_mpirun->setObjectName(QStringLiteral("mpirunPath"));
    const QString onPath = QStandardPaths::findExecutable(QStringLiteral("mpirun"));
    m_mpirun->setPlaceholderText(onPath.isEmpty() ? tr("mpirun is not on PATH: give its path")
                                                  : tr("%1 (on PATH)").arg(onPath));
    addFieldRow(form, QStringLiteral("mpirun"), tr("mpirun"), m_mpirun, &error);
    m_errors[QStringLiteral("mpirun")] = error;
    m_sharedDir->setObjectName(QStringLiteral("sharedDir"));
    m_sharedDir->setPlaceholderText(tr("this machine's temporary folder (enough for localhost)"));
    m_sharedDir->setToolTip(tr("The job's experiment file is written here: every host must see this "
                               "folder at the same path. The paralab program, the data files and the "
                               "run store must be at the same paths on every host too."));
    addFieldRow(form, QStringLiteral("sharedDir"), tr("Shared folder"), m_sharedDir, &error);
    m_errors[QStringLiteral("sharedDir")] = error;
    m_devices->setObjectName(QStringLiteral("clusterDevices"));
    m_devices->setWordWrap(true);
    form->addRow(m_devices);
    layout->addWidget(m_clusterBox);

    QSettings settings;
    show(ClusterSettings::load(settings));

    connect(m_cluster, &QRadioButton::toggled, this, &ClusterPanel::edited);
    connect(m_hostMode, &QComboBox::currentIndexChanged, this, &ClusterPanel::edited);
    connect(m_hosts, &QTableWidget::itemChanged, this, &ClusterPanel::edited);
    connect(m_addHost, &QPushButton::clicked, this, &ClusterPanel::addHost);
    connect(m_removeHost, &QPushButton::clicked, this, &ClusterPanel::removeHost);
    connect(m_hostfile, &QLineEdit::textChanged, this, &ClusterPanel::edited);
    connect(browse, &QPushButton::clicked, this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, tr("Open MPI hostfile"), m_hostfile->text());
        if (!path.isEmpty()) m_hostfile->setText(path);
    });
    connect(m_processes, &QSpinBox::valueChanged, this, &ClusterPanel::edited);
    connect(m_devicesPerProcess, &QSpinBox::valueChanged, this, &ClusterPanel::edited);
    connect(m_oversubscribe, &QCheckBox::toggled, this, &ClusterPanel::edited);
    connect(m_mpirun, &QLineEdit::textChanged, this, &ClusterPanel::edited);
    connect(m_sharedDir, &QLineEdit::textChanged, this, &ClusterPanel::edited);
}

void ClusterPanel::show(const ClusterSettings& s) {
    m_updating = true;
    m_settings = s;
    (s.enabled ? m_cluster : m_local)->setChecked(true);
    m_hostMode->setCurrentIndex(s.useHostfile ? 1 : 0);
    m_hosts->setRowCount(0);
    for (const auto& h : s.hosts) {
        const int row = m_hosts->rowCount();
        m_hosts->insertRow(row);
        m_hosts->setItem(row, 0, new QTableWidgetItem(h.name));
        auto* slotItem = new QTableWidgetItem;
        slotItem->setData(Qt::EditRole, h.slotCount);  // a spin box editor
        m_hosts->setItem(row, 1, slotItem);
    }
    m_hostfile->setText(s.hostfile);
    m_processes->setValue(s.processes);
    m_devicesPerProcess->setValue(s.devicesPerProcess);
    m_oversubscribe->setChecked(s.oversubscribe);
    m_mpirun->setText(s.mpirun);
    m_sharedDir->setText(s.sharedDir);
    m_updating = false;
    showProblems();
}

void ClusterPanel::setSettings(const ClusterSettings& s) {
    show(s);
    QSettings settings;
    m_settings.save(settings);
    emit settingsChanged(m_settings);
    emit sourceChanged(m_settings.enabled);
}

void ClusterPanel::edited() {
    if (m_updating) return;
    const bool wasCluster = m_settings.enabled;
    ClusterSettings s;
    s.enabled = m_cluster->isChecked();
    s.useHostfile = m_hostMode->currentIndex() == 1;
    s.hosts.clear();
    for (int row = 0; row < m_hosts->rowCount(); ++row) {
        const auto* name = m_hosts->item(row, 0);
        const auto* slotItem = m_hosts->item(row, 1);
        s.hosts.push_back({name ? name->text().trimmed() : QString(), slotItem ? slotItem->data(Qt::EditRole).toInt() : 1});
    }
    s.hostfile = m_hostfile->text().trimmed();
    s.processes = m_processes->value();
    s.devicesPerProcess = m_devicesPerProcess->value();
    s.oversubscribe = m_oversubscribe->isChecked();
    s.mpirun = m_mpirun->text().trimmed();
    s.sharedDir = m_sharedDir->text().trimmed();
    m_settings = s;
    QSettings settings;
    m_settings.save(settings);
    showProblems();
    emit settingsChanged(m_settings);
    if (wasCluster != m_settings.enabled) emit sourceChanged(m_settings.enabled);
}

void ClusterPanel::showProblems() {
    m_clusterBox->setVisible(m_settings.enabled);
    m_hostListCell->setEnabled(!m_settings.useHostfile);
    m_hostfileCell->setEnabled(m_settings.useHostfile);
    m_removeHost->setEnabled(m_hosts->rowCount() > 0);
    m_processes->setSpecialValueText(tr("one per slot (%1)").arg(m_settings.slotCount()));
    const auto problems = m_settings.problems();
    for (auto it = m_errors.begin(); it != m_errors.end(); ++it) {
        const QString message = problems.value(it.key());
        it.value()->setText(message);
        it.value()->setVisible(!message.isEmpty());
    }
    const bool placeable = !problems.contains(QStringLiteral("hosts")) && !problems.contains(QStringLiteral("hostfile")) &&
                           !problems.contains(QStringLiteral("processes"));
    m_devices->setText(placeable ? tr("This run: %1").arg(m_settings.placedDeviceNames().join(QStringLiteral(", ")))
                                 : tr("This run: no devices until the hosts are right"));
}

void ClusterPanel::addHost() {
    m_updating = true;
    const int row = m_hosts->rowCount();
    m_hosts->insertRow(row);
    m_hosts->setItem(row, 0, new QTableWidgetItem);
    auto* slotItem = new QTableWidgetItem;
    slotItem->setData(Qt::EditRole, 1);
    m_hosts->setItem(row, 1, slotItem);
    m_updating = false;
    edited();
    m_hosts->setCurrentCell(row, 0);
    if (isVisible()) m_hosts->editItem(m_hosts->item(row, 0));
}

void ClusterPanel::removeHost() {
    QList<int> rows;
    for (const auto& range : m_hosts->selectedRanges())
        for (int r = range.topRow(); r <= range.bottomRow(); ++r) rows << r;
    if (rows.isEmpty() && m_hosts->currentRow() >= 0) rows << m_hosts->currentRow();
    std::sort(rows.begin(), rows.end(), std::greater<int>());
    m_updating = true;
    for (int r : rows) m_hosts->removeRow(r);
    m_updating = false;
    edited();
}

QString ClusterPanel::fieldError(const QString& key) const {
    const QLabel* label = m_errors.value(key);
    return label && !label->isHidden() ? label->text() : QString();
}

QString ClusterPanel::devicesText() const { return m_devices->text(); }

}  // namespace paralab::ui
