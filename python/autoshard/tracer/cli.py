"""`autoshard-trace`: trace a model factory's training step into autoshard graph JSON.

    autoshard-trace MODULE:FACTORY [--batch N] [--seq N] [--dtype bf16] [--arg k=v ...] -o OUT
    autoshard-trace path/to/file.py:FACTORY ...

FACTORY is called with the keyword arguments among batch / seq / dtype / --arg that were given
and that its signature accepts, and returns one of
    model                                   (then model.example_inputs(**same kwargs) must exist
                                             and return inputs or (inputs, targets))
    (model, example_inputs)                 loss = mean of the output
    (model, example_inputs, loss_fn)        loss = loss_fn(output)
    (model, example_inputs, loss_fn, targets)   loss = loss_fn(output, *targets)
    {"model":..., "inputs":..., "loss_fn":..., "targets":...}
example_inputs: a tensor, a tuple of positional tensors or a dict of keyword tensors.  Build the
model with autoshard.tracer.meta_init (or on device="meta") so no weights are allocated;
anything still on CPU is moved to meta before tracing.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import os
import sys
import time


def load_factory(spec: str):
    """'pkg.mod:fn' or 'path/to/file.py:fn' -> the callable."""
    if ":" not in spec:
        raise SystemExit(f"autoshard-trace: expected MODULE:FACTORY or FILE.py:FACTORY, got {spec!r}")
    target, attr = spec.rsplit(":", 1)
    if target.endswith(".py") or os.sep in target or "/" in target:
        path = os.path.abspath(target)
        if not os.path.exists(path):
            raise SystemExit(f"autoshard-trace: no such file {target}")
        name = "autoshard_user_" + os.path.splitext(os.path.basename(path))[0]
        mspec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(mspec)
        sys.modules[name] = module
        sys.path.insert(0, os.path.dirname(path))  # let the file import its neighbours
        mspec.loader.exec_module(module)
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        module = importlib.import_module(target)
    fn = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise SystemExit(f"autoshard-trace: {target} has no attribute {attr!r}")
    return fn


def _parse_value(text: str):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _overrides(ap: argparse.ArgumentParser, items: list) -> dict:
    """--data-dependent FILE:LINE=VALUE options -> the tracer's data_dependent dict."""
    out = {}
    for kv in items:
        if "=" not in kv:
            ap.error(f"--data-dependent expects FILE:LINE=VALUE, got {kv!r}")
        k, v = kv.rsplit("=", 1)
        out[k.strip()] = _parse_value(v.strip())
    return out


def _trace_step(trace, model, inputs, loss_fn, targets, overrides: dict):
    """trace(...) with the overrides; None (after one line on stderr) when a data-dependent
    value has no default or an override does not fit."""
    from .datadep import DataDependentError

    try:
        return trace(model, inputs, loss_fn, targets, data_dependent=overrides or None)
    except DataDependentError as e:
        print(f"autoshard-trace: {e}", file=sys.stderr)
        return None


def _report_data_dependent(traced) -> None:
    """Notes on stderr: the decisions taken for what the data would decide, and the module
    calls the applied step runs eagerly."""
    taken = [d for d in traced.data_dependent if d.why != "known"]
    if taken:
        print(f"autoshard-trace: note: {len(taken)} data-dependent decisions (planned for):",
              file=sys.stderr)
        for d in taken:
            print(f"  {d.describe()}", file=sys.stderr)
    if traced.islands:
        mods = sorted({c.module or "<root module>" for c in traced.islands})
        print(f"autoshard-trace: note: run eagerly when applied (islands): {', '.join(mods)}",
              file=sys.stderr)


