// The per-device dashboard and the timeline, offscreen: synthetic records of three devices give
// one curve per device with every point, TensorBoard's smoothing starts at the raw value, the
// memory stacks add up to each device's total, the timeline keeps only the last K steps and
// colours spans by phase family, exports write files, a real 2-device DDP run started from the
// window fills both, every plot of the window exports as PNG, PDF and CSV, a decimated curve
// keeps every pixel column's extremes, and a hidden tab is not redrawn. A text model's
// evaluations show their generated text under the Training plot (the latest one), from a real run
// too; other runs show none.
#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QMenu>
#include <QPlainTextEdit>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTextBlock>
#include <QtTest>

#include <cmath>
#include <limits>
#include <qcustomplot.h>

#include "engine/store/run_store.h"
#include "engine/strategy/registry.h"
#include "ui/mainwindow/main_window.h"
#include "ui/panels/common/palette.h"
#include "ui/panels/dashboard/decimated_graph.h"
#include "ui/panels/dashboard/device_dashboard.h"
#include "ui/panels/dashboard/expert_routing_plot.h"
#include "ui/panels/dashboard/loss_plot_panel.h"
#include "ui/panels/dashboard/text_sample_panel.h"
#include "ui/panels/runs/runs_panel.h"
#include "ui/panels/timeline/timeline_panel.h"
#include "ui/session/run_controller.h"

using paralab::config::Span;
using paralab::config::StepRecord;
using paralab::ui::DecimatedGraph;
using paralab::ui::DeviceDashboard;
using paralab::ui::PlotExport;
using paralab::ui::MainWindow;
using paralab::ui::RunController;
using paralab::ui::TimelinePanel;
namespace palette = paralab::ui::palette;
using Family = palette::PhaseFamily;

namespace {

const QStringList kDevices = {"cpu:0", "cpu:1", "cpu:2"};

double lossOf(int device, int64_t step) { return 2.0 / (1.0 + 0.1 * static_cast<double>(step)) + 0.01 * device; }

// Step `step` of `device`: 32 samples in (10 + device) ms, memory growing with the device.
StepRecord deviceRecord(int device, int64_t step) {
    StepRecord r;
    r.step = step;
    r.device = kDevices[device].toStdString();
    r.loss = lossOf(device, step);
    r.samples = 32;
    r.wall_s = 0.001 * static_cast<double>(step) * (10 + device);
    r.compute_ms = static_cast<double>(step);
    r.comm_ms = 2.0 + device;
    r.idle_ms = 0.5;
    r.data_wait_ms = 0.25;
    for (size_t c = 0; c < paralab::kMemCategoryCount; ++c) {
        r.memory.current[c] = static_cast<int64_t>((c + 1) * 1000 * (device + 1) + step);
        r.memory.current_total += r.memory.current[c];
    }
    return r;
}

// Steps first..last of every device, in batches of 10 steps, devices out of order in a batch.
void feed(DeviceDashboard& d, int64_t first, int64_t last) {
    QVector<StepRecord> batch;
    for (int64_t s = first; s <= last; ++s) {
        for (int device : {2, 0, 1}) batch.append(deviceRecord(device, s));
        if (s % 10 == 0 || s == last) {
            d.addDeviceSteps(batch);
            batch.clear();
        }
    }
}

QVector<StepRecord> globalRecords(int64_t first, int64_t last) {
    QVector<StepRecord> out;
    for (int64_t s = first; s <= last; ++s) {
        StepRecord r = deviceRecord(0, s);
        r.device = "all";
        r.samples = 96;
        r.wall_s = 0.012 * static_cast<double>(s);
        out.append(r);
    }
    return out;
}

Span span(const QString& device, int64_t step, const QString& phase, double begin, double end, int64_t bytes = 0) {
    Span s;
    s.device = device.toStdString();
    s.step = step;
    s.phase = phase.toStdString();
    s.t_begin = begin;
    s.t_end = end;
    s.bytes = bytes;
    return s;
}

// A DDP-like step on each device: data wait, forward, backward with an overlapping all-reduce,
// a wait for it, the optimizer.
QVector<Span> ddpSpans(int64_t first, int64_t last) {
    QVector<Span> out;
    for (int64_t s = first; s <= last; ++s) {
        for (int d = 0; d < kDevices.size(); ++d) {
            const double t = 0.01 * static_cast<double>(s) + 0.0001 * d;
            out.append(span(kDevices[d], s, "data_wait", t, t + 0.0005));
            out.append(span(kDevices[d], s, "forward", t + 0.0005, t + 0.003));
            out.append(span(kDevices[d], s, "backward", t + 0.003, t + 0.007));
            out.append(span(kDevices[d], s, "all_reduce_bucket", t + 0.005, t + 0.008, 4096));
            out.append(span(kDevices[d], s, "wait_all_reduce", t + 0.007, t + 0.008));
            out.append(span(kDevices[d], s, "optimizer", t + 0.008, t + 0.009));
        }
    }
    return out;
}

// Fields of one CSV line, quotes (RFC 4180) taken off.
QStringList csvFields(const QString& line) {
    QStringList fields;
    QString field;
    bool quoted = false;
    for (qsizetype i = 0; i < line.size(); ++i) {
        const QChar c = line[i];
        if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') field += c, ++i;
        else if (c == '"') quoted = !quoted;
        else if (c == ',' && !quoted) fields << field, field.clear();
        else field += c;
    }
    fields << field;
    return fields;
}

QStringList readLines(const QString& path) {
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly | QIODevice::Text)) return {};
    return QString::fromUtf8(f.readAll()).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
}

}  // namespace

class TestDashboard : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void oneCurvePerDeviceWithEveryPoint();
    void expertRoutingShowsTheLatestStepsTokens();
    void deviceWithoutLossHasNoLossPoints();
    void smoothingStartsAtTheRawValue_data();
    void smoothingStartsAtTheRawValue();
    void xAxisSwitchKeepsThePoints();
    void trainingPlotByWallTime();
    void trainingPlotShowsAuxiliaryLosses();
    void memoryStacksAddUpToTheDeviceTotal();
    void memoryShowsTheStepsPeak();
    void breakdownIsTheMeanOfTheLastSteps();
    void phaseFamilies_data();
    void phaseFamilies();
    void timelineKeepsTheLastSteps();
    void timelineReplaysOneStepInOrder();
    void timelineColoursByPhaseFamily();
    void timelineDescribesTheSpanUnderThePointer();
    void timelineMeasuresThePipelineBubble();
    void timelineMeasuresAnInterleavedBubble();
    void timelineMeasuresAZeroBubble();
    void realPipelineRunShowsItsBubble();
    void csvHasAHeaderAndOneRowPerRecord();
    void plotsExportAsPngAndPdf();
    void realDdpRunFillsBothDevices();
    void everyPlotOfTheWindowExports();
    void decimatedCurveKeepsEachColumnsExtremes_data();
    void decimatedCurveKeepsEachColumnsExtremes();
    void decimatedCurveZoomedInReadsEveryPoint();
    void hiddenPlotsAreNotRedrawn();
    void textSampleShowsTheLatestEvaluation();
    void textRunShowsItsSampleInTheTrainingTab();
    void screenshots();
};

void TestDashboard::initTestCase() {
    // The store exists before the first window opens, as it does after a user's first run: a
    // brand-new store opened at the same moment by the runs tab's loader and by the run's thread
    // can fail the run with "database is locked" (SQLite does not wait for a lock when switching
    // a new file to WAL). Not what these tests are about.
    paralab::store::RunStore db(paralab::store::RunStore::default_path());
}

