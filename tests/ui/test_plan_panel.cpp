// The Plan tab: the sweep's heatmap (one cell per combination, out-of-memory and skipped cells
// marked), a click showing the cell's memory bars, step breakdown and predicted pipeline, Run
// here's experiment (and the run it starts through the window), errors shown in the tab, and a
// 100-configuration sweep's time.
#include <qcustomplot.h>
#include <QComboBox>
#include <QDir>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QSplitter>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QtTest>

#include <nlohmann/json.hpp>

#include "engine/plan/goodput.h"
#include "engine/plan/planner.h"
#include "engine/run/experiment_file.h"
#include "engine/run/json_reader.h"
#include "ui/mainwindow/main_window.h"
#include "ui/panels/dashboard/loss_plot_panel.h"
#include "ui/panels/plan/plan_panel.h"
#include "ui/panels/plan/plan_views.h"
#include "ui/panels/timeline/timeline_panel.h"
#include "ui/panels/runs/runs_panel.h"
#include "ui/session/run_controller.h"

using paralab::config::Experiment;
using paralab::ui::MainWindow;
using paralab::ui::TimelinePanel;
using paralab::ui::PlanHeatmap;
using paralab::ui::PlanPanel;

namespace {

Experiment gpt3() {
    const std::string path =
        std::string(PARALAB_SOURCE_DIR) + "/resources/examples/plan/gpt3-175b.plan.paralab.json";
    return paralab::run::parse_experiment(paralab::run::read_json_file(path, "experiment file"));
}

Experiment gptChar() {
    QFile file(QStringLiteral(":/examples/gpt-char.paralab.json"));
    if (!file.open(QIODevice::ReadOnly)) qFatal("no gpt-char example");
    return paralab::run::parse_experiment(nlohmann::json::parse(file.readAll().toStdString()));
}

// Plans now and waits for the result.
bool planNow(PlanPanel& panel) {
    QSignalSpy planned(&panel, &PlanPanel::planned);
    panel.replan();
    return planned.count() > 0 || planned.wait(30000);
}

// The forwards and backwards the Plan tab's timeline shows (the step's tail left out).
int pipelineSpans(const TimelinePanel* timeline) {
    int n = 0;
    for (const auto& s : timeline->spans())
        n += s.phase.startsWith(QLatin1String("forward")) || s.phase.startsWith(QLatin1String("backward"));
    return n;
}

// The cell of the heatmap whose configuration has these tp and pp; -1 when none.
int cellOf(const PlanHeatmap* map, int tp, int pp) {
    for (int i = 0; i < map->cellCount(); ++i)
        if (map->cell(i).mesh.tp == tp && map->cell(i).mesh.pp == pp) return i;
    return -1;
}

}  // namespace

