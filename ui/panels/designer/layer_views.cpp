#include "ui/panels/designer/layer_views.h"

#include <QDragEnterEvent>
#include <QHeaderView>
#include <QMimeData>

namespace paralab::ui {

LayerPalette::LayerPalette(QWidget* parent) : QListWidget(parent) {
    setDragEnabled(true);
    setDragDropMode(QAbstractItemView::DragOnly);
    setSelectionMode(QAbstractItemView::SingleSelection);
    setToolTip(tr("Double-click a layer type, or drag it onto the stack"));
    connect(this, &QListWidget::itemActivated, this,
            [this](QListWidgetItem* item) { emit layerTypeActivated(item->text()); });
}

QMimeData* LayerPalette::mimeData(const QList<QListWidgetItem*>& items) const {
    if (items.isEmpty()) return nullptr;
    auto* data = new QMimeData;
    data->setData(kLayerTypeMime, items.front()->text().toUtf8());
    return data;
}

LayerStackView::LayerStackView(QWidget* parent) : QTreeWidget(parent) {
    setColumnCount(ColumnCount);
    setHeaderLabels({tr("Layer"), tr("Output"), tr("Params"), tr("FLOPs"), tr("Act. mem")});
    header()->setStretchLastSection(false);
    header()->setSectionResizeMode(QHeaderView::ResizeToContents);
    header()->setSectionResizeMode(LayerColumn, QHeaderView::Stretch);
    setSelectionMode(QAbstractItemView::SingleSelection);
    setDragEnabled(true);
    setAcceptDrops(true);
    viewport()->setAcceptDrops(true);  // drops are delivered to the viewport
    setDropIndicatorShown(true);
    setDragDropMode(QAbstractItemView::DragDrop);
    setAlternatingRowColors(true);
    setUniformRowHeights(true);
    setExpandsOnDoubleClick(false);
}

bool LayerStackView::isPart(const QTreeWidgetItem* item) {
    return item && item->data(LayerColumn, kLayerPartRole).toBool();
}

LayerPath LayerStackView::pathOf(const QTreeWidgetItem* item) const {
    while (isPart(item)) item = item->parent();
    LayerPath path;
    while (item) {
        const QTreeWidgetItem* parent = item->parent();
        path.prepend(parent ? parent->indexOfChild(const_cast<QTreeWidgetItem*>(item))
                            : indexOfTopLevelItem(const_cast<QTreeWidgetItem*>(item)));
        item = parent;
    }
    return path;
}

QTreeWidgetItem* LayerStackView::itemAt(const LayerPath& path) const {
    QTreeWidgetItem* item = nullptr;
    for (int i : path) {
        const int count = item ? item->childCount() : topLevelItemCount();
        if (i < 0 || i >= count) return nullptr;
        item = item ? item->child(i) : topLevelItem(i);
    }
    return item;
}

void LayerStackView::dragEnterEvent(QDragEnterEvent* event) {
    if (event->mimeData()->hasFormat(kLayerTypeMime) || event->source() == this) {
        QTreeWidget::dragEnterEvent(event);
        event->acceptProposedAction();
    } else {
        event->ignore();
    }
}

void LayerStackView::dragMoveEvent(QDragMoveEvent* event) {
    QTreeWidget::dragMoveEvent(event);  // updates the drop indicator
    if (event->mimeData()->hasFormat(kLayerTypeMime) || event->source() == this)
        event->acceptProposedAction();
}

bool LayerStackView::dropTarget(const QPoint& pos, LayerPath& parent, int& index) const {
    QTreeWidgetItem* target = QTreeWidget::itemAt(pos);
    const bool onPart = isPart(target);
    while (isPart(target)) target = target->parent();  // among a block's parts: after the block
    if (!target) {
        parent.clear();
        index = topLevelItemCount();
        return true;
    }
    const LayerPath at = pathOf(target);
    parent = at.mid(0, at.size() - 1);
    index = at.back();
    switch (onPart ? BelowItem : dropIndicatorPosition()) {
        case AboveItem:
            break;
        case BelowItem:
            ++index;
            break;
        case OnItem:
            // Onto a residual block: into its body, at the end; onto a layer: after it.
            if (target->data(LayerColumn, Qt::UserRole).toString() == QLatin1String("residual")) {
                parent = at;
                index = target->childCount();
            } else {
                ++index;
            }
            break;
        case OnViewport:
            parent.clear();
            index = topLevelItemCount();
            break;
    }
    return true;
}

void LayerStackView::dropEvent(QDropEvent* event) {
    LayerPath parent;
    int index = 0;
    const QPoint pos = event->position().toPoint();
    if (!dropTarget(pos, parent, index)) return event->ignore();
    if (event->mimeData()->hasFormat(kLayerTypeMime)) {
        emit insertRequested(QString::fromUtf8(event->mimeData()->data(kLayerTypeMime)), parent,
                             index);
    } else if (event->source() == this && currentItem()) {
        emit moveRequested(pathOf(currentItem()), parent, index);
    }
    // The tree is rebuilt from the model; Qt must not move items itself.
    event->setDropAction(Qt::IgnoreAction);
    event->accept();
}

}  // namespace paralab::ui
