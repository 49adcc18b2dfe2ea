// One undoable edit of the designed model: the model before and after, and which layer was
// selected on each side. Snapshots rather than inverse operations: a model is a few hundred
// bytes, and a snapshot cannot drift from what the edit did.
#pragma once

#include <QUndoCommand>
#include <functional>

#include "ui/panels/designer/designed_model.h"

namespace paralab::ui {

class ModelEditCommand : public QUndoCommand {
public:
    using Apply = std::function<void(const DesignedModel&, const LayerPath& selection)>;

    // `mergeKey`: edits with the same non-empty key in a row become one step (a spin box's
    // arrow pressed ten times on one option is one undo).
    ModelEditCommand(const QString& text, DesignedModel before, LayerPath selectedBefore,
                     DesignedModel after, LayerPath selectedAfter, Apply apply,
                     QString mergeKey = {});

    void undo() override { m_apply(m_before, m_selectedBefore); }
    void redo() override { m_apply(m_after, m_selectedAfter); }
    int id() const override { return m_mergeKey.isEmpty() ? -1 : 1; }
    bool mergeWith(const QUndoCommand* other) override;

private:
    DesignedModel m_before;
    LayerPath m_selectedBefore;
    DesignedModel m_after;
    LayerPath m_selectedAfter;
    Apply m_apply;
    QString m_mergeKey;
};

}  // namespace paralab::ui
