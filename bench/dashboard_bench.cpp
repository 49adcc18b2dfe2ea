// Not a test: the figures of docs/benchmarks.md's "Dashboard" section (the goals: the dashboard
// with 8 devices x 100,000 points per series replots in under 16 ms median, and the GUI thread
// never stalls more than 50 ms during a run).
//
//   dashboard_bench replot [--devices 8] [--points 100000] [--replots 50] [--png FILE]
//       The Devices tab's dashboard, shown at the size it has in a 1600x1000 window, filled with
//       `devices` devices x `points` steps (and the steps over all devices): the time to redraw
//       every plot of it (each QCustomPlot replotted and painted at once), and the time of a live
//       tick (a batch of 3 steps per device appended, then the queued replots run), median and
//       p90 over `replots` of each.
//   dashboard_bench lag [--devices 4] [--steps 3000] [--tab devices|timeline|training|runs]
//       A real run started from the window (spirals-mlp, ddp on `devices` virtual CPU devices,
//       `steps` steps) with the tab shown, while a 5 ms timer on the GUI thread measures how late
//       it fires: max, p99, p50 of the lateness, and the longest gaps.
//
// Output: one line of key=value pairs per measurement (and a human-readable line before it).
// Run under QT_QPA_PLATFORM=offscreen, or under a display (xvfb-run -s "-screen 0 1600x1000x24").
#include <qcustomplot.h>
#include <QApplication>
#include <QCommandLineParser>
#include <QElapsedTimer>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTimer>

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

#include "ui/mainwindow/main_window.h"
#include "ui/panels/dashboard/device_dashboard.h"
#include "ui/panels/dashboard/loss_plot_panel.h"
#include "ui/panels/runs/runs_panel.h"
#include "ui/panels/timeline/timeline_panel.h"
#include "ui/session/run_controller.h"

using paralab::config::StepRecord;
using paralab::ui::DeviceDashboard;
using paralab::ui::MainWindow;
using paralab::ui::RunController;

namespace {

// Where the GUI thread's time goes: every event delivered from the event loop (not the ones
// sent from inside another), timed by receiver class and event type.
class TimingApplication : public QApplication {
public:
    using QApplication::QApplication;
    struct Cost {
        double totalMs = 0, maxMs = 0;
        long count = 0;
    };
    std::map<QString, Cost> costs;
    bool timing = false;

