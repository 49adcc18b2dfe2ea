#include "ui/session/run_source.h"

namespace paralab::ui {

RunSource::RunSource(QObject* parent) : QObject(parent) {
    qRegisterMetaType<paralab::run::StepRecord>();
    qRegisterMetaType<paralab::run::EvalResult>();
    qRegisterMetaType<paralab::run::RunSummary>();
    qRegisterMetaType<paralab::run::Span>();
}

void RunSource::setState(State state) {
    if (state == m_state) return;
    m_state = state;
    emit stateChanged(state);
}

}  // namespace paralab::ui
