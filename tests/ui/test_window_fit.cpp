// The window on a classroom projector: its minimum size fits 1024 x 700, and laid out at
// 1280 x 720 and 1024 x 768 every tab's key widgets (Export buttons, each plot with its right
// axis and legend, the runs table) lie inside what the window shows, once a scroll area has
// scrolled to them. View ▸ Presentation enlarges fonts and pens and puts them back; exported
// pictures carry the run's caption; the dashboard's bars start at zero.
#include <QAbstractScrollArea>
#include <QHeaderView>
#include <QScrollArea>
#include <QTabWidget>
#include <QTableView>
#include <QToolButton>
#include <QPushButton>
#include <QtTest>
#include <QTemporaryDir>
#include <QSignalSpy>
#include <QDir>
#include <QImage>
#include <qcustomplot.h>

#include "engine/strategy/registry.h"
#include "ui/mainwindow/main_window.h"
#include "ui/mainwindow/presentation_mode.h"
#include "ui/panels/common/plot_export.h"
#include "ui/panels/common/plot_style.h"
#include "ui/panels/dashboard/device_dashboard.h"
#include "ui/panels/dashboard/loss_plot_panel.h"
#include "ui/session/run_controller.h"
#include "ui/panels/runs/runs_panel.h"
#include "ui/panels/lessons/lessons_panel.h"
#include <QComboBox>
#include <QLineEdit>

using paralab::config::StepRecord;
using paralab::ui::DeviceDashboard;
using paralab::ui::LessonsPanel;
using paralab::ui::MainWindow;
using paralab::ui::PresentationMode;

