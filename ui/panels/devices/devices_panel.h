// The Devices panel: the GPUs found (name, memory, compute capability) and the virtual CPU
// devices (cpu:0 .. cpu:N-1, each a rank thread with its own memory accounting); picks the
// run's devices. Discovery runs on a worker thread (CUDA's first call can take seconds).
#pragma once

#include <QWidget>

#include <vector>

#include "engine/device/device.h"
#include "engine/run/experiment.h"

class QLabel;
class QListWidget;
class QSpinBox;

namespace paralab::ui {

class DevicesPanel : public QWidget {
    Q_OBJECT
public:
    explicit DevicesPanel(QWidget* parent = nullptr);

    void setExperiment(const run::Experiment& e);
    // For tests: the virtual CPU devices' count box, and whether discovery has answered.
    QSpinBox* cpuCountBox() const { return m_cpuCount; }
    bool discovered() const { return m_discovered; }
    QString errorText() const;

signals:
    void experimentEdited(const paralab::run::Experiment& e);
    void devicesDiscovered();

private:
    void showDiscovered(const std::vector<DeviceInfo>& devices);
    void edited();

    run::Experiment m_experiment;
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
