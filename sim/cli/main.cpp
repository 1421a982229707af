// clustersim: the command-line entry point. Maps errors to exit codes: 0 success, 2 bad input
// (ConfigError, unparsable command line), 1 internal error.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <iostream>
#include <new>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.hpp"
#include "cli/log.hpp"
#include "core/errors.hpp"
#include "session/shard.hpp"

namespace {

// Output options given an empty path (`--json "$UNSET"`) would write nothing without a word: an
// empty path is a command-line error on every subcommand's output options.
void refuse_empty_outputs(CLI::App& app) {
    static const std::set<std::string> kOutputs{"--json", "--trace", "--html",    "--svg",
                                                "--dot",  "--out",   "--summary", "--write-doc"};
    for (CLI::Option* option : app.get_options())
        if (kOutputs.count(option->get_name()))
            option->check(
                [](const std::string& path) {
                    return path.empty() ? std::string("expected a file name, found an empty path")
                                        : std::string();
                },
                "");
    for (CLI::App* sub : app.get_subcommands({}))
        refuse_empty_outputs(*sub);
}

}  // namespace

// CLI11's message, except for a first word that is no command ("clustersim bogus", which CLI11
// reports as "A subcommand is required"): that names the word and the commands.
static std::string parse_error_text(const CLI::App& app, int argc, char** argv,
                                    const CLI::ParseError& e) {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({}))
        names.push_back(sub->get_name());
    for (int i = 1; i < argc; ++i) {
        const std::string_view word(argv[i]);
        if (word.empty() || word.front() == '-') continue;  // a top-level flag
        if (std::find(names.begin(), names.end(), word) != names.end()) break;
        std::string list;
        for (std::size_t n = 0; n < names.size(); ++n)
            list += (n == 0 ? "" : n + 1 == names.size() ? " or " : ", ") + names[n];
        return "unknown command '" + std::string(word) + "'; expected " + list;
    }
    // CLI11 says "Could not convert: --gpus = 2147483648" without saying what it takes.
    if (dynamic_cast<const CLI::ConversionError*>(&e))
        return std::string(e.what()) +
               ": not a value of the option's type (counts and sizes are whole numbers up to "
               "2147483647, fractions and prices are decimal numbers; its --help gives the form)";
    return e.what();
}

int main(int argc, char** argv) {
    CLI::App app{"clustersim: discrete-event simulator of GPU training clusters"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "clustersim 0.1.0");
    app.add_flag_callback(
        "-v,--verbose", [] { spdlog::set_level(spdlog::level::debug); },
        "Log details of what is simulated");
    app.add_flag_callback(
        "-q,--quiet", [] { spdlog::set_level(spdlog::level::err); },
        "Log only errors: no warnings or progress on stderr (results still print)");
    app.add_flag_callback(
        "--log-json", [] { cs::cli::use_json_log(); },
        "Log as JSON lines on stderr: {\"level\": ..., \"message\": ...}; errors add file, "
        "line, column and exit");
    app.fallthrough();
    cs::cli::register_run(app);
    cs::cli::register_compare(app);
    cs::cli::register_sweep(app);
    cs::cli::register_plan(app);
    cs::cli::register_topology(app);
    cs::cli::register_collective(app);
    cs::cli::register_validate(app);
    cs::cli::register_calibrate(app);
    cs::cli::register_chakra(app);
    cs::cli::register_diff(app);
    refuse_empty_outputs(app);

    cs::cli::install_logger();
    // --log-json holds for errors in the command line itself too, which CLI11 may report
    // before it has run the flag's callback.
    bool json_log = false;
    for (int i = 1; i < argc; ++i)
        json_log = json_log || std::string_view(argv[i]) == "--log-json";
    if (json_log) cs::cli::use_json_log();
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        // Under mpirun every process parses the same command line; rank 0 speaks for all.
        if (cs::api::launcher_rank() == 0) {
            cs::cli::print_error("error", parse_error_text(app, argc, argv, e), 2);
            if (!json_log)
                std::cerr << "Run 'clustersim --help' or 'clustersim <command> --help' for "
                             "usage.\n";
        }
        return 2;
    } catch (const cs::cli::CommandExit& e) {
        // validate --check's failure (exit 3): as text, or a JSON line like every error.
        if (json_log)
            cs::cli::print_error("error", e.message, e.status);
        else
            std::cerr << e.message << "\n";
        return e.status;
    } catch (const cs::ConfigError& e) {
        cs::cli::print_error("error", e.what(), 2, &e.where());
        return 2;
    } catch (const std::bad_alloc&) {
        // Every memory-hungry step is estimated against --max-memory first: one that still runs
        // out found a machine with less memory than the limit allows (16 GiB by default).
        cs::cli::print_error("error",
                             "out of memory: this machine could not give what the input needs; "
                             "give smaller sizes, or a --max-memory this machine has so that "
                             "the estimate refuses it before it starts",
                             2);
        return 2;
    } catch (const cs::ClockOverflow& e) {
        // Every time is derived from the input's sizes, rates and durations: one beyond the
        // clock is an input out of range (the commands that can name the input do so first).
        cs::cli::print_error("error",
                             std::string("a time derived from the input is longer than the "
                                         "simulator's clock can hold (2^63 ps, about 106 days): ") +
                                 e.what() + "; check the sizes, durations and rates given",
                             2);
        return 2;
    } catch (const cs::SimulationError& e) {
        cs::cli::print_error("internal error", e.what(), 1);
        return 1;
    } catch (const std::exception& e) {
        cs::cli::print_error("internal error", e.what(), 1);
        return 1;
    }
    return 0;
}