namespace {

const char* kDefault = ":/examples/spirals-mlp.paralab.json";

// Lays out everything pending (a resize, a tab switch) without waiting for time.
void settle(QWidget* w) {
    for (int i = 0; i < 4; ++i) {
        QCoreApplication::sendPostedEvents(nullptr, QEvent::LayoutRequest);
        QCoreApplication::processEvents();
    }
    w->layout() ? w->layout()->activate() : false;
}

// What of `child` the window shows, in window coordinates: its rect clipped by every ancestor,
// the window itself being `shown` (the screen) large.
QRect visiblePart(QWidget* child, QWidget* window, QSize shown) {
    QRect visible(child->mapTo(window, QPoint(0, 0)), child->size());
    for (QWidget* w = child->parentWidget(); w && w != window; w = w->parentWidget())
        visible &= QRect(w->mapTo(window, QPoint(0, 0)), w->size());
    return visible & QRect(QPoint(0, 0), shown);
}

// `child` whole on screen, after any scroll area around it has scrolled to it.
QString checkShown(QWidget* child, QWidget* window, QSize shown, const QString& what) {
    for (QWidget* w = child->parentWidget(); w && w != window; w = w->parentWidget())
        if (auto* scroll = qobject_cast<QScrollArea*>(w)) {
            // The whole widget (ensureWidgetVisible makes only a line edit's cursor visible).
            const QRect r(child->mapTo(scroll->widget(), QPoint(0, 0)), child->size());
            scroll->ensureVisible(r.center().x(), r.center().y(), r.width() / 2 + 1, r.height() / 2 + 1);
        }
    settle(window);
    const QRect full(child->mapTo(window, QPoint(0, 0)), child->size());
    const QRect part = visiblePart(child, window, shown);
    if (part == full) return {};
    // On failure, what cuts it: the innermost ancestor it does not fit in.
    QString cutBy = QStringLiteral("the screen");
    for (QWidget* w = child->parentWidget(); w && w != window; w = w->parentWidget())
        if (!QRect(w->mapTo(window, QPoint(0, 0)), w->size()).contains(full)) {
            cutBy = w->objectName().isEmpty() ? QString::fromLatin1(w->metaObject()->className()) : w->objectName();
            break;
        }
    return QStringLiteral("%1 at %2x%3: %4 shows only %5,%6 %7x%8 of %9,%10 %11x%12 (cut by %13)")
        .arg(what)
        .arg(shown.width())
        .arg(shown.height())
        .arg(child->objectName().isEmpty() ? QString::fromLatin1(child->metaObject()->className()) : child->objectName())
        .arg(part.x()).arg(part.y()).arg(part.width()).arg(part.height())
        .arg(full.x()).arg(full.y()).arg(full.width()).arg(full.height())
        .arg(cutBy);
}

// The key widgets of the tab in view: every plot (its legend inside it), every Export button.
QStringList checkTab(QWidget* tab, QWidget* window, QSize shown, const QString& name) {
    QStringList problems;
    for (QCustomPlot* plot : tab->findChildren<QCustomPlot*>()) {
        if (!plot->isVisibleTo(window)) continue;
        const QString p = checkShown(plot, window, shown, name + QStringLiteral(" plot"));
        if (!p.isEmpty()) problems << p;
        plot->replot();
        if (plot->legend && plot->legend->visible() && plot->legend->itemCount() > 0 &&
            !plot->rect().contains(plot->legend->outerRect()))
            problems << QStringLiteral("%1 at %2x%3: a legend overflows its plot").arg(name).arg(shown.width()).arg(shown.height());
        QString title;
        for (QCPLayoutElement* e : plot->plotLayout()->elements(false))
            if (auto* text = qobject_cast<QCPTextElement*>(e); text && title.isEmpty()) title = text->text();
        if (plot->axisRect()->outerRect().right() > plot->width())
            problems << QStringLiteral("%1 at %2x%3: %4's right axis is cut").arg(name).arg(shown.width()).arg(shown.height()).arg(title);
        if (plot->axisRect()->width() < 60 || plot->axisRect()->height() < 40)
            problems << QStringLiteral("%1 at %2x%3: %4's axes are %5x%6 px")
                            .arg(name).arg(shown.width()).arg(shown.height()).arg(title)
                            .arg(plot->axisRect()->width()).arg(plot->axisRect()->height());
    }
    QList<QAbstractButton*> buttons;
    for (auto* b : tab->findChildren<QToolButton*>()) buttons << b;
    for (auto* b : tab->findChildren<QPushButton*>()) buttons << b;
    for (QAbstractButton* b : buttons) {
        if (!b->isVisibleTo(window) || !b->text().startsWith(QLatin1String("Export"))) continue;
        const QString p = checkShown(b, window, shown, name + QStringLiteral(" Export button"));
        if (!p.isEmpty()) problems << p;
    }
    return problems;
}

// Every plot drawn now, rather than when its pacer next lets it.
void drawNow(QWidget* window) {
    for (QCustomPlot* plot : window->findChildren<QCustomPlot*>()) plot->replot(QCustomPlot::rpImmediateRefresh);
}

StepRecord record(const std::string& device, int64_t step) {
    StepRecord r;
    r.step = step;
    r.device = device;
    r.loss = 2.0 / static_cast<double>(step);
    r.samples = 32;
    r.wall_s = 0.01 * static_cast<double>(step);
    r.compute_ms = 5;
    r.comm_ms = 2;
    r.idle_ms = 0.5;
    r.data_wait_ms = 0.25;
    for (size_t c = 0; c < paralab::kMemCategoryCount; ++c) {
        r.memory.current[c] = static_cast<int64_t>((c + 1) * 1000);
        r.memory.current_total += r.memory.current[c];
    }
    return r;
}

QCustomPlot* plotTitled(QWidget* parent, const QString& title) {
    for (QCustomPlot* plot : parent->findChildren<QCustomPlot*>())
        for (QCPLayoutElement* e : plot->plotLayout()->elements(false))
            if (auto* text = qobject_cast<QCPTextElement*>(e); text && text->text().startsWith(title)) return plot;
    return nullptr;
}

}  // namespace

class WindowFitTest : public QObject {
    Q_OBJECT
private slots:
    void minimumSizeFitsAProjector() {
        MainWindow w;
        QCOMPARE(w.openExperiment(kDefault, false), QString());
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        settle(&w);
        const QSize min = w.minimumSizeHint().expandedTo(w.minimumSize());
        // On failure, what asks for the room: each tab's own minimum.
        QStringList parts;
        auto sizeText = [](QSize s) { return QStringLiteral("%1x%2").arg(s.width()).arg(s.height()); };
        for (QTabWidget* tabs : {w.experimentTabs(), w.viewTabs()})
            for (int i = 0; i < tabs->count(); ++i)
                parts << tabs->tabText(i) + QLatin1Char(' ') +
                             sizeText(tabs->widget(i)->minimumSizeHint().expandedTo(tabs->widget(i)->minimumSize()));
        QVERIFY2(min.width() <= 1024 && min.height() <= 700,
                 qPrintable(QStringLiteral("minimum size %1 (tabs: %2)").arg(sizeText(min), parts.join(QStringLiteral(", ")))));
    }