class PlanPanelTest : public QObject {
    Q_OBJECT
private slots:
    void heatmapHasOneCellPerCombination() {
        PlanPanel panel;
        panel.setExperiment(gpt3());
        panel.setPreset(QStringLiteral("h100-80g"));
        // The preset sized for the experiment's mesh: dp 16 · tp 8 · pp 8 = 1,024 devices.
        QCOMPARE(panel.nodesBox()->value(), 128);
        QCOMPARE(panel.gpusBox()->value(), 8);
        QCOMPARE(panel.precisionText(), QStringLiteral("Precision: bf16"));
        QCOMPARE(panel.keyBox(0)->currentText(), QStringLiteral("tp"));
        QCOMPARE(panel.keyBox(1)->currentText(), QStringLiteral("pp"));
        panel.setSweep(1, QStringLiteral("pp"), QStringLiteral("1,2,4,8,16"));
        QVERIFY(planNow(panel));
        QCOMPARE(panel.errorText(), QString());
        PlanHeatmap* map = panel.heatmap();
        QCOMPARE(map->columns(), 4);
        QCOMPARE(map->rows(), 5);
        QCOMPARE(map->cellCount(), 20);
        const int tps[] = {1, 2, 4, 8}, pps[] = {1, 2, 4, 8, 16};
        int oom = 0, skipped = 0, fits = 0;
        for (int i = 0; i < map->cellCount(); ++i) {
            const auto& p = map->cell(i);
            // Row by row: pp down, tp across; dp takes the rest of the 1,024 devices.
            QCOMPARE(p.mesh.tp, tps[i % 4]);
            QCOMPARE(p.mesh.pp, pps[i / 4]);
            QCOMPARE(p.mesh.dp * p.mesh.tp * p.mesh.pp, 1024);
            switch (map->mark(i)) {
                case PlanHeatmap::Mark::oom:
                    ++oom;
                    QVERIFY(!p.fits);
                    QVERIFY(map->label(i).startsWith(QStringLiteral("OOM")));
                    break;
                case PlanHeatmap::Mark::skipped:
                    ++skipped;
                    QVERIFY(!p.skipped.empty());
                    QCOMPARE(map->label(i), QStringLiteral("skipped"));
                    QVERIFY2(map->toolTipText(i).contains(QString::fromStdString(p.skipped)),
                             qPrintable(map->toolTipText(i)));
                    break;
                case PlanHeatmap::Mark::fits:
                    ++fits;
                    QVERIFY(p.fits && p.skipped.empty());
                    QVERIFY(map->label(i).contains(QStringLiteral("MFU")));
                    break;
            }
        }
        // GPT-3 175B: one device per replica cannot hold it; an interleaved schedule needs pp ≥ 2.
        QVERIFY(oom > 0);
        QVERIFY(skipped > 0);
        QVERIFY(fits > 0);
        const int single = cellOf(map, 1, 1);
        QCOMPARE(map->mark(single), PlanHeatmap::Mark::skipped);
        QVERIFY2(map->toolTipText(single).contains(QStringLiteral("needs at least 2 pipeline stages")),
                 qPrintable(map->toolTipText(single)));
        QCOMPARE(map->mark(cellOf(map, 1, 2)) == PlanHeatmap::Mark::fits, false);
        // The best cell that fits is selected first, and has the most throughput.
        QVERIFY(map->best() >= 0);
        QCOMPARE(panel.selectedCell(), map->best());
        for (int i = 0; i < map->cellCount(); ++i)
            if (map->mark(i) == PlanHeatmap::Mark::fits)
                QVERIFY(map->value(i) <= map->value(map->best()));
        // The published configuration is there, with the experiment's 96 micro-batches.
        const int published = cellOf(map, 8, 8);
        QCOMPARE(map->cell(published).mesh.dp, 16);
        QCOMPARE(map->cell(published).mesh.micro_batches, 96);
        QVERIFY(panel.statusText().contains(QStringLiteral("20 configurations")));
    }

