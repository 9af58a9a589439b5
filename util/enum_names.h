// One name table per enum: every enum a user names (read modes, pinning kinds, CPU binding,
// devices, layouts, placements, dedup modes, ...) is listed once, as a constexpr array of
// {value, name} next to the enum, and everything that turns names into values or values into
// names reads that array: parsing, printing, the option table's choices ("a | b | c",
// config/option_table.h) and the "is not a, b or c" of an error.
//
//   inline constexpr EnumName<ReadMode> kReadModeNames[] = {{ReadMode::kAuto, "auto"}, ...};
//   EnumFromName(kReadModeNames, "direct")  -> ReadMode::kDirect
//   NameOfEnum(kReadModeNames, mode)         -> "direct"
//   kEnumChoices<kReadModeNames>             -> "auto | buffered | ..." (a constant)
//   EnumNameList(kReadModeNames)             -> "auto, buffered, ... or registered"
//
// Ownership: tables and their names are static constants. Failure: an unknown name is
// std::nullopt; an unknown value prints as `unknown`. Threading: pure.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace hoist {

template <typename E>
struct EnumName {
  E value;
  std::string_view name;
};

template <typename E, std::size_t N>
constexpr std::optional<E> EnumFromName(const EnumName<E> (&table)[N], std::string_view name) {
  for (const EnumName<E>& e : table) {
    if (e.name == name) return e.value;
  }
  return std::nullopt;
}

template <typename E, std::size_t N>
constexpr std::string_view NameOfEnum(const EnumName<E> (&table)[N], E value,
                                      std::string_view unknown = "?") {
  for (const EnumName<E>& e : table) {
    if (e.value == value) return e.name;
  }
  return unknown;
}

// "a, b or c" (for errors: "read mode 'x' is not auto, buffered, ... or registered").
template <typename E, std::size_t N>
std::string EnumNameList(const EnumName<E> (&table)[N]) {
  std::string out;
  for (std::size_t i = 0; i < N; ++i) {
    if (i > 0) out += i + 1 == N ? " or " : ", ";
    out += table[i].name;
  }
  return out;
}

namespace enum_names_internal {

inline constexpr std::string_view kBar = " | ";

template <const auto& kTable>
constexpr std::size_t ChoicesSize() {
  std::size_t n = 0;
  for (const auto& e : kTable) n += e.name.size() + kBar.size();
  return n == 0 ? 0 : n - kBar.size();
}

template <const auto& kTable>
constexpr std::array<char, ChoicesSize<kTable>() + 1> ChoicesText() {
  std::array<char, ChoicesSize<kTable>() + 1> text{};
  std::size_t at = 0;
  for (const auto& e : kTable) {
    if (at > 0) {
      for (char c : kBar) text[at++] = c;
    }
    for (char c : e.name) text[at++] = c;
  }
  return text;
}

template <const auto& kTable>
inline constexpr auto kChoicesStorage = ChoicesText<kTable>();

}  // namespace enum_names_internal

// "a | b | c", the table's names in its order: a constant usable in constexpr tables.
template <const auto& kTable>
inline constexpr std::string_view kEnumChoices{enum_names_internal::kChoicesStorage<kTable>.data(),
                                               enum_names_internal::ChoicesSize<kTable>()};

}  // namespace hoist