def call_with_accepted(fn, kwargs: dict, warn=True):
    """Calls fn with the kwargs its signature accepts; warns about the others."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn(**kwargs)
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return fn(**kwargs)
    ok = {k: v for k, v in kwargs.items() if k in params}
    dropped = sorted(set(kwargs) - set(ok))
    if dropped and warn:
        print(f"autoshard-trace: note: {getattr(fn, '__name__', fn)} takes no "
              f"{', '.join(dropped)}; ignored", file=sys.stderr)
    return fn(**ok)


def normalize_factory_result(result, kwargs):
    """-> (model, inputs, loss_fn, targets)."""
    import torch

    if isinstance(result, torch.nn.Module):
        if not hasattr(result, "example_inputs"):
            raise SystemExit("autoshard-trace: the factory returned only a model and the model "
                             "has no example_inputs(); return (model, inputs[, loss_fn[, targets]])")
        ex = call_with_accepted(result.example_inputs, kwargs, warn=False)
        if isinstance(ex, tuple) and len(ex) == 2 and isinstance(ex[0], (tuple, list, dict)):
            return result, ex[0], None, ex[1]
        return result, ex, None, None
    if isinstance(result, dict):
        return (result["model"], result.get("inputs", result.get("example_inputs")),
                result.get("loss_fn"), result.get("targets"))
    if isinstance(result, (tuple, list)) and 2 <= len(result) <= 4:
        r = list(result) + [None] * (4 - len(result))
        return r[0], r[1], r[2], r[3]
    raise SystemExit("autoshard-trace: the factory must return a model, (model, inputs), "
                     "(model, inputs, loss_fn), (model, inputs, loss_fn, targets) or a dict")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="autoshard-trace",
        description="Trace forward+loss+backward of a PyTorch model (on the meta device, no "
                    "weights allocated) into autoshard graph JSON.",
        epilog="FACTORY returns a model, (model, inputs), (model, inputs, loss_fn) or "
               "(model, inputs, loss_fn, targets); see docs/tracer.md.  "
               "Example: autoshard-trace autoshard.tracer.examples.llama:llama3_8b "
               "--batch 8 --seq 2048 -o llama3-8b.graph.json")
    ap.add_argument("factory", help="MODULE:FACTORY or path/to/file.py:FACTORY")
    ap.add_argument("--batch", type=int, help="passed to the factory as batch=")
    ap.add_argument("--seq", type=int, help="passed to the factory as seq=")
    ap.add_argument("--dtype", help="passed as dtype= (f32, bf16, f16); if the factory takes "
                                    "no dtype, the model and float inputs are cast")
    ap.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE",
                    help="extra factory keyword argument (int/float/bool/str), repeatable")
    ap.add_argument("--data-dependent", action="append", default=[], metavar="FILE:LINE=VALUE",
                    help="override the data-dependent decision at a source line (a bool/number "
                         "read in Python, or the kept elements of a mask), repeatable "
                         "(docs/tracer.md, 'Data-dependent code')")
    ap.add_argument("--name", help="graph name (default: the factory's name)")
    ap.add_argument("--keep-dead", action="store_true", help="keep nodes whose results are unused")
    ap.add_argument("-o", "--output", required=True, help="output graph JSON path")
    return ap


def _factory_kwargs(ap: argparse.ArgumentParser, args: argparse.Namespace) -> dict:
    kwargs = {}
    for key in ("batch", "seq", "dtype"):
        if getattr(args, key) is not None:
            kwargs[key] = getattr(args, key)
    for kv in args.arg:
        if "=" not in kv:
            ap.error(f"--arg expects KEY=VALUE, got {kv!r}")
        k, v = kv.split("=", 1)
        kwargs[k.strip()] = _parse_value(v.strip())
    return kwargs


def _cast_to_dtype(factory, dtype: str, model, inputs):
    """--dtype for a factory that takes none: the model and the float inputs are cast."""
    import torch

    from . import _compat
    from .meta_init import to_meta

    try:
        takes_dtype = "dtype" in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        takes_dtype = True
    if takes_dtype:
        return model, inputs
    dt = _compat.parse_dtype(dtype)
    model = to_meta(model).to(dt)
    cast = lambda t: t.to(dt) if t.is_floating_point() else t  # noqa: E731
    if isinstance(inputs, torch.Tensor):
        inputs = cast(inputs)
    elif isinstance(inputs, dict):
        inputs = {k: cast(v) for k, v in inputs.items()}
    elif inputs is not None:
        inputs = tuple(cast(v) for v in inputs)
    return model, inputs


def _summary(path: str, graph: dict, seconds_traced: float, seconds_exported: float) -> str:
    kinds: dict[str, int] = {}
    for n in graph["nodes"]:
        kinds[n["kind"]] = kinds.get(n["kind"], 0) + 1
    return (f"autoshard-trace: wrote {path}: {len(graph['nodes'])} nodes "
            f"({kinds.get('op', 0)} ops, {kinds.get('parameter', 0)} parameters, "
            f"{len(graph['grad_pairs'])} gradients); traced in {seconds_traced:.1f}s, "
            f"exported in {seconds_exported:.1f}s")


def main(argv=None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    kwargs = _factory_kwargs(ap, args)
    overrides = _overrides(ap, args.data_dependent)
    if importlib.util.find_spec("torch") is None:
        print(f"autoshard-trace: PyTorch is not importable by {sys.executable} (install it "
              "into this interpreter's environment: pip install torch)", file=sys.stderr)
        return 2

    from .export import to_graph_dict, write_graph_json
    from .trace import trace_training_step

    t0 = time.time()
    factory = load_factory(args.factory)
    result = call_with_accepted(factory, kwargs)
    model, inputs, loss_fn, targets = normalize_factory_result(result, kwargs)
    if args.dtype is not None:
        model, inputs = _cast_to_dtype(factory, args.dtype, model, inputs)
    traced = _trace_step(trace_training_step, model, inputs, loss_fn, targets, overrides)
    if traced is None:
        return 2
    t1 = time.time()
    name = args.name or getattr(factory, "__name__", "model")
    graph = to_graph_dict(traced, name, keep_dead=args.keep_dead)
    write_graph_json(graph, args.output)
    print(_summary(args.output, graph, t1 - t0, time.time() - t1))
    _report_data_dependent(traced)
    if traced.missing_grads:
        print(f"autoshard-trace: note: {len(traced.missing_grads)} trainable parameters get no "
              f"gradient (unused): {', '.join(traced.missing_grads[:5])}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