    void clickingACellShowsItsBarsBreakdownAndPipeline() {
        PlanPanel panel;
        panel.resize(1200, 800);
        panel.setExperiment(gpt3());
        panel.setPreset(QStringLiteral("h100-80g"));
        QVERIFY(planNow(panel));
        PlanHeatmap* map = panel.heatmap();
        QCOMPARE(map->cellCount(), 16);
        panel.show();
        QVERIFY(QTest::qWaitForWindowExposed(&panel));
        // Two configurations that fit, clicked one after the other.
        std::vector<int> fitting;
        for (int i = 0; i < map->cellCount(); ++i)
            if (map->mark(i) == PlanHeatmap::Mark::fits) fitting.push_back(i);
        QVERIFY(fitting.size() >= 2);
        for (int i : {fitting[0], fitting[1]}) {
            QTest::mouseClick(map, Qt::LeftButton, {}, map->cellRect(i).center());
            QCOMPARE(panel.selectedCell(), i);
            const auto& p = map->cell(i);
            const auto b = panel.shownBreakdown();
            QCOMPARE(b.size(), size_t{7});
            QCOMPARE(b[0], p.breakdown.compute);
            QCOMPARE(b[1], p.breakdown.recompute);
            QCOMPARE(b[2], p.breakdown.tp_comm);
            QCOMPARE(b[3], p.breakdown.pp_bubble);
            QCOMPARE(b[4], p.breakdown.pp_comm);
            QCOMPARE(b[5], p.breakdown.dp_comm);
            QCOMPARE(b[6], p.breakdown.optimizer);
            double sum = 0;
            for (double s : b) sum += s;
            QVERIFY(std::abs(sum - p.step_time_s) < 1e-6 * p.step_time_s);
            const auto mem = panel.shownMemory();
            QCOMPARE(mem.size(), paralab::kMemCategoryCount);
            for (size_t c = 0; c < mem.size(); ++c) QCOMPARE(mem[c], p.memory[c]);
            QCOMPARE(panel.shownCapacity(), p.memory_capacity);
            QCOMPARE(panel.memoryPlot()->plottableCount(), 6);
            QCOMPARE(panel.breakdownPlot()->plottableCount(), 7);
            // The pipeline, drawn by the Timeline tab's widget: every forward and backward of
            // every stage, one row per stage, the pipeline part of the step, then the exposed
            // gradient sync and the optimizer, so that the whole step is the predicted one.
            TimelinePanel* timeline = panel.timeline();
            const int chunks = p.mesh.chunks();
            QCOMPARE(timeline->devices().size(), p.mesh.pp);
            QCOMPARE(timeline->devices().front(), QStringLiteral("stage 0"));
            QCOMPARE(pipelineSpans(timeline), 2 * p.mesh.pp * chunks * p.mesh.micro_batches);
            double first = 1e300, pipelineEnd = -1e300, end = -1e300;
            for (const auto& s : timeline->spans()) {
                first = std::min(first, s.t_begin);
                end = std::max(end, s.t_end);
                if (s.phase.startsWith(QLatin1String("forward")) || s.phase.startsWith(QLatin1String("backward")))
                    pipelineEnd = std::max(pipelineEnd, s.t_end);
            }
            const double pipeline = p.step_time_s - p.breakdown.dp_comm - p.breakdown.optimizer;
            QVERIFY2(std::abs(pipelineEnd - first - pipeline) < 1e-9 + 1e-6 * pipeline,
                     qPrintable(QStringLiteral("%1 vs %2").arg(pipelineEnd - first).arg(pipeline)));
            QVERIFY(std::abs(end - first - p.step_time_s) < 1e-9 + 1e-6 * p.step_time_s);
            // Its bubble beside the ideal of the schedule, as for a run.
            QVERIFY2(timeline->bubbleText().contains(QStringLiteral("(p−1)/(v·m+p−1)")) &&
                         timeline->bubbleText().contains(QStringLiteral("measured")),
                     qPrintable(timeline->bubbleText()));
            const double bubble = timeline->measuredBubble();
            QVERIFY2(bubble > 0 && bubble < 1, qPrintable(QString::number(bubble)));
            // Hovering names the stage and the phase.
            const auto firstSpan = timeline->spans().front();
            QVERIFY2(timeline->describeAt(1000 * (firstSpan.t_begin + firstSpan.t_end) / 2 - 1000 * first, firstSpan.row)
                         .startsWith(firstSpan.device + QStringLiteral(" · step 0 · ") + firstSpan.phase),
                     qPrintable(timeline->describeAt(1000 * (firstSpan.t_begin + firstSpan.t_end) / 2 - 1000 * first, firstSpan.row)));
            // 1,024 devices: Run here says why not.
            QVERIFY(!panel.runHereButton()->isEnabled());
            QVERIFY2(panel.runHereNote().contains(QStringLiteral("at most 8")),
                     qPrintable(panel.runHereNote()));
        }
        // An out-of-memory cell shows its bars past the capacity.
        int oom = -1;
        for (int i = 0; i < map->cellCount() && oom < 0; ++i)
            if (map->mark(i) == PlanHeatmap::Mark::oom) oom = i;
        QVERIFY(oom >= 0);
        QTest::mouseClick(map, Qt::LeftButton, {}, map->cellRect(oom).center());
        double total = 0;
        for (double m : panel.shownMemory()) total += m;
        QVERIFY(total > panel.shownCapacity());
        QVERIFY(panel.selectionText().contains(QStringLiteral("out of memory")));
        // A skipped cell: its reason, no bars.
        const int skipped = cellOf(map, 1, 1);
        QTest::mouseClick(map, Qt::LeftButton, {}, map->cellRect(skipped).center());
        QVERIFY(panel.shownMemory().empty());
        QCOMPARE(panel.memoryPlot()->plottableCount(), 0);
        QVERIFY(panel.selectionText().contains(QStringLiteral("Skipped")));
        QVERIFY(panel.timeline()->spans().isEmpty());
    }

