#include "describe.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>
#include <vector>

namespace dlock::cli {
namespace {

// Hidden subcommands and options are those with an empty group (CLI11's convention).
std::vector<const CLI::App*> visible_subcommands(const CLI::App& app) {
    return app.get_subcommands([](const CLI::App* sub) { return !sub->get_group().empty(); });
}

std::vector<const CLI::Option*> visible_options(const CLI::App& app) {
    return app.get_options([](const CLI::Option* opt) { return !opt->get_group().empty(); });
}

std::vector<const CLI::Option*> named_options(const CLI::App& app) {
    auto options = visible_options(app);
    std::erase_if(options, [](const CLI::Option* opt) { return !opt->nonpositional(); });
    return options;
}

bool takes_value(const CLI::Option& opt) { return opt.get_items_expected_max() > 0; }

// Every spelling of an option, short ones first: {"-q", "--quiet"}.
std::vector<std::string> spellings(const CLI::Option& opt) {
    std::vector<std::string> out;
    for (const auto& s : opt.get_snames()) out.push_back("-" + s);
    for (const auto& l : opt.get_lnames()) out.push_back("--" + l);
    return out;
}

// The value's placeholder as --help shows it ("DURATION=30s" -> "DURATION"), or "VALUE".
std::string placeholder(const CLI::Option& opt) {
    std::string type = opt.get_type_name();
    if (const auto eq = type.find('='); eq != std::string::npos) type.resize(eq);
    return type.empty() ? "VALUE" : type;
}

// Text for troff: backslashes escaped, hyphens kept literal, and a line that would start with a
// control character ('.' or '\'') protected with a zero-width \&.
std::string roff(std::string_view text) {
    std::string out;
    bool line_start = true;
    for (const char c : text) {
        if (line_start && (c == '.' || c == '\'')) out += "\\&";
        if (c == '\\') {
            out += "\\e";
        } else if (c == '-') {
            out += "\\-";
        } else {
            out += c;
        }
        line_start = c == '\n';
    }
    return out;
}

// A footer or description paragraph as preformatted text, its layout (aligned examples and tables)
// kept as --help prints it.
void preformatted(std::ostringstream& out, std::string_view text) {
    while (!text.empty() && text.back() == '\n') text.remove_suffix(1);
    if (text.empty()) return;
    out << ".PP\n.nf\n" << roff(text) << "\n.fi\n";
}

void option_entries(std::ostringstream& out, const CLI::App& app) {
    for (const auto* opt : visible_options(app)) {
        out << ".TP\n";
        if (!opt->nonpositional()) {
            out << ".I " << roff(opt->get_name(true)) << "\n";
        } else {
            const auto names = spellings(*opt);
            out << "\\fB";
            for (std::size_t i = 0; i < names.size(); ++i)
                out << (i != 0 ? "\\fR, \\fB" : "") << roff(names[i]);
            out << "\\fR";
            if (takes_value(*opt)) out << " \\fI" << roff(placeholder(*opt)) << "\\fR";
            out << "\n";
        }
        std::string text = opt->get_description();
        const std::string fallback = opt->get_default_str();
        if (!fallback.empty()) text += " (default: " + fallback + ")";
        out << roff(text) << "\n";
    }
}

std::string upper(std::string_view text) {
    std::string out(text);
    std::transform(out.begin(), out.end(), out.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    return out;
}

}  // namespace

std::string man_page(const CLI::App& app, std::string_view version, std::string_view notes,
                     std::string_view exit_statuses) {
    std::ostringstream out;
    const std::string name = app.get_name();
    out << ".TH " << upper(name) << " 1 \"\" \"" << name << " " << version
        << "\" \"User Commands\"\n";
    // "dlock: run commands ..." -> "run commands ...": the page's NAME line names it already.
    std::string summary = app.get_description();
    if (summary.starts_with(name + ": ")) summary.erase(0, name.size() + 2);
    out << ".SH NAME\n" << name << " \\- " << roff(summary) << "\n";
    out << ".SH SYNOPSIS\n";
    // Each command's usage line as --help prints it.
    const auto usage = [](const CLI::App& cmd) {
        const auto* formatter = dynamic_cast<const CLI::Formatter*>(cmd.get_formatter().get());
        std::string line = formatter != nullptr ? formatter->make_usage(&cmd, cmd.get_name())
                                                : cmd.get_name() + " [OPTIONS]";
        if (line.starts_with("Usage: ")) line.erase(0, 7);
        while (!line.empty() && line.back() == '\n') line.pop_back();
        return line;
    };
    out << ".nf\n";
    for (const auto* sub : visible_subcommands(app)) out << roff(usage(*sub)) << "\n";
    out << roff(usage(app)) << "\n.fi\n";
    out << ".SH DESCRIPTION\n" << roff(app.get_description()) << "\n";
    out << ".SH OPTIONS\n";
    option_entries(out, app);
    out << ".SH COMMANDS\n";
    for (const auto* sub : visible_subcommands(app)) {
        out << ".SS \"" << name << " " << sub->get_name() << "\"\n";
        out << roff(sub->get_description()) << "\n";
        option_entries(out, *sub);
        preformatted(out, sub->get_footer());
    }
    out << ".SH NOTES\n";
    preformatted(out, notes);
    out << ".SH EXIT STATUS\n";
    preformatted(out, exit_statuses);
    out << ".SH ENVIRONMENT\n"
           ".TP\n.B DLOCK_URL\nThe lock service when \\fB\\-\\-url\\fR is not given.\n"
           ".TP\n.B DLOCK_PASSWORD\nThe server's password; read by "
        << name
        << ", never passed "
           "on to the command.\n";
    out << ".SH SEE ALSO\n.BR flock (1),\n.BR timeout (1)\n";
    return out.str();
}

std::string bash_completion(const CLI::App& app) {
    const std::string name = app.get_name();
    std::ostringstream out;
    out << "# bash completion for " << name << " (generated by `" << name << " completion bash`)\n";
    out << "_" << name << "() {\n"
        << "    local cur prev sub i\n"
        << "    cur=\"${COMP_WORDS[COMP_CWORD]}\"\n"
        << "    prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n"
        << "    sub=\"\"\n"
        << "    for ((i = 1; i < COMP_CWORD; i++)); do\n"
        << "        case \"${COMP_WORDS[i]}\" in -*) ;; *) sub=\"${COMP_WORDS[i]}\"; break ;; "
           "esac\n"
        << "    done\n"
        << "    case \"$sub\" in\n";
    std::string subcommands;
    for (const auto* sub : visible_subcommands(app)) {
        subcommands += (subcommands.empty() ? "" : " ") + sub->get_name();
        std::string words, files;
        for (const auto* opt : named_options(*sub)) {
            for (const auto& s : spellings(*opt)) {
                words += (words.empty() ? "" : " ") + s;
                if (takes_value(*opt) && placeholder(*opt) == "FILE")
                    files += (files.empty() ? "" : "|") + s;
            }
        }
        // Words that are not options (the lock's name, the command) complete as files.
        out << "    " << sub->get_name() << ")\n";
        if (!files.empty())
            out << "        case \"$prev\" in " << files
                << ") COMPREPLY=($(compgen -f -- \"$cur\")); return ;; esac\n";
        out << "        [[ \"$cur\" != -* ]] && return\n";
        out << "        COMPREPLY=($(compgen -W \"" << words << "\" -- \"$cur\")) ;;\n";
    }
    std::string top;
    for (const auto* opt : named_options(app))
        for (const auto& s : spellings(*opt)) top += " " + s;
    out << "    *)\n        COMPREPLY=($(compgen -W \"" << subcommands << top
        << "\" -- \"$cur\")) ;;\n"
        << "    esac\n}\n"
        << "complete -o default -F _" << name << " " << name << "\n";
    return out.str();
}

std::string zsh_completion(const CLI::App& app) {
    const std::string name = app.get_name();
    // zsh's _arguments specs: '--opt[description]:value:' with ':' and brackets escaped.
    const auto quoted = [](std::string_view text) {
        std::string out;
        for (const char c : text) {
            if (c == '\'') {
                out += "'\\''";
            } else if (c == '[' || c == ']' || c == ':') {
                out += '\\';
                out += c;
            } else if (c == '\n') {
                out += ' ';
            } else {
                out += c;
            }
        }
        return out;
    };
    std::ostringstream out;
    out << "#compdef " << name << "\n# zsh completion for " << name << " (generated by `" << name
        << " completion zsh`)\n";
    out << "_" << name << "() {\n  local line state\n  _arguments -C \\\n";
    for (const auto* opt : named_options(app))
        for (const auto& s : spellings(*opt))
            out << "    '" << s << "[" << quoted(opt->get_description()) << "]' \\\n";
    out << "    '1: :->command' \\\n    '*:: :->args'\n";
    out << "  case $state in\n  command)\n    local -a commands\n    commands=(\n";
    for (const auto* sub : visible_subcommands(app))
        out << "      '" << sub->get_name() << ":" << quoted(sub->get_description()) << "'\n";
    out << "    )\n    _describe command commands ;;\n  args)\n    case $line[1] in\n";
    for (const auto* sub : visible_subcommands(app)) {
        out << "    " << sub->get_name() << ")\n      _arguments \\\n";
        for (const auto* opt : named_options(*sub)) {
            for (const auto& s : spellings(*opt)) {
                out << "        '" << s << "[" << quoted(opt->get_description()) << "]";
                if (takes_value(*opt))
                    out << ":" << quoted(placeholder(*opt))
                        << (placeholder(*opt) == "FILE" ? ":_files" : ":");
                out << "' \\\n";
            }
        }
        out << "        '*::argument:_normal' ;;\n";
    }
    out << "    esac ;;\n  esac\n}\n_" << name << " \"$@\"\n";
    return out.str();
}

}  // namespace dlock::cli