// A mixture-of-experts run: the Devices tab shows each layer's tokens per expert at the latest
// step that routed, with its auxiliary losses and drops; hidden for other runs and after clear.
void TestDashboard::expertRoutingShowsTheLatestStepsTokens() {
    DeviceDashboard d;
    d.addSteps(globalRecords(1, 3));
    QVERIFY(d.expertRouting()->isHidden());
    QVector<paralab::config::StepRecord> steps = globalRecords(4, 5);
    for (auto& r : steps) {
        paralab::config::MoERecord a, b;
        a.layer = "model.layers[1] (transformer_block 1 of 2).mlp.moe";
        b.layer = "model.layers[1] (transformer_block 2 of 2).mlp.moe";
        a.tokens_per_expert = {r.step, 2, 3};
        b.tokens_per_expert = {7, 0, 1};
        a.aux_loss = 0.25, b.aux_loss = 0.5, b.router_z_loss = 0.25;
        b.dropped_tokens = 4;
        r.moe = {a, b};
    }
    d.addSteps(steps);
    QVERIFY(!d.expertRouting()->isHidden());
    QCOMPARE(d.expertRouting()->layerCount(), 2);
    QCOMPARE(d.expertRouting()->tokens(0), (QVector<double>{5, 2, 3}));
    QCOMPARE(d.expertRouting()->tokens(1), (QVector<double>{7, 0, 1}));
    QVERIFY2(d.expertRouting()->title().contains(QStringLiteral("step 5")), qPrintable(d.expertRouting()->title()));
    QVERIFY2(d.expertRouting()->title().contains(QStringLiteral("auxiliary losses 1 ")), qPrintable(d.expertRouting()->title()));
    QVERIFY2(d.expertRouting()->title().contains(QStringLiteral("dropped 4")), qPrintable(d.expertRouting()->title()));
    d.clear();
    QVERIFY(d.expertRouting()->isHidden());
    QCOMPARE(d.expertRouting()->layerCount(), 0);
}

void TestDashboard::oneCurvePerDeviceWithEveryPoint() {
    DeviceDashboard d;
    feed(d, 1, 47);
    d.addSteps(globalRecords(1, 47));
    QCOMPARE(d.devices(), kDevices);  // palette order, whatever the arrival order
    for (int i = 0; i < kDevices.size(); ++i) {
        QCOMPARE(d.lossPointCount(kDevices[i]), 47);
        QCOMPARE(d.throughputPointCount(kDevices[i]), 47);
        QCOMPARE(d.memoryPointCount(kDevices[i]), 47);
        QCOMPARE(d.colorOf(kDevices[i]), palette::deviceColor(i));
    }
    QCOMPARE(d.lossPointCount("all"), 47);
    QCOMPARE(d.throughputPointCount("all"), 47);
    QCOMPARE(d.lossPointCount("cpu:7"), 0);
    QCOMPARE(d.recordCount(), 4 * 47);
    QCOMPARE(d.lossAt("cpu:1", 46, false), lossOf(1, 47));
    d.clear();
    QVERIFY(d.devices().isEmpty());
    QCOMPARE(d.lossPointCount("cpu:0"), 0);
    QCOMPARE(d.lossPointCount("all"), 0);
    QCOMPARE(d.recordCount(), 0);
}

void TestDashboard::deviceWithoutLossHasNoLossPoints() {
    // The first stages of a pipeline compute no loss: NaN, not a point at 0.
    DeviceDashboard d;
    QVector<StepRecord> batch;
    for (int64_t s = 1; s <= 12; ++s) {
        StepRecord first = deviceRecord(0, s);
        first.loss = std::numeric_limits<double>::quiet_NaN();
        batch << first << deviceRecord(1, s);
    }
    d.addDeviceSteps(batch);
    QCOMPARE(d.lossPointCount("cpu:0"), 0);
    QCOMPARE(d.lossPointCount("cpu:1"), 12);
    QCOMPARE(d.memoryPointCount("cpu:0"), 12);
    QCOMPARE(d.throughputPointCount("cpu:0"), 12);
}

void TestDashboard::smoothingStartsAtTheRawValue_data() {
    QTest::addColumn<double>("weight");
    QTest::newRow("raw") << 0.0;
    QTest::newRow("tensorboard default") << 0.6;
    QTest::newRow("heaviest") << 0.99;
}

void TestDashboard::smoothingStartsAtTheRawValue() {
    QFETCH(double, weight);
    DeviceDashboard d;
    d.setSmoothing(weight);
    QCOMPARE(d.smoothing(), weight);
    feed(d, 1, 30);
    for (const QString& device : kDevices) {
        const double v1 = d.lossAt(device, 0, false), v2 = d.lossAt(device, 1, false);
        QCOMPARE(d.lossAt(device, 0, true), v1);  // debiased: not (1 - w) * v1
        // The second point weighs the first w times as much as itself: (w v1 + v2) / (w + 1).
        QVERIFY(std::abs(d.lossAt(device, 1, true) - (weight * v1 + v2) / (weight + 1)) < 1e-12);
    }
    // Moving the slider recomputes every curve from its raw points.
    d.setSmoothing(0.0);
    for (const QString& device : kDevices)
        for (int i = 0; i < 30; ++i) QCOMPARE(d.lossAt(device, i, true), d.lossAt(device, i, false));
}

void TestDashboard::xAxisSwitchKeepsThePoints() {
    DeviceDashboard d;
    feed(d, 1, 25);
    d.setXAxis(DeviceDashboard::XAxis::WallTime);
    QCOMPARE(d.xAxis(), DeviceDashboard::XAxis::WallTime);
    for (const QString& device : kDevices) QCOMPARE(d.lossPointCount(device), 25);
    feed(d, 26, 30);  // appended by wall time now
    for (const QString& device : kDevices) QCOMPARE(d.memoryPointCount(device), 30);
    d.setXAxis(DeviceDashboard::XAxis::Step);
    d.setLogarithmicLoss(true);
    QVERIFY(d.logarithmicLoss());
    for (const QString& device : kDevices) QCOMPARE(d.lossPointCount(device), 30);
}

// The Training tab's plot by wall time: every point at its step's wall time, an evaluation at
// the time of the step it followed (also when it arrived first), a diverged step's NaN kept out
// of the smoothed curve, the learning-rate strip on the same x, and the controls in step with
// the slots.
// A mixture of experts' auxiliary losses are their own series in the Training tab: per step the
// sum over its layers of the load-balancing and z-losses (what they added to the loss), in the
// legend only for a model that has them, and placed again by wall time.
void TestDashboard::trainingPlotShowsAuxiliaryLosses() {
    paralab::ui::LossPlotPanel panel;
    auto* plot = panel.findChild<QCustomPlot*>();
    QVERIFY(plot);
    QCPGraph* aux = nullptr;
    for (int i = 0; i < plot->graphCount(); ++i)
        if (plot->graph(i)->name().startsWith("auxiliary losses")) aux = plot->graph(i);
    QVERIFY(aux);
    panel.addSteps(globalRecords(1, 3));  // a model without experts
    QCOMPARE(panel.auxPointCount(), 0);
    QVERIFY(!plot->legend->hasItemWithPlottable(aux));
    panel.clear();
    QVector<paralab::config::StepRecord> steps = globalRecords(1, 4);
    for (auto& r : steps) {
        paralab::config::MoERecord a, b;
        a.layer = "model.layers[1] (transformer_block 1 of 2).mlp.moe";
        b.layer = "model.layers[1] (transformer_block 2 of 2).mlp.moe";
        a.aux_loss = 0.01 * static_cast<double>(r.step);
        a.router_z_loss = 0.001;
        b.aux_loss = 0.02;
        r.moe = {a, b};
    }
    panel.addSteps(steps);
    QCOMPARE(panel.auxPointCount(), 4);
    QVERIFY(plot->legend->hasItemWithPlottable(aux));
    QVERIFY(std::abs(aux->data()->at(2)->value - (0.03 + 0.001 + 0.02)) < 1e-12);
    QCOMPARE(aux->data()->at(2)->key, 3.0);
    panel.setXAxis(paralab::ui::LossPlotPanel::XAxis::WallTime);
    QCOMPARE(panel.auxPointCount(), 4);
    QVERIFY(std::abs(aux->data()->at(2)->key - 0.036) < 1e-12);
    panel.clear();
    QCOMPARE(panel.auxPointCount(), 0);
    QVERIFY(!plot->legend->hasItemWithPlottable(aux));
}

