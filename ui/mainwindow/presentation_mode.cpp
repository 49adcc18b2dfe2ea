#include "ui/mainwindow/presentation_mode.h"

#include <QAction>
#include <QMainWindow>
#include <QMenu>
#include <QMenuBar>
#include <qcustomplot.h>

#include <functional>

namespace paralab::ui {

namespace {

using FontSetter = std::function<void(const QFont&)>;
using PenSetter = std::function<void(const QPen&)>;
using Key = QPair<const void*, int>;

// Every font a plot draws text with: axis labels and tick labels of each axis rect, titles and
// other text elements, legends and their items, text items. `from`: the element whose font a
// new one takes when it is made (a legend item its legend's), else a null key.
using FontVisitor = std::function<void(Key key, const QFont&, const FontSetter&, Key from)>;
void forEachFont(QCustomPlot* plot, const FontVisitor& f) {
    for (QCPAxisRect* rect : plot->axisRects())
        for (QCPAxis* axis : rect->axes()) {
            f({axis, 0}, axis->labelFont(), [axis](const QFont& v) { axis->setLabelFont(v); }, {});
            f({axis, 1}, axis->tickLabelFont(), [axis](const QFont& v) { axis->setTickLabelFont(v); }, {});
        }
    for (QCPLayoutElement* element : plot->plotLayout()->elements(true)) {
        if (auto* text = qobject_cast<QCPTextElement*>(element))
            f({text, 0}, text->font(), [text](const QFont& v) { text->setFont(v); }, {});
    }
    // Legends live in the layout or in an axis rect's inset layout.
    QList<QCPLegend*> legends;
    for (QCPLayoutElement* element : plot->plotLayout()->elements(true))
        if (auto* legend = qobject_cast<QCPLegend*>(element)) legends << legend;
    for (QCPAxisRect* rect : plot->axisRects())
        for (QCPLayoutElement* element : rect->insetLayout()->elements(true))
            if (auto* legend = qobject_cast<QCPLegend*>(element); legend && !legends.contains(legend)) legends << legend;
    for (QCPLegend* legend : legends) {
        // The legend's own font is the one later items take.
        f({legend, 0}, legend->font(), [legend](const QFont& v) {
            // setFont also sets every item's: keep the items' own as they are.
            QList<QPair<QCPAbstractLegendItem*, QFont>> items;
            for (int i = 0; i < legend->itemCount(); ++i)
                if (QCPAbstractLegendItem* item = legend->item(i)) items.append({item, item->font()});
            legend->setFont(v);
            for (const auto& [item, font] : items) item->setFont(font);
        }, {});
        for (int i = 0; i < legend->itemCount(); ++i) {
            QCPAbstractLegendItem* item = legend->item(i);  // a wrapped legend has empty cells
            if (!item) continue;
            f({item, 0}, item->font(), [item](const QFont& v) { item->setFont(v); }, {legend, 0});
        }
    }
    for (int i = 0; i < plot->itemCount(); ++i)
        if (auto* text = qobject_cast<QCPItemText*>(plot->item(i)))
            f({text, 0}, text->font(), [text](const QFont& v) { text->setFont(v); }, {});
}

// Every line a plot draws its data with.
void forEachPen(QCustomPlot* plot, const std::function<void(Key, const QPen&, const PenSetter&)>& f) {
    for (int i = 0; i < plot->plottableCount(); ++i) {
        QCPAbstractPlottable* p = plot->plottable(i);
        f({p, 0}, p->pen(), [p](const QPen& v) { p->setPen(v); });
    }
}

QFont enlarged(QFont font, double scale) {
    if (font.pointSizeF() > 0) font.setPointSizeF(font.pointSizeF() * scale);
    else if (font.pixelSize() > 0) font.setPixelSize(qRound(font.pixelSize() * scale));
    return font;
}

QPen thickened(QPen pen, double scale) {
    pen.setWidthF(std::max(1.0, pen.widthF()) * scale);
    return pen;
}

}  // namespace

PresentationMode::PresentationMode(QMainWindow* window, QWidget* hideInPresentation)
    : QObject(window), m_window(window), m_hidden(hideInPresentation) {
    auto* view = new QMenu(tr("&View"), window);
    view->setObjectName(QStringLiteral("viewMenu"));
    m_action = view->addAction(tr("&Presentation"));
    m_action->setObjectName(QStringLiteral("presentationAction"));
    m_action->setCheckable(true);
    m_action->setShortcut(QKeySequence(Qt::Key_F11));
    m_action->setStatusTip(tr("Large fonts and thick lines, full screen, for a projector (F11 leaves)"));
    // The shortcut works with the menu bar hidden (full screen on some desktops).
    window->addAction(m_action);
    connect(m_action, &QAction::toggled, this, &PresentationMode::setOn);
    // Before Help, the last menu by convention.
    QAction* before = nullptr;
    for (QAction* a : window->menuBar()->actions())
        if (a->menu() && a->text().contains(QLatin1String("Help"))) before = a;
    window->menuBar()->insertMenu(before, view);
}

void PresentationMode::setOn(bool on) {
    if (on == m_on) return;
    m_on = on;
    if (m_action->isChecked() != on) {
        const QSignalBlocker block(m_action);
        m_action->setChecked(on);
    }
    const QList<QCustomPlot*> plots = m_window->findChildren<QCustomPlot*>();
    if (on) {
        m_hadFont = m_window->testAttribute(Qt::WA_SetFont);
        m_font = m_window->font();
        m_states = m_window->windowState();
        m_hiddenWasVisible = m_hidden && !m_hidden->isHidden();
        m_window->setFont(enlarged(m_window->font(), kFontScale));
        if (m_hidden) m_hidden->hide();
        for (QCustomPlot* plot : plots) {
            enlargePlot(plot);
            // What the plot gains while on (a new device's curve, a recoloured pen) follows.
            m_connections.append(connect(plot, &QCustomPlot::beforeReplot, this, [this, plot] { enlargePlot(plot); }));
            plot->replot();
        }
        m_window->setWindowState(m_states | Qt::WindowFullScreen);
        return;
    }
    for (const auto& c : std::as_const(m_connections)) disconnect(c);
    m_connections.clear();
    for (QCustomPlot* plot : plots) {
        restorePlot(plot);
        plot->replot();
    }
    m_fonts.clear();
    m_pens.clear();
    if (m_hadFont) m_window->setFont(m_font);
    else m_window->setFont(QFont());  // inherits the application's again
    m_window->setAttribute(Qt::WA_SetFont, m_hadFont);
    if (m_hidden) m_hidden->setVisible(m_hiddenWasVisible);
    m_window->setWindowState(m_states);
}

void PresentationMode::enlargePlot(QCustomPlot* plot) {
    // A value not as this mode set it is new (or was set anew): it is the one to put back.
    forEachFont(plot, [this](Key key, const QFont& font, const FontSetter& set, Key from) {
        auto it = m_fonts.find(key);
        if (it != m_fonts.end() && it->applied == font) return;
        // Made while on (a legend item of a new curve): it took its parent's enlarged font, and
        // the parent's original is the one to put back. Keys are addresses, and a new item may
        // or may not reuse a deleted one's, so this cannot rest on what the key held before.
        if (const auto parent = m_fonts.constFind(from); from.first && parent != m_fonts.constEnd() &&
                                                         parent->applied == font) {
            m_fonts.insert(key, *parent);
            return;
        }
        const QFont applied = enlarged(font, kFontScale);
        m_fonts.insert(key, {font, applied});
        set(applied);
    });
    forEachPen(plot, [this](Key key, const QPen& pen, const PenSetter& set) {
        auto it = m_pens.find(key);
        if (it != m_pens.end() && it->applied == pen) return;
        const QPen applied = thickened(pen, kPenScale);
        m_pens.insert(key, {pen, applied});
        set(applied);
    });
}

void PresentationMode::restorePlot(QCustomPlot* plot) {
    // Only what is still as this mode set it: a value set since is the plot's own.
    forEachFont(plot, [this](Key key, const QFont& font, const FontSetter& set, Key) {
        auto it = m_fonts.constFind(key);
        if (it != m_fonts.constEnd() && it->applied == font) set(it->original);
    });
    forEachPen(plot, [this](Key key, const QPen& pen, const PenSetter& set) {
        auto it = m_pens.constFind(key);
        if (it != m_pens.constEnd() && it->applied == pen) set(it->original);
    });
}

}  // namespace paralab::ui