    void everyTabFits_data() {
        QTest::addColumn<QSize>("size");
        QTest::newRow("1280x720") << QSize(1280, 720);
        QTest::newRow("1024x768") << QSize(1024, 768);
    }

    void everyTabFits() {
        QFETCH(QSize, size);
        MainWindow w;
        QCOMPARE(w.openExperiment(kDefault, false), QString());
        w.resize(size);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        // Eight devices: the dashboard's legends at their longest.
        QVector<StepRecord> steps, global;
        for (int64_t s = 1; s <= 20; ++s) {
            for (int d = 0; d < 8; ++d) steps.append(record("cpu:" + std::to_string(d), s));
            global.append(record("all", s));
        }
        w.deviceDashboard()->addDeviceSteps(steps);
        w.deviceDashboard()->addSteps(global);
        w.plot()->addSteps(global);
        settle(&w);
        QStringList problems;
        if (w.width() > size.width() || w.height() > size.height())
            problems << QStringLiteral("the window is %1x%2").arg(w.width()).arg(w.height());
        for (QTabWidget* tabs : {w.experimentTabs(), w.viewTabs()}) {
            for (int i = 0; i < tabs->count(); ++i) {
                tabs->setCurrentIndex(i);
                // A tab may still be laying out what a worker just finished (the Plan tab's plan
                // grows its texts above the plots): checked until it settles or 5 s pass, and
                // what is still wrong then is reported below.
                QStringList tabProblems;
                (void)QTest::qWaitFor(
                    [&] {
                        settle(&w);
                        tabProblems = checkTab(tabs->widget(i), &w, size, tabs->tabText(i));
                        return tabProblems.isEmpty();
                    },
                    5000);
                problems += tabProblems;
            }
        }
        // The runs table shows more than a couple of rows.
        w.viewTabs()->setCurrentWidget(w.runsPanel());
        settle(&w);
        if (auto* table = w.viewTabs()->currentWidget()->findChild<QTableView*>()) {
            const int rows = table->viewport()->height() / std::max(1, table->verticalHeader()->defaultSectionSize());
            if (rows < 5) problems << QStringLiteral("the runs table shows %1 rows").arg(rows);
        }
        QVERIFY2(problems.isEmpty(), qPrintable(problems.join(QLatin1Char('\n'))));
    }

    // The Lessons tab with every built-in lesson: its experiment buttons, every question's answer
    // and Check button inside the window once the questions have scrolled to them, and the
    // questions never scrolled sideways; in presentation mode too (the projector's size).
    void lessonsFit_data() {
        QTest::addColumn<QSize>("size");
        QTest::addColumn<bool>("presentation");
        QTest::newRow("1280x720") << QSize(1280, 720) << false;
        QTest::newRow("1024x768") << QSize(1024, 768) << false;
        QTest::newRow("1280x720 presentation") << QSize(1280, 720) << true;
        QTest::newRow("1024x768 presentation") << QSize(1024, 768) << true;
    }

    void lessonsFit() {
        QFETCH(QSize, size);
        QFETCH(bool, presentation);
        MainWindow w;
        QCOMPARE(w.openExperiment(kDefault, false), QString());
        w.resize(size);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        if (presentation) {
            w.findChild<PresentationMode*>()->setOn(true);
            // A projector's screen is the window's size.
            w.setWindowState(w.windowState() & ~Qt::WindowFullScreen);
            w.resize(size);
        }
        LessonsPanel* panel = w.lessonsPanel();
        w.viewTabs()->setCurrentWidget(panel);
        settle(&w);
        QStringList problems;
        const QString at = presentation ? QStringLiteral("presentation ") : QString();
        for (const QString& path : panel->builtinLessons()) {
            QCOMPARE(panel->openLesson(path), QString());
            settle(&w);
            const QString name = at + QString::fromStdString(panel->lesson()->title);
            if (w.width() > size.width() || w.height() > size.height())
                problems << QStringLiteral("%1: the window is %2x%3").arg(name).arg(w.width()).arg(w.height());
            auto* questions = panel->findChild<QScrollArea*>(QStringLiteral("lessonQuestions"));
            QVERIFY(questions);
            if (questions->widget()->width() > questions->viewport()->width())
                problems << QStringLiteral("%1 at %2x%3: the questions are %4 px wide in %5 px")
                                .arg(name).arg(size.width()).arg(size.height())
                                .arg(questions->widget()->width()).arg(questions->viewport()->width());
            // With PARALAB_SCREENSHOT_DIR: each lesson as it opens (fit-lesson-N-WxH[-presentation].png).
            if (const QString dir = qEnvironmentVariable("PARALAB_SCREENSHOT_DIR"); !dir.isEmpty())
                QVERIFY(w.grab().save(QDir(dir).filePath(QStringLiteral("fit-lesson-%1-%2x%3%4.png")
                                                             .arg(panel->builtinLessons().indexOf(path) + 1)
                                                             .arg(size.width()).arg(size.height())
                                                             .arg(presentation ? QStringLiteral("-presentation") : QString()))));
            for (QPushButton* b : panel->experimentButtons())
                if (QString p = checkShown(b, &w, size, name + QStringLiteral(" experiment button")); !p.isEmpty()) problems << p;
            for (int i = 0; i < static_cast<int>(panel->lesson()->questions.size()); ++i) {
                QWidget* answer = panel->answerEdit(i) ? static_cast<QWidget*>(panel->answerEdit(i)) : panel->choiceBox(i);
                for (QWidget* x : {answer, static_cast<QWidget*>(panel->checkButton(i))})
                    if (QString p = checkShown(x, &w, size, name + QStringLiteral(" question %1").arg(i + 1)); !p.isEmpty())
                        problems << p;
            }
        }
        QVERIFY2(problems.isEmpty(), qPrintable(problems.join(QLatin1Char('\n'))));
    }