void TestDashboard::trainingPlotByWallTime() {
    paralab::ui::LossPlotPanel panel;
    auto* plot = panel.findChild<QCustomPlot*>();
    QVERIFY(plot);
    auto graph = [&](const QString& name) -> QCPGraph* {
        for (int i = 0; i < plot->graphCount(); ++i)
            if (plot->graph(i)->name() == name) return plot->graph(i);
        return nullptr;
    };
    QCPGraph* raw = graph("training loss (per step)");
    QCPGraph* smooth = graph("training loss (smoothed)");
    QCPGraph* test = graph("test loss");
    QCPGraph* accuracy = graph("test accuracy (right axis)");
    QCPGraph* lr = graph("learning rate");
    QVERIFY(raw && smooth && test && accuracy && lr);
    QVERIFY(lr->keyAxis()->axisRect() != raw->keyAxis()->axisRect());  // its own strip
    auto keys = [](QCPGraph* g) {
        QVector<double> out;
        for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it) out.append(it->key);
        return out;
    };
    auto eval = [](int64_t step, double loss, double acc) {
        paralab::config::EvalResult e;
        e.step = step;
        e.loss = loss;
        e.accuracy = acc;
        return e;
    };
    auto records = globalRecords(1, 50);  // wall time 0.012 s a step
    records.back().loss = std::numeric_limits<double>::quiet_NaN();  // a diverged last step
    for (auto& r : records) r.lr = 0.05 * (1.0 - static_cast<double>(r.step) / 100.0);  // decaying
    panel.addSteps(records);
    QCOMPARE(lr->dataCount(), 50);
    QCOMPARE(lr->data()->constBegin()->key, 1.0);
    QCOMPARE(lr->data()->constBegin()->value, 0.05 * 0.99);
    QCOMPARE(lr->valueAxis()->range().upper, 0.05 * 0.99 * 1.1);  // the largest rate, and room
    panel.addEval(eval(50, 0.4, 0.8));
    QCOMPARE(keys(test), QVector<double>{50});
    QCOMPARE(plot->xAxis->label(), QString("optimizer step"));

    auto* box = panel.findChild<QComboBox*>("xAxisBox");
    QVERIFY(box);
    box->setCurrentIndex(1);  // as the user does
    QCOMPARE(panel.xAxis(), paralab::ui::LossPlotPanel::XAxis::WallTime);
    QCOMPARE(plot->xAxis->label(), QString("wall time (s)"));
    QCOMPARE(raw->dataCount(), 50);
    QCOMPARE(smooth->dataCount(), 49);  // the NaN step is a gap, not a smoothed point
    QCOMPARE(keys(raw).front(), 0.012);
    QCOMPARE(keys(raw).back(), 0.012 * 50);
    QCOMPARE(keys(test), QVector<double>{0.012 * 50});
    QCOMPARE(keys(accuracy), QVector<double>{0.012 * 50});
    QCOMPARE(keys(lr), keys(raw));
    QCOMPARE(plot->xAxis->range().upper, 1.0);  // at least a second wide
    QCOMPARE(lr->keyAxis()->range(), plot->xAxis->range());

    // An evaluation that arrives before the step it followed moves there when the step comes.
    panel.addEval(eval(60, 0.3, 0.85));
    QCOMPARE(keys(test).back(), 0.012 * 50);
    panel.addSteps(globalRecords(51, 60));
    QCOMPARE(keys(test), (QVector<double>{0.012 * 50, 0.012 * 60}));
    QCOMPARE(raw->dataCount(), 60);
    QCOMPARE(panel.pointCount(), 60);

    // The curves as CSV name the axis they were plotted on.
    QTemporaryDir dir;
    QVERIFY(panel.exportCsv(dir.filePath("training.csv")));
    QFile csv(dir.filePath("training.csv"));
    QVERIFY(csv.open(QIODevice::ReadOnly | QIODevice::Text));
    const QString text = QString::fromUtf8(csv.readAll());
    QVERIFY(text.contains("test loss,wall time (s),"));
    QVERIFY(text.contains("learning rate,wall time (s),0.012,learning rate,"));
    QVERIFY(lr->keyAxis()->label().isEmpty());  // still none on screen

    // Back to steps through the slot: the box follows, and every point is at its step again.
    panel.setXAxis(paralab::ui::LossPlotPanel::XAxis::Step);
    QCOMPARE(box->currentIndex(), 0);
    QCOMPARE(keys(raw).back(), 60.0);
    QCOMPARE(keys(test), (QVector<double>{50, 60}));
    QCOMPARE(plot->xAxis->range().upper, 60 * 1.02);
    QCOMPARE(keys(lr).back(), 60.0);
    plot->xAxis->setRange(10, 20);  // as a drag or a zoom does: the strip follows
    QCOMPARE(lr->keyAxis()->range(), QCPRange(10, 20));

    auto* log = panel.findChild<QCheckBox*>("logLossBox");
    QVERIFY(log);
    log->setChecked(true);
    QVERIFY(panel.logarithmicLoss());
    panel.setLogarithmicLoss(false);
    QVERIFY(!log->isChecked());
    QCOMPARE(plot->yAxis->scaleType(), QCPAxis::stLinear);
}

void TestDashboard::memoryStacksAddUpToTheDeviceTotal() {
    DeviceDashboard d;
    feed(d, 1, 13);
    for (int i = 0; i < kDevices.size(); ++i) {
        const StepRecord latest = deviceRecord(i, 13);
        double sum = 0;
        for (int c = 0; c < static_cast<int>(paralab::kMemCategoryCount); ++c) {
            QCOMPARE(d.memoryBar(kDevices[i], c), static_cast<double>(latest.memory.current[static_cast<size_t>(c)]));
            sum += d.memoryBar(kDevices[i], c);
        }
        QCOMPARE(sum, static_cast<double>(latest.memory.current_total));
    }
}

// A record with the step's peak shows the step at its peak, activations included, not what was
// live at its end.
void TestDashboard::memoryShowsTheStepsPeak() {
    DeviceDashboard d;
    StepRecord r = deviceRecord(0, 1);
    const size_t acts = static_cast<size_t>(paralab::MemCategory::activations);
    r.memory.at_step_peak = r.memory.current;
    r.memory.at_step_peak[acts] += 5000000;  // freed by the step's end
    r.memory.step_peak_total = r.memory.current_total + 5000000;
    d.addDeviceSteps({r});
    double sum = 0;
    for (int c = 0; c < static_cast<int>(paralab::kMemCategoryCount); ++c) {
        QCOMPARE(d.memoryBar(kDevices[0], c), static_cast<double>(r.memory.at_step_peak[static_cast<size_t>(c)]));
        sum += d.memoryBar(kDevices[0], c);
    }
    QCOMPARE(sum, static_cast<double>(r.memory.step_peak_total));
}

void TestDashboard::breakdownIsTheMeanOfTheLastSteps() {
    DeviceDashboard d;
    d.setBreakdownWindow(10);
    feed(d, 1, 30);
    using Part = DeviceDashboard::TimePart;
    // compute_ms is the step number: the mean of steps 21..30 is 25.5.
    QCOMPARE(d.breakdownMs("cpu:0", Part::Compute), 25.5);
    QCOMPARE(d.breakdownMs("cpu:2", Part::Communication), 4.0);
    QCOMPARE(d.breakdownMs("cpu:1", Part::Idle), 0.5);
    QCOMPARE(d.breakdownMs("cpu:1", Part::DataWait), 0.25);
    d.setBreakdownWindow(2);
    QCOMPARE(d.breakdownMs("cpu:0", Part::Compute), 29.5);
}

