// The designer's two lists: the palette of layer types (drag from it, or double-click) and the
// layer stack (a tree: a residual block holds its body; a transformer_block its parts, read-only).
// The stack reports drops as requests; the designer turns them into undoable edits and rebuilds
// the tree.
#pragma once

#include <QListWidget>
#include <QTreeWidget>

#include "ui/panels/designer/designed_model.h"

namespace paralab::ui {

// The MIME type of a palette drag: the layer type's name, UTF-8.
inline constexpr const char* kLayerTypeMime = "application/x-paralab-layer-type";
// Set (true) on the stack's rows that show a part of a composite layer (a transformer_block's
// layernorm, attention, ...): not layers of the file, so neither selected, dragged nor dropped on.
inline constexpr int kLayerPartRole = Qt::UserRole + 1;

class LayerPalette : public QListWidget {
    Q_OBJECT
public:
    explicit LayerPalette(QWidget* parent = nullptr);

signals:
    void layerTypeActivated(const QString& type);

protected:
    QMimeData* mimeData(const QList<QListWidgetItem*>& items) const override;
};

class LayerStackView : public QTreeWidget {
    Q_OBJECT
public:
    enum Column { LayerColumn, OutputColumn, ParamsColumn, FlopsColumn, MemoryColumn, ColumnCount };

    explicit LayerStackView(QWidget* parent = nullptr);

    // The layer's path in the model; for a part's row, its composite layer's.
    LayerPath pathOf(const QTreeWidgetItem* item) const;
    QTreeWidgetItem* itemAt(const LayerPath& path) const;
    static bool isPart(const QTreeWidgetItem* item);

signals:
    // A palette type dropped: insert it into the list `parent` names (empty: the model's) at index.
    void insertRequested(const QString& type, const LayerPath& parent, int index);
    // A layer of the stack dragged to another place.
    void moveRequested(const LayerPath& from, const LayerPath& parent, int index);

protected:
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dragMoveEvent(QDragMoveEvent* event) override;
    void dropEvent(QDropEvent* event) override;

private:
    // Where a drop at the current indicator goes: the parent list and the index in it.
    bool dropTarget(const QPoint& pos, LayerPath& parent, int& index) const;
};

}  // namespace paralab::ui
