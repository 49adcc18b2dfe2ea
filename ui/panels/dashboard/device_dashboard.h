// Every device live (the dashboard): loss per device and over all devices with
// TensorBoard's debiased EMA smoothing, throughput per device and in total, memory per device
// stacked by category (at the latest step) and over time, and where each device's step time
// goes (compute / communication / idle / data wait, mean over the last N steps).
//
// Records arrive in batches from RunController (~30 Hz); each batch appends to the curves and
// asks for a replot, and none while the dashboard is hidden (a hidden tab costs nothing to the
// GUI thread; it is drawn when shown). Replots are paced to their cost (ReplotPacer), and the
// curves are DecimatedGraphs: a replot reads one or two points per pixel column, whatever the
// length of the run (docs/benchmarks.md, Dashboard). A device keeps its palette colour
// (ui/panels/common/palette.h) in every plot, the timeline's included.
#pragma once

#include <QStringList>
#include <QVector>
#include <QWidget>

#include <array>
#include <memory>
#include <vector>

#include "engine/run/trainer.h"
#include "ui/panels/common/plot_export.h"
#include "ui/panels/common/replot_pacer.h"

class QCheckBox;
class QComboBox;
class QCustomPlot;
class QLabel;
class QScrollArea;
class QSlider;
class QSpinBox;

namespace paralab::ui {

class ExpertRoutingPlot;

class DeviceDashboard : public QWidget {
    Q_OBJECT
public:
    enum class XAxis { Step, WallTime };
    // The step-time breakdown's parts, in stacking order.
    enum class TimePart { Compute, Communication, Idle, DataWait };

    explicit DeviceDashboard(QWidget* parent = nullptr);
    ~DeviceDashboard() override;

    // The devices seen so far, in palette order ("all", the steps over all devices, is not one).
    QStringList devices() const { return m_devices; }
    QColor colorOf(const QString& device) const;
    // Points of a device's curves; `device` "all" for the global loss and the total throughput.
    int lossPointCount(const QString& device) const;
    int throughputPointCount(const QString& device) const;
    int memoryPointCount(const QString& device) const;
    // The i-th point of the loss curve, raw or smoothed (NaN when there is none).
    double lossAt(const QString& device, int i, bool smoothed) const;
    // Bytes of `category` (MemCategory order) on the device at its latest step, as stacked.
    double memoryBar(const QString& device, int category) const;
    // Mean ms per step of `part` over the device's last breakdownWindow() steps.
    double breakdownMs(const QString& device, TimePart part) const;
    int recordCount() const;  // records kept (the CSV's rows)

    double smoothing() const { return m_smoothing; }
    XAxis xAxis() const { return m_xAxis; }
    bool logarithmicLoss() const { return m_logLoss; }
    int breakdownWindow() const { return m_breakdownWindow; }

    // All plots in one picture, laid out as on screen: PNG or PDF by the file's suffix. False
    // when the file cannot be written.
    bool exportTo(const QString& path);
    // One row per record, devices in palette order then "all", each by step.
    bool exportCsv(const QString& path) const;
    // Each plot on its own (its context menu, File ▸ Export): the picture, and the numbers it
    // shows as CSV (taken from the records, whatever the plot draws): loss per device, raw and
    // smoothed; throughput, raw and smoothed; memory by category at the latest step; memory in
    // use over time; the step-time breakdown. Then all plots at once (exportTo, exportCsv).
    QVector<PlotExport> plotExports();

    // Connected to RunController's batches with function-pointer connects (not moc slots: moc
    // would instantiate the records' metatypes before run_controller.h declares them).
    void addDeviceSteps(const QVector<config::StepRecord>& steps);
    void addSteps(const QVector<config::StepRecord>& steps);  // over all devices

    // How many plots side by side: 3 on a wide tab, 2 or 1 as it narrows (the plots then
    // scroll vertically).
    int plotColumns() const;
    // A mixture-of-experts run's tokens per expert at the latest step (hidden without one).
    ExpertRoutingPlot* expertRouting() const { return m_experts; }

public slots:
    void clear();
    void setSmoothing(double weight);  // 0 (raw) .. 0.99
    void setXAxis(paralab::ui::DeviceDashboard::XAxis axis);
    void setLogarithmicLoss(bool on);
    void setBreakdownWindow(int steps);
    void fitToData();
    void exportWithDialog();
    void exportCsvWithDialog();

protected:
    void resizeEvent(QResizeEvent* event) override;
    void changeEvent(QEvent* event) override;

private:
    struct Series;
    struct Plots;

    int columnsFor(int width) const;
    void reflow(int columns);

    Series* series(const QString& device) const;  // nullptr when not seen
    Series& seriesFor(const QString& device);      // creates the device's curves
    void append(Series& s, const config::StepRecord& r);
    void rebuildCurves();  // after a change of smoothing or x axis
    void recolor();
    void updateBars();
    void updateRanges();
    void replotAll();  // now: after a setting changed
    void showPlotMenu(QCustomPlot* plot, const QPoint& pos);
    // Mean ms per step of each part over each device's last breakdownWindow() steps.
    std::vector<std::array<double, 4>> breakdownMeans() const;
    bool writeLossCsv(const QString& path) const;
    bool writeThroughputCsv(const QString& path) const;
    bool writeMemoryBarsCsv(const QString& path) const;
    bool writeMemoryTimeCsv(const QString& path) const;
    bool writeBreakdownCsv(const QString& path) const;

    std::unique_ptr<Plots> m_plots;
    QWidget* m_plotArea;
    QScrollArea* m_scroll = nullptr;
    int m_columns = 0;
    QComboBox* m_xAxisBox;
    QCheckBox* m_logBox;
    QSlider* m_smoothingSlider;
    QLabel* m_smoothingLabel;
    QSpinBox* m_windowBox;

    QStringList m_devices;                        // palette order
    std::vector<std::unique_ptr<Series>> m_series;  // in m_devices order
    std::unique_ptr<Series> m_global;             // the steps over all devices
    double m_smoothing = 0.6;  // TensorBoard's default
    XAxis m_xAxis = XAxis::Step;
    bool m_logLoss = false;
    int m_breakdownWindow = 20;
    ReplotPacer* m_pacer;
    ExpertRoutingPlot* m_experts;
};

}  // namespace paralab::ui
