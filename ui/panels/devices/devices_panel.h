// The Devices panel: the GPUs found (name, memory, compute capability) and the virtual CPU
// devices (cpu:0 .. cpu:N-1, each a rank thread with its own memory accounting); picks the
// run's devices. Discovery runs on a worker thread (CUDA's first call can take seconds).
//
// The GPU list has one row per GPU id, whichever comes first (the experiment or discovery) and
// however often either is shown: the GPUs found, then those the experiment names that were not
// found here (a file from another machine), marked so. A GPU the experiment lists N times
// (virtual devices sharing it, docs/design.md) is one row saying so, and edits keep it N times.
#pragma once

#include <QWidget>

#include <vector>

#include "engine/device/device.h"
#include "engine/run/experiment_file.h"

class QLabel;
class QListWidget;
class QSpinBox;

namespace paralab::ui {

class DevicesPanel : public QWidget {
    Q_OBJECT
public:
    explicit DevicesPanel(QWidget* parent = nullptr);

    void setExperiment(const config::Experiment& e);
    // For tests: the virtual CPU devices' count box, and whether discovery has answered.
    QSpinBox* cpuCountBox() const { return m_cpuCount; }
    bool discovered() const { return m_discovered; }
    QString errorText() const;
    // The GPU rows' device ids, in order, and whether each is ticked.
    QStringList gpuIds() const;
    bool gpuChecked(const QString& id) const;
    void setGpuChecked(const QString& id, bool checked);  // as a click on its box does

    // Discovery's answer (the worker hands it here; tests hand it GPUs this machine lacks).
    void showDiscovered(const std::vector<DeviceInfo>& devices);

signals:
    void experimentEdited(const paralab::config::Experiment& e);
    // An edit that was refused: its message is shown under its field, nothing was passed on.
    void editRefused(const QString& message);
    void devicesDiscovered();

private:
    void rebuildGpuRows();
    void edited();

    config::Experiment m_experiment;
    std::vector<DeviceInfo> m_foundGpus;  // discovery's GPUs, each id once
    bool m_updating = false;
    bool m_discovered = false;
    QLabel* m_cpuInfo;
    QLabel* m_gpuInfo;
    QListWidget* m_gpus;
    QSpinBox* m_cpuCount;
    QLabel* m_chosen;
    QLabel* m_error;
};

}  // namespace paralab::ui
