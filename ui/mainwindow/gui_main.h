#pragma once

namespace paralab::ui {

// Creates the application and the window on the embedded default experiment, or on the
// experiment file given as the one positional argument (`paralab FILE.paralab.json`); runs
// the event loop and returns its exit code.
int gui_main(int argc, char** argv);

}  // namespace paralab::ui
