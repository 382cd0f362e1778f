// The `flywheel` command. `flywheel --help` lists the command groups;
// `flywheel GROUP COMMAND --help` documents each command.
#include <cstdio>

#include "flywheel/cli/commands.h"
#include "flywheel/cli/common.h"
#include "flywheel/base/waits.h"

int main(int argc, char** argv) {
  CLI::App app{"flywheel: versioned training data, fast loading and RL experience replay"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "flywheel 0.1.0");
  int exit_code = 0;
  // SIGUSR1 (and a watchdog, FLYWHEEL_WATCHDOG_SECONDS, default 300 s) print
  // who waits on what (docs/observability.md, "Hangs").
  flywheel::obs::InstallHangDiagnostics();
  std::string catalog;
  app.add_option("--catalog", catalog,
                 "Catalog that records lineage and names datasets: a directory (SQLite) or\n"
                 "postgresql://... (default: $FLYWHEEL_CATALOG; none = nothing recorded)");
  app.parse_complete_callback([&] { flywheel::cli::SetCatalogSpec(catalog); });
  flywheel::cli::AddTableCommands(app, &exit_code);
  flywheel::cli::AddIngestCommands(app, &exit_code);
  flywheel::cli::AddExportCommand(app, &exit_code);
  flywheel::cli::AddCatalogCommands(app, &exit_code);
  flywheel::cli::AddServeCommand(app, &exit_code);
  flywheel::cli::AddDoctorCommand(app, &exit_code);
  flywheel::cli::AddLlmCommands(app, &exit_code);
#ifdef FLYWHEEL_HAVE_REPLAY_SERVICE
  flywheel::cli::AddReplayCommands(app, &exit_code);
  flywheel::cli::AddRunCommand(app, &exit_code);
  flywheel::cli::AddTaskCommand(app, &exit_code);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and exit 0; every other parse or validation
    // error (unknown flag, missing argument, a number out of range) is bad
    // input: exit 2, like every other refusal of bad input (cli/common.cc).
    return app.exit(e) == 0 ? 0 : 2;
  }
  return exit_code;
}
