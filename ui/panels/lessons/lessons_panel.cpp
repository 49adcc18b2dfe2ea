#include "ui/panels/lessons/lessons_panel.h"

#include <QComboBox>
#include <QDirIterator>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QFrame>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QScrollArea>
#include <QSplitter>
#include <QTextBrowser>
#include <QThread>
#include <QToolButton>
#include <QVBoxLayout>
#include <QWheelEvent>

#include <memory>

#include "engine/store/run_store.h"
#include "engine/util/error.h"
#include "ui/panels/common/flow_layout.h"

// The lessons are compiled into this static library (ui/CMakeLists.txt); Qt needs telling once,
// outside any namespace, that their resources exist.
static void initLessonResources() { Q_INIT_RESOURCE(lessons); }

namespace paralab::ui {

namespace {

// Compiled-in resources through Qt's resource system, files from the disk.
std::string readLessonFile(const std::string& path) {
    if (!path.starts_with(":/")) return lesson::read_disk_file(path);
    QFile file(QString::fromStdString(path));
    if (!file.open(QIODevice::ReadOnly)) throw ConfigError(path + ": no such file");
    return file.readAll().toStdString();
}

lesson::Lesson loadLesson(const QString& path) {
    const std::string p = path.toStdString();
    return path.startsWith(QLatin1String(":/")) ? lesson::load_lesson(p, readLessonFile) : lesson::load_lesson(p);
}

QString q(const std::string& s) { return QString::fromStdString(s); }

// A student scrolling the questions with the wheel passes over the answers: a combo box takes
// the wheel only once it has the focus (clicked or tabbed to); otherwise the wheel scrolls the
// page under it.
class AnswerComboBox : public QComboBox {
public:
    AnswerComboBox() { setFocusPolicy(Qt::StrongFocus); }

protected:
    void wheelEvent(QWheelEvent* e) override {
        if (hasFocus())
            QComboBox::wheelEvent(e);
        else
            e->ignore();
    }
};

}  // namespace

LessonsPanel::LessonsPanel(QString storePath, QWidget* parent)
    : QWidget(parent),
      m_storePath(storePath.isEmpty() ? q(store::RunStore::default_path()) : std::move(storePath)),
      m_list(new QListWidget),
      m_text(new QTextBrowser),
      m_title(new QLabel),
      m_error(new QLabel),
      m_listToggle(new QToolButton),
      m_listPane(new QWidget),
      m_split(new QSplitter),
      m_experiments(new QWidget),
      m_questionsLayout(new QVBoxLayout),
      m_questions(new QWidget) {
    initLessonResources();
    m_list->setObjectName(QStringLiteral("lessonList"));
    m_list->setWordWrap(true);
    m_list->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    m_list->setSpacing(2);
    m_text->setObjectName(QStringLiteral("lessonText"));
    m_text->setOpenExternalLinks(true);
    m_title->setObjectName(QStringLiteral("lessonTitle"));
    setTitleFont();
    m_title->setWordWrap(true);
    m_error->setObjectName(QStringLiteral("lessonError"));
    m_error->setWordWrap(true);
    m_error->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_error->setStyleSheet(QStringLiteral("color: #b00020;"));
    m_error->hide();

    auto* openFile = new QPushButton(tr("Open lesson file…"));
    openFile->setObjectName(QStringLiteral("openLessonFile"));
    connect(openFile, &QPushButton::clicked, this, &LessonsPanel::openLessonFile);
    auto* left = m_listPane;
    left->setObjectName(QStringLiteral("lessonListPane"));
    auto* leftLayout = new QVBoxLayout(left);
    leftLayout->setContentsMargins(0, 0, 0, 0);
    leftLayout->addWidget(new QLabel(tr("Lessons")));
    leftLayout->addWidget(m_list, 1);
    leftLayout->addWidget(openFile);

    // The experiment buttons wrap onto more lines rather than widen the pane.
    new FlowLayout(m_experiments);
    m_questions->setLayout(m_questionsLayout);
    auto* questionsBox = new QWidget;
    auto* questionsBoxLayout = new QVBoxLayout(questionsBox);
    questionsBoxLayout->addWidget(m_experiments);
    questionsBoxLayout->addWidget(m_questions);
    questionsBoxLayout->addStretch(1);
    auto* scroll = new QScrollArea;
    scroll->setObjectName(QStringLiteral("lessonQuestions"));
    scroll->setWidgetResizable(true);
    // The questions wrap to the pane's width: it never scrolls sideways.
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    // A vertical bar that came and went would change the width the questions wrapped to after
    // their height was measured, and cut the last of them short.
    scroll->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOn);
    scroll->setFrameShape(QFrame::NoFrame);
    scroll->setWidget(questionsBox);

