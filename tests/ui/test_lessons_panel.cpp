// The Lessons tab: the six built-in lessons listed, a lesson's text shown, planned questions
// checked at once, measured ones against real runs started from the lesson's "Open experiment"
// buttons through the window, and bad lesson files refused with their message.
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTextBrowser>
#include <QtTest>
#include <QWheelEvent>
#include <QToolButton>

#include "ui/mainwindow/main_window.h"
#include "ui/panels/lessons/lessons_panel.h"
#include "ui/session/run_controller.h"

using paralab::ui::LessonsPanel;
using paralab::ui::MainWindow;

namespace {

// Checks question `index` and returns whether the verdict was right (fails the test when no
// verdict comes).
bool checkNow(LessonsPanel& panel, int index, bool* got = nullptr) {
    QSignalSpy checked(&panel, &LessonsPanel::checked);
    panel.check(index);
    const bool arrived = checked.count() > 0 || checked.wait(30000);
    if (got) *got = arrived;
    return arrived && checked.last().at(0).toInt() == index && checked.last().at(1).toBool();
}

QPushButton* experimentButton(LessonsPanel& panel, const QString& label) {
    for (QPushButton* b : panel.experimentButtons())
        if (b->text() == label) return b;
    return nullptr;
}

bool writeFile(const QString& path, const QByteArray& bytes) {
    QFile f(path);
    return f.open(QIODevice::WriteOnly) && f.write(bytes) == bytes.size();
}

}  // namespace

class LessonsPanelTest : public QObject {
    Q_OBJECT
    QTemporaryDir m_data;  // the window's run store: empty at every start of the test

private slots:
    void initTestCase() {
        QVERIFY(m_data.isValid());
        qputenv("XDG_DATA_HOME", QFile::encodeName(m_data.path()));
    }

    void listsTheSixBuiltinLessons() {
        QTemporaryDir store;
        LessonsPanel panel(store.filePath(QStringLiteral("runs.db")));
        QCOMPARE(panel.lessonList()->count(), 6);
        QCOMPARE(panel.builtinLessons().size(), 6);
        for (const QString& path : panel.builtinLessons()) QVERIFY2(path.startsWith(QLatin1String(":/lessons/")), qPrintable(path));
        QCOMPARE(panel.lessonList()->item(0)->text(), QStringLiteral("DataParallel against DistributedDataParallel"));
        QCOMPARE(panel.lessonList()->item(5)->text(), QStringLiteral("Tensor parallelism, from one block to 1,024 GPUs"));
        QVERIFY(!panel.lesson().has_value());
    }

    void openingALessonShowsItsText() {
        QTemporaryDir store;
        LessonsPanel panel(store.filePath(QStringLiteral("runs.db")));
        QSignalSpy opened(&panel, &LessonsPanel::lessonOpened);
        panel.lessonList()->setCurrentRow(2);
        QCOMPARE(opened.count(), 1);
        QVERIFY(panel.lesson().has_value());
        QCOMPARE(QString::fromStdString(panel.lesson()->title), QStringLiteral("The pipeline bubble and micro-batches"));
        QVERIFY(panel.textView()->toPlainText().contains(QStringLiteral("bubble fraction = (p − 1) / (m + p − 1)")));
        QCOMPARE(panel.experimentButtons().size(), 6);
        QVERIFY(panel.answerEdit(0) && !panel.choiceBox(0));
        QVERIFY(panel.choiceBox(3) && !panel.answerEdit(3));
        QCOMPARE(panel.choiceBox(3)->count(), 2);
        QCOMPARE(panel.errorText(), QString());
    }

