"""Cutting the lowered per-rank training step into pipeline stages.

    cuts = cut_stages(lowered.gm, placeholder_stage, node_stage, n_stages, tangents,
                      outputs, grads, param_index, wanted=[s])
    cuts[0].gm               # stage s's joint graph (forward, and its backward)

The SPMD lowering (autoshard.lower) of a plan with a pipeline section gives one joint graph
(forward, loss, backward) of local ops and collectives over the stage's sub-mesh.  Every
lowered node carries the planned node it came from (node.meta["autoshard"]["node"]) and the
plan gives every planned node its stage ("stage" in placements.json; -1 = every stage that
uses it).  This module cuts that graph into one joint graph per stage.  A plan without
pipeline stages is the one-stage case: every node is in stage 0 and the cut is the whole
step, so the single program and the pipeline stages run one path (autoshard.module):

  * primals: the stage's parameters, buffers and inputs (traced placeholder order), then the
    activations the previous stage sends (its forward values this stage reads);
  * outputs: the activations sent to the next stage (on the last stage the step's outputs:
    the loss, or the model outputs the module returns), one
    gradient per parameter of the stage, then the gradients sent back to the previous stage
    (one per received activation, in the same order);
  * tangents: the gradients the next stage sends back (on the last stage the loss's seed, or
    the outputs' gradient marks), as nodes that autoshard.partition turns into backward
    placeholders.

Every lowered node is in the stage the plan gives its planned node (the lowering stamps each
node with it; a placeholder's own view with the placeholder): the runtime places nothing by a
rule of its own.  Nodes computed from shared placeholders alone (a rope table slice), and the
nodes the plan gives stage -1, are copied into every stage that reads them, so that only
activations cross stage boundaries.  Anything else that crosses a boundary (a value skipping
a stage, a parameter shared by two stages, a node the plan gives no stage) is refused with an
error naming the node.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch
import torch.fx

from .lower import META_KEY, backward_nodes

SHARED = -1


class StageError(ValueError):
    """The plan's stages cannot be cut out of the lowered step (the message names the node)."""


@dataclass
class StageGraph:
    """One stage's joint graph and what its primals / outputs / tangents are."""

    index: int
    gm: torch.fx.GraphModule
    placeholders: list           # traced placeholder indices of the stage's own primals
    act_in: list                 # lowered nodes' names received from the previous stage
    act_out: list                # lowered nodes' names sent to the next stage (or the loss)
    grad_params: list            # traced placeholder indices of the parameters with a gradient
    out_nodes: list = field(default_factory=list)    # nodes of gm: the forward outputs
    grad_nodes: list = field(default_factory=list)   # gm nodes: param grads, then act_in grads
    tangent_nodes: list = field(default_factory=list)  # gm nodes replaced by tangents
    act_in_meta: list = field(default_factory=list)  # fake values of act_in (local shapes)
    act_out_meta: list = field(default_factory=list)


def _pure(n: torch.fx.Node) -> bool:
    if n.op != "call_function":
        return False
    if getattr(n.target, "namespace", "") == "_c10d_functional":
        return True  # functional collectives: every rank of the stage runs the same copy
    schema = getattr(n.target, "_schema", None)
    if schema is not None and (schema.is_mutable
                               or torch.Tag.nondeterministic_seeded in n.target.tags):
        return False
    return not n.is_impure()


def assign_stages(gm: torch.fx.GraphModule, placeholder_stage: Sequence[int],
                  node_stage: dict, n_stages: int,
                  tangents: Sequence[torch.fx.Node]) -> tuple[dict, dict]:
    """lowered node -> stage (SHARED for nodes every reader copies), and node -> is backward.

    placeholder_stage: per traced placeholder, its stage (SHARED for "every stage that uses it").
    node_stage: planned node name -> stage ("grad:<param>" and "loss" stamps resolved here);
    with one stage every node is in it."""
    bwd = backward_nodes(gm, set(tangents))
    stage: dict = {}
    k = 0
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            stage[n] = placeholder_stage[k]
            k += 1
        elif n.op == "get_attr":
            stage[n] = SHARED
        elif n.op == "call_function":
            ins = n.all_input_nodes
            if _pure(n) and not bwd[n] and all(stage[i] == SHARED for i in ins):
                stage[n] = SHARED
                continue
            planned = n.meta.get(META_KEY, {}).get("node")
            if planned is not None and planned.startswith("grad:"):
                planned = planned[5:]
            s = n_stages - 1 if planned == "loss" or n_stages == 1 else node_stage.get(planned)
            if s is None:
                raise StageError(f"node {n.name} (planned node {planned}): the plan gives it "
                                 f"no stage")
            if s == SHARED:
                # the plan's "every stage that uses it": a copy in each reader's stage, which
                # only a forward value without side effects can be
                if not _pure(n) or bwd[n]:
                    raise StageError(f"node {n.name} (planned node {planned}): planned in "
                                     f"every stage, but it is not a pure forward op")
                stage[n] = SHARED
                continue
            if not 0 <= s < n_stages:
                raise StageError(f"node {planned}: stage {s} outside 0..{n_stages - 1}")
            stage[n] = s
    _check_shared(gm, stage)
    return stage, bwd