    auto* content = new QSplitter(Qt::Vertical);
    content->addWidget(m_text);
    content->addWidget(scroll);
    content->setStretchFactor(0, 2);
    content->setStretchFactor(1, 3);
    content->setSizes({400, 600});
    auto* right = new QWidget;
    auto* rightLayout = new QVBoxLayout(right);
    rightLayout->setContentsMargins(0, 0, 0, 0);
    m_listToggle->setObjectName(QStringLiteral("lessonListToggle"));
    m_listToggle->setText(tr("Lessons"));
    m_listToggle->setCheckable(true);
    m_listToggle->setChecked(true);
    m_listToggle->setToolTip(tr("Show or hide the list of lessons"));
    connect(m_listToggle, &QToolButton::toggled, this, [this](bool on) { m_listPane->setVisible(on); });
    auto* header = new QHBoxLayout;
    header->addWidget(m_listToggle, 0, Qt::AlignTop);
    header->addWidget(m_title, 1);
    rightLayout->addLayout(header);
    rightLayout->addWidget(m_error);
    rightLayout->addWidget(content, 1);

    auto* split = m_split;
    split->addWidget(left);
    split->addWidget(right);
    split->setStretchFactor(1, 1);
    split->setSizes({200, 700});
    split->setCollapsible(1, false);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(split);

    findBuiltinLessons();
    connect(m_list, &QListWidget::currentRowChanged, this, [this](int row) {
        if (row >= 0 && row < m_builtin.size()) openLesson(m_builtin[row]);
    });
    m_title->setText(tr("Choose a lesson"));
    m_text->setMarkdown(tr("Each lesson is a short text, experiments to run and questions to answer "
                           "**before** running them: predict, then run, then **Check** against what the "
                           "run measured or what the planner predicts."));
}

LessonsPanel::~LessonsPanel() {
    // The store read posts to this panel: it ends first (SQLite's busy wait at most).
    if (m_thread) m_thread->wait();
}

void LessonsPanel::findBuiltinLessons() {
    QDirIterator it(QStringLiteral(":/lessons"), {QStringLiteral("*.lesson.json")}, QDir::Files,
                    QDirIterator::Subdirectories);
    QStringList paths;
    while (it.hasNext()) paths << it.next();
    paths.sort();  // the folders are numbered in teaching order
    for (const QString& path : paths) {
        try {
            const lesson::Lesson l = loadLesson(path);
            auto* item = new QListWidgetItem(q(l.title));
            item->setToolTip(q(l.summary));
            m_list->addItem(item);
            m_builtin << path;
        } catch (const std::exception& e) {  // a build with a broken lesson: said, not hidden
            auto* item = new QListWidgetItem(tr("%1 (does not load)").arg(QFileInfo(path).fileName()));
            item->setToolTip(QString::fromUtf8(e.what()));
            item->setFlags(Qt::NoItemFlags);
            m_list->addItem(item);
            m_builtin << QString();
        }
    }
}

void LessonsPanel::setOpenExperimentHandler(std::function<QString(const QString&)> handler) {
    m_openExperiment = std::move(handler);
}

void LessonsPanel::setTitleFont() {
    QFont big = font();
    big.setPointSizeF(big.pointSizeF() * 1.3);
    big.setBold(true);
    m_title->setFont(big);
}

void LessonsPanel::changeEvent(QEvent* event) {
    // The title's own font follows the window's (presentation mode enlarges it too).
    if (event->type() == QEvent::FontChange) setTitleFont();
    QWidget::changeEvent(event);
}

bool LessonsPanel::isListShown() const { return m_listToggle->isChecked(); }

void LessonsPanel::setListShown(bool shown) { m_listToggle->setChecked(shown); }

QString LessonsPanel::errorText() const { return m_error->isHidden() ? QString() : m_error->text(); }

void LessonsPanel::showError(const QString& message) {
    m_error->setText(message);
    m_error->setVisible(!message.isEmpty());
}

QString LessonsPanel::openLesson(const QString& path) {
    try {
        m_lesson = loadLesson(path);
    } catch (const std::exception& e) {
        const QString message = QString::fromUtf8(e.what());
        showError(tr("This lesson does not load: %1").arg(message));
        return message;
    }
    ++m_generation;
    m_pending = -1;
    showError({});
    showLesson();
    // On a projector the lesson needs the width more than the list does.
    if (isVisible() && width() < kCollapseListBelow) setListShown(false);
    const int row = static_cast<int>(m_builtin.indexOf(path));
    if (row >= 0 && m_list->currentRow() != row) {
        const QSignalBlocker block(m_list);
        m_list->setCurrentRow(row);
    }
    emit lessonOpened(path);
    return {};
}