    void plannedQuestionsAreCheckedAtOnce() {
        QTemporaryDir store;
        LessonsPanel panel(store.filePath(QStringLiteral("runs.db")));
        QCOMPARE(panel.openLesson(panel.builtinLessons()[2]), QString());
        // bubble-m4: (p−1)/(m+p−1) = 3/7.
        panel.answerEdit(1)->setText(QStringLiteral("0.43"));
        QVERIFY(checkNow(panel, 1));
        QVERIFY2(panel.resultText(1).startsWith(QStringLiteral("Right: the planner predicts ")), qPrintable(panel.resultText(1)));
        panel.answerEdit(1)->setText(QStringLiteral("0.75"));
        bool got = false;
        QVERIFY(!checkNow(panel, 1, &got));
        QVERIFY(got);
        QVERIFY2(panel.resultText(1).startsWith(QStringLiteral("Not quite: ")), qPrintable(panel.resultText(1)));
        // Not a number: said, nothing else.
        panel.answerEdit(1)->setText(QStringLiteral("a third"));
        QVERIFY(!checkNow(panel, 1));
        QVERIFY2(panel.resultText(1).contains(QStringLiteral("expected a number")), qPrintable(panel.resultText(1)));
        // A choice: 1F1B ("m = 16, 1f1b") needs less memory than GPipe.
        panel.choiceBox(3)->setCurrentText(QStringLiteral("m = 16, gpipe"));
        QVERIFY(!checkNow(panel, 3));
        panel.choiceBox(3)->setCurrentText(QStringLiteral("m = 16, 1f1b"));
        QVERIFY(checkNow(panel, 3));
        QVERIFY(panel.resultText(3).contains(QStringLiteral("GiB")));
    }

    // Scrolling the questions with the wheel over an answer's combo box leaves the answer as it
    // is; once the student has clicked into it, the wheel chooses.
    void wheelOverAnUnfocusedComboDoesNothing() {
        QTemporaryDir store;
        LessonsPanel panel(store.filePath(QStringLiteral("runs.db")));
        panel.resize(900, 700);
        panel.show();
        QVERIFY(QTest::qWaitForWindowActive(&panel));
        QCOMPARE(panel.openLesson(panel.builtinLessons()[2]), QString());
        QComboBox* box = panel.choiceBox(3);
        QVERIFY(box);
        box->setCurrentIndex(0);
        panel.answerEdit(0)->setFocus();
        QTRY_VERIFY(panel.answerEdit(0)->hasFocus());
        auto wheel = [box](int delta) {
            const QPoint at = box->rect().center();
            QWheelEvent e(at, box->mapToGlobal(at), QPoint(), QPoint(0, delta), Qt::NoButton, Qt::NoModifier,
                          Qt::NoScrollPhase, false);
            QCoreApplication::sendEvent(box, &e);
        };
        wheel(-120);
        wheel(-120);
        QCOMPARE(box->currentIndex(), 0);
        box->setFocus();
        QTRY_VERIFY(box->hasFocus());
        wheel(-120);
        QCOMPARE(box->currentIndex(), 1);
    }

    // On a projector's narrow pane a lesson opened takes the list's width; the toggle brings the
    // list back.
    void theListCollapsesOnANarrowPane() {
        QTemporaryDir store;
        LessonsPanel panel(store.filePath(QStringLiteral("runs.db")));
        panel.resize(LessonsPanel::kCollapseListBelow - 200, 600);
        panel.show();
        QVERIFY(QTest::qWaitForWindowExposed(&panel));
        panel.setListShown(true);  // (the list's first focus may have opened its first lesson)
        QVERIFY(panel.lessonList()->isVisible());
        panel.lessonList()->setCurrentRow(1);
        QVERIFY(panel.lesson().has_value());
        QVERIFY(!panel.isListShown());
        QVERIFY(!panel.lessonList()->isVisible());
        panel.listToggle()->click();
        QVERIFY(panel.lessonList()->isVisible());
        // Wide enough: it stays.
        panel.resize(LessonsPanel::kCollapseListBelow + 200, 600);
        QTRY_COMPARE(panel.width(), LessonsPanel::kCollapseListBelow + 200);
        panel.lessonList()->setCurrentRow(2);
        QVERIFY(panel.isListShown());
    }