    // Goodput of the selected configuration from the tab's inputs, the engine's figures; a bad
    // input says which.
    void goodputOfTheSelectedConfiguration() {
        PlanPanel panel;
        panel.setExperiment(gpt3());
        panel.setPreset(QStringLiteral("h100-80g"));
        QVERIFY(planNow(panel));
        const int i = panel.selectedCell();
        QVERIFY(i >= 0);
        const auto& p = panel.heatmap()->cell(i);
        paralab::plan::GoodputInputs in;
        in.failure_rate_per_gpu_hour = 1.97e-5;
        in.storage_bytes_per_s = 2000e9;
        in.restart_s = 600;
        in.tokens = 15.6e12;
        in.price_per_gpu_hour = paralab::plan::preset("h100-80g").price_per_gpu_hour;
        const auto g = paralab::plan::goodput_of(p, in);
        QVERIFY2(panel.goodputText().contains(QStringLiteral("Goodput %1%").arg(100 * g.goodput, 0, 'f', 1)),
                 qPrintable(panel.goodputText()));
        QVERIFY(panel.goodputText().contains(QStringLiteral("cost")));  // h100-80g has a price
        // The stack box re-plans with that stack: Megatron-LM 2021's is slower than the ideal.
        const double ideal = p.step_time_s;
        const paralab::plan::Mesh mesh = p.mesh;
        panel.stackBox()->setCurrentText(QStringLiteral("megatron-lm-2021"));
        QVERIFY(planNow(panel));
        bool found = false;
        for (int c = 0; c < panel.heatmap()->cellCount(); ++c) {
            const auto& q = panel.heatmap()->cell(c);
            if (q.skipped.empty() && q.mesh.tp == mesh.tp && q.mesh.pp == mesh.pp) {
                QVERIFY(q.step_time_s > ideal);
                found = true;
            }
        }
        QVERIFY(found);
        panel.goodputEdit(0)->setText(QStringLiteral("0"));
        emit panel.goodputEdit(0)->editingFinished();
        QVERIFY2(panel.goodputText().contains(QStringLiteral("--failure-rate: expected a failure rate")),
                 qPrintable(panel.goodputText()));
        panel.goodputEdit(0)->setText(QStringLiteral("1e-5"));
        panel.goodputEdit(1)->setText(QStringLiteral("fast"));
        emit panel.goodputEdit(1)->editingFinished();
        QVERIFY2(panel.goodputText().contains(QStringLiteral("storage GB/s is not a number")),
                 qPrintable(panel.goodputText()));
    }

    void runHereBuildsTheChosenConfiguration() {
        const Experiment base = gptChar();
        paralab::plan::Mesh mesh;
        mesh.dp = 1;
        mesh.tp = 2;
        mesh.pp = 2;
        mesh.zero = 1;
        mesh.micro_batches = 4;
        mesh.schedule = paralab::strategy::stages::Schedule::gpipe;
        mesh.recompute = paralab::nn::Recompute::selective;
        mesh.precision = paralab::MatmulPrecision::bf16;
        const auto r = PlanPanel::runHereExperiment(base, mesh);
        QVERIFY2(r.experiment.has_value(), qPrintable(r.why));
        const Experiment& e = *r.experiment;
        QCOMPARE(e.strategy.type, std::string("hybrid"));
        using paralab::config::OptionValue;
        QCOMPARE(std::get<int64_t>(e.strategy.options.at("dp")), int64_t{1});
        QCOMPARE(std::get<int64_t>(e.strategy.options.at("tp")), int64_t{2});
        QCOMPARE(std::get<int64_t>(e.strategy.options.at("pp")), int64_t{2});
        QCOMPARE(std::get<int64_t>(e.strategy.options.at("zero")), int64_t{1});
        QCOMPARE(std::get<int64_t>(e.strategy.options.at("micro_batches")), int64_t{4});
        QCOMPARE(std::get<std::string>(e.strategy.options.at("schedule")), std::string("gpipe"));
        QCOMPARE((e.devices), (std::vector<std::string>{"cpu:0", "cpu:1", "cpu:2", "cpu:3"}));
        QCOMPARE(e.train.precision, std::string("fp32"));
        QCOMPARE(e.train.recompute, std::string("selective"));
        QCOMPARE(e.train.max_steps.value_or(-1), int64_t{20});
        QCOMPARE(e.layers.size(), base.layers.size());
        QCOMPARE(e.data.batch_size, base.data.batch_size);
        QVERIFY(paralab::run::validate(e).empty());
        // It round-trips through the file format (what the run store keeps).
        QCOMPARE(paralab::run::to_json(paralab::run::parse_experiment(paralab::run::to_json(e))),
                 paralab::run::to_json(e));
        // More devices than this machine runs, or a mesh the model refuses: why, no experiment.
        mesh.dp = 4;
        auto far = PlanPanel::runHereExperiment(base, mesh);
        QVERIFY(!far.experiment);
        QVERIFY2(far.why.contains(QStringLiteral("16 devices")) &&
                     far.why.contains(QStringLiteral("at most 8")),
                 qPrintable(far.why));
        mesh.dp = 1;
        mesh.pp = 1;
        mesh.tp = 8;  // 4 heads
        auto refused = PlanPanel::runHereExperiment(base, mesh);
        QVERIFY(!refused.experiment);
        QVERIFY2(refused.why.contains(QStringLiteral("strategy")), qPrintable(refused.why));
    }