    void presentationEnlargesAndRestores() {
        MainWindow w;
        QCOMPARE(w.openExperiment(kDefault, false), QString());
        w.resize(1280, 720);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        // Curves to thicken: two devices and the global curve on the dashboard.
        QVector<StepRecord> steps;
        for (int64_t s = 1; s <= 20; ++s)
            for (const char* d : {"cpu:0", "cpu:1"}) steps.append(record(d, s));
        w.deviceDashboard()->addDeviceSteps(steps);
        w.viewTabs()->setCurrentWidget(w.deviceDashboard());
        settle(&w);

        auto* mode = w.findChild<PresentationMode*>();
        QVERIFY(mode);
        QAction* action = w.findChild<QAction*>(QStringLiteral("presentationAction"));
        QVERIFY(action && action->isCheckable());
        QCOMPARE(action->shortcut(), QKeySequence(Qt::Key_F11));
        QCustomPlot* loss = plotTitled(w.deviceDashboard(), QStringLiteral("Training loss per device"));
        QVERIFY(loss);
        QVERIFY(loss->graphCount() >= 2);
        const double windowFont = w.font().pointSizeF();
        const QFont tick = loss->xAxis->tickLabelFont(), label = loss->yAxis->labelFont(), legend = loss->legend->font();
        const QFont legendItem = loss->legend->item(0)->font();
        const int legendItems = loss->legend->itemCount();
        QList<QPen> pens;
        for (int i = 0; i < loss->graphCount(); ++i) pens << loss->graph(i)->pen();
        const Qt::WindowStates states = w.windowState();

        action->trigger();
        QVERIFY(mode->isOn());
        QCOMPARE(w.font().pointSizeF(), windowFont * 1.5);
        QCOMPARE(loss->xAxis->tickLabelFont().pointSizeF(), tick.pointSizeF() * 1.5);
        QCOMPARE(loss->yAxis->labelFont().pointSizeF(), label.pointSizeF() * 1.5);
        QCOMPARE(loss->legend->item(0)->font().pointSizeF(), legendItem.pointSizeF() * 1.5);
        for (int i = 0; i < loss->graphCount(); ++i)
            QCOMPARE(loss->graph(i)->pen().widthF(), std::max(1.0, pens[i].widthF()) * 2);
        QVERIFY(w.windowState() & Qt::WindowFullScreen);
        QVERIFY(!w.experimentTabs()->isVisible());
        // A device that appears while it is on is drawn as thick as the others.
        QVector<StepRecord> more;
        for (int64_t s = 21; s <= 25; ++s) more.append(record("cpu:2", s));
        w.deviceDashboard()->addDeviceSteps(more);
        loss->replot();
        for (int i = 0; i < loss->graphCount(); ++i) QVERIFY(loss->graph(i)->pen().widthF() >= 2);

        action->trigger();
        QVERIFY(!mode->isOn());
        QCOMPARE(w.font().pointSizeF(), windowFont);
        QVERIFY(!w.testAttribute(Qt::WA_SetFont));
        QCOMPARE(loss->xAxis->tickLabelFont(), tick);
        QCOMPARE(loss->yAxis->labelFont(), label);
        QCOMPARE(loss->legend->font(), legend);
        // Every item, the one made while on (cpu:2's, which took the enlarged legend font) too.
        QVERIFY(loss->legend->itemCount() > legendItems);
        for (int i = 0; i < loss->legend->itemCount(); ++i)
            if (loss->legend->item(i)) QCOMPARE(loss->legend->item(i)->font(), legendItem);
        for (int i = 0; i < pens.size(); ++i) QCOMPARE(loss->graph(i)->pen(), pens[i]);
        QCOMPARE(w.windowState(), states);
        QVERIFY(w.experimentTabs()->isVisible());
    }

