/// Pointwise ops with broadcasting (sharding-rules.md, "Pointwise").  Per mesh dim: all-R, and
/// for each output dim d a row sharding d on every output and on each input through
/// broadcasting (a dim an input lacks or broadcasts from size 1 stays R).  Enumerating the
/// output dims covers DTensor's "follow the input with most shards" for every input choice.
///
/// Partial(sum) passes only through linear ops:
/// - add/sub .Tensor: all tensor inputs P  -> P;
/// - mul.Tensor: one input P, the other R  -> P;  div.Tensor: numerator P, denominator R;
/// - mul/div .Scalar, neg, _to_copy, clone, copy_, contiguous, type casts: P -> P.
/// add.Scalar / sub.Scalar are affine, not linear: no Partial.
/// In-place variants (add_, mul_, ...) use the same rows: self is never broadcast, so the
/// output placement equals self's.
#include "strategy/rule.h"

namespace autoshard {

namespace {

enum class Linear { kNone, kAll, kFirst, kEither };

/// Ops whose extra outputs have the output's shape (native_dropout -> out, mask) are covered
/// by mapping every output from output 0 through broadcasting.
RuleResult pointwise(const OpContext& c, Linear lin) {
  RuleResult r;
  if (c.n_out() == 0) return r;
  const TensorMeta& o = c.out(0);
  r.rows.push_back(c.replicated());
  auto row_for = [&](const Placement& p) {
    Row row = c.replicated();
    for (size_t i = 0; i < c.n_out(); ++i) row[c.out_slot(i)] = map_broadcast(p, o, c.out(i));
    for (size_t i = 0; i < c.n_in(); ++i) row[c.in_slot(i)] = map_broadcast(p, o, c.in[i]);
    return row;
  };
  for (int32_t d = 0; d < o.rank(); ++d) r.rows.push_back(row_for(Placement::shard(d)));
  switch (lin) {
    case Linear::kNone: break;
    case Linear::kAll: {
      Row row(c.n_out() + c.n_in(), P);
      r.rows.push_back(row);
      break;
    }
    case Linear::kFirst:
    case Linear::kEither: {
      for (size_t k = 0; k < c.n_in(); ++k) {
        if (lin == Linear::kFirst && k > 0) break;
        Row row(c.n_out() + c.n_in(), R);
        for (size_t i = 0; i < c.n_out(); ++i) row[c.out_slot(i)] = P;
        row[c.in_slot(k)] = P;
        r.rows.push_back(row);
      }
      break;
    }
  }
  return r;
}

RuleFn rule(Linear lin) {
  return [lin](const OpContext& c) { return pointwise(c, lin); };
}

/// Linearity of add/sub/mul/div depends on the overload: ".Scalar" ops take one tensor.
RuleFn arith(bool additive) {
  return [additive](const OpContext& c) {
    bool scalar = c.op.overload.starts_with("Scalar") || c.n_in() == 1;
    if (additive) return pointwise(c, scalar ? Linear::kNone : Linear::kAll);
    if (scalar) return pointwise(c, Linear::kAll);
    return pointwise(c, c.op.base == "div" ? Linear::kFirst : Linear::kEither);
  };
}

}  // namespace

void register_pointwise_rules(RuleTable& t) {
  t["add"] = arith(true);
  t["sub"] = arith(true);
  t["mul"] = arith(false);
  t["div"] = arith(false);
  // Unary linear ops and dtype casts.
  for (const char* op : {"neg", "_to_copy", "clone", "contiguous", "to",
                         "convert_element_type", "copy_", "copy", "lift_fresh_copy",
                         "positive"})
    t[op] = rule(Linear::kAll);
  // _conj (the backward of a complex mul) is linear over the reals, but torch 2.13's DTensor
  // registers it as a plain pointwise op, without Partial: a plan keeping P(sum) through it
  // would be redistributed at apply time.
  t["_conj"] = rule(Linear::kNone);
  // Non-linear pointwise ops (any arity, broadcasting): Partial must be resolved first.
  for (const char* op :
       {"rsqrt", "sqrt", "pow", "silu", "gelu", "relu", "tanh", "exp", "exp2", "log", "log2",
        "log1p", "expm1", "sigmoid", "where", "fill", "threshold_backward", "silu_backward",
        "gelu_backward", "sigmoid_backward", "tanh_backward", "abs", "reciprocal", "sin", "cos",
        "erf", "sign", "square", "rsub", "maximum", "minimum", "clamp", "clamp_min",
        "clamp_max", "eq", "ne", "lt", "le", "gt", "ge", "logical_not", "logical_and",
        "logical_or", "bitwise_not", "bitwise_and", "bitwise_or", "masked_fill", "lerp",
        "addcmul", "addcdiv", "hardtanh", "hardtanh_backward", "leaky_relu",
        "leaky_relu_backward", "elu", "elu_backward", "softplus", "mish", "hardswish",
        "hardsigmoid", "floor", "ceil", "round", "trunc", "remainder", "fmod", "floor_divide",
        "native_dropout", "native_dropout_backward", "threshold", "isnan", "isinf",
        "nan_to_num", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like",
        "randn_like", "bernoulli", "atan", "asin", "acos", "sinh", "cosh", "atan2", "xlogy",
        "relu6", "hardswish_backward", "mish_backward", "softplus_backward",
        "hardsigmoid_backward", "log_sigmoid_forward", "log_sigmoid_backward", "sgn", "logit",
        "logit_backward", "logical_xor", "bitwise_xor", "frac", "signbit", "isfinite"})
    t[op] = rule(Linear::kNone);
  // In-place random fills (uniform_, exponential_, ...; bernoulli_ above): the output follows
  // self's sharding, no Partial, as DTensor's _random_ops.py registers them.
  for (const char* op : {"uniform", "normal", "exponential", "log_normal", "geometric"})
    t[op] = rule(Linear::kNone);
}

}  // namespace autoshard
