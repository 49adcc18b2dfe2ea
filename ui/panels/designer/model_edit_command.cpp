#include "ui/panels/designer/model_edit_command.h"

namespace paralab::ui {

ModelEditCommand::ModelEditCommand(const QString& text, DesignedModel before, LayerPath selectedBefore,
                                   DesignedModel after, LayerPath selectedAfter, Apply apply)
    : QUndoCommand(text),
      m_before(std::move(before)),
      m_selectedBefore(std::move(selectedBefore)),
      m_after(std::move(after)),
      m_selectedAfter(std::move(selectedAfter)),
      m_apply(std::move(apply)) {}

}  // namespace paralab::ui