void TestDashboard::phaseFamilies_data() {
    QTest::addColumn<QString>("phase");
    QTest::addColumn<qint64>("bytes");
    QTest::addColumn<int>("family");
    const auto row = [](const char* phase, Family f, qint64 bytes = 0) {
        QTest::newRow(phase) << QString(phase) << bytes << static_cast<int>(f);
    };
    row("forward", Family::forward);
    row("backward", Family::backward);
    row("forward chunk 1", Family::forward);  // an interleaved pipeline's
    row("backward chunk 0", Family::backward);
    row("backward_input", Family::backward);       // a zero-bubble pipeline's B
    row("backward_weight", Family::weight_grad);  // and its W
    row("forward+backward (CUDA graph)", Family::forward);  // single's replayed step on a GPU
    row("send_activation chunk 1", Family::communication, 1024);
    for (const char* p : {"optimizer", "clip", "loss", "server_update"}) row(p, Family::compute);
    for (const char* p : {"all_reduce_bucket", "all_reduce", "reduce_scatter_grads", "all_gather_params", "broadcast",
                          "scatter_inputs", "gather_outputs", "reduce_grads", "send_activation", "send_grad",
                          "push_grad", "pull_weights"})
        row(p, Family::communication, 1024);
    for (const char* p : {"wait_all_reduce", "wait_staleness", "recv_activation", "recv_grad"}) row(p, Family::idle);
    row("data_wait", Family::data_wait);
    QTest::newRow("unknown, no bytes") << QString("mystery") << qint64(0) << static_cast<int>(Family::compute);
    QTest::newRow("unknown, bytes") << QString("mystery") << qint64(64) << static_cast<int>(Family::communication);
}

void TestDashboard::phaseFamilies() {
    QFETCH(QString, phase);
    QFETCH(qint64, bytes);
    QFETCH(int, family);
    QCOMPARE(static_cast<int>(palette::phaseFamilyOf(phase, bytes)), family);
}

void TestDashboard::timelineKeepsTheLastSteps() {
    TimelinePanel t;
    QCOMPARE(t.stepsShown(), 5);
    // Two batches, and a straggling span of an old step after them: not kept.
    t.addSpans(ddpSpans(1, 6));
    t.addSpans(ddpSpans(7, 12));
    t.addSpans({span("cpu:1", 3, "forward", 0.03, 0.031)});
    QCOMPARE(t.keptSteps(), (QVector<qint64>{8, 9, 10, 11, 12}));
    for (const QString& device : kDevices) QCOMPARE(t.keptSteps(device), (QVector<qint64>{8, 9, 10, 11, 12}));
    QCOMPARE(t.devices(), kDevices);
    QCOMPARE(t.spans().size(), 5 * 3 * 6);
    t.setStepsShown(2);
    QCOMPARE(t.keptSteps(), (QVector<qint64>{11, 12}));
    QCOMPARE(t.spans().size(), 2 * 3 * 6);
    t.clear();
    QVERIFY(t.keptSteps().isEmpty());
    QVERIFY(t.spans().isEmpty());
}

// Slow motion: the newest step every device completed, its spans appearing in the order they
// began (device d's spans start 0.1·d ms after device 0's: data wait, forward 0.5 ms later,
// backward 3 ms later, ...), then the kept steps again.
void TestDashboard::timelineReplaysOneStepInOrder() {
    TimelinePanel t;
    QVERIFY(!t.startReplay());  // nothing has arrived
    t.addSpans(ddpSpans(1, 1));
    QVERIFY(!t.startReplay());  // step 1 may still be arriving
    t.addSpans(ddpSpans(2, 3));
    QVERIFY(t.startReplay());
    QVERIFY(t.replaying());
    QCOMPARE(t.replayStep(), 2);  // 3 is the newest, which may still be arriving
    QCOMPARE(t.drawnSpanCount(), 1);  // cpu:0's data wait
    t.advanceReplay(0.00025);
    QCOMPARE(t.drawnSpanCount(), 3);  // every device's data wait
    t.advanceReplay(0.003);
    QCOMPARE(t.drawnSpanCount(), 9);  // and their forwards and backwards, at 3.25 ms
    t.addSpans(ddpSpans(4, 4));       // arriving meanwhile: kept, the replay goes on
    QVERIFY(t.replaying());
    QCOMPARE(t.drawnSpanCount(), 9);
    t.advanceReplay(1.0);  // past the step's end
    QVERIFY(!t.replaying());
    QCOMPARE(t.drawnSpanCount(), 4 * 3 * 6);  // the kept steps again
    t.setReplaySlowdown(5000);
    QCOMPARE(t.replaySlowdown(), 1000.0);
}

// GPipe on 2 stages, 2 micro-batches, every forward and backward 1 s: stage 0 works 0-2 and
// 4-6, stage 1 works 1-5: 4 of the 12 stage-seconds idle, the ideal (p-1)/(m+p-1) = 1/3.
void TestDashboard::timelineMeasuresThePipelineBubble() {
    TimelinePanel t;
    QVERIFY(t.bubbleText().isEmpty());  // not a pipeline
    t.setPipeline(2, 2, "gpipe");
    QVERIFY(std::isnan(t.measuredBubble()));
    QVERIFY(t.bubbleText().contains("33 %"));  // the ideal, before any step
    QCOMPARE(TimelinePanel::idealBubble(2, 2), 1.0 / 3.0);
    QCOMPARE(TimelinePanel::idealBubble(4, 4), 3.0 / 7.0);
    const QVector<Span> step = {
        span("cpu:0", 1, "forward", 0, 1),  span("cpu:0", 1, "forward", 1, 2),
        span("cpu:0", 1, "send_activation", 2, 2.1, 64),
        span("cpu:1", 1, "forward", 1, 2),  span("cpu:1", 1, "forward", 2, 3),
        span("cpu:1", 1, "backward", 3, 4), span("cpu:1", 1, "backward", 4, 5),
        span("cpu:0", 1, "backward", 4, 5), span("cpu:0", 1, "backward", 5, 6),
    };
    // Half a step (stage 1 still running) is not measured...
    t.addSpans(step.mid(0, 5));
    QVERIFY(std::isnan(t.measuredBubble()));
    // ...the whole step is.
    t.addSpans(step.mid(5));
    QCOMPARE(t.measuredBubble(), 1.0 / 3.0);
    QVERIFY2(t.bubbleText().contains("measured 33 %"), qPrintable(t.bubbleText()));
    t.setPipeline(0, 0, {});
    QVERIFY(t.bubbleText().isEmpty());
    // A mesh's stages are several devices each (dp2 · pp2: cpu:0 and cpu:1 run stage 0, cpu:2 and
    // cpu:3 stage 1): every device counts, and a step is whole once all four have run it.
    t.clear();
    t.setPipeline(2, 2, "gpipe", 1, 4);
    QVector<Span> mesh;
    for (const Span& s : step) {
        Span a = s, b = s;
        a.device = s.device == "cpu:0" ? "cpu:0" : "cpu:2";
        b.device = s.device == "cpu:0" ? "cpu:1" : "cpu:3";
        mesh << a << b;
    }
    t.addSpans(mesh.mid(0, 9));
    QVERIFY(std::isnan(t.measuredBubble()));
    t.addSpans(mesh.mid(9));
    QCOMPARE(t.measuredBubble(), 1.0 / 3.0);
}