    // A verdict is about the answer it judged: changing the answer takes it away.
    void aChangedAnswerClearsItsVerdict() {
        QTemporaryDir store;
        LessonsPanel panel(store.filePath(QStringLiteral("runs.db")));
        QCOMPARE(panel.openLesson(panel.builtinLessons()[2]), QString());
        panel.answerEdit(1)->setText(QStringLiteral("0.43"));
        QVERIFY(checkNow(panel, 1));
        QVERIFY(panel.resultText(1).startsWith(QStringLiteral("Right")));
        panel.answerEdit(1)->setText(QStringLiteral("0.9"));
        QCOMPARE(panel.resultText(1), QString());
        panel.choiceBox(3)->setCurrentText(QStringLiteral("m = 16, gpipe"));
        QVERIFY(!checkNow(panel, 3));
        QVERIFY(panel.resultText(3).startsWith(QStringLiteral("Not quite")));
        panel.choiceBox(3)->setCurrentIndex(panel.choiceBox(3)->currentIndex() == 0 ? 1 : 0);
        QCOMPARE(panel.resultText(3), QString());
        // The other questions' verdicts stay.
        panel.answerEdit(0)->setText(QStringLiteral("0.75"));
        QVERIFY(checkNow(panel, 0));
        panel.answerEdit(1)->setText(QStringLiteral("0.5"));
        QVERIFY(panel.resultText(0).startsWith(QStringLiteral("Right")));
    }

    void badLessonFilesShowTheirMessage() {
        QTemporaryDir dir;
        LessonsPanel panel(dir.filePath(QStringLiteral("runs.db")));
        QCOMPARE(panel.openLesson(panel.builtinLessons()[0]), QString());
        // A teacher's lesson beside a copy of a built-in experiment, with a typo in a quantity.
        QVERIFY(QFile::copy(QStringLiteral(":/lessons/01-dp-vs-ddp/ddp.paralab.json"), dir.filePath(QStringLiteral("ddp.paralab.json"))));
        QVERIFY(writeFile(dir.filePath(QStringLiteral("t.md")), "# Mine\n"));
        const QString bad = dir.filePath(QStringLiteral("bad.lesson.json"));
        QVERIFY(writeFile(bad, R"({"paralab_lesson": 1, "title": "Mine", "text": "t.md",
            "experiments": [{"label": "ddp", "file": "ddp.paralab.json"}],
            "questions": [{"id": "q", "ask": "?", "source": "measured", "quantity": "speed", "experiment": "ddp"}]})"));
        const QString message = panel.openLesson(bad);
        QVERIFY2(message.startsWith(bad + QStringLiteral(": questions[0].quantity: unknown quantity 'speed'")), qPrintable(message));
        QVERIFY(panel.errorText().contains(message));
        // The lesson shown before stays.
        QCOMPARE(QString::fromStdString(panel.lesson()->title), QStringLiteral("DataParallel against DistributedDataParallel"));
        // Not JSON, and no file at all.
        QVERIFY(writeFile(bad, "{\"paralab_lesson\": "));
        QVERIFY(panel.openLesson(bad).contains(QStringLiteral("not valid JSON")));
        QVERIFY(panel.openLesson(dir.filePath(QStringLiteral("none.lesson.json"))).contains(QStringLiteral("none.lesson.json")));
        // Fixed: it opens, and the message goes.
        QVERIFY(writeFile(bad, R"({"paralab_lesson": 1, "title": "Mine", "text": "t.md",
            "experiments": [{"label": "ddp", "file": "ddp.paralab.json"}],
            "questions": [{"id": "q", "ask": "?", "source": "measured", "quantity": "samples_per_s", "experiment": "ddp"}]})"));
        QCOMPARE(panel.openLesson(bad), QString());
        QCOMPARE(panel.errorText(), QString());
        QCOMPARE(QString::fromStdString(panel.lesson()->title), QStringLiteral("Mine"));
        // No run of it yet: said, and the check ends.
        panel.answerEdit(0)->setText(QStringLiteral("1000"));
        QVERIFY(!checkNow(panel, 0));
        QVERIFY2(panel.resultText(0).contains(QStringLiteral("ddp")), qPrintable(panel.resultText(0)));
    }