void LessonsPanel::openLessonFile() {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open lesson"), QString(),
                                                      tr("ParaLab lessons (*.lesson.json);;JSON (*.json)"));
    if (!path.isEmpty()) openLesson(path);
}

void LessonsPanel::showLesson() {
    const lesson::Lesson& l = *m_lesson;
    m_title->setText(q(l.title));
    m_text->setSearchPaths({QFileInfo(q(l.text_file)).absolutePath()});
    m_text->setMarkdown(q(l.text));

    // The experiments: one button each.
    qDeleteAll(m_experimentButtons);
    m_experimentButtons.clear();
    QLayout* row = m_experiments->layout();
    while (QLayoutItem* item = row->takeAt(0)) {
        delete item->widget();
        delete item;
    }
    row->addWidget(new QLabel(tr("Open experiment:")));
    for (const auto& x : l.experiments) {
        auto* button = new QPushButton(q(x.label));
        button->setToolTip(tr("%1\nOpens it in the window, as File ▸ Open does%2")
                               .arg(q(x.path), x.plan ? tr("; the Plan tab predicts it") : tr("; then press Start")));
        const QString path = q(x.path);
        connect(button, &QPushButton::clicked, this, [this, path] {
            if (!m_openExperiment) return;
            const QString why = m_openExperiment(path);
            if (!why.isEmpty()) showError(why);
        });
        row->addWidget(button);
        m_experimentButtons << button;
    }

    // The questions.
    while (QLayoutItem* item = m_questionsLayout->takeAt(0)) {
        delete item->widget();
        delete item;
    }
    m_questionWidgets.clear();
    for (int i = 0; i < static_cast<int>(l.questions.size()); ++i) {
        const lesson::Question& question = l.questions[static_cast<size_t>(i)];
        const lesson::QuantityInfo* info = lesson::find_quantity(question.source, question.quantity);
        auto* box = new QGroupBox(tr("Question %1 · %2").arg(i + 1).arg(question.source == lesson::Source::planned
                                                                                ? tr("the planner predicts")
                                                                                : tr("run, then check")));
        auto* boxLayout = new QVBoxLayout(box);
        auto* ask = new QLabel(q(question.ask));
        ask->setTextFormat(Qt::MarkdownText);
        ask->setWordWrap(true);
        boxLayout->addWidget(ask);
        auto* answerRow = new QHBoxLayout;
        QuestionWidgets w;
        if (question.kind == "choice") {
            w.choice = new AnswerComboBox;
            w.choice->setObjectName(QStringLiteral("choice%1").arg(i));
            for (const auto& label : question.experiments) w.choice->addItem(q(label));
            w.choice->setCurrentIndex(-1);
            w.choice->setPlaceholderText(tr("choose"));
            w.choice->setMinimumContentsLength(8);
            w.choice->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
            // A verdict belongs to the answer it judged.
            connect(w.choice, &QComboBox::currentIndexChanged, this, [this, i] { clearVerdict(i); });
            answerRow->addWidget(w.choice, 1);
        } else {
            w.answer = new QLineEdit;
            w.answer->setObjectName(QStringLiteral("answer%1").arg(i));
            w.answer->setPlaceholderText(info && !info->unit.empty() ? tr("your prediction, in %1").arg(q(info->unit))
                                                                    : tr("your prediction"));
            w.answer->setMinimumWidth(80);
            connect(w.answer, &QLineEdit::returnPressed, this, [this, i] { check(i); });
            connect(w.answer, &QLineEdit::textChanged, this, [this, i] { clearVerdict(i); });
            answerRow->addWidget(w.answer, 1);
        }
        w.check = new QPushButton(tr("Check"));
        w.check->setObjectName(QStringLiteral("check%1").arg(i));
        connect(w.check, &QPushButton::clicked, this, [this, i] { check(i); });
        answerRow->addWidget(w.check);
        boxLayout->addLayout(answerRow);
        w.result = new QLabel;
        w.result->setWordWrap(true);
        w.result->setTextInteractionFlags(Qt::TextSelectableByMouse);
        boxLayout->addWidget(w.result);
        m_questionsLayout->addWidget(box);
        m_questionWidgets << w;
    }
}

void LessonsPanel::clearVerdict(int index) {
    if (index < 0 || index >= m_questionWidgets.size()) return;
    QLabel* result = m_questionWidgets[index].result;
    if (result->text() == tr("Reading the run store…")) return;  // the check under way says so
    result->clear();
    result->setStyleSheet(QString());
}