    bool notify(QObject* receiver, QEvent* event) override {
        if (!timing || m_depth > 0) return QApplication::notify(receiver, event);
        // Named before delivery: the event may delete its receiver (DeferredDelete).
        const QString key = QStringLiteral("%1 / %2")
                                .arg(QString::fromLatin1(receiver->metaObject()->className()))
                                .arg(static_cast<int>(event->type()));
        ++m_depth;
        QElapsedTimer t;
        t.start();
        const bool result = QApplication::notify(receiver, event);
        const double ms = static_cast<double>(t.nsecsElapsed()) / 1e6;
        --m_depth;
        Cost& c = costs[key];
        c.totalMs += ms;
        c.maxMs = std::max(c.maxMs, ms);
        ++c.count;
        return result;
    }

private:
    int m_depth = 0;
};

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return std::nan("");
    std::sort(v.begin(), v.end());
    const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<size_t>(std::floor(rank));
    const auto hi = static_cast<size_t>(std::ceil(rank));
    return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

// Step `step` of device `d`: a noisy falling loss (noise defeats any curve that happens to be
// cheap to draw), a throughput with jitter, memory that moves a little.
StepRecord record(int d, int64_t step, int devices) {
    StepRecord r;
    r.step = step;
    r.device = d < 0 ? std::string("all") : "cpu:" + std::to_string(d);
    const double noise = std::sin(static_cast<double>(step) * 12.9898 + d * 78.233) * 43758.5453;
    const double u = noise - std::floor(noise);  // a hash in [0, 1)
    r.loss = 2.0 / (1.0 + 0.001 * static_cast<double>(step)) + 0.3 * (u - 0.5) + 0.01 * d;
    r.samples = d < 0 ? 64 * devices : 64;
    r.wall_s = 0.004 * static_cast<double>(step) * (1.0 + 0.05 * u);
    r.compute_ms = 3.0 + u;
    r.comm_ms = 0.5 + 0.1 * d;
    r.idle_ms = 0.2 * u;
    r.data_wait_ms = 0.1;
    for (size_t c = 0; c < paralab::kMemCategoryCount; ++c) {
        r.memory.current[c] = static_cast<int64_t>((c + 1) * 100000 * (d + 2) + (step % 97) * 64);
        r.memory.current_total += r.memory.current[c];
    }
    return r;
}

void feed(DeviceDashboard& dash, int devices, int64_t first, int64_t last) {
    QVector<StepRecord> perDevice, global;
    perDevice.reserve(static_cast<qsizetype>((last - first + 1) * devices));
    for (int64_t s = first; s <= last; ++s) {
        for (int d = 0; d < devices; ++d) perDevice.append(record(d, s, devices));
        global.append(record(-1, s, devices));
    }
    dash.addDeviceSteps(perDevice);
    dash.addSteps(global);
}

// CPU seconds of the calling thread, and of the whole process.
double cpuSeconds(clockid_t clock) {
    timespec ts{};
    clock_gettime(clock, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// The machine's 1-minute load average (other processes competing for the cores).
double loadAverage() {
    double load[1] = {0};
    return getloadavg(load, 1) == 1 ? load[0] : std::nan("");
}

void settle() {
    for (int i = 0; i < 4; ++i) QCoreApplication::processEvents(QEventLoop::AllEvents);
}

int benchReplot(int devices, int points, int replots, const QString& png) {
    MainWindow w;
    w.resize(1600, 1000);
    w.show();
    w.viewTabs()->setCurrentWidget(w.deviceDashboard());
    settle();
    DeviceDashboard& dash = *w.deviceDashboard();
    QElapsedTimer fillTimer;
    fillTimer.start();
    constexpr int kChunk = 10000;  // records arrive in batches; the size does not matter here
    for (int64_t s = 1; s <= points; s += kChunk)
        feed(dash, devices, s, std::min<int64_t>(points, s + kChunk - 1));
    const double fillMs = static_cast<double>(fillTimer.nsecsElapsed()) / 1e6;
    settle();
    const QList<QCustomPlot*> plots = dash.findChildren<QCustomPlot*>();
    std::printf(
        "dashboard %dx%d shown, %d devices x %d points (+ all), %lld plots, filled in %.0f ms\n",
        dash.width(), dash.height(), devices, points, static_cast<long long>(plots.size()), fillMs);

    // Every plot redrawn and painted now, as a queued replot would at the next event loop pass.
    // Wall time, and the GUI thread's CPU time (what the replot costs whatever else runs on
    // the machine: wall time includes the waits for a core when other processes compete).
    std::vector<double> replot, replotCpu;
    for (int i = 0; i < replots + 3; ++i) {
        QElapsedTimer t;
        t.start();
        const double cpu0 = cpuSeconds(CLOCK_THREAD_CPUTIME_ID);
        for (QCustomPlot* p : plots) p->replot(QCustomPlot::rpImmediateRefresh);
        if (i < 3) continue;  // warm-ups
        replot.push_back(static_cast<double>(t.nsecsElapsed()) / 1e6);
        replotCpu.push_back(1e3 * (cpuSeconds(CLOCK_THREAD_CPUTIME_ID) - cpu0));
    }
    // A live tick: RunController's 30 Hz batch (3 steps per device) appended, and the replot it
    // asks for, whenever the dashboard runs it (it paces replots to their cost): the append's
    // time plus the replot's, from QCustomPlot's beforeReplot to afterReplot of each plot.
    double drawingMs = 0;
    int replotted = 0;
    QElapsedTimer drawing;
    for (QCustomPlot* p : plots) {
        QObject::connect(p, &QCustomPlot::beforeReplot, [&] { drawing.start(); });
        QObject::connect(p, &QCustomPlot::afterReplot, [&] {
            drawingMs += static_cast<double>(drawing.nsecsElapsed()) / 1e6;
            ++replotted;
        });
    }
    std::vector<double> tick;
    int64_t next = points + 1;
    for (int i = 0; i < replots; ++i) {
        drawingMs = 0;
        replotted = 0;
        QElapsedTimer t;
        t.start();
        feed(dash, devices, next, next + 2);
        const double appendMs = static_cast<double>(t.nsecsElapsed()) / 1e6;
        next += 3;
        QElapsedTimer limit;
        limit.start();
        while (replotted < plots.size() && limit.elapsed() < 2000)
            QCoreApplication::processEvents(QEventLoop::WaitForMoreEvents, 5);
        tick.push_back(appendMs + drawingMs);
    }
    std::printf("replot all plots: median %.1f ms, p90 %.1f ms, min %.1f, max %.1f (n=%zu)\n",
                percentile(replot, 50), percentile(replot, 90), percentile(replot, 0),
                percentile(replot, 100), replot.size());
    std::printf(
        "live tick (append 3 steps x %d devices, then its replot): median %.1f ms, p90 %.1f ms, "
        "max "
        "%.1f\n",
        devices, percentile(tick, 50), percentile(tick, 90), percentile(tick, 100));
    std::printf(
        "RESULT bench=replot platform=%s devices=%d points=%d replot_median_ms=%.2f "
        "replot_p90_ms=%.2f replot_cpu_median_ms=%.2f replot_cpu_p90_ms=%.2f "
        "tick_median_ms=%.2f tick_p90_ms=%.2f fill_ms=%.0f load=%.2f\n",
        qPrintable(QGuiApplication::platformName()), devices, points, percentile(replot, 50),
        percentile(replot, 90), percentile(replotCpu, 50), percentile(replotCpu, 90),
        percentile(tick, 50), percentile(tick, 90), fillMs, loadAverage());
    if (!png.isEmpty() && !dash.grab().save(png))
        std::fprintf(stderr, "cannot write %s\n", qPrintable(png));
    for (QCustomPlot* p : plots)  // which plot costs what, once
    {
        QElapsedTimer t;
        t.start();
        for (int i = 0; i < 5; ++i) p->replot(QCustomPlot::rpImmediateRefresh);
        auto* title = p->plotLayout()->elementCount() > 0
                          ? qobject_cast<QCPTextElement*>(p->plotLayout()->element(0, 0))
                          : nullptr;
        std::printf("  %-40s %.1f ms\n", title ? qPrintable(title->text()) : "(untitled)",
                    static_cast<double>(t.nsecsElapsed()) / 5e6);
    }
    return 0;
}

int benchLag(int devices, int steps, const QString& tab) {
    MainWindow w;
    const QString opened =
        w.openExperiment(QStringLiteral(":/examples/spirals-mlp.paralab.json"), false);
    if (!opened.isEmpty()) {
        std::fprintf(stderr, "%s\n", qPrintable(opened));
        return 1;
    }
    auto e = *w.experiment();
    e.devices.clear();
    for (int d = 0; d < devices; ++d) e.devices.push_back("cpu:" + std::to_string(d));
    e.strategy.type = devices > 1 ? "ddp" : "single";
    e.train.epochs = 100000;
    e.train.max_steps = steps;
    w.setExperiment(e);
    w.resize(1600, 1000);
    w.show();
    QWidget* page = tab == QLatin1String("timeline")   ? static_cast<QWidget*>(w.timeline())
                    : tab == QLatin1String("training") ? static_cast<QWidget*>(w.plot())
                    : tab == QLatin1String("runs")     ? static_cast<QWidget*>(w.runsPanel())
                                                       : static_cast<QWidget*>(w.deviceDashboard());
    w.viewTabs()->setCurrentWidget(page);
    settle();

    // The probe: a 5 ms precise timer; its lateness is how long the GUI thread was busy past the
    // moment it should have fired.
    std::vector<double> lag;
    std::vector<std::pair<double, double>> stalls;  // (ms since Start, lag ms) of lags over 16 ms
    QElapsedTimer clock;
    clock.start();
    qint64 last = -1;
    QTimer probe;
    probe.setTimerType(Qt::PreciseTimer);
    probe.setInterval(5);
    QObject::connect(&probe, &QTimer::timeout, [&] {
        const qint64 now = clock.nsecsElapsed();
        if (last >= 0) {
            lag.push_back(std::max(0.0, static_cast<double>(now - last) / 1e6 - 5.0));
            if (lag.back() > 16) stalls.emplace_back(static_cast<double>(last) / 1e6, lag.back());
        }
        last = now;
    });
    double firstStepMs = -1, finishedMs = -1;
    QObject::connect(w.controller(), &RunController::stepsArrived, [&] {
        if (firstStepMs < 0) firstStepMs = static_cast<double>(clock.nsecsElapsed()) / 1e6;
    });
    QEventLoop loop;
    bool done = false;
    QString status;
    qint64 arrived = 0;
    QObject::connect(w.controller(), &RunController::deviceStepsArrived,
                     [&](const QVector<StepRecord>& s) { arrived += s.size(); });
    QObject::connect(w.controller(), &RunController::finished,
                     [&](const paralab::config::RunSummary& s) {
                         status = QString::fromStdString(s.status);
                         finishedMs = static_cast<double>(clock.nsecsElapsed()) / 1e6;
                         done = true;
                         loop.quit();
                     });
    QObject::connect(w.controller(), &RunController::failed, [&](const QString& m) {
        status = QStringLiteral("failed: ") + m;
        done = true;
        loop.quit();
    });
    probe.start();
    QElapsedTimer wall;
    wall.start();
    const double startMs = static_cast<double>(clock.nsecsElapsed()) / 1e6;
    const double guiCpu0 = cpuSeconds(CLOCK_THREAD_CPUTIME_ID),
                 processCpu0 = cpuSeconds(CLOCK_PROCESS_CPUTIME_ID);
    auto* app = static_cast<TimingApplication*>(QCoreApplication::instance());
    app->costs.clear();
    app->timing = true;
    w.startRun();
    if (!done) loop.exec();
    probe.stop();
    app->timing = false;
    const double seconds = static_cast<double>(wall.nsecsElapsed()) / 1e9;
    const double guiCpu = cpuSeconds(CLOCK_THREAD_CPUTIME_ID) - guiCpu0;
    const double processCpu = cpuSeconds(CLOCK_PROCESS_CPUTIME_ID) - processCpu0;
    std::printf(
        "run %s: %d devices ddp, %d steps in %.1f s, %lld device records drawn on the %s tab\n",
        qPrintable(status), devices, steps, seconds, static_cast<long long>(arrived),
        qPrintable(tab));
    std::printf(
        "GUI-thread lag of a 5 ms timer: max %.1f ms, p99 %.1f ms, p50 %.2f ms over %zu ticks; >16 "
        "ms: %lld, >50 ms: %lld\n",
        percentile(lag, 100), percentile(lag, 99), percentile(lag, 50), lag.size(),
        static_cast<long long>(
            std::count_if(lag.begin(), lag.end(), [](double v) { return v > 16; })),
        static_cast<long long>(
            std::count_if(lag.begin(), lag.end(), [](double v) { return v > 50; })));
    // A GUI thread busy for a small part of the run yet late: the CPU was given to others.
    std::printf(
        "CPU during the run: GUI thread %.1f s (%.0f %% of the wall time), whole process %.1f s "
        "(%.2f cores)\n",
        guiCpu, 100 * guiCpu / seconds, processCpu, processCpu / seconds);
    // The events that took the GUI thread's time (receiver class / QEvent::Type).
    std::vector<std::pair<QString, TimingApplication::Cost>> costs(app->costs.begin(),
                                                                   app->costs.end());
    std::sort(costs.begin(), costs.end(),
              [](const auto& a, const auto& b) { return a.second.totalMs > b.second.totalMs; });
    std::printf("GUI-thread time by event (receiver / QEvent type):\n");
    for (size_t i = 0; i < std::min<size_t>(costs.size(), 8); ++i)
        std::printf("  %-45s %7.0f ms in %6ld events, longest %.1f ms\n",
                    qPrintable(costs[i].first), costs[i].second.totalMs, costs[i].second.count,
                    costs[i].second.maxMs);
    // Where the longest stalls were: before the first steps arrived (the run starting), during
    // the run, or at its end.
    std::sort(stalls.begin(), stalls.end(),
              [](const auto& a, const auto& b) { return a.second > b.second; });
    std::printf("first steps drawn %.0f ms after Start, finished at %.0f ms; longest stalls:",
                firstStepMs - startMs, finishedMs - startMs);
    for (size_t i = 0; i < std::min<size_t>(stalls.size(), 6); ++i)
        std::printf(" %.0f ms at %.0f ms;", stalls[i].second, stalls[i].first - startMs);
    std::printf("\n");
    std::printf(
        "RESULT bench=lag platform=%s tab=%s devices=%d steps=%d seconds=%.1f lag_max_ms=%.2f "
        "lag_p99_ms=%.2f "
        "lag_p50_ms=%.2f ticks=%zu gui_cpu_pct=%.0f load=%.2f\n",
        qPrintable(QGuiApplication::platformName()), qPrintable(tab), devices, steps, seconds,
        percentile(lag, 100), percentile(lag, 99), percentile(lag, 50), lag.size(),
        100 * guiCpu / seconds, loadAverage());
    return status == QLatin1String("finished") ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    // Runs go to a store in a temporary folder, never into the user's own.
    QTemporaryDir storeDir;
    qputenv("XDG_DATA_HOME", storeDir.path().toUtf8());
    TimingApplication app(argc, argv);
    QCommandLineParser parser;
    parser.setApplicationDescription(
        QStringLiteral("ParaLab dashboard benchmark (docs/benchmarks.md, Dashboard)"));
    parser.addHelpOption();
    parser.addPositionalArgument(QStringLiteral("what"), QStringLiteral("replot, lag, or all"));
    QCommandLineOption devicesOpt(QStringLiteral("devices"), QStringLiteral("devices"),
                                  QStringLiteral("n"));
    QCommandLineOption pointsOpt(QStringLiteral("points"),
                                 QStringLiteral("points per series (replot)"), QStringLiteral("n"),
                                 QStringLiteral("100000"));
    QCommandLineOption replotsOpt(QStringLiteral("replots"), QStringLiteral("replots measured"),
                                  QStringLiteral("n"), QStringLiteral("50"));
    QCommandLineOption stepsOpt(QStringLiteral("steps"), QStringLiteral("steps of the run (lag)"),
                                QStringLiteral("n"), QStringLiteral("3000"));
    QCommandLineOption tabOpt(QStringLiteral("tab"),
                              QStringLiteral("tab shown during the run (lag)"),
                              QStringLiteral("name"), QStringLiteral("devices"));
    QCommandLineOption pngOpt(QStringLiteral("png"),
                              QStringLiteral("save the filled dashboard (replot)"),
                              QStringLiteral("file"));
    parser.addOptions({devicesOpt, pointsOpt, replotsOpt, stepsOpt, tabOpt, pngOpt});
    parser.process(app);
    const QString what = parser.positionalArguments().value(0, QStringLiteral("all"));
    int rc = 0;
    if (what == QLatin1String("replot") || what == QLatin1String("all"))
        rc |= benchReplot(parser.isSet(devicesOpt) ? parser.value(devicesOpt).toInt() : 8,
                          parser.value(pointsOpt).toInt(),
                          std::max(1, parser.value(replotsOpt).toInt()), parser.value(pngOpt));
    if (what == QLatin1String("lag") || what == QLatin1String("all"))
        rc |= benchLag(parser.isSet(devicesOpt) ? parser.value(devicesOpt).toInt() : 4,
                       parser.value(stepsOpt).toInt(), parser.value(tabOpt));
    return rc;
}
