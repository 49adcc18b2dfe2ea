// When a panel's plots are redrawn as live data arrive: at most 30 times a second, and less
// often when a redraw is costly (the next one waits for three times the last one's duration), so
// that drawing takes at most about a quarter of the GUI thread while the ranks compete with it
// for the CPU; never while the panel is hidden (a tab not in view is drawn when it is shown).
#pragma once

#include <QElapsedTimer>
#include <QObject>

#include <functional>

class QTimer;
class QWidget;

namespace paralab::ui {

class ReplotPacer : public QObject {
    Q_OBJECT
public:
    // `draw` redraws the panel's plots (replot(rpRefreshHint) of each).
    ReplotPacer(QWidget* panel, std::function<void()> draw);

    void request();  // new data: drawn at the pace the redraws allow
    void drawNow();  // a setting changed: drawn at once (when the panel is shown, if hidden)
    qint64 periodMs() const { return m_periodMs; }

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;  // the panel's Show

private:
    QWidget* m_panel;
    std::function<void()> m_draw;
    QTimer* m_timer;
    QElapsedTimer m_last;  // started when the last redraw started
    qint64 m_periodMs = 33;
    bool m_dirty = false;  // asked for while hidden
};

}  // namespace paralab::ui