// interleaved_1f1b on 2 stages, 2 micro-batches, 2 chunks a device, every operation 1 s and named
// with its chunk as the engine names it: each stage works 8 of the step's 10 s, so 4 of the 20
// stage-seconds are idle, the ideal (p-1)/(v·m+p-1) = 1/5.
void TestDashboard::timelineMeasuresAnInterleavedBubble() {
    TimelinePanel t;
    t.setPipeline(2, 2, "interleaved_1f1b", 2);
    QCOMPARE(TimelinePanel::idealBubble(2, 2, 2), 1.0 / 5.0);
    QVERIFY2(t.bubbleText().contains("(p−1)/(v·m+p−1) = 20 %"), qPrintable(t.bubbleText()));
    QVector<Span> step;
    for (int i = 0; i < 4; ++i) {
        const QString chunk = QString::number(i / 2);
        step << span("cpu:0", 1, "forward chunk " + chunk, i, i + 1)
             << span("cpu:0", 1, "backward chunk " + chunk, 6 + i, 7 + i)
             << span("cpu:1", 1, "forward chunk " + chunk, 1 + i, 2 + i)
             << span("cpu:1", 1, "backward chunk " + chunk, 5 + i, 6 + i);
    }
    step << span("cpu:0", 1, "send_activation chunk 0", 2, 2.1, 64);
    t.addSpans(step.mid(0, 8));  // half the operations: not a whole step yet
    QVERIFY(std::isnan(t.measuredBubble()));
    t.addSpans(step.mid(8));
    QCOMPARE(t.measuredBubble(), 0.2);
    QVERIFY2(t.bubbleText().contains("measured 20 %"), qPrintable(t.bubbleText()));
    // Their colours are forward's and backward's.
    for (const auto& v : t.spans())
        if (v.phase.startsWith("forward")) QCOMPARE(v.color, palette::phaseFamilyColor(Family::forward));
}

// zb_h1 on 2 stages, 2 micro-batches, every forward, B and W 1 s as the engine names them
// (stage 0: F0 F1 B0 W0 B1 W1, stage 1: F0 B0 F1 B1 W0 W1): each stage works 6 of the step's
// 7 s, the ideal (p-1)/(3m+p-1) = 1/7; W is busy time, coloured as the weight gradients.
void TestDashboard::timelineMeasuresAZeroBubble() {
    TimelinePanel t;
    t.setPipeline(2, 2, "zb_h1");
    QCOMPARE(TimelinePanel::idealZeroBubble(2, 2), 1.0 / 7.0);
    QCOMPARE(TimelinePanel::idealZeroBubble(4, 8), 3.0 / 27.0);
    QCOMPARE(TimelinePanel::idealZeroBubble(4, 1), 6.0 / 9.0);
    QVERIFY2(t.bubbleText().contains("(p−1)/(3m+p−1) = 14 %"), qPrintable(t.bubbleText()));
    const QVector<Span> step = {
        span("cpu:0", 1, "forward", 0, 1),         span("cpu:0", 1, "forward", 1, 2),
        span("cpu:1", 1, "forward", 1, 2),         span("cpu:1", 1, "backward_input", 2, 3),
        span("cpu:1", 1, "forward", 3, 4),         span("cpu:0", 1, "backward_input", 3, 4),
        span("cpu:0", 1, "backward_weight", 4, 5), span("cpu:1", 1, "backward_input", 4, 5),
        span("cpu:0", 1, "backward_input", 5, 6),  span("cpu:1", 1, "backward_weight", 5, 6),
        span("cpu:0", 1, "backward_weight", 6, 7), span("cpu:1", 1, "backward_weight", 6, 7),
    };
    t.addSpans(step);
    QCOMPARE(t.measuredBubble(), 1.0 / 7.0);
    QVERIFY2(t.bubbleText().contains("measured 14 %"), qPrintable(t.bubbleText()));
    for (const auto& v : t.spans()) {
        if (v.phase == "backward_weight") QCOMPARE(v.color, palette::phaseFamilyColor(Family::weight_grad));
        if (v.phase == "backward_input") QCOMPARE(v.color, palette::phaseFamilyColor(Family::backward));
    }
}

void TestDashboard::timelineColoursByPhaseFamily() {
    TimelinePanel t;
    t.addSpans(ddpSpans(1, 3));
    t.addSpans({span("cpu:0", 3, "recv_activation", 0.5, 0.6, 2048)});
    bool sawComm = false;
    for (const auto& s : t.spans()) {
        const Family family = palette::phaseFamilyOf(s.phase, s.bytes);
        QCOMPARE(s.color, palette::phaseFamilyColor(family));
        QCOMPARE(s.commLane, family == Family::communication);
        QCOMPARE(s.row, static_cast<int>(kDevices.indexOf(s.device)));
        if (s.phase == "forward") QCOMPARE(s.color, palette::phaseFamilyColor(Family::forward));
        if (s.phase == "wait_all_reduce" || s.phase == "recv_activation")
            QCOMPARE(s.color, palette::phaseFamilyColor(Family::idle));
        if (s.phase == "all_reduce_bucket") {
            QCOMPARE(s.color, palette::phaseFamilyColor(Family::communication));
            sawComm = true;
        }
    }
    QVERIFY(sawComm);
    // The families' colours are distinct, so the legend can tell them apart.
    QSet<QRgb> colors;
    for (int f = 0; f < palette::kPhaseFamilyCount; ++f) colors.insert(palette::phaseFamilyColor(Family(f)).rgb());
    QCOMPARE(colors.size(), palette::kPhaseFamilyCount);
}

void TestDashboard::timelineDescribesTheSpanUnderThePointer() {
    TimelinePanel t;
    t.addSpans(ddpSpans(1, 1));
    // Device cpu:1 starts at 0.0101 s; the window starts at cpu:0's 0.01 s. Its backward runs
    // 3.1..7.1 ms into the window, its all-reduce 5.1..8.1 ms in the lower lane.
    const QString backward = t.describeAt(4.0, 1.0 - 0.1);
    QVERIFY2(backward.contains("cpu:1") && backward.contains("step 1") && backward.contains("backward") &&
                 backward.contains("4.000 ms"),
             qPrintable(backward));
    const QString comm = t.describeAt(6.0, 1.0 + 0.3);
    QVERIFY2(comm.contains("all_reduce_bucket") && comm.contains("communication") && comm.contains("4.0 KiB"),
             qPrintable(comm));
    QVERIFY(t.describeAt(-5.0, 0).isEmpty());
    QVERIFY(t.describeAt(1.0, 7).isEmpty());
}

void TestDashboard::csvHasAHeaderAndOneRowPerRecord() {
    QTemporaryDir dir;
    DeviceDashboard d;
    feed(d, 1, 20);
    d.addSteps(globalRecords(1, 20));
    const QString devicesCsv = dir.filePath("devices.csv");
    QVERIFY(d.exportCsv(devicesCsv));
    const QStringList lines = readLines(devicesCsv);
    QCOMPARE(lines.size(), 1 + 4 * 20);
    QVERIFY2(lines[0].startsWith("device,step,epoch,wall_s,loss,samples,samples_per_s,compute_ms"), qPrintable(lines[0]));
    QVERIFY(lines[0].contains("mem_optimizer_state_bytes"));
    const int columns = static_cast<int>(lines[0].split(',').size());
    for (const QString& line : lines) QCOMPARE(static_cast<int>(line.split(',').size()), columns);
    QVERIFY(lines[1].startsWith("cpu:0,1,"));
    QVERIFY(lines.last().startsWith("all,20,"));

    TimelinePanel t;
    t.addSpans(ddpSpans(1, 9));
    const QString spansCsv = dir.filePath("spans.csv");
    QVERIFY(t.exportCsv(spansCsv));
    const QStringList spanLines = readLines(spansCsv);
    QCOMPARE(spanLines.size(), 1 + t.spans().size());
    QCOMPARE(spanLines[0], QString("device,step,phase,family,t_begin_s,t_end_s,duration_ms,bytes"));
    QVERIFY(spanLines.filter(",all_reduce_bucket,communication,").size() == 5 * 3);
    QVERIFY(!d.exportCsv(dir.filePath("no/such/folder/x.csv")));
}