    void exportsCarryTheRunCaption() {
        MainWindow w;
        QCOMPARE(w.openExperiment(QStringLiteral(":/examples/fashion-mlp-ddp.paralab.json"), false), QString());
        const auto& e = *w.experiment();
        const QString variant = QString::fromStdString(paralab::strategy::variant_label(e.strategy));
        QVERIFY(!variant.isEmpty());
        // The caption row is in the plot's layout while it is saved, and only then.
        QCustomPlot* plot = w.plot()->findChild<QCustomPlot*>();
        QVERIFY(plot);
        QStringList seen;
        connect(plot, &QCustomPlot::afterLayout, this, [&] {
            for (QCPLayoutElement* el : plot->plotLayout()->elements(true))
                if (auto* text = qobject_cast<QCPTextElement*>(el); text && text->objectName() == QLatin1String("exportCaption"))
                    seen << text->text();
        });
        QTemporaryDir dir;
        QVERIFY(w.plot()->exportTo(dir.filePath(QStringLiteral("loss.pdf"))));
        QVERIFY(!seen.isEmpty());
        const QString caption = seen.last();
        QVERIFY2(caption.contains(QString::fromStdString(e.name)), qPrintable(caption));
        QVERIFY2(caption.contains(QString::fromStdString(e.strategy.type)), qPrintable(caption));
        QVERIFY2(caption.contains(variant), qPrintable(caption));
        QVERIFY2(caption.contains(QStringLiteral("%1 devices").arg(e.devices.size())), qPrintable(caption));
        const int rows = plot->plotLayout()->rowCount();
        seen.clear();
        QVERIFY(w.plot()->exportTo(dir.filePath(QStringLiteral("loss.png"))));
        QCOMPARE(seen.size() > 0 ? seen.last() : QString(), caption);
        plot->replot();
        QCOMPARE(plot->plotLayout()->rowCount(), rows);  // gone again once saved

        // A stored run's id is in its caption.
        QVERIFY(paralab::ui::plotexport::captionFor(e, 12).contains(QStringLiteral("#12")));

        // The dashboard's picture of all plots has the caption line under them.
        const QString all = dir.filePath(QStringLiteral("all.png")), bare = dir.filePath(QStringLiteral("bare.png"));
        QVERIFY(w.deviceDashboard()->exportTo(all));
        paralab::ui::plotexport::setRunCaption(QString());
        QVERIFY(w.deviceDashboard()->exportTo(bare));
        QVERIFY(QImage(all).height() > QImage(bare).height());
        QCOMPARE(QImage(all).width(), QImage(bare).width());
    }

    // A rotated axis label longer than its plot is tall is replaced by its brief form, and comes
    // back when the plot grows (the Runs tab's small charts at 720 px, the learning-rate strip
    // in presentation mode).
    void longAxisLabelsGiveWayToBriefOnes() {
        QCustomPlot plot;
        plot.resize(400, 90);
        plot.show();
        QVERIFY(QTest::qWaitForWindowExposed(&plot));
        const QString full = QStringLiteral("a label far longer than the plot is tall");
        paralab::ui::plotstyle::setFittedLabel(plot.yAxis, full, QStringLiteral("brief"));
        plot.replot();
        plot.replot();  // the first replot lays the axis rect out
        QCOMPARE(plot.yAxis->label(), QStringLiteral("brief"));
        plot.resize(400, 900);
        plot.replot();
        plot.replot();
        QCOMPARE(plot.yAxis->label(), full);
    }

