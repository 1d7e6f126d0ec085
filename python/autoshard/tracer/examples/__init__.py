"""Example models and factories for `autoshard-trace`.

Factory convention (also used by the CLI): a callable taking keyword arguments among
`batch`, `seq`, `dtype` (and any model-specific ones) and returning
`(model, example_inputs, loss_fn, targets)` -- see docs/tracer.md.
"""