    void runHereStartsTheRunInTheWindow() {
        MainWindow w;
        // The user's own file: Run here must not make Save write the planned configuration over it.
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString mine = dir.filePath(QStringLiteral("mine.paralab.json"));
        QVERIFY(QFile::copy(QStringLiteral(":/examples/gpt-char.paralab.json"), mine));
        QFile::setPermissions(mine, QFileDevice::ReadOwner | QFileDevice::WriteOwner);
        QCOMPARE(w.openExperiment(mine, false), QString());
        QCOMPARE(w.currentPath(), mine);
        PlanPanel* panel = w.planPanel();
        QCOMPARE(w.viewTabs()->tabText(w.viewTabs()->indexOf(panel)), QStringLiteral("Plan"));
        QCOMPARE(w.viewTabs()->indexOf(panel), w.viewTabs()->indexOf(w.runsPanel()) + 1);
        panel->setPreset(QStringLiteral("local"));
        panel->nodesBox()->setValue(1);
        panel->gpusBox()->setValue(4);
        panel->setSweep(0, QStringLiteral("tp"), QStringLiteral("1,2,4"));
        panel->setSweep(1, QStringLiteral("pp"), QStringLiteral("1,2"));
        QVERIFY(planNow(*panel));
        QCOMPARE(panel->errorText(), QString());
        PlanHeatmap* map = panel->heatmap();
        QCOMPARE(map->cellCount(), 6);
        const int cell = cellOf(map, 2, 2);  // dp 1 · tp 2 · pp 2 on cpu:0..3
        QVERIFY(cell >= 0);
        QCOMPARE(map->mark(cell) == PlanHeatmap::Mark::skipped, false);
        panel->selectCell(cell);
        QVERIFY2(panel->runHereButton()->isEnabled(), qPrintable(panel->runHereNote()));
        QSignalSpy finished(w.controller(), &paralab::ui::RunController::finished);
        QTest::mouseClick(panel->runHereButton(), Qt::LeftButton);
        QVERIFY2(w.controller()->isRunning(), qPrintable(panel->runHereNote()));
        QVERIFY(panel->runHereNote().startsWith(QStringLiteral("Started")));
        // The window now shows and runs the planned configuration.
        const Experiment& e = *w.experiment();
        QCOMPARE(e.strategy.type, std::string("hybrid"));
        QCOMPARE(e.devices.size(), size_t{4});
        QCOMPARE(std::get<int64_t>(e.strategy.options.at("tp")), int64_t{2});
        QCOMPARE(std::get<int64_t>(e.strategy.options.at("pp")), int64_t{2});
        QVERIFY(w.isWindowModified());
        QCOMPARE(w.currentPath(), QString());  // Save asks where
        QCOMPARE(w.viewTabs()->currentWidget(), static_cast<QWidget*>(w.plot()));
        // A second Run here while it runs is refused, saying why.
        QCOMPARE(w.runPlanned(e), QStringLiteral("a run is going: stop it first"));
        w.stopRun();
        QTRY_VERIFY_WITH_TIMEOUT(finished.count() > 0, 120000);
    }

