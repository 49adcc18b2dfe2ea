// The timeline: a Gantt chart of the last K steps (default 5) of each device, one row
// per device,
// one rectangle per span coloured by its phase family (forward, backward, other compute,
// communication, idle, data wait). Each device row has two lanes: the rank thread's phases
// above, communication below, so that DDP's all-reduce overlapping backward is seen as
// overlap. Hovering a rectangle names its phase, step, duration and bytes.
//
// Only the spans of each device's last K steps are kept (older ones are dropped on arrival;
// per device, because asynchronous strategies let devices drift steps apart): memory is
// bounded by K, whatever the length of the run. Spans arrive in batches (~30 Hz); each batch
// queues one replot, none while the panel is hidden.
//
// "Replay one step" plays the newest step that every device completed in slow motion: its spans
// appear in the order they began, each growing to its end, at 1/slowdown of their real speed
// (the slider: 1× to 1000× slower), so that a step of a few milliseconds can be watched.
#pragma once

#include <QColor>
#include <QElapsedTimer>
#include <QString>
#include <QStringList>
#include <QVector>
#include <QWidget>

#include <map>
#include <vector>

#include "engine/run/trainer.h"
#include "ui/panels/common/plot_export.h"

class QCPTextElement;
class QCustomPlot;
class QLabel;
class QSlider;
class QSpinBox;
class QTimer;
class QToolButton;

namespace paralab::ui {

class GanttPlottable;

class TimelinePanel : public QWidget {
    Q_OBJECT
public:
    explicit TimelinePanel(QWidget* parent = nullptr);

    // One kept span, as drawn.
    struct SpanView {
        QString device, phase;
        qint64 step = 0;
        double t_begin = 0, t_end = 0;  // seconds since training started
        qint64 bytes = 0;
        int row = 0;                    // the device's row (palette order)
        bool commLane = false;          // drawn in the communication lane
        QColor color;
    };

    int stepsShown() const { return m_stepsShown; }
    QVector<qint64> keptSteps() const;  // over all devices, ascending
    QVector<qint64> keptSteps(const QString& device) const;
    QVector<SpanView> spans() const;    // by device, step, then arrival
    QStringList devices() const { return m_devices; }
    // What the hover shows for the span under (time in ms from the window's start, row).
    QString describeAt(double timeMs, double row) const;

    bool exportTo(const QString& path);  // PNG or PDF by the suffix
    // One row per kept span: device, step, phase, family, times, duration, bytes.
    bool exportCsv(const QString& path) const;
    QVector<PlotExport> plotExports();  // the one plot: exportTo and exportCsv

    // Connected to RunController::spansArrived (a plain member: see DeviceDashboard).
    void addSpans(const QVector<config::Span>& spans);

    // The run is a pipeline of `stages` stages running `microBatches` micro-batches per step,
    // each device `chunks` model chunks (interleaved_1f1b; 0 stages: it is not a pipeline), on
    // `devices` devices (a mesh's stages are several devices each; 0: one per stage): the panel
    // then measures the bubble of the steps it keeps and shows it beside the ideal
    // (p − 1) / (v·m + p − 1) (v = chunks; (p − 1) / (m + p − 1) for one chunk).
    void setPipeline(int stages, int microBatches, const QString& schedule, int chunks = 1, int devices = 0);
    // The measured bubble: over the kept steps that every device completed (v·m forwards and
    // v·m backwards each), the share of devices × (first forward → last backward) in which the
    // devices did no forward or backward work. NaN when there is no such step.
    double measuredBubble() const;
    static double idealBubble(int stages, int microBatches, int chunks = 1);
    // zb_h1's with a forward, a B and a W of one unit each: (p − 1)/(3m + p − 1) for m >= p,
    // (2p − m − 1)/(2m + 2p − 1) with fewer micro-batches.
    static double idealZeroBubble(int stages, int microBatches);
    QString bubbleText() const;  // the line under the plot ("" when not a pipeline)
    // The plot's title ("Timeline of the last steps" by default), and whether the "Steps shown"
    // box and the replay's controls are there: the Plan tab shows one predicted step under its
    // own title.
    void setTitle(const QString& title);
    void setStepsControlVisible(bool visible);

    // Slow motion: starts replaying the newest kept step that every device completed (false
    // when there is none); while it plays, the plot shows that step's spans up to the replay's
    // time. advanceReplay moves it on by `stepSeconds` of the step's own time (the panel's timer
    // calls it with the wall time since the last tick over the slowdown); the replay ends, and
    // the plot shows the kept steps again, past the step's last span.
    bool startReplay();
    void stopReplay();
    bool replaying() const { return m_replayStep >= 0; }
    qint64 replayStep() const { return m_replayStep; }
    double replayTime() const { return m_replayTime; }  // seconds from the step's first span
    void advanceReplay(double stepSeconds);
    void setReplaySlowdown(double times);
    double replaySlowdown() const { return m_replaySlowdown; }
    int drawnSpanCount() const;  // the rectangles on the plot now

public slots:
    void clear();
    void setStepsShown(int steps);
    void exportWithDialog();
    void exportCsvWithDialog();

protected:
    void showEvent(QShowEvent* event) override;

private:
    struct Kept {
        QString phase;
        double t_begin, t_end;
        qint64 bytes;
    };
    using Steps = std::map<qint64, std::vector<Kept>>;  // by step
    void dropOldSteps(Steps& steps) const;
    void refresh();  // hands the kept spans to the plot, fits the axes, queues a replot
    SpanView view(const QString& device, qint64 step, const Kept& k) const;
    // The span under (time in ms from the window's start, row); false when there is none.
    bool spanAt(double timeMs, double row, SpanView* found) const;
    void onMouseMove(const QPoint& pos);
    // "step N" over where each step starts, leaving out labels that would overlap the one before
    // (asynchronous strategies start steps of different devices close together).
    void updateStepLabels();
    void drawReplay();  // the replayed step up to m_replayTime
    qint64 newestCompleteStep() const;  // -1: none

    QCustomPlot* m_plot;
    GanttPlottable* m_gantt;
    QLabel* m_hover;
    QLabel* m_bubble;
    int m_pipelineStages = 0, m_microBatches = 0, m_chunks = 1;
    int m_pipelineDevices = 0;  // the devices that run the stages (a mesh: dp · tp per stage)
    QCPTextElement* m_title = nullptr;
    QWidget* m_stepsControl = nullptr;  // the "Steps shown" label and box
    QString m_schedule;
    QSpinBox* m_stepsBox;
    int m_stepsShown = 5;
    QStringList m_devices;              // palette order
    std::map<QString, Steps> m_kept;    // by device: its last m_stepsShown steps
    double m_origin = 0;                // t of the earliest kept span: x = 0 ms
    std::vector<std::pair<qint64, double>> m_stepStarts;  // step, ms: its earliest span
    bool m_dirty = false;
    // Slow motion (startReplay): the step, its time so far and its length, in seconds.
    qint64 m_replayStep = -1;
    double m_replayTime = 0, m_replayLength = 0;
    double m_replaySlowdown = 100;
    QToolButton* m_replayButton;
    QSlider* m_slowdownSlider;
    QLabel* m_slowdownLabel;
    QTimer* m_replayTimer;
    QElapsedTimer m_replayClock;
};

}  // namespace paralab::ui
