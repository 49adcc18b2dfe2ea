#include "ui/panels/common/replot_pacer.h"

#include <QEvent>
#include <QTimer>
#include <QWidget>

#include <algorithm>

namespace paralab::ui {

ReplotPacer::ReplotPacer(QWidget* panel, std::function<void()> draw)
    : QObject(panel), m_panel(panel), m_draw(std::move(draw)), m_timer(new QTimer(this)) {
    m_timer->setSingleShot(true);
    connect(m_timer, &QTimer::timeout, this, &ReplotPacer::drawNow);
    panel->installEventFilter(this);
}

void ReplotPacer::request() {
    if (!m_panel->isVisible()) {
        m_dirty = true;
        return;
    }
    if (m_timer->isActive()) return;  // these data are drawn by the redraw already due
    const qint64 since = m_last.isValid() ? m_last.elapsed() : m_periodMs;
    m_timer->start(static_cast<int>(std::max<qint64>(0, m_periodMs - since)));
}

void ReplotPacer::drawNow() {
    m_timer->stop();
    if (!m_panel->isVisible()) {
        m_dirty = true;
        return;
    }
    m_dirty = false;
    m_last.start();
    m_draw();
    m_periodMs = std::clamp<qint64>(4 * m_last.elapsed(), 33, 500);
}

bool ReplotPacer::eventFilter(QObject* watched, QEvent* event) {
    if (watched == m_panel && event->type() == QEvent::Show && m_dirty) drawNow();
    return QObject::eventFilter(watched, event);
}

}  // namespace paralab::ui
