// Name tables: each enum of dtune-comm has one table of rows {value, name, aliases} (types.cc,
// collectives.cc), and these helpers are the only readers, so the CLI's parsing and choice lists,
// to_string and the results writers can never disagree on a spelling. A row type only needs the
// fields `value`, `name` (canonical: printed and written to results files) and `aliases` (other
// spellings accepted on input, such as nccl-tests' names).
#pragma once

#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"

namespace dtune::comm {

template <typename E>
struct EnumName {
  EnumName(E v, std::string_view n, std::vector<std::string_view> a = {})
      : value(v), name(n), aliases(std::move(a)) {}
  E value;
  std::string_view name;
  std::vector<std::string_view> aliases;
};

// ASCII case-insensitive equality (names are ASCII).
bool same_name(std::string_view a, std::string_view b);

// The canonical name of `v`, or "?" for a value without a row.
template <typename Rows, typename E>
std::string name_of(const Rows& rows, E v) {
  for (const auto& r : rows)
    if (r.value == v) return std::string(r.name);
  return "?";
}

// The row whose name or alias is `text` (any case), or nullptr.
template <typename Rows>
const auto* find_named(const Rows& rows, std::string_view text) {
  for (const auto& r : rows) {
    if (same_name(text, r.name)) return &r;
    for (std::string_view a : r.aliases)
      if (same_name(text, a)) return &r;
  }
  return static_cast<decltype(&*std::begin(rows))>(nullptr);
}

// Every canonical name, in table order (CLI11 IsMember lists, --help texts).
template <typename Rows>
std::vector<std::string> names_of(const Rows& rows) {
  std::vector<std::string> out;
  for (const auto& r : rows) out.emplace_back(r.name);
  return out;
}

template <typename Rows>
std::string join_names(const Rows& rows, std::string_view sep) {
  std::string out;
  for (const auto& r : rows) out += (out.empty() ? "" : std::string(sep)) + std::string(r.name);
  return out;
}

// One item of a comma-separated list option (--collective, -d, -o): its value, or a UsageError
// that names `flag`, the unknown text and the choices.
template <typename Rows>
auto parse_list_item(const Rows& rows, const std::string& text, const std::string& flag,
                     const std::string& what) {
  if (const auto* r = find_named(rows, text)) return r->value;
  throw UsageError(flag + ": unknown " + what + " '" + text + "' (choose from " +
                   join_names(rows, ", ") + ", or all)");
}

// Every value, in table order (what "all" means in a list option).
template <typename Rows>
auto values_of(const Rows& rows) {
  std::vector<std::decay_t<decltype(std::begin(rows)->value)>> out;
  for (const auto& r : rows) out.push_back(r.value);
  return out;
}

}  // namespace dtune::comm
