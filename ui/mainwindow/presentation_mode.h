// View ▸ Presentation (F11): the window for a classroom projector. Fonts 1.5 times larger, in
// the widgets and in every plot (axis labels, tick labels, legends, titles, text items), plot
// pens twice as thick, the window full screen and the experiment tabs hidden, so the plot tab in
// view takes the whole screen. Leaving it puts back every font, pen, the window's state and the
// tabs exactly as they were.
//
// Plots keep changing while it is on (a device's curve appears mid-run, a colour is reapplied):
// before each replot, what a plot has that is not yet enlarged is enlarged, and on leaving only
// what is still as enlarged is put back.
#pragma once

#include <QFont>
#include <QHash>
#include <QMetaObject>
#include <QObject>
#include <QPair>
#include <QPen>
#include <QPointer>
#include <QVector>

class QAction;
class QCustomPlot;
class QMainWindow;
class QWidget;

namespace paralab::ui {

class PresentationMode : public QObject {
    Q_OBJECT
public:
    static constexpr double kFontScale = 1.5;
    static constexpr double kPenScale = 2.0;

    // Adds View ▸ Presentation to `window`'s menu bar (before Help); `hideInPresentation` is
    // hidden while it is on (the experiment tabs).
    PresentationMode(QMainWindow* window, QWidget* hideInPresentation);

    QAction* action() const { return m_action; }
    bool isOn() const { return m_on; }

public slots:
    void setOn(bool on);

private:
    template <typename T>
    struct Kept {
        T original, applied;
    };
    void enlargePlot(QCustomPlot* plot);
    void restorePlot(QCustomPlot* plot);

    QMainWindow* m_window;
    QPointer<QWidget> m_hidden;
    QAction* m_action;
    bool m_on = false;
    // What the window had before.
    bool m_hadFont = false;
    QFont m_font;
    Qt::WindowStates m_states;
    bool m_hiddenWasVisible = true;
    // Per plot, per element and property: the value before and the one set.
    using Key = QPair<const void*, int>;
    QHash<Key, Kept<QFont>> m_fonts;
    QHash<Key, Kept<QPen>> m_pens;
    QVector<QMetaObject::Connection> m_connections;
};

}  // namespace paralab::ui
