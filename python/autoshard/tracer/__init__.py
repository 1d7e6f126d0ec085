"""autoshard.tracer: trace a PyTorch training step into autoshard's graph JSON.

    from autoshard.tracer import export_training_graph, meta_init
    model = meta_init(MyModel, cfg)                       # no weights allocated
    export_training_graph(model, (tokens,), loss_fn, "model.graph.json", targets=(labels,))

Importing this package does not import torch; `autoshard.tracer.validate` is pure Python.
"""

__all__ = ["export_training_graph", "trace_training_step", "to_graph_dict", "write_graph_json",
           "meta_init", "meta_device", "to_meta", "validate_graph"]


def __getattr__(name):
    """The public names, imported on first use (keeps `import autoshard.tracer.validate`
    torch-free)."""
    value = _lookup(name)
    # Importing the submodule autoshard.tracer.meta_init binds it as this package's attribute
    # `meta_init`, which would hide the function of that name: bind the function again.
    import sys
    sub = sys.modules.get(__name__ + ".meta_init")
    if sub is not None:
        globals()["meta_init"] = sub.meta_init
    return value


def _lookup(name):
    if name in ("export_training_graph", "to_graph_dict", "write_graph_json"):
        from . import export
        return getattr(export, name)
    if name == "trace_training_step":
        from .trace import trace_training_step
        return trace_training_step
    if name in ("meta_init", "meta_device", "to_meta"):
        import importlib
        return getattr(importlib.import_module(".meta_init", __name__), name)
    if name == "validate_graph":
        from .validate import validate_graph
        return validate_graph
    raise AttributeError(name)
