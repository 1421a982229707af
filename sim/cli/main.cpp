// clustersim: the command-line entry point. Maps errors to exit codes: 0 success, 2 bad input
// (ConfigError, unparsable command line), 1 internal error.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <iostream>

#include "api/shard.hpp"
#include "cli/commands.hpp"
#include "core/errors.hpp"

int main(int argc, char** argv) {
    CLI::App app{"clustersim: discrete-event simulator of GPU training clusters"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "clustersim 0.1.0");
    app.add_flag_callback(
        "-v,--verbose", [] { spdlog::set_level(spdlog::level::debug); },
        "Log details of what is simulated");
    app.add_flag_callback(
        "-q,--quiet", [] { spdlog::set_level(spdlog::level::err); }, "Only print errors");
    app.fallthrough();
    cs::cli::register_run(app);
    cs::cli::register_compare(app);
    cs::cli::register_sweep(app);
    cs::cli::register_topology(app);
    cs::cli::register_collective(app);
    cs::cli::register_validate(app);
    cs::cli::register_calibrate(app);
    cs::cli::register_chakra(app);

    auto logger = spdlog::stderr_color_mt("clustersim");
    logger->set_pattern("%^%l%$: %v");
    spdlog::set_default_logger(logger);
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
        if (cs::api::launcher_rank() == 0)
            std::cerr << "clustersim: " << e.what() << "\n"
                      << "Run 'clustersim --help' or 'clustersim <command> --help' for usage.\n";
        return 2;
    } catch (const cs::cli::CommandExit& e) {
        std::cerr << e.message << "\n";
        return e.status;
    } catch (const cs::ConfigError& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 2;
    } catch (const cs::SimulationError& e) {
        std::cerr << "internal error: " << e.what() << "\n";
        return 1;
    } catch (const std::exception& e) {
        std::cerr << "internal error: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
