#include "ui/session/run_source.h"

namespace paralab::ui {

RunSource::RunSource(QObject* parent) : QObject(parent) {
    qRegisterMetaType<paralab::config::StepRecord>();
    qRegisterMetaType<paralab::config::EvalResult>();
    qRegisterMetaType<paralab::config::RunSummary>();
    qRegisterMetaType<paralab::config::Span>();
}

void RunSource::setState(State state) {
    if (state == m_state) return;
    m_state = state;
    emit stateChanged(state);
}

}  // namespace paralab::ui