void TestDashboard::plotsExportAsPngAndPdf() {
    QTemporaryDir dir;
    DeviceDashboard d;
    feed(d, 1, 30);
    TimelinePanel t;
    t.addSpans(ddpSpans(1, 9));
    for (const QString name : {"devices.png", "devices.pdf"}) {
        QVERIFY2(d.exportTo(dir.filePath(name)), qPrintable(name));
        QVERIFY(QFileInfo(dir.filePath(name)).size() > 1000);
    }
    for (const QString name : {"timeline.png", "timeline.pdf"}) {
        QVERIFY2(t.exportTo(dir.filePath(name)), qPrintable(name));
        QVERIFY(QFileInfo(dir.filePath(name)).size() > 1000);
    }
    QImage image(dir.filePath("devices.png"));
    QVERIFY(image.width() >= 1200 && image.height() >= 700);  // laid out even though never shown
}

// The spirals MLP by ddp on cpu:0 and cpu:1 for `steps` steps, started from the window `w`
// (left with that experiment); its summary.
static paralab::config::RunSummary runDdpFromWindow(MainWindow& w, int steps) {
    [&] { QCOMPARE(w.openExperiment(":/examples/spirals-mlp.paralab.json", false), QString()); }();
    auto e = *w.experiment();
    e.devices = {"cpu:0", "cpu:1"};
    e.strategy.type = "ddp";
    e.train.max_steps = steps;
    w.setExperiment(e);
    QSignalSpy finished(w.controller(), &RunController::finished);
    w.startRun();
    if (finished.count() == 0 && !finished.wait(30000)) {
        [&] { QFAIL(qPrintable("the run did not finish: " + w.statusText())); }();
        return {};
    }
    return finished.at(0).at(0).value<paralab::config::RunSummary>();
}

void TestDashboard::realDdpRunFillsBothDevices() {
    MainWindow w;
    const auto summary = runDdpFromWindow(w, 30);
    QCOMPARE(QString::fromStdString(summary.status), QString("finished"));
    auto e = *w.experiment();

    DeviceDashboard* d = w.deviceDashboard();
    QCOMPARE(d->devices(), (QStringList{"cpu:0", "cpu:1"}));
    for (const QString& device : d->devices()) {
        QCOMPARE(d->lossPointCount(device), 30);
        QCOMPARE(d->throughputPointCount(device), 30);
        QCOMPARE(d->memoryPointCount(device), 30);
        QVERIFY(d->memoryBar(device, static_cast<int>(paralab::MemCategory::parameters)) > 0);
        QVERIFY(d->breakdownMs(device, DeviceDashboard::TimePart::Compute) > 0);
    }
    QCOMPARE(d->lossPointCount("all"), 30);

    TimelinePanel* t = w.timeline();
    QCOMPARE(t->devices(), (QStringList{"cpu:0", "cpu:1"}));
    QCOMPARE(t->keptSteps(), (QVector<qint64>{26, 27, 28, 29, 30}));
    bool forward = false, comm = false;
    for (const auto& s : t->spans()) {
        forward |= s.phase == "forward";
        comm |= palette::phaseFamilyOf(s.phase, s.bytes) == Family::communication;
    }
    QVERIFY(forward);
    QVERIFY(comm);  // DDP's all-reduce

    // A new run starts from empty plots.
    e.train.max_steps = 4;
    w.setExperiment(e);
    QCOMPARE(d->lossPointCount("cpu:0"), 0);
    QVERIFY(t->spans().isEmpty());
}

// A real 1F1B pipeline from the window: the timeline measures the bubble of its steps and
// shows it beside the ideal.
void TestDashboard::realPipelineRunShowsItsBubble() {
    MainWindow w;
    QCOMPARE(w.openExperiment(":/examples/spirals-mlp.paralab.json", false), QString());
    auto e = *w.experiment();
    e.devices = {"cpu:0", "cpu:1"};
    e.strategy = paralab::strategy::default_config("pipeline");
    e.strategy.options["schedule"] = std::string("1f1b");
    e.train.max_steps = 12;
    w.setExperiment(e);
    QSignalSpy finished(w.controller(), &RunController::finished);
    w.startRun();
    QVERIFY(finished.count() == 1 || finished.wait(30000));
    TimelinePanel* t = w.timeline();
    const double measured = t->measuredBubble();
    QVERIFY2(measured > 0 && measured < 1, qPrintable(t->bubbleText()));
    QVERIFY2(t->bubbleText().contains("ideal (p−1)/(m+p−1) = 20 %"), qPrintable(t->bubbleText()));  // p 2, m 4
}

// File ▸ Export covers every plot of the window: each one's picture (PNG, PDF) and its data
// (CSV: a header, then rows) after a real run, with the run selected in the Runs tab.
void TestDashboard::everyPlotOfTheWindowExports() {
    MainWindow w;
    QCOMPARE(QString::fromStdString(runDdpFromWindow(w, 20).status), QString("finished"));
    // This test's run: the newest in the store, once the runs table has read it.
    const auto stored = paralab::store::RunStore(paralab::store::RunStore::default_path()).list_runs();
    QVERIFY(!stored.empty());
    const qint64 runId = stored.back().run_id;
    QTRY_VERIFY_WITH_TIMEOUT(w.runsPanel()->model()->run(runId) != nullptr, 10000);
    w.runsPanel()->selectRuns({runId});
    QTRY_VERIFY_WITH_TIMEOUT(w.runsPanel()->comparedRunIds().contains(runId), 10000);

    const QVector<PlotExport> exports = w.plotExports();
    // Training; the Devices tab's five plots and all of them at once; the timeline; the runs.
    QCOMPARE(exports.size(), 9);
    QTemporaryDir dir;
    QSet<QString> stems;
    for (const PlotExport& x : exports) {
        QVERIFY2(!stems.contains(x.fileStem), qPrintable(x.fileStem));
        stems.insert(x.fileStem);
        const QString base = dir.filePath(x.fileStem);
        QVERIFY2(paralab::ui::plotexport::save(x, base + ".png"), qPrintable(x.title));
        const QImage image(base + ".png");
        QVERIFY2(!image.isNull() && image.width() >= 400 && image.height() >= 200, qPrintable(x.title));
        QVERIFY2(paralab::ui::plotexport::save(x, base + ".pdf"), qPrintable(x.title));
        QFile pdf(base + ".pdf");
        QVERIFY(pdf.open(QIODevice::ReadOnly));
        QVERIFY2(pdf.size() > 1000 && pdf.read(5) == "%PDF-", qPrintable(x.title));
        QVERIFY2(paralab::ui::plotexport::save(x, base + ".csv"), qPrintable(x.title));
        const QStringList lines = readLines(base + ".csv");
        QVERIFY2(lines.size() >= 2, qPrintable(x.title + ": " + lines.join('|')));
        const QStringList header = csvFields(lines[0]);
        QVERIFY2(header.size() >= 3, qPrintable(x.title + ": " + lines[0]));
        for (const QString& h : header) QVERIFY2(!h.isEmpty() && !h.front().isDigit(), qPrintable(lines[0]));
        for (const QString& line : lines.mid(1))
            QVERIFY2(csvFields(line).size() == header.size(), qPrintable(x.title + ": " + line));
    }
    // The per-device plots' data name both devices.
    const QStringList loss = readLines(dir.filePath("paralab-loss-per-device.csv"));
    QCOMPARE(loss[0], QString("device,step,wall_s,loss,loss_smoothed"));
    QCOMPARE(loss.filter(QRegularExpression("^cpu:0,")).size(), 20);
    QCOMPARE(loss.filter(QRegularExpression("^cpu:1,")).size(), 20);
    QCOMPARE(loss.filter(QRegularExpression("^all,")).size(), 20);
    QCOMPARE(readLines(dir.filePath("paralab-memory-by-category.csv")).size(), 1 + 2);
    QCOMPARE(readLines(dir.filePath("paralab-time-breakdown.csv")).size(), 1 + 2);
    // The comparison's data: the run's loss curve and its throughput bar.
    const QStringList comparison = readLines(dir.filePath("paralab-comparison.csv"));
    QCOMPARE(comparison[0], QString("series,x_axis,x,y_axis,y"));
    QVERIFY2(comparison.filter(",optimizer step,").size() == 20, qPrintable(comparison.mid(0, 4).join('|')));
    QVERIFY(comparison.filter(",samples/s,").size() == 1);
    // A file that cannot be written is reported as such.
    QVERIFY(!paralab::ui::plotexport::save(exports[1], dir.filePath("no/such/folder/x.csv")));
    QVERIFY(!paralab::ui::plotexport::save(exports[1], dir.filePath("no/such/folder/x.png")));

    // The File menu lists them all.
    auto* menu = w.findChild<QMenu*>("exportMenu");
    QVERIFY(menu);
    QMetaObject::invokeMethod(menu, "aboutToShow");
    QCOMPARE(menu->actions().size(), exports.size());
    QVERIFY(menu->actions()[2]->text().startsWith(exports[2].title));
}