    void barsStartAtZero() {
        // The device strips lie under the value axis, which starts at zero: no bar or strip is
        // drawn below zero.
        DeviceDashboard d;
        d.resize(1000, 700);
        d.show();
        QVERIFY(QTest::qWaitForWindowExposed(&d));
        QVector<StepRecord> steps;
        for (int64_t s = 1; s <= 5; ++s)
            for (const char* dev : {"cpu:0", "cpu:1", "cpu:2"}) steps.append(record(dev, s));
        d.addDeviceSteps(steps);
        d.fitToData();
        for (const QString& title : {QStringLiteral("Memory by category"), QStringLiteral("Time per step")}) {
            QCustomPlot* plot = plotTitled(&d, title);
            QVERIFY2(plot, qPrintable(title));
            plot->replot();
            QCOMPARE(plot->yAxis->range().lower, 0.0);
            const int zero = qRound(plot->yAxis->coordToPixel(0));
            int strips = 0;
            for (int i = 0; i < plot->itemCount(); ++i)
                if (auto* mark = qobject_cast<QCPItemRect*>(plot->item(i))) {
                    ++strips;
                    QVERIFY(mark->topLeft->pixelPosition().y() > zero);  // under the axis line
                    QVERIFY(mark->bottomRight->pixelPosition().y() < plot->height());
                }
            QCOMPARE(strips, 3);
        }
    }

    // The README's pictures at a projector's 1280 x 720: every tab, left and right, during a
    // 4-device DDP run of the Fashion-MNIST MLP, and the Devices tab in presentation mode. Run
    // under a display (xvfb-run -s "-screen 0 1280x720x24" ui_window_fit_test screenshots
    // -platform xcb) with PARALAB_SCREENSHOT_DIR set to the folder to write them into.
    void screenshots() {
        const QString dir = qEnvironmentVariable("PARALAB_SCREENSHOT_DIR");
        if (dir.isEmpty()) QSKIP("set PARALAB_SCREENSHOT_DIR to take the 1280 x 720 screenshots");
        MainWindow w;
        QCOMPARE(w.openExperiment(QStringLiteral(":/examples/fashion-mlp-ddp.paralab.json"), false), QString());
        auto e = *w.experiment();
        e.devices = {"cpu:0", "cpu:1", "cpu:2", "cpu:3"};
        w.setExperiment(e);
        w.resize(1280, 720);
        w.move(0, 0);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QSignalSpy finished(w.controller(), &paralab::ui::RunController::finished);
        w.startRun();
        QTRY_VERIFY_WITH_TIMEOUT(w.deviceDashboard()->lossPointCount("all") >= 250 || finished.count() > 0, 600000);
        QCOMPARE(finished.count(), 0);  // still running: the pictures are of a live run
        auto shoot = [&](QTabWidget* tabs, int i, const QString& side) {
            tabs->setCurrentIndex(i);
            settle(&w);
            drawNow(&w);
            const QString name = QStringLiteral("fit-%1-%2.png").arg(side, tabs->tabText(i).toLower());
            QVERIFY(w.grab().save(QDir(dir).filePath(name)));
        };
        for (int i = 0; i < w.experimentTabs()->count(); ++i) shoot(w.experimentTabs(), i, QStringLiteral("left"));
        w.experimentTabs()->setCurrentIndex(0);
        // The Lessons tab with the buckets lesson open and a question answered.
        QCOMPARE(w.lessonsPanel()->openLesson(w.lessonsPanel()->builtinLessons()[1]), QString());
        w.lessonsPanel()->answerEdit(0)->setText(QStringLiteral("1"));
        for (int i = 0; i < w.viewTabs()->count(); ++i) shoot(w.viewTabs(), i, QStringLiteral("right"));
        w.viewTabs()->setCurrentWidget(w.deviceDashboard());
        w.findChild<PresentationMode*>()->setOn(true);
        settle(&w);
        drawNow(&w);
        QVERIFY(w.grab().save(QDir(dir).filePath(QStringLiteral("fit-presentation.png"))));
        w.viewTabs()->setCurrentWidget(w.plot());
        settle(&w);
        drawNow(&w);
        QVERIFY(w.grab().save(QDir(dir).filePath(QStringLiteral("fit-presentation-training.png"))));
        w.findChild<PresentationMode*>()->setOn(false);
        QVERIFY(w.deviceDashboard()->exportTo(QDir(dir).filePath(QStringLiteral("fit-export-devices.png"))));
        w.stopRun();
        QTRY_VERIFY_WITH_TIMEOUT(finished.count() > 0, 60000);
    }
};

QTEST_MAIN(WindowFitTest)
#include "test_window_fit.moc"
