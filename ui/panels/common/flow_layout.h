// A layout that places its widgets left to right and wraps them onto the next line when the
// width runs out (Qt's flow layout example, with heightForWidth): a row of buttons that must
// never make its pane scroll sideways, on a projector's 1024 px or in presentation mode.
#pragma once

#include <QLayout>
#include <QList>

namespace paralab::ui {

class FlowLayout : public QLayout {
public:
    explicit FlowLayout(QWidget* parent = nullptr, int spacing = 6);
    ~FlowLayout() override;

    void addItem(QLayoutItem* item) override;
    int count() const override { return static_cast<int>(m_items.size()); }
    QLayoutItem* itemAt(int index) const override { return m_items.value(index); }
    QLayoutItem* takeAt(int index) override;
    Qt::Orientations expandingDirections() const override { return {}; }
    bool hasHeightForWidth() const override { return true; }
    int heightForWidth(int width) const override { return arrange(QRect(0, 0, width, 0), false); }
    void setGeometry(const QRect& rect) override;
    // At least the widest item: the layout can be as narrow as one item per line.
    QSize minimumSize() const override;
    QSize sizeHint() const override;

private:
    // Lays the items out in `rect` (only measures without `apply`); returns the height used.
    int arrange(const QRect& rect, bool apply) const;

    QList<QLayoutItem*> m_items;
    int m_spacing;
};

}  // namespace paralab::ui