// 100,000 noisy points drawn at `pixels` columns: the curve read is a subset of the points, in
// order, one to four per column, and every column's lowest and highest point is among those read
// for it or its neighbours (a block of extremes is at most two columns wide).
void TestDashboard::decimatedCurveKeepsEachColumnsExtremes_data() {
    QTest::addColumn<int>("points");
    QTest::addColumn<int>("pixels");
    QTest::newRow("100k over 900 px") << 100000 << 900;
    QTest::newRow("100k over 333 px") << 100000 << 333;
    QTest::newRow("5k over 1000 px") << 5000 << 1000;
}

void TestDashboard::decimatedCurveKeepsEachColumnsExtremes() {
    QFETCH(int, points);
    QFETCH(int, pixels);
    QCustomPlot plot;
    auto* g = new DecimatedGraph(plot.xAxis, plot.yAxis);
    std::vector<double> values(static_cast<size_t>(points));
    for (int i = 0; i < points; ++i) {
        const double noise = std::sin(i * 12.9898) * 43758.5453;
        values[static_cast<size_t>(i)] = 1.0 / (1 + 0.001 * i) + (noise - std::floor(noise));
        g->append(i, values[static_cast<size_t>(i)]);
    }
    QCOMPARE(g->dataCount(), points);
    const QVector<QCPGraphData> read = g->pointsFor(0, points - 1, pixels);
    QVERIFY2(read.size() >= pixels / 2 && read.size() <= 4 * pixels + 64, qPrintable(QString::number(read.size())));
    for (qsizetype k = 0; k < read.size(); ++k) {
        const auto i = static_cast<size_t>(read[k].key);
        QCOMPARE(read[k].key, std::floor(read[k].key));
        QCOMPARE(read[k].value, values[i]);
        if (k > 0) QVERIFY(read[k].key > read[k - 1].key);
    }
    const double width = static_cast<double>(points) / pixels;  // points per column
    for (int c = 0; c < pixels; ++c) {
        const auto lo = static_cast<size_t>(std::ceil(c * width)), hi = static_cast<size_t>(std::ceil((c + 1) * width));
        const double trueMax = *std::max_element(values.begin() + static_cast<long>(lo), values.begin() + static_cast<long>(hi));
        const double trueMin = *std::min_element(values.begin() + static_cast<long>(lo), values.begin() + static_cast<long>(hi));
        double readMax = -1e300, readMin = 1e300;
        for (const auto& p : read)
            if (p.key >= (c - 2) * width && p.key < (c + 3) * width) {
                readMax = std::max(readMax, p.value);
                readMin = std::min(readMin, p.value);
            }
        QVERIFY2(readMax >= trueMax && readMin <= trueMin, qPrintable(QStringLiteral("column %1").arg(c)));
    }
}

// Zoomed in to fewer points than columns, every point is read; a point out of order is placed.
void TestDashboard::decimatedCurveZoomedInReadsEveryPoint() {
    QCustomPlot plot;
    auto* g = new DecimatedGraph(plot.xAxis, plot.yAxis);
    for (int i = 0; i < 50000; ++i) g->append(i, (i % 7) - 3.0);
    QVERIFY(g->levelCount() > 5);
    const auto zoomed = g->pointsFor(1000, 1299, 800);
    QCOMPARE(zoomed.size(), 300);
    QCOMPARE(zoomed.front().key, 1000.0);
    QCOMPARE(zoomed.back().key, 1299.0);
    g->append(20000.5, 100.0);  // out of order: the extremes are rebuilt
    const auto all = g->pointsFor(0, 50000, 200);
    QVERIFY(std::any_of(all.begin(), all.end(), [](const QCPGraphData& p) { return p.value == 100.0; }));
    QVector<QCPGraphData> replaced;
    for (int i = 0; i < 10; ++i) replaced.append({double(i), double(i)});
    g->setPoints(replaced, true);
    QCOMPARE(g->pointsFor(0, 9, 500).size(), 10);
    g->clearPoints();
    QCOMPARE(g->dataCount(), 0);
    QVERIFY(g->pointsFor(0, 9, 500).isEmpty());
}

// A tab not in view costs the GUI thread no drawing: its plots are drawn when it is shown.
void TestDashboard::hiddenPlotsAreNotRedrawn() {
    DeviceDashboard d;
    paralab::ui::LossPlotPanel loss;
    QList<QCustomPlot*> plots = d.findChildren<QCustomPlot*>() + loss.findChildren<QCustomPlot*>();
    QCOMPARE(plots.size(), 7);
    // The expert routing's plot stays hidden without a mixture of experts: never drawn here.
    plots.removeOne(d.expertRouting()->findChild<QCustomPlot*>());
    QTest::qWait(50);  // QCustomPlot's own replot, queued by its constructor
    std::vector<std::unique_ptr<QSignalSpy>> spies;
    for (QCustomPlot* p : plots) spies.push_back(std::make_unique<QSignalSpy>(p, &QCustomPlot::beforeReplot));
    feed(d, 1, 40);
    d.addSteps(globalRecords(1, 40));
    loss.addSteps(globalRecords(1, 40));
    QTest::qWait(100);
    for (int i = 0; i < plots.size(); ++i) QVERIFY2(spies[size_t(i)]->count() == 0, qPrintable(QString::number(i)));
    d.show();
    loss.show();
    for (const auto& spy : spies) QTRY_VERIFY(spy->count() >= 1);
    // Shown, new data are drawn (at the pace the replots allow).
    for (const auto& spy : spies) spy->clear();
    feed(d, 41, 45);
    loss.addSteps(globalRecords(41, 45));
    for (const auto& spy : spies) QTRY_VERIFY(spy->count() >= 1);
}

void TestDashboard::textSampleShowsTheLatestEvaluation() {
    paralab::ui::LossPlotPanel plot;
    plot.resize(900, 600);
    plot.show();
    QVERIFY(QTest::qWaitForWindowExposed(&plot));
    paralab::ui::TextSamplePanel* text = plot.textSample();
    QVERIFY(!text->isVisible());
    // A classifier's evaluation: no text, nothing shown.
    paralab::config::EvalResult eval;
    eval.step = 100;
    eval.loss = 2.5;
    plot.addEval(eval);
    QVERIFY(!text->isVisible());
    QCOMPARE(plot.evalPointCount(), 1);

    eval.step = 250;
    eval.prompt = "To be, or not";
    eval.sample = " to be:\nthat is";
    plot.addEval(eval);
    QVERIFY(text->isVisible());
    QCOMPARE(text->step(), qint64(250));
    QVERIFY2(text->title().contains("step 250"), qPrintable(text->title()));
    QCOMPARE(text->textView()->toPlainText(), QString("To be, or not to be:\nthat is"));
    QVERIFY(text->textView()->isReadOnly());
    // Monospace: as wide an 'i' as an 'M' (what fontconfig calls its spacing varies by font).
    const QFontMetrics metrics(text->textView()->font());
    QCOMPARE(metrics.horizontalAdvance(QLatin1Char('i')),
             metrics.horizontalAdvance(QLatin1Char('M')));
    // The prompt in the normal weight, the model's words bold: told apart at a glance.
    const QTextBlock first = text->textView()->document()->firstBlock();
    QVector<QPair<QString, int>> runs;
    for (auto it = first.begin(); !it.atEnd(); ++it)
        runs.append({it.fragment().text(), it.fragment().charFormat().fontWeight()});
    QVERIFY(runs.contains(qMakePair(QString("To be, or not"), int(QFont::Normal))));
    QVERIFY(runs.contains(qMakePair(QString(" to be:"), int(QFont::Bold))));

    // The next evaluation replaces it; an evaluation without text leaves it.
    eval.step = 500;
    eval.sample = " TO BE";
    plot.addEval(eval);
    QCOMPARE(text->step(), qint64(500));
    QCOMPARE(text->sampleText(), QString(" TO BE"));
    eval.step = 600;
    eval.sample.clear();
    plot.addEval(eval);
    QCOMPARE(text->step(), qint64(500));
    // A new run starts without it.
    plot.clear();
    QVERIFY(!text->isVisible());
    QCOMPARE(text->step(), qint64(-1));
}

