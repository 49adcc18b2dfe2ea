// The `paralab` command line (docs/experiment-format.md, "Command line"). Subcommands never open a window.
#pragma once

#include <string>

namespace paralab::app {

// "1.5 MiB": bytes in binary units, as every command prints them.
std::string human_bytes(double bytes);

// Runs the command line. Returns the process exit code: 0 finished, 1 failed run, 2 bad file
// or arguments. `open_gui` is called when there is no subcommand in a GUI build.
int run_cli(int argc, char** argv, int (*open_gui)(int argc, char** argv));

}  // namespace paralab::app