def _check_shared(gm: torch.fx.GraphModule, stage: dict) -> None:
    """A copied node that reads one stage's value (the plan's shared view of a placeholder
    that stage owns, such as the labels' view) is read in that stage only."""
    home: dict = {}  # shared node -> the stage of the owned values it reads (transitively)
    for n in gm.graph.nodes:
        if stage.get(n) != SHARED or n.op != "call_function":
            continue
        owned = {stage[i] for i in n.all_input_nodes if stage[i] != SHARED}
        owned |= {home[i] for i in n.all_input_nodes if i in home}
        if len(owned) > 1:
            raise StageError(f"node {n.name} (planned {n.meta.get(META_KEY, {}).get('node')}): "
                             f"copied in every stage, it reads stages {sorted(owned)}")
        if owned:
            home[n] = owned.pop()
    for n, s in home.items():
        for u in n.users:
            if u.op != "output" and stage.get(u) not in (SHARED, s):
                raise StageError(f"node {u.name} of stage {stage.get(u)} reads {n.name} "
                                 f"(planned {n.meta.get(META_KEY, {}).get('node')}), a copy of "
                                 f"a value of stage {s}")


def cut_stages(gm: torch.fx.GraphModule, placeholder_stage: Sequence[int], node_stage: dict,
               n_stages: int, tangents: Sequence[torch.fx.Node],
               outputs: Sequence[torch.fx.Node], grads: Sequence[Optional[torch.fx.Node]],
               param_index: Sequence[int], wanted: Sequence[int]) -> list[StageGraph]:
    """The joint graphs of the stages in `wanted` (this rank's), cut out of `gm`.

    outputs: the step's outputs, which the last stage returns (the loss node, or the model
    outputs' aliases); tangents: the lowered nodes of their gradients (the loss seed's alias,
    or the outputs' gradient marks); grads: per parameter (param_index: its traced
    placeholder index), the gradient node or None."""
    stage, bwd = assign_stages(gm, placeholder_stage, node_stage, n_stages, tangents)
    nodes = [n for n in gm.graph.nodes if n.op != "output"]
    placeholders = [n for n in nodes if n.op == "placeholder"]
    # boundary b (between stage b and b + 1): forward values sent on, gradients sent back
    fwd_cross: list = [[] for _ in range(n_stages)]
    bwd_cross: list = [[] for _ in range(n_stages)]
    for n in nodes:
        for i in n.all_input_nodes:
            si, sn = stage[i], stage.get(n, SHARED)
            if si == SHARED or sn == SHARED or si == sn:
                continue
            what = f"node {n.name} (planned {n.meta.get(META_KEY, {}).get('node')}) of stage " \
                   f"{sn} reads {i.name} (planned {i.meta.get(META_KEY, {}).get('node')}) " \
                   f"of stage {si}"
            if not bwd[i] and sn == si + 1:
                if i not in fwd_cross[si]:
                    fwd_cross[si].append(i)
            elif bwd[i] and sn == si - 1:
                if i not in bwd_cross[sn]:
                    bwd_cross[sn].append(i)
            else:
                raise StageError(f"{what}: only activations to the next stage and their "
                                 f"gradients back cross a stage boundary")
    for b in range(n_stages - 1):
        _check_pairs(fwd_cross[b], bwd_cross[b], b)
    grad_of = {p: g for p, g in zip(param_index, grads)}
    for p, g in grad_of.items():
        if g is not None and stage[g] != placeholder_stage[p]:
            raise StageError(f"parameter {placeholders[p].name}: its gradient "
                             f"{g.name} is computed in stage {stage[g]}, the parameter is in "
                             f"stage {placeholder_stage[p]}")
    return [_build(gm, s, stage, bwd, nodes, placeholders, fwd_cross, bwd_cross, tangents,
                   outputs, grad_of, n_stages) for s in wanted]