// A small character model trained from the window on a corpus of its own: its evaluations carry
// a continuation of the test split's start, shown under the Training plot as the run goes.
void TestDashboard::textRunShowsItsSampleInTheTrainingTab() {
    QTemporaryDir dir;
    const QString corpus = dir.filePath("corpus.txt");
    {
        QFile f(corpus);
        QVERIFY(f.open(QIODevice::WriteOnly));
        for (int i = 0; i < 200; ++i) f.write("the quick brown fox jumps over the lazy dog. ");
    }
    nlohmann::json j = {{"paralab", 1},
                        {"name", "tiny-text"},
                        {"seed", 7},
                        {"data",
                         {{"dataset", "text"},
                          {"path", corpus.toStdString()},
                          {"seq_len", 16},
                          {"batch_size", 4},
                          {"test_limit", 4}}},
                        {"model",
                         {{"input", {16}},
                          {"layers",
                           {{{"type", "embedding"}, {"vocab", 256}, {"dim", 16}},
                            {{"type", "position_embedding"}},
                            {{"type", "transformer_block"}, {"heads", 2}, {"ffn", 32}},
                            {{"type", "layernorm"}},
                            {{"type", "linear"}, {"out", 256}}}},
                          {"loss", "cross_entropy"}}},
                        {"devices", {"cpu:0"}},
                        {"strategy", {{"type", "single"}}},
                        {"optimizer", {{"type", "adamw"}, {"lr", 0.003}}},
                        {"train", {{"epochs", 1}, {"max_steps", 6}, {"eval_every", 3}}}};
    MainWindow w;
    w.setExperiment(paralab::run::parse_experiment(j));
    w.resize(1200, 800);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QSignalSpy evals(w.controller(), &RunController::evalArrived);
    QSignalSpy finished(w.controller(), &RunController::finished);
    w.startRun();
    QTRY_VERIFY_WITH_TIMEOUT(finished.count() == 1, 120000);
    const auto summary = finished.at(0).at(0).value<paralab::config::RunSummary>();
    QCOMPARE(QString::fromStdString(summary.status), QString("finished"));
    QVERIFY(evals.count() >= 1);
    const auto last = evals.last().at(0).value<paralab::config::EvalResult>();
    QVERIFY(!last.sample.empty());
    paralab::ui::TextSamplePanel* text = w.plot()->textSample();
    QVERIFY(text->isVisible());
    QCOMPARE(text->step(), qint64(last.step));
    QCOMPARE(text->promptText(), QString::fromStdString(last.prompt));
    QCOMPARE(text->textView()->toPlainText(), QString::fromStdString(last.prompt + last.sample));
    // The prompt is the corpus's text (the start of its test split).
    QVERIFY(!last.prompt.empty());
    QVERIFY2(QString("the quick brown fox jumps over the lazy dog. ")
                 .repeated(3)
                 .contains(QString::fromStdString(last.prompt).left(40)),
             last.prompt.c_str());

    // A run of a model without text hides it.
    QCOMPARE(runDdpFromWindow(w, 4).status, std::string("finished"));
    QVERIFY(!text->isVisible());
}

// Not a check: the README's screenshots, taken from the real window during a 4-device DDP run on
// Fashion-MNIST. Run under a display (xvfb-run -s "-screen 0 1600x1000x24" ui_dashboard_test
// screenshots -platform xcb) with PARALAB_SCREENSHOT_DIR set to the folder to write them into
// (PARALAB_SCREENSHOT_STEPS: the step to take them at, 250 by default;
// PARALAB_SCREENSHOT_TIMELINE_STEPS: the steps the Timeline shows, its default otherwise).
void TestDashboard::screenshots() {
    const QString dir = qEnvironmentVariable("PARALAB_SCREENSHOT_DIR");
    if (dir.isEmpty()) QSKIP("set PARALAB_SCREENSHOT_DIR to take the README's screenshots");
    MainWindow w;
    // PARALAB_SCREENSHOT_EXPERIMENT: another experiment file, run as it is.
    const QString other = qEnvironmentVariable("PARALAB_SCREENSHOT_EXPERIMENT");
    QCOMPARE(w.openExperiment(other.isEmpty() ? ":/examples/fashion-mlp-ddp.paralab.json" : other, false), QString());
    if (other.isEmpty()) {
        auto e = *w.experiment();
        e.devices = {"cpu:0", "cpu:1", "cpu:2", "cpu:3"};
        w.setExperiment(e);
    }
    w.resize(1600, 1000);
    w.move(0, 0);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    w.viewTabs()->setCurrentWidget(w.deviceDashboard());
    if (const int shown = qEnvironmentVariableIntValue("PARALAB_SCREENSHOT_TIMELINE_STEPS"); shown > 0)
        w.timeline()->setStepsShown(shown);
    const int steps = qEnvironmentVariableIntValue("PARALAB_SCREENSHOT_STEPS") > 0
                          ? qEnvironmentVariableIntValue("PARALAB_SCREENSHOT_STEPS")
                          : 250;
    QSignalSpy finished(w.controller(), &RunController::finished);
    w.startRun();
    QTRY_VERIFY_WITH_TIMEOUT(w.deviceDashboard()->lossPointCount("all") >= steps || finished.count() > 0, 600000);
    QCOMPARE(finished.count(), 0);  // still running: the picture is of a live run
    QTest::qWait(300);
    QVERIFY(w.grab().save(QDir(dir).filePath("screenshot-dashboard.png")));
    w.viewTabs()->setCurrentIndex(0);  // the Training tab
    QTest::qWait(300);
    QVERIFY(w.grab().save(QDir(dir).filePath("screenshot-training.png")));
    w.viewTabs()->setCurrentWidget(w.timeline());
    QTest::qWait(300);
    QVERIFY(w.grab().save(QDir(dir).filePath("screenshot-timeline.png")));
    // The panels' own exports, to look at too.
    QVERIFY(w.deviceDashboard()->exportTo(QDir(dir).filePath("export-devices.png")));
    QVERIFY(w.timeline()->exportTo(QDir(dir).filePath("export-timeline.png")));
    QVERIFY(w.timeline()->exportTo(QDir(dir).filePath("export-timeline.pdf")));
    QVERIFY(w.deviceDashboard()->exportTo(QDir(dir).filePath("export-devices.pdf")));
    w.stopRun();
    QVERIFY(finished.count() == 1 || finished.wait(10000));
}

// Runs go to a store in a temporary folder, never into the user's own.
static void useTemporaryStore() {
    static QTemporaryDir dir;
    qputenv("XDG_DATA_HOME", dir.path().toUtf8());
}
Q_CONSTRUCTOR_FUNCTION(useTemporaryStore)

QTEST_MAIN(TestDashboard)
#include "test_dashboard.moc"