QLineEdit* LessonsPanel::answerEdit(int index) const {
    return index >= 0 && index < m_questionWidgets.size() ? m_questionWidgets[index].answer : nullptr;
}
QComboBox* LessonsPanel::choiceBox(int index) const {
    return index >= 0 && index < m_questionWidgets.size() ? m_questionWidgets[index].choice : nullptr;
}
QPushButton* LessonsPanel::checkButton(int index) const {
    return index >= 0 && index < m_questionWidgets.size() ? m_questionWidgets[index].check : nullptr;
}
QString LessonsPanel::resultText(int index) const {
    return index >= 0 && index < m_questionWidgets.size() ? m_questionWidgets[index].result->text() : QString();
}

void LessonsPanel::check(int index) {
    if (!m_lesson || index < 0 || index >= m_questionWidgets.size()) return;
    const lesson::Question& question = m_lesson->questions[static_cast<size_t>(index)];
    QLabel* result = m_questionWidgets[index].result;
    if (question.source == lesson::Source::planned) {  // the planner: milliseconds, at once
        std::map<std::string, double> values;
        QString error;
        try {
            for (const auto& label : question.experiments)
                values[label] = lesson::planned_value(question.quantity, lesson::predict(*m_lesson->experiment(label)));
        } catch (const std::exception& e) {
            error = QString::fromUtf8(e.what());
        }
        showVerdict(index, values, error);
        return;
    }
    if (m_reading) {  // one store read at a time: this check follows it
        m_pending = index;
        return;
    }
    std::vector<lesson::LessonExperiment> experiments;
    for (const auto& label : question.experiments) experiments.push_back(*m_lesson->experiment(label));
    result->setStyleSheet(QString());
    result->setText(tr("Reading the run store…"));
    for (const auto& w : m_questionWidgets) w.check->setEnabled(false);
    const std::string storePath = m_storePath.toStdString();
    const std::string quantity = question.quantity;
    const quint64 generation = m_generation;
    m_thread = QThread::create([this, experiments = std::move(experiments), storePath, quantity, generation, index] {
        std::map<std::string, double> values;
        QString error;
        try {
            // No store yet (or one another opener, the window's Runs tab, is creating this
            // moment): nothing has run on this machine, which is said as for any run missing.
            std::optional<store::RunStore> db;
            std::vector<store::RunRow> rows;
            if (QFileInfo::exists(q(storePath))) {
                try {
                    db.emplace(storePath, store::RunStore::Access::read_only);
                    db->set_busy_timeout(5000);
                    rows = db->list_runs();
                } catch (const store::StoreNotCreated&) {
                    db.reset();
                }
            }
            for (const auto& x : experiments) {
                const auto row = lesson::latest_run(rows, x);
                if (!row) {
                    error = tr("No finished run of \"%1\" in the run store yet: open it (Open experiment: %1), "
                               "press Start, and check again when it has finished.")
                                .arg(q(x.label));
                    break;
                }
                values[x.label] = lesson::measured_value(quantity, *row, *db);
            }
        } catch (const std::exception& e) {
            error = tr("Cannot read the runs: %1").arg(QString::fromUtf8(e.what()));
        }
        QMetaObject::invokeMethod(
            this,
            [this, values = std::move(values), error, generation, index] {
                m_reading = false;
                for (const auto& w : m_questionWidgets) w.check->setEnabled(true);
                if (generation == m_generation) showVerdict(index, values, error);
                if (m_pending >= 0) {
                    const int next = m_pending;
                    m_pending = -1;
                    if (generation == m_generation) check(next);
                }
            },
            Qt::QueuedConnection);
    });
    m_reading = true;
    connect(m_thread, &QThread::finished, m_thread, &QObject::deleteLater);
    m_thread->start();
}

void LessonsPanel::showVerdict(int index, const std::map<std::string, double>& values, const QString& error) {
    if (!m_lesson || index >= m_questionWidgets.size()) return;
    const lesson::Question& question = m_lesson->questions[static_cast<size_t>(index)];
    const QuestionWidgets& w = m_questionWidgets[index];
    const QString answer = w.choice ? w.choice->currentText() : w.answer->text();
    QString message = error;
    bool right = false;
    if (message.isEmpty() && answer.trimmed().isEmpty())
        message = w.choice ? tr("Choose an answer first.") : tr("Type your prediction first.");
    if (message.isEmpty()) {
        try {
            const lesson::Verdict v = lesson::check(question, answer.toStdString(), values);
            right = v.right;
            w.result->setStyleSheet(right ? QStringLiteral("color: #1b7f3b;") : QStringLiteral("color: #b35c00;"));
            w.result->setText(q(v.message));
            emit checked(index, right);
            return;
        } catch (const std::exception& e) {
            message = QString::fromUtf8(e.what());
        }
    }
    w.result->setStyleSheet(QStringLiteral("color: #b00020;"));
    w.result->setText(message);
    emit checked(index, false);
}

}  // namespace paralab::ui
