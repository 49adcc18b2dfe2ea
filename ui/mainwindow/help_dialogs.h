// Help ▸: the documentation (the README and docs/ pages, compiled into the program, read in a
// browser window), the keyboard shortcuts (read from the window's own menus, so the list is
// always the one in force) and About.
#pragma once

#include <QDialog>
#include <QStringList>

class QListWidget;
class QMainWindow;
class QTextBrowser;

namespace paralab::ui {

// The documentation pages compiled in: ":/docs/README.md" first, then ":/docs/docs/*.md" by name.
QStringList documentationPages();

// The README and docs pages with their pictures, one at a time; links between pages are
// followed, links to the web opened by the system.
class DocumentationDialog : public QDialog {
    Q_OBJECT
public:
    explicit DocumentationDialog(QWidget* parent = nullptr);
    void showPage(const QString& resource);  // one of documentationPages()
    QString currentPage() const;
    QTextBrowser* browser() const { return m_browser; }

private:
    QListWidget* m_pages;
    QTextBrowser* m_browser;
};

// Every action of `window`'s menus that has a shortcut: its menu, its text and its keys, in menu
// order ("Run", "Start", "Ctrl+R").
struct ShortcutRow {
    QString menu, action, keys;
};
QList<ShortcutRow> shortcutsOf(const QMainWindow* window);
void showShortcuts(QMainWindow* window);
void showAbout(QWidget* parent);

}  // namespace paralab::ui
