#include "ui/mainwindow/help_dialogs.h"

#include <QAction>
#include <QCoreApplication>
#include <QDesktopServices>
#include <QDialogButtonBox>
#include <QDir>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QListWidget>
#include <QMainWindow>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QTableWidget>
#include <QTextBrowser>
#include <QVBoxLayout>

#include <functional>

// The pages are compiled into this static library; Qt needs telling once, outside any namespace.
static void initDocumentationResources() { Q_INIT_RESOURCE(documentation); }

namespace paralab::ui {

namespace {

// The page's first heading, without its "# ".
QString titleOf(const QString& resource) {
    QFile file(resource);
    if (file.open(QIODevice::ReadOnly))
        while (!file.atEnd()) {
            const QString line = QString::fromUtf8(file.readLine()).trimmed();
            if (line.startsWith(QLatin1String("# "))) return line.mid(2);
        }
    return QFileInfo(resource).completeBaseName();
}

}  // namespace

QStringList documentationPages() {
    initDocumentationResources();
    QStringList pages{QStringLiteral(":/docs/README.md")};
    const QDir docs(QStringLiteral(":/docs/docs"));
    for (const QString& name : docs.entryList({QStringLiteral("*.md")}, QDir::Files, QDir::Name))
        pages << docs.filePath(name);
    return pages;
}

DocumentationDialog::DocumentationDialog(QWidget* parent)
    : QDialog(parent), m_pages(new QListWidget), m_browser(new QTextBrowser) {
    setWindowTitle(tr("ParaLab documentation"));
    setObjectName(QStringLiteral("documentationDialog"));
    for (const QString& page : documentationPages()) {
        auto* item = new QListWidgetItem(titleOf(page), m_pages);
        item->setData(Qt::UserRole, page);
        item->setToolTip(page.mid(QStringLiteral(":/docs/").size()));
    }
    m_pages->setMaximumWidth(260);
    // Links between pages stay here (the browser loads qrc: pages itself, images included);
    // links to the web go to the system's browser.
    m_browser->setOpenLinks(false);
    connect(m_browser, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
        if (url.scheme() == QLatin1String("qrc") || url.isRelative()) {
            const QUrl target = m_browser->source().resolved(url);
            const QString path = QStringLiteral(":") + target.path();
            if (QFileInfo::exists(path) && path.endsWith(QLatin1String(".md")))
                showPage(path);
            else if (!target.fragment().isEmpty())
                m_browser->scrollToAnchor(target.fragment());
            return;
        }
        QDesktopServices::openUrl(url);
    });
    connect(m_pages, &QListWidget::currentItemChanged, this, [this](QListWidgetItem* item) {
        if (item) showPage(item->data(Qt::UserRole).toString());
    });
    auto* body = new QHBoxLayout;
    body->addWidget(m_pages);
    body->addWidget(m_browser, 1);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(body, 1);
    layout->addWidget(buttons);
    resize(1000, 700);
    if (m_pages->count() > 0) m_pages->setCurrentRow(0);
}

void DocumentationDialog::showPage(const QString& resource) {
    const QUrl url(QStringLiteral("qrc") + resource);
    if (m_browser->source() != url) m_browser->setSource(url, QTextDocument::MarkdownResource);
    for (int i = 0; i < m_pages->count(); ++i)
        if (m_pages->item(i)->data(Qt::UserRole).toString() == resource && m_pages->currentRow() != i)
            m_pages->setCurrentRow(i);
}

QString DocumentationDialog::currentPage() const {
    return QStringLiteral(":") + m_browser->source().path();
}

QList<ShortcutRow> shortcutsOf(const QMainWindow* window) {
    QList<ShortcutRow> rows;
    std::function<void(const QMenu*, const QString&)> walk = [&](const QMenu* menu, const QString& path) {
        for (const QAction* a : menu->actions()) {
            const QString text = a->text().remove(QLatin1Char('&')).remove(QStringLiteral("…"));
            if (a->menu()) {
                walk(a->menu(), path + QStringLiteral(" ▸ ") + text);
                continue;
            }
            if (a->isSeparator()) continue;
            QStringList keys;
            for (const QKeySequence& k : a->shortcuts()) keys << k.toString(QKeySequence::NativeText);
            if (!keys.isEmpty()) rows.push_back({path, text, keys.join(QStringLiteral(", "))});
        }
    };
    for (const QAction* top : window->menuBar()->actions())
        if (top->menu()) walk(top->menu(), top->text().remove(QLatin1Char('&')));
    return rows;
}

void showShortcuts(QMainWindow* window) {
    const QList<ShortcutRow> rows = shortcutsOf(window);
    QDialog dialog(window);
    dialog.setWindowTitle(QObject::tr("Keyboard shortcuts"));
    auto* table = new QTableWidget(static_cast<int>(rows.size()), 3);
    table->setHorizontalHeaderLabels({QObject::tr("Menu"), QObject::tr("Action"), QObject::tr("Keys")});
    for (int i = 0; i < rows.size(); ++i) {
        table->setItem(i, 0, new QTableWidgetItem(rows[i].menu));
        table->setItem(i, 1, new QTableWidgetItem(rows[i].action));
        table->setItem(i, 2, new QTableWidgetItem(rows[i].keys));
    }
    table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table->verticalHeader()->hide();
    table->horizontalHeader()->setStretchLastSection(true);
    table->resizeColumnsToContents();
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close);
    QObject::connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
    auto* layout = new QVBoxLayout(&dialog);
    layout->addWidget(table);
    layout->addWidget(buttons);
    dialog.resize(560, 480);
    dialog.exec();
}

void showAbout(QWidget* parent) {
    QMessageBox::about(
        parent, QObject::tr("About ParaLab"),
        QObject::tr("<h3>ParaLab %1</h3>"
                    "<p>A laboratory for parallel neural-network training: design a model, pick "
                    "devices and a parallel strategy, and watch every device train.</p>"
                    "<p>Built with Qt %2, QCustomPlot, SQLite, oneDNN and OpenBLAS.</p>")
            .arg(QCoreApplication::applicationVersion(), QString::fromLatin1(qVersion())));
}

}  // namespace paralab::ui
