// The spec_edge ops' schemas, the one place they are written. custom_ops/aten defines
// torch.ops.spec_edge from them; custom_ops/executorch finds each argument's place on its boxed
// stack by the argument's name here, at compile time; tests/test_op_schemas.py checks the Python
// fake kernels (python/spec_edge/ops.py) against the registered schemas.
#pragma once

#include <cstddef>
#include <string_view>

// The filters of every sampling op, in this order; None (the default) is off (see ops.h).
#define SPEC_EDGE_FILTER_ARGS                                                                  \
  "Tensor? top_k=None, Tensor? top_p=None, Tensor? min_p=None, Tensor? repetition_penalty=None, " \
  "Tensor? prev_tokens=None"

// X(name, inputs, returns, outs, out_returns): the functional form name(inputs) -> returns and
// the out form name.out(inputs, *, outs) -> out_returns. update_cache and attention are the model
// side of exported programs (attention.h).
#define SPEC_EDGE_OPS(X)                                                                          \
  X(verify_greedy, "Tensor target_probs, Tensor draft_tokens",                                    \
    "(Tensor n_accepted, Tensor next_token)", "Tensor(a!) n_accepted, Tensor(b!) next_token",     \
    "(Tensor(a!) n_accepted, Tensor(b!) next_token)")                                             \
  X(accept, "Tensor target_probs, Tensor? draft_probs, Tensor draft_tokens, Tensor uniforms",     \
    "(Tensor n_accepted, Tensor next_token)", "Tensor(a!) n_accepted, Tensor(b!) next_token",     \
    "(Tensor(a!) n_accepted, Tensor(b!) next_token)")                                             \
  X(verify,                                                                                       \
    "Tensor target_logits, Tensor draft_logits, Tensor draft_tokens, Tensor temperature, "        \
    "Tensor seed, Tensor offset, Tensor? num_draft=None, " SPEC_EDGE_FILTER_ARGS,                 \
    "(Tensor accept_len, Tensor out)", "Tensor(a!) accept_len, Tensor(b!) out",                   \
    "(Tensor(a!) accept_len, Tensor(b!) out)")                                                    \
  X(sample, "Tensor logits, Tensor temperature, Tensor seed, Tensor offset, " SPEC_EDGE_FILTER_ARGS, \
    "Tensor", "Tensor(a!) out", "Tensor(a!)")                                                     \
  X(filter_logits, "Tensor logits, Tensor temperature, " SPEC_EDGE_FILTER_ARGS, "Tensor",         \
    "Tensor(a!) out", "Tensor(a!)")                                                               \
  X(update_cache, "Tensor value, Tensor(a!) cache, SymInt start_pos", "Tensor", "Tensor(b!) out", \
    "Tensor(b!)")                                                                                 \
  X(attention, "Tensor q, Tensor k_cache, Tensor v_cache, SymInt start_pos", "Tensor",           \
    "Tensor(a!) out", "Tensor(a!)")

namespace spec_edge::schema {

// schema::verify is "verify(...) -> ...", schema::verify_out "verify.out(...) -> ...", and so on.
#define SPEC_EDGE_SCHEMA_STRINGS(name, inputs, returns, outs, out_returns)         \
  inline constexpr std::string_view name = #name "(" inputs ") -> " returns; \
  inline constexpr std::string_view name##_out = #name ".out(" inputs ", *, " outs ") -> " out_returns;
SPEC_EDGE_OPS(SPEC_EDGE_SCHEMA_STRINGS)
#undef SPEC_EDGE_SCHEMA_STRINGS

inline constexpr size_t kNoArgument = static_cast<size_t>(-1);

// "ns::op.overload" of a schema: what precedes its argument list.
constexpr std::string_view op_name(std::string_view schema) { return schema.substr(0, schema.find('(')); }

// The argument i of a schema ("*" is no argument: it marks the keyword-only out arguments), or
// an empty view past the last.
constexpr std::string_view argument(std::string_view schema, size_t i) {
  const size_t open = schema.find('(');
  std::string_view rest = schema.substr(open + 1, schema.rfind(") -> ") - open - 1);
  for (;;) {
    const size_t comma = rest.find(", ");
    const std::string_view arg = rest.substr(0, comma);
    if (arg != "*" && i-- == 0) return arg;
    if (comma == std::string_view::npos) return {};
    rest = rest.substr(comma + 2);
  }
}

// An argument's name: its last word, before any default.
constexpr std::string_view argument_name(std::string_view arg) {
  arg = arg.substr(0, arg.find('='));
  return arg.substr(arg.rfind(' ') + 1);
}

// How many arguments a boxed call of the schema has on its stack before the returns.
constexpr size_t argument_count(std::string_view schema) {
  size_t n = 0;
  while (!argument(schema, n).empty()) ++n;
  return n;
}

// The stack position of argument `name`: the inputs in order, then the out arguments.
constexpr size_t position(std::string_view schema, std::string_view name) {
  for (size_t i = 0; !argument(schema, i).empty(); ++i)
    if (argument_name(argument(schema, i)) == name) return i;
  return kNoArgument;
}

template <size_t Position>
struct CheckedPosition {
  static_assert(Position != kNoArgument, "no argument of that name in the schema (op_schemas.h)");
  static constexpr size_t value = Position;
};

}  // namespace spec_edge::schema

// The stack position of argument `arg_name` of `op_schema`, a compile error if it has none.
#define SPEC_EDGE_ARG(op_schema, arg_name) \
  (::spec_edge::schema::CheckedPosition<::spec_edge::schema::position(op_schema, arg_name)>::value)
