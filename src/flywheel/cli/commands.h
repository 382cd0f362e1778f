// Command groups of the `flywheel` binary; one file per group.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace flywheel::cli {

// Each group adds its subcommands to `app`. A subcommand's callback sets the
// process exit code through `exit_code`.
// An integer option's check: at least `min`, with a plain message
// ("--rows: must be at least 0, got -5"); bad values exit 2 (main.cc).
CLI::Validator AtLeast(long long min);

void AddTableCommands(CLI::App& app, int* exit_code);
// `flywheel replay ...` (builds with the gRPC service only).
void AddReplayCommands(CLI::App& app, int* exit_code);
// `flywheel ingest` and `flywheel export` (ingest_commands.cc).
void AddIngestCommands(CLI::App& app, int* exit_code);
void AddExportCommand(CLI::App& app, int* exit_code);
// `flywheel lineage ...` and `flywheel catalog ...` (catalog_commands.cc).
void AddCatalogCommands(CLI::App& app, int* exit_code);
// `flywheel run CONFIG.toml` (run_command.cc).
void AddRunCommand(CLI::App& app, int* exit_code);

// `flywheel task make arith`: task tables for RL on language models (run_command.cc).
void AddTaskCommand(CLI::App& app, int* exit_code);
// `flywheel serve`: the dashboard (serve_command.cc).
void AddServeCommand(CLI::App& app, int* exit_code);
// `flywheel doctor`: this machine's limits and a job's bottleneck (doctor_command.cc).
void AddDoctorCommand(CLI::App& app, int* exit_code);
// `flywheel llm import|inspect` (llm_commands.cc).
void AddLlmCommands(CLI::App& app, int* exit_code);

}  // namespace flywheel::cli
