// Name tables: the one place where the names a user can type for a closed set of choices (an
// enum) are spelled. Parsers turn a name into the enum at the YAML / command-line boundary;
// messages list the accepted names from the same table; models only ever see the enum.
//
// A table is a constexpr std::array of {name, value} rows, in the order messages list them:
//
//   inline constexpr std::array<Named<Fidelity>, 3> kFidelityNames{{
//       {"ideal", Fidelity::Ideal}, {"analytical", Fidelity::Analytical}, {"flow",
//       Fidelity::Flow}}};
//
// Open sets that tests and new modules extend (schedules, collective algorithms, trace formats,
// summary writers) are registry objects of their own layer instead; see docs/architecture.md.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cs {

template <class E>
struct Named {
    std::string_view name;
    E value;
};

// The value named `name`, or nullopt.
template <class E, std::size_t N>
constexpr std::optional<E> find_named(const std::array<Named<E>, N>& table, std::string_view name) {
    for (const auto& row : table)
        if (row.name == name) return row.value;
    return std::nullopt;
}

// The name of `value` (the first row that has it), or "?" if the table lacks it.
template <class E, std::size_t N>
constexpr std::string_view name_of(const std::array<Named<E>, N>& table, E value) {
    for (const auto& row : table)
        if (row.value == value) return row.name;
    return "?";
}

// Every name, in table order, for "expected a, b or c" messages.
template <class E, std::size_t N>
std::vector<std::string> names_of(const std::array<Named<E>, N>& table) {
    std::vector<std::string> out;
    out.reserve(N);
    for (const auto& row : table)
        out.emplace_back(row.name);
    return out;
}

}  // namespace cs
