#include "ui/panels/designer/model_edit_command.h"

namespace paralab::ui {

ModelEditCommand::ModelEditCommand(const QString& text, DesignedModel before,
                                   LayerPath selectedBefore, DesignedModel after,
                                   LayerPath selectedAfter, Apply apply, QString mergeKey)
    : QUndoCommand(text),
      m_before(std::move(before)),
      m_selectedBefore(std::move(selectedBefore)),
      m_after(std::move(after)),
      m_selectedAfter(std::move(selectedAfter)),
      m_apply(std::move(apply)),
      m_mergeKey(std::move(mergeKey)) {}

bool ModelEditCommand::mergeWith(const QUndoCommand* other) {
    const auto* next = static_cast<const ModelEditCommand*>(other);  // same id(): same class
    if (next->m_mergeKey != m_mergeKey) return false;
    m_after = next->m_after;
    m_selectedAfter = next->m_selectedAfter;
    return true;
}

}  // namespace paralab::ui