    // The window's tab: an experiment opened from the lesson and run, then its measured
    // questions checked against the run in the store.
    void measuredQuestionsAgainstRunsOfTheWindow() {
        MainWindow w;
        LessonsPanel* panel = w.lessonsPanel();
        QVERIFY(panel);
        QCOMPARE(w.viewTabs()->tabText(w.viewTabs()->indexOf(panel)), QStringLiteral("Lessons"));
        QCOMPARE(panel->openLesson(panel->builtinLessons()[0]), QString());
        panel->choiceBox(0)->setCurrentText(QStringLiteral("data_parallel"));
        QVERIFY(!checkNow(*panel, 0));  // nothing has run yet
        QVERIFY2(panel->resultText(0).startsWith(QStringLiteral("No finished run of \"")), qPrintable(panel->resultText(0)));

        for (const QString& label : {QStringLiteral("data_parallel"), QStringLiteral("ddp")}) {
            QPushButton* open = experimentButton(*panel, label);
            QVERIFY(open);
            open->click();
            QVERIFY(w.experiment().has_value());
            QCOMPARE(QString::fromStdString(w.experiment()->strategy.type), label);
            QSignalSpy finished(w.controller(), &paralab::ui::RunController::finished);
            w.startRun();
            QVERIFY(finished.wait(120000));
        }
        QVERIFY(checkNow(*panel, 0));  // data_parallel holds more on cpu:0
        // Each label's own run: data_parallel's cpu:0 holds more than any ddp device.
        const QRegularExpressionMatch m =
            QRegularExpression(QStringLiteral("data_parallel ([0-9.]+) MiB, ddp ([0-9.]+) MiB")).match(panel->resultText(0));
        QVERIFY2(m.hasMatch(), qPrintable(panel->resultText(0)));
        QVERIFY2(m.captured(1).toDouble() > m.captured(2).toDouble(), qPrintable(panel->resultText(0)));
        panel->choiceBox(0)->setCurrentText(QStringLiteral("ddp"));
        QVERIFY(!checkNow(*panel, 0));
        // ddp's traffic: 2 devices × the gradients' 0.257 MiB, and the start's broadcast.
        panel->answerEdit(1)->setText(QStringLiteral("0.51"));
        QVERIFY2(checkNow(*panel, 1), qPrintable(panel->resultText(1)));
        panel->answerEdit(1)->setText(QStringLiteral("1.03"));
        QVERIFY(!checkNow(*panel, 1));
    }

    // Every experiment of every built-in lesson opens in the window from its button.
    void everyExperimentOpensInTheWindow() {
        MainWindow w;
        LessonsPanel* panel = w.lessonsPanel();
        for (const QString& path : panel->builtinLessons()) {
            QCOMPARE(panel->openLesson(path), QString());
            for (const auto& x : panel->lesson()->experiments) {
                QPushButton* open = experimentButton(*panel, QString::fromStdString(x.label));
                QVERIFY(open);
                open->click();
                QCOMPARE(panel->errorText(), QString());
                QCOMPARE(QString::fromStdString(w.experiment()->name), QString::fromStdString(x.experiment.name));
                QCOMPARE(w.currentPath(), QString::fromStdString(x.path));
            }
        }
    }

    // With PARALAB_SCREENSHOT_DIR: the window at 1600 x 1000 with a lesson open and a question
    // checked, as lessons.png.
    void screenshot() {
        const QString dir = qEnvironmentVariable("PARALAB_SCREENSHOT_DIR");
        if (dir.isEmpty()) QSKIP("set PARALAB_SCREENSHOT_DIR to take the screenshot");
        MainWindow w;
        QCOMPARE(w.openExperiment(QStringLiteral(":/lessons/03-pipeline-bubble/plan-pp4-m4.plan.paralab.json"), false), QString());
        w.resize(1600, 1000);
        w.move(0, 0);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        LessonsPanel* panel = w.lessonsPanel();
        w.viewTabs()->setCurrentWidget(panel);
        panel->lessonList()->setCurrentRow(2);
        panel->answerEdit(0)->setText(QStringLiteral("0.75"));
        QVERIFY(checkNow(*panel, 0));
        panel->answerEdit(1)->setText(QStringLiteral("0.6"));
        QVERIFY(!checkNow(*panel, 1));
        // The verdicts laid out (every question's Check button shown whole) before the grab.
        QTRY_VERIFY(panel->checkButton(4)->isVisible() &&
                    panel->checkButton(4)->height() >= panel->checkButton(4)->minimumSizeHint().height());
        QVERIFY(w.grab().save(QDir(dir).filePath(QStringLiteral("lessons.png"))));
    }
};

QTEST_MAIN(LessonsPanelTest)
#include "test_lessons_panel.moc"
