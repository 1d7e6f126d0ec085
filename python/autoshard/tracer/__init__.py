"""autoshard.tracer: trace a PyTorch training step into autoshard's graph JSON.

    from autoshard.tracer import export_training_graph, meta_init
    model = meta_init(MyModel, cfg)                       # no weights allocated
    export_training_graph(model, (tokens,), loss_fn, "model.graph.json", targets=(labels,))

Importing this package does not import torch; `autoshard.tracer.validate` is pure Python.
"""

__all__ = ["export_training_graph", "trace_training_step", "to_graph_dict", "write_graph_json",
           "meta_init", "meta_device", "to_meta", "validate_graph"]


def __getattr__(name):  # lazy: keep `import autoshard.tracer.validate` torch-free
    if name in ("export_training_graph", "to_graph_dict", "write_graph_json"):
        from . import export
        return getattr(export, name)
    if name == "trace_training_step":
        from .trace import trace_training_step
        return trace_training_step
    if name in ("meta_init", "meta_device", "to_meta"):
        from . import meta_init as m
        return getattr(m, name)
    if name == "validate_graph":
        from .validate import validate_graph
        return validate_graph
    raise AttributeError(name)
