// The CLI described from its own CLI11 definition: the dlock(1) manual page and the bash and zsh
// completion scripts are generated from the same options, descriptions and footers `--help`
// prints, so none of them can drift from the parser (docs/cli.md, "Manual page and completion").
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <string_view>

namespace dlock::cli {

/// The manual page dlock(1) in man(7) troff: NAME, SYNOPSIS, DESCRIPTION, one section per visible
/// subcommand (its usage, options with defaults, and its `--help` footer), NOTES (`notes`:
/// examples, URLs), EXIT STATUS (`exit_statuses`), ENVIRONMENT and SEE ALSO. Subcommands and
/// options whose group is empty (hidden) are left out. Nothing in it names a file of the source
/// tree: an installed system has only the page.
std::string man_page(const CLI::App& app, std::string_view version, std::string_view notes,
                     std::string_view exit_statuses);

/// A bash completion script (`source <(dlock completion bash)`): completes subcommand names, each
/// subcommand's options, and file names after options that take a FILE.
std::string bash_completion(const CLI::App& app);

/// A zsh completion script (`dlock completion zsh > "${fpath[1]}/_dlock"`), with each option's
/// description.
std::string zsh_completion(const CLI::App& app);

}  // namespace dlock::cli