def _meta(n: torch.fx.Node):
    return n.meta.get("val")


def _check_pairs(acts: list, grads: list, b: int) -> None:
    """The gradients crossing boundary b back are those of its activations, in order: one
    per floating activation, of its local shape."""
    for a in acts:
        if _meta(a) is None or not _meta(a).is_floating_point():
            raise StageError(f"stage boundary {b}->{b + 1}: {a.name} (planned "
                             f"{a.meta.get(META_KEY, {}).get('node')}) is not a floating "
                             f"activation")
    float_acts = acts
    shapes_a = [(tuple(_meta(a).shape), _meta(a).dtype) for a in float_acts]
    shapes_g = [(tuple(_meta(g).shape), _meta(g).dtype) for g in grads]
    if sorted(shapes_a, key=str) != sorted(shapes_g, key=str):
        raise StageError(f"stage boundary {b}->{b + 1}: activations "
                         f"{[a.name for a in float_acts]} {shapes_a} but gradients "
                         f"{[g.name for g in grads]} {shapes_g} cross it back")
    # order the gradients like their activations (equal shapes keep their graph order)
    ordered = []
    rest = list(grads)
    for sh in shapes_a:
        g = next(g for g in rest if (tuple(_meta(g).shape), _meta(g).dtype) == sh)
        rest.remove(g)
        ordered.append(g)
    grads[:] = ordered


def _build(gm: torch.fx.GraphModule, s: int, stage: dict, bwd: dict, nodes: list,
           placeholders: list, fwd_cross: list, bwd_cross: list, tangents: Sequence,
           outputs: Sequence, grad_of: dict, n_stages: int) -> StageGraph:
    first, last = s == 0, s == n_stages - 1
    act_in = fwd_cross[s - 1] if not first else []
    act_out = fwd_cross[s] if not last else list(outputs)
    grads_back = bwd_cross[s - 1] if not first else []   # sent to stage s - 1
    tangents_in = bwd_cross[s] if not last else []       # received from stage s + 1
    # which nodes: the stage's own, and the shared ones they read (transitively)
    keep: set = set()

    def need(n: torch.fx.Node) -> None:
        todo = [n]
        while todo:
            x = todo.pop()
            if x in keep:
                continue
            keep.add(x)
            todo.extend(i for i in x.all_input_nodes if stage[i] == SHARED)

    for n in nodes:
        if stage.get(n) == s and n.op != "placeholder":
            need(n)
    own_ph = [k for k, p in enumerate(placeholders)
              if stage[p] == s or (stage[p] == SHARED and p in keep)]
    for k in own_ph:
        keep.add(placeholders[k])
    g = torch.fx.Graph()
    env: dict = {}
    for k in own_ph:
        env[placeholders[k]] = _copy_placeholder(g, placeholders[k], f"p{k}_")
    for a in act_in:
        env[a] = _copy_placeholder(g, a, "act_")
    for t in tangents_in:  # the next stage's gradients: backward nodes, made placeholders
        v = _meta(t)
        node = g.call_function(torch.ops.aten.empty.memory_format, (list(v.shape),),
                               {"dtype": v.dtype})
        node.meta = {"val": v, META_KEY: {"phase": "backward", "node": "tangent"}}
        env[t] = node
    for n in nodes:
        if n in keep and n.op != "placeholder" and n not in env:
            env[n] = g.node_copy(n, lambda a: env[a])
    out_nodes = [env[a] for a in act_out]
    params = [k for k in own_ph if k in grad_of and grad_of[k] is not None]
    grad_nodes = [env[grad_of[k]] for k in params] + [env[x] for x in grads_back]
    tangent_nodes = [env[t] for t in tangents_in]
    if last:
        tangent_nodes = [env[t] for t in tangents]
    g.output((*out_nodes, *grad_nodes))
    sgm = torch.fx.GraphModule(gm, g)
    return StageGraph(index=s, gm=sgm, placeholders=own_ph, act_in=[a.name for a in act_in],
                      act_out=[a.name for a in act_out], grad_params=params,
                      out_nodes=out_nodes, grad_nodes=grad_nodes, tangent_nodes=tangent_nodes,
                      act_in_meta=[_meta(a) for a in act_in],
                      act_out_meta=[_meta(a) for a in act_out])


def _copy_placeholder(g: torch.fx.Graph, n: torch.fx.Node, prefix: str) -> torch.fx.Node:
    p = g.placeholder(prefix + n.name)
    p.meta = dict(n.meta)
    return p
