// Wiring only: the GUI when there is no subcommand (in a GUI build), the CLI otherwise.
#include "cli.h"

#ifdef PARALAB_WITH_GUI
#include "ui/mainwindow/gui_main.h"
#endif

int main(int argc, char** argv) {
#ifdef PARALAB_WITH_GUI
    return paralab::app::run_cli(argc, argv, &paralab::ui::gui_main);
#else
    return paralab::app::run_cli(argc, argv, nullptr);
#endif
}