    void errorsAreShownInTheTab() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        PlanPanel panel;
        panel.setExperiment(gpt3());
        QVERIFY(planNow(panel));
        QVERIFY(panel.heatmap()->cellCount() > 0);
        // A cluster file with a bad value: the message names the file and the value.
        const QString bad = dir.filePath(QStringLiteral("bad-cluster.json"));
        QFile f(bad);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(R"({"name": "mine", "nodes": 2, "gpus_per_node": "eight"})");
        f.close();
        const QString message = panel.loadClusterFile(bad);
        QVERIFY(!message.isEmpty());
        QCOMPARE(panel.errorText(), message);
        QVERIFY2(message.contains(QStringLiteral("bad-cluster.json")), qPrintable(message));
        QVERIFY2(message.contains(QStringLiteral("gpus_per_node")), qPrintable(message));
        QCOMPARE(panel.heatmap()->cellCount(), 0);
        QCOMPARE(panel.clusterBox()->currentText(),
                 QStringLiteral("a100-80g"));  // the preset stays
        // Not JSON at all.
        const QString notJson = dir.filePath(QStringLiteral("not-json.json"));
        QFile g(notJson);
        QVERIFY(g.open(QIODevice::WriteOnly));
        g.write("{ nodes: ");
        g.close();
        QVERIFY(panel.loadClusterFile(notJson).contains(QStringLiteral("not-json.json")));
        // A good plan again clears the error.
        QVERIFY(planNow(panel));
        QCOMPARE(panel.errorText(), QString());
        // A sweep value the key does not take.
        panel.setSweep(0, QStringLiteral("tp"), QStringLiteral("1,0"));
        QVERIFY(planNow(panel));
        QVERIFY2(panel.errorText().contains(QStringLiteral("tp=0")), qPrintable(panel.errorText()));
        panel.setSweep(0, QStringLiteral("pp"), QStringLiteral("1,2"));
        QVERIFY(planNow(panel));
        QVERIFY(panel.errorText().contains(QStringLiteral("different keys")));
        // A strategy the planner does not model.
        panel.setSweep(0, QStringLiteral("tp"), QStringLiteral("1,2"));
        Experiment hogwild = gptChar();
        hogwild.strategy.type = "hogwild";
        hogwild.strategy.options.clear();
        panel.setExperiment(hogwild);
        QVERIFY(planNow(panel));
        QVERIFY2(panel.errorText().contains(QStringLiteral("hogwild")),
                 qPrintable(panel.errorText()));
        QCOMPARE(panel.heatmap()->cellCount(), 0);
    }

    // Export: the tab as a PNG and a PDF with the plan's caption, every configuration as CSV
    // (one row each, the figures of `paralab plan --json`) and as JSON (the same objects); the
    // memory and breakdown plots through the window's export list; nothing before a plan.
    void exportsWriteTheTabAndEveryConfiguration() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        PlanPanel panel;
        panel.resize(1200, 800);
        QVERIFY(!panel.exportConfigurations(dir.filePath(QStringLiteral("none.csv"))));
        QVERIFY(!panel.hasPlan());
        panel.setExperiment(gpt3());
        panel.setPreset(QStringLiteral("h100-80g"));
        panel.setSweep(1, QStringLiteral("pp"), QStringLiteral("4,8"));
        QVERIFY(planNow(panel));
        QVERIFY(panel.hasPlan());
        const int cells = panel.heatmap()->cellCount();
        QCOMPARE(cells, 8);
        QVERIFY(panel.planCaption().startsWith(QStringLiteral("Plan of gpt3-175b on h100-80g · 128 × 8 devices · selected dp")));

        const QString png = dir.filePath(QStringLiteral("plan.png"));
        QVERIFY(panel.exportTab(png));
        const QImage image(png);
        QVERIFY(!image.isNull());
        QVERIFY(image.width() >= 2 * 1000);  // twice the tab's pixels
        const QString pdf = dir.filePath(QStringLiteral("plan.pdf"));
        QVERIFY(panel.exportTab(pdf));
        QFile pdfFile(pdf);
        QVERIFY(pdfFile.open(QIODevice::ReadOnly));
        QVERIFY(pdfFile.read(5) == "%PDF-");

        const QString json = dir.filePath(QStringLiteral("plan.json"));
        QVERIFY(panel.exportConfigurations(json));
        QFile jsonFile(json);
        QVERIFY(jsonFile.open(QIODevice::ReadOnly));
        const auto all = nlohmann::json::parse(jsonFile.readAll().toStdString());
        QVERIFY(all.is_array());
        QCOMPARE(static_cast<int>(all.size()), cells);
        for (int i = 0; i < cells; ++i) {
            const auto& p = panel.heatmap()->cell(i);
            QCOMPARE(all[i]["config"]["tp"].get<int>(), p.mesh.tp);
            QCOMPARE(all[i]["config"]["pp"].get<int>(), p.mesh.pp);
            if (p.skipped.empty()) QCOMPARE(all[i]["step_time_s"].get<double>(), p.step_time_s);
        }

        const QString csv = dir.filePath(QStringLiteral("plan.csv"));
        QVERIFY(panel.exportConfigurations(csv));
        QFile csvFile(csv);
        QVERIFY(csvFile.open(QIODevice::ReadOnly | QIODevice::Text));
        const QStringList lines = QString::fromUtf8(csvFile.readAll()).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
        QCOMPARE(lines.size(), 1 + cells);
        const QStringList header = lines.front().split(QLatin1Char(','));
        QVERIFY2(header.contains(QStringLiteral("config.tp")) && header.contains(QStringLiteral("step_time_s")) &&
                     header.contains(QStringLiteral("memory_bytes.total")) && header.back() == QStringLiteral("skipped"),
                 qPrintable(lines.front()));
        const int tpColumn = static_cast<int>(header.indexOf(QStringLiteral("config.tp")));
        for (int i = 0; i < cells; ++i)
            QCOMPARE(lines[i + 1].split(QLatin1Char(','))[tpColumn].toInt(), panel.heatmap()->cell(i).mesh.tp);

        // The window's list: memory, breakdown, and the tab last (Ctrl+E on the Plan tab).
        const auto exports = panel.plotExports();
        QCOMPARE(exports.size(), 3);
        QCOMPARE(exports.back().fileStem, QStringLiteral("paralab-plan"));
        const QString memoryCsv = dir.filePath(QStringLiteral("memory.csv"));
        QVERIFY(exports.front().csv(memoryCsv));
        QVERIFY(QFileInfo(memoryCsv).size() > 0);
        QVERIFY(exports[1].image(dir.filePath(QStringLiteral("breakdown.png"))));
        QVERIFY(!QImage(dir.filePath(QStringLiteral("breakdown.png"))).isNull());
    }

    void aNewPlanWhilePlanningWinsAndClosingWaits() {
        PlanPanel panel;
        panel.setExperiment(gpt3());
        panel.setPreset(QStringLiteral("h100-80g"));
        panel.setSweep(0, QStringLiteral("tp"), QStringLiteral("1,2"));
        panel.replan();
        QVERIFY(panel.isPlanning());
        panel.setSweep(0, QStringLiteral("tp"), QStringLiteral("1,2,4,8"));
        panel.setSweep(1, QStringLiteral("pp"), QStringLiteral("2,4,8"));
        panel.replan();  // queued behind the first, which stops early and shows nothing
        QTRY_COMPARE_WITH_TIMEOUT(panel.heatmap()->cellCount(), 12, 30000);
        QTRY_VERIFY_WITH_TIMEOUT(!panel.isPlanning(), 30000);
        QCOMPARE(panel.heatmap()->cellCount(), 12);
        // A panel closed while it plans waits for its worker, which stops at the next cell.
        auto* closing = new PlanPanel;
        closing->setExperiment(gpt3());
        closing->replan();
        QVERIFY(closing->isPlanning());
        delete closing;
    }

    void aPipelineTooLongToDrawSaysSo() {
        // 100,000 micro-batches on 2 stages: predicted, but 400,000 spans are not drawn.
        Experiment e = gptChar();
        e.data.batch_size = 100000;
        PlanPanel panel;
        panel.setExperiment(e);
        panel.setPreset(QStringLiteral("local"));
        panel.nodesBox()->setValue(1);
        panel.gpusBox()->setValue(2);
        panel.setSweep(0, QStringLiteral("micro_batches"), QStringLiteral("4,100000"));
        panel.setSweep(1, QStringLiteral("pp"), QStringLiteral("2"));
        QVERIFY(planNow(panel));
        QCOMPARE(panel.errorText(), QString());
        PlanHeatmap* map = panel.heatmap();
        QCOMPARE(map->cellCount(), 2);
        QCOMPARE(map->cell(1).mesh.micro_batches, 100000);
        QVERIFY(map->cell(1).skipped.empty());
        panel.selectCell(0);
        QCOMPARE(pipelineSpans(panel.timeline()), 2 * 2 * 4);
        panel.selectCell(1);
        QVERIFY(panel.timeline()->spans().isEmpty());
        QCOMPARE(panel.shownBreakdown().size(), size_t{7});  // the rest is shown
    }

    void hundredConfigurationsTakeAFewSeconds() {
        // GPT-3 175B with 1F1B on 120 × 8 = 960 H100s, tp 8: every pp below divides the 120
        // replicas' devices, so that most configurations are predicted, not skipped.
        Experiment e = gpt3();
        e.strategy.options["schedule"] = std::string("1f1b");
        e.strategy.options["interleave"] = int64_t{1};
        PlanPanel panel;
        panel.setExperiment(e);
        panel.setPreset(QStringLiteral("h100-80g"));
        panel.nodesBox()->setValue(120);
        panel.setSweep(0, QStringLiteral("micro_batches"),
                       QStringLiteral("1,2,4,6,8,12,16,24,32,48"));
        panel.setSweep(1, QStringLiteral("pp"), QStringLiteral("1,2,3,4,5,6,8,10,12,15"));
        QSignalSpy planned(&panel, &PlanPanel::planned);
        panel.replan();
        QVERIFY(panel.isPlanning());  // on the worker: the GUI thread goes on
        QVERIFY(planned.wait(30000));
        QCOMPARE(panel.heatmap()->cellCount(), 100);
        int predicted = 0;
        for (int i = 0; i < 100; ++i)
            predicted += panel.heatmap()->mark(i) != PlanHeatmap::Mark::skipped;
        QVERIFY2(predicted >= 50, qPrintable(panel.statusText()));
        qInfo("100 configurations of GPT-3 175B on 960 H100s: %.3f s (%s)",
              panel.lastSweepSeconds(),
              qPrintable(panel.statusText()
                             .section(QStringLiteral(": "), 2, 2)
                             .section(QStringLiteral(" · "), 0, 0)));
        QVERIFY2(panel.lastSweepSeconds() < 5,
                 qPrintable(QString::number(panel.lastSweepSeconds())));
    }

    // docs/screenshot-plan.png: the GPT-3 175B example on 128 × 8 H100s, tp × pp, a cell
    // selected, at 1600 x 1000. Run under a display (xvfb-run -a -s "-screen 0 1600x1000x24"
    // ui_plan_panel_test screenshot -platform xcb) with PARALAB_SCREENSHOT_DIR set.
    void screenshot() {
        const QString dir = qEnvironmentVariable("PARALAB_SCREENSHOT_DIR");
        if (dir.isEmpty()) QSKIP("set PARALAB_SCREENSHOT_DIR to take the Plan tab's screenshot");
        MainWindow w;
        const QString path = QStringLiteral(PARALAB_SOURCE_DIR
                                            "/resources/examples/plan/gpt3-175b.plan.paralab.json");
        QCOMPARE(w.openExperiment(path, false), QString());
        w.resize(1600, 1000);
        w.move(0, 0);
        w.viewTabs()->setCurrentWidget(w.planPanel());
        // The model's side narrower, as a user makes room for the sweep.
        if (auto* splitter = qobject_cast<QSplitter*>(w.centralWidget()))
            splitter->setSizes({430, 1170});
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        PlanPanel* panel = w.planPanel();
        panel->setPreset(QStringLiteral("h100-80g"));
        QCOMPARE(panel->nodesBox()->value() * panel->gpusBox()->value(), 1024);
        QVERIFY(planNow(*panel));
        panel->selectCell(cellOf(panel->heatmap(), 8, 8));
        for (int i = 0; i < 4; ++i) QCoreApplication::processEvents();
        panel->memoryPlot()->replot();  // laid out at its final size
        QVERIFY(w.grab().save(QDir(dir).filePath(QStringLiteral("screenshot-plan.png"))));
        // And the tab as File ▸ Export writes it (for looking at, not for the docs).
        QVERIFY(panel->exportTab(QDir(dir).filePath(QStringLiteral("plan-export.png"))));
        // The selected configuration's predicted step, on the page beside the sweep.
        panel->pages()->setCurrentWidget(panel->timeline());
        for (int i = 0; i < 4; ++i) QCoreApplication::processEvents();
        QVERIFY(w.grab().save(QDir(dir).filePath(QStringLiteral("screenshot-plan-predicted.png"))));
    }
};

QTEST_MAIN(PlanPanelTest)
#include "test_plan_panel.moc"
