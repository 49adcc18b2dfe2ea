// The Lessons tab (docs/lessons.md): the built-in lessons (compiled in, ":/lessons/...") and a
// teacher's own lesson file; a lesson's Markdown text, a button per experiment that opens it in
// the window (as File ▸ Open does, unsaved changes asked about first), and its "predict, then
// run" questions with an answer field each. Check compares an answer with the planner's
// prediction (at once) or with the latest finished run of the question's experiments in the
// run store, read on a worker thread (the GUI thread never opens the store).
#pragma once

#include <QPointer>
#include <QString>
#include <QVector>
#include <QThread>
#include <QWidget>

#include <functional>
#include <optional>

#include "engine/lesson/lesson.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QListWidget;
class QPushButton;
class QSplitter;
class QTextBrowser;
class QToolButton;
class QVBoxLayout;
class QWidget;

namespace paralab::ui {

class LessonsPanel : public QWidget {
    Q_OBJECT
public:
    // Runs are looked up in the store at `storePath` (the default store when empty).
    explicit LessonsPanel(QString storePath = {}, QWidget* parent = nullptr);
    ~LessonsPanel() override;

    // Opens a lesson file (a path, or a ":/lessons/..." resource). A lesson that does not load
    // is not opened: its message (the file and the JSON path) is shown in the tab and returned;
    // the lesson shown before stays.
    QString openLesson(const QString& path);
    // "Open experiment": the window's File ▸ Open (it asks about unsaved changes); returns why
    // the experiment was not opened ("" when it was).
    void setOpenExperimentHandler(std::function<QString(const QString& path)> handler);
    // Checks question `index` of the open lesson with the answer in its field; the verdict is
    // shown under it and checked() emitted (at once for a planned question, after the store was
    // read for a measured one).
    void check(int index);

    // The built-in lessons' paths, in the list's order.
    QStringList builtinLessons() const { return m_builtin; }
    const std::optional<lesson::Lesson>& lesson() const { return m_lesson; }
    QListWidget* lessonList() const { return m_list; }
    // The button that shows or hides the lesson list (collapsed when a lesson opens on a pane
    // narrower than kCollapseListBelow, so that the lesson has the width).
    QToolButton* listToggle() const { return m_listToggle; }
    bool isListShown() const;
    void setListShown(bool shown);
    static constexpr int kCollapseListBelow = 1100;
    QTextBrowser* textView() const { return m_text; }
    QString errorText() const;
    // Question `index`'s widgets: a value question's answer is a line edit, a choice's a combo box.
    QLineEdit* answerEdit(int index) const;
    QComboBox* choiceBox(int index) const;
    QPushButton* checkButton(int index) const;
    QString resultText(int index) const;
    QVector<QPushButton*> experimentButtons() const { return m_experimentButtons; }
    bool isChecking() const { return m_reading; }

signals:
    void checked(int index, bool right);
    void lessonOpened(const QString& path);

protected:
    void changeEvent(QEvent* event) override;

private:
    void setTitleFont();
    struct QuestionWidgets {
        QLineEdit* answer = nullptr;
        QComboBox* choice = nullptr;
        QPushButton* check = nullptr;
        QLabel* result = nullptr;
    };
    void findBuiltinLessons();
    void showLesson();
    void showError(const QString& message);
    void showVerdict(int index, const std::map<std::string, double>& values, const QString& error);
    // A changed answer: its old verdict goes.
    void clearVerdict(int index);
    void openLessonFile();

    QString m_storePath;
    QStringList m_builtin;
    std::optional<lesson::Lesson> m_lesson;
    std::function<QString(const QString&)> m_openExperiment;
    QListWidget* m_list;
    QTextBrowser* m_text;
    QLabel* m_title;
    QLabel* m_error;
    QToolButton* m_listToggle;
    QWidget* m_listPane;
    QSplitter* m_split;
    QWidget* m_experiments;  // the row of "Open experiment" buttons
    QVBoxLayout* m_questionsLayout;
    QWidget* m_questions;
    QVector<QPushButton*> m_experimentButtons;
    QVector<QuestionWidgets> m_questionWidgets;
    QPointer<QThread> m_thread;  // the store read under way (null once deleted)
    bool m_reading = false;      // one store read at a time: a check asked meanwhile waits
    int m_pending = -1;          // the question to check when the read ends (-1: none)
    quint64 m_generation = 0;     // a lesson opened since a read began makes its result stale
};

}  // namespace paralab::ui
