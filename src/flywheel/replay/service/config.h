// The replay server's configuration file (TOML), as read by
// `flywheel replay serve --config tables.toml`. Format: docs/replay.md,
// "Server configuration". Every error names the file, line and column.
//
// Thread-safety: stateless functions.
#pragma once

#include <string>
#include <string_view>

#include "flywheel/base/status.h"
#include "flywheel/base/toml.h"
#include "flywheel/replay/service/server.h"

namespace flywheel::replay {

// ServerOptions (tables created, address "host:port") from a parsed config.
Result<ServerOptions> ServerOptionsFromToml(const toml::Value& root);
// Reads and parses `path`.
Result<ServerOptions> LoadServerConfig(const std::string& path);

// A commented example configuration (what `flywheel replay serve
// --example-config` prints); it parses.
std::string_view ExampleServerConfig();

}  // namespace flywheel::replay
