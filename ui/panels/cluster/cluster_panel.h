// Where a run's devices are: this machine's rank threads, or a cluster of processes
// started by mpirun — a host list with slots (or an Open MPI hostfile), the number of processes
// (one per slot unless told), mpirun's path, a folder every host sees for the job's file, and
// the devices the job will have (r0/cpu:0 ...). Shown in the Devices panel; what it holds is
// kept in QSettings ("cluster/") at every edit, and what is wrong is said under its field.
#pragma once

#include <QMap>
#include <QWidget>

#include "ui/session/cluster_settings.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QRadioButton;
class QSpinBox;
class QTableWidget;

namespace paralab::ui {

class ClusterPanel : public QWidget {
    Q_OBJECT
public:
    // Shows the settings kept in QSettings (the defaults when there are none).
    explicit ClusterPanel(QWidget* parent = nullptr);

    ClusterSettings settings() const { return m_settings; }
    // Shows `s` and keeps it, as an edit does.
    void setSettings(const ClusterSettings& s);
    bool useCluster() const { return m_settings.enabled; }

    // For tests: the editors, a field's error line ("" when hidden), the devices line.
    QRadioButton* localButton() const { return m_local; }
    QRadioButton* clusterButton() const { return m_cluster; }
    QTableWidget* hostTable() const { return m_hosts; }
    QPushButton* addHostButton() const { return m_addHost; }
    QPushButton* removeHostButton() const { return m_removeHost; }
    QComboBox* hostModeBox() const { return m_hostMode; }
    QLineEdit* hostfileEdit() const { return m_hostfile; }
    QSpinBox* processBox() const { return m_processes; }
    QSpinBox* devicesPerProcessBox() const { return m_devicesPerProcess; }
    QLineEdit* mpirunEdit() const { return m_mpirun; }
    QString fieldError(const QString& key) const;
    QString devicesText() const;

signals:
    // Every edit: the settings as they are now (valid or not), and whether the cluster is the
    // device source.
    void settingsChanged(const paralab::ui::ClusterSettings& settings);
    void sourceChanged(bool cluster);

private:
    void show(const ClusterSettings& s);
    void edited();
    void showProblems();
    void addHost();
    void removeHost();

    ClusterSettings m_settings;
    bool m_updating = false;
    QRadioButton* m_local;
    QRadioButton* m_cluster;
    QWidget* m_clusterBox;
    QComboBox* m_hostMode;
    QWidget* m_hostListCell;
    QTableWidget* m_hosts;
    QPushButton* m_addHost;
    QPushButton* m_removeHost;
    QWidget* m_hostfileCell;
    QLineEdit* m_hostfile;
    QSpinBox* m_processes;
    QSpinBox* m_devicesPerProcess;
    QCheckBox* m_oversubscribe;
    QLineEdit* m_mpirun;
    QLineEdit* m_sharedDir;
    QLabel* m_devices;
    QMap<QString, QLabel*> m_errors;  // by field: hosts, hostfile, processes, mpirun, sharedDir
};

}  // namespace paralab::ui
