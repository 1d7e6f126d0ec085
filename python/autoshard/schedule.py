"""Running the step as the plan runs it: the op order, prefetched parameters, early activations.

    order = run_order(gm, names, doc.get("schedule"))     # doc: the placements.json document
    moved = apply_prefetch(graph, doc.get("schedule"))
    moved += apply_issue_points(graph, doc.get("schedule"))

The planner writes, beside the placements, where a rank issues each redistribution that waits
for nothing computed in the step (placements.json "schedule": "prefetch" entries, C++
planner/prefetch_schedule.h): a parameter's all-gather for a layer is issued at the first op of
the layer `prefetch_layers` before it, as FSDP does and as the simulator and the overlap-aware
objective assume.  The lowered graph issues each collective where DTensor redistributed it, right
before its use; this pass moves the collectives of each scheduled edge (and the local ops they
read that depend on placeholders only, such as a weight's transpose) up to the planned issue
point, and leaves the wait at the use (apply_wait_points then puts it at the file's wait
point).  It decides nothing: an entry whose issue point or collectives are not in this graph
(a recomputed gather in the backward, an edge whose redistribution needs no collective) is
left where it is.

Activations (schedule version 4, "issue" entries): a redistribution of a computed tensor is
issued as soon as its producer has run, so its collective overlaps the ops between the
producer and the consumer, as the simulator assumes; DTensor issues it at the use.  The pass
moves the edge's local ops and its first collective right after the producer's last lowered
node in this graph, or after a later input of theirs (a value the forward saved for the
backward is redistributed at its use: issued at the backward's start, every such buffer would
be held through the whole backward); the first wait and any later step of a multi-step redistribution stay at the
use, where the value is read.

The op order (version 5, "order"; run_order): the ops in the order the simulator priced them,
which the lowering follows when it runs the traced graph (apply.StepRunner), instead of the
order the graph happens to hold; the entries above then move collectives relative to it.

Wait points (version 6, every entry's "wait_before"; apply_wait_points): each entry names the
op before which a rank waits for its collectives -- the consumer for a tensor use, null (the
step's end) for a gradient reduction -- the point where the simulator's compute stream waits.
The pass moves the edge's last `wait_tensor` (with the local ops that only reshape the
arrived value) to just before that op's own lowered node (or the graph's output), in both
graphs.  A wait point before the collective is issued is refused (ScheduleError naming the
entry); one after another reader of the value (a gather the backward's de-duplication shares
between two uses) waits before that reader instead.  On gloo the in-flight limit
(autoshard.inflight) may then move a wait earlier still, never later.

Every rank moves the same nodes of the same graph, so the collectives stay matched across
ranks; autoshard.inflight's rules still hold afterwards.
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping, Optional

import torch.fx

from .inflight import is_wait
from .lower import META_KEY, collective_kind

#: The schedule versions this runtime reads (2 added the prefetch entries' buckets, 3 the
#: gradient reductions' buckets, 4 the activations' issue points, 5 the op order, 6 every
#: entry's wait point).
SCHEDULE_VERSIONS = (1, 2, 3, 4, 5, 6)


class ScheduleError(ValueError):
    """A placements.json schedule this runtime cannot read (the message names the key)."""


def _stamp(node: torch.fx.Node, key: str) -> Any:
    return node.meta.get(META_KEY, {}).get(key)


def _version(schedule: Mapping[str, Any]) -> int:
    """The schedule's version; ScheduleError for one this runtime does not read."""
    version = schedule.get("version")
    if version not in SCHEDULE_VERSIONS:
        raise ScheduleError(f"/schedule/version: {version!r}, this runtime reads "
                            f"{', '.join(map(str, SCHEDULE_VERSIONS))}")
    return version


def _is_bucket(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def prefetch_entries(schedule: Optional[Mapping[str, Any]]) -> list:
    """The schedule's prefetch entries as (edge, issue_before or None, bucket or None); []
    without a schedule.  Version 1 has no buckets."""
    if not schedule:
        return []
    version = _version(schedule)
    out = []
    for k, e in enumerate(schedule.get("prefetch", [])):
        if not isinstance(e, Mapping) or not isinstance(e.get("edge"), str):
            raise ScheduleError(f"/schedule/prefetch/{k}: expected {{\"edge\": ..., "
                                f"\"issue_before\": ...}}")
        before = e.get("issue_before")
        if before is not None and not isinstance(before, str):
            raise ScheduleError(f"/schedule/prefetch/{k}/issue_before: a node name or null")
        if version >= 2 and not _is_bucket(e.get("bucket")):
            raise ScheduleError(f"/schedule/prefetch/{k}/bucket: a bucket number >= 0")
        out.append((e["edge"], before, e["bucket"] if version >= 2 else None))
    return out


def reduce_entries(schedule: Optional[Mapping[str, Any]]) -> list:
    """The schedule's gradient reductions as (edge, bucket) ("grad:<param>:-1"); [] without a
    schedule or before version 3."""
    if not schedule or _version(schedule) < 3:
        return []
    out = []
    for k, e in enumerate(schedule.get("reduce", [])):
        if (not isinstance(e, Mapping) or not isinstance(e.get("edge"), str)
                or not _is_bucket(e.get("bucket"))):
            raise ScheduleError(f"/schedule/reduce/{k}: expected {{\"edge\": ..., "
                                f"\"bucket\": n >= 0}}")
        out.append((e["edge"], e["bucket"]))
    return out


def op_order(schedule: Optional[Mapping[str, Any]]) -> Optional[list]:
    """The schedule's "order": the graph's op names in the order a rank runs them (C++
    planner/prefetch_schedule.h run_order, the simulator's); None without a schedule or
    before version 5."""
    if not schedule or _version(schedule) < 5:
        return None
    order = schedule.get("order")
    if not isinstance(order, list) or not all(isinstance(x, str) for x in order):
        raise ScheduleError("/schedule/order: expected [node name, ...]")
    return order


def wait_entries(schedule: Optional[Mapping[str, Any]]) -> list:
    """Every entry's wait point as (edge, wait_before or None: the step's end, JSON pointer of
    the entry); [] without a schedule or before version 6."""
    if not schedule or _version(schedule) < 6:
        return []
    out = []
    for key in ("prefetch", "issue", "reduce"):
        for k, e in enumerate(schedule.get(key, [])):
            where = f"/schedule/{key}/{k}"
            if not isinstance(e, Mapping) or not isinstance(e.get("edge"), str):
                raise ScheduleError(f"{where}: expected {{\"edge\": ..., ...}}")
            if "wait_before" not in e:
                raise ScheduleError(f"{where}/wait_before: missing (a node name or null)")
            before = e["wait_before"]
            if before is not None and not isinstance(before, str):
                raise ScheduleError(f"{where}/wait_before: a node name or null")
            out.append((e["edge"], before, where))
    return out


def issue_entries(schedule: Optional[Mapping[str, Any]]) -> list:
    """The schedule's activation issue points as (edge, issue_after); [] without a schedule or
    before version 4."""
    if not schedule or _version(schedule) < 4:
        return []
    out = []
    for k, e in enumerate(schedule.get("issue", [])):
        if (not isinstance(e, Mapping) or not isinstance(e.get("edge"), str)
                or not isinstance(e.get("issue_after"), str)):
            raise ScheduleError(f"/schedule/issue/{k}: expected {{\"edge\": ..., "
                                f"\"issue_after\": a node name}}")
        out.append((e["edge"], e["issue_after"]))
    return out


def twin_entries(schedule: Optional[Mapping[str, Any]]) -> dict:
    """The schedule's "twins": view node -> the earlier view of the same tensor whose
    redistributed input it reads (the planner priced that redistribution once); {} without."""
    twins = (schedule or {}).get("twins", {})
    if not isinstance(twins, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in twins.items()):
        raise ScheduleError("/schedule/twins: expected {\"view\": \"earlier view\", ...}")
    return dict(twins)


def via_entries(schedule: Optional[Mapping[str, Any]]) -> list:
    """The schedule's planned paths as (edge, [placement strings]); [] without a schedule, before
    version 4, or for a plan priced with DTensor's own order (no "via")."""
    if not schedule or _version(schedule) < 4:
        return []
    out = []
    for k, e in enumerate(schedule.get("via", [])):
        via = e.get("via") if isinstance(e, Mapping) else None
        if (not isinstance(e, Mapping) or not isinstance(e.get("edge"), str)
                or not isinstance(via, list) or not all(isinstance(x, str) for x in via)):
            raise ScheduleError(f"/schedule/via/{k}: expected {{\"edge\": ..., \"via\": "
                                f"[placements, ...]}}")
        out.append((e["edge"], list(via)))
    return out


def _follows(anchor: torch.fx.Node, nodes: list) -> bool:
    """Whether `nodes` run right after `anchor`, in order."""
    for n in nodes:
        if anchor.next is not n:
            return False
        anchor = n
    return True


def apply_issue_points(graph: torch.fx.Graph, schedule: Optional[Mapping[str, Any]]) -> int:
    """Moves the first collective of every "issue" entry found in `graph` (with the edge's local
    ops before it) right after its producer (module docstring); returns how many edges moved."""
    entries = issue_entries(schedule)
    if not entries:
        return 0
    last_of: dict = {}    # planned node name -> its last lowered node
    by_edge: dict = {}    # "consumer:slot" -> its lowered nodes, in graph order
    for n in graph.nodes:
        if n.op in ("placeholder", "get_attr"):
            continue
        planned = _stamp(n, "node")
        if planned is not None:
            last_of[planned] = n
        edge = _stamp(n, "edge")
        if edge is not None:
            by_edge.setdefault(edge, []).append(n)
    moved = 0
    pos = {n: k for k, n in enumerate(graph.nodes)}
    for edge, after in entries:
        group = by_edge.get(edge, [])
        first = next((k for k, n in enumerate(group) if collective_kind(n) is not None), None)
        if first is None:
            continue
        chosen = [n for n in group[:first + 1] if not is_wait(n)]
        inside = set(chosen)
        anchors = [i for n in chosen for i in n.all_input_nodes if i not in inside]
        target = last_of.get(after)
        if target is None:
            # The producer ran in another graph (a forward value the backward reads): issuing at
            # this graph's start would hold every such buffer from the backward's first op on.
            continue
        anchor = max([target, *anchors], key=pos.get)
        if pos[anchor] > pos[chosen[0]]:
            continue  # the producer's last node follows the issue part: leave it
        if _follows(anchor, chosen):
            continue  # already right after it
        for n in chosen:
            anchor.append(n)
            anchor = n
        moved += 1
        pos = {n: k for k, n in enumerate(graph.nodes)}
    return moved


def _arrived_block(wait: torch.fx.Node, nodes: list, limit: float, pos: dict) -> list:
    """The wait and its edge's local ops (`nodes`) after it, before position `limit`, that read
    only it (and each other): what moves with a wait moved later."""
    block = [wait]
    inside = {wait}
    for n in sorted(nodes, key=pos.get):
        if pos[n] <= pos[wait] or pos[n] >= limit:
            continue
        if n.op == "call_function" and any(i in inside for i in n.all_input_nodes) and all(
                i in inside or pos[i] < pos[wait] for i in n.all_input_nodes):
            block.append(n)
            inside.add(n)
    return block


def _move_before(target: torch.fx.Node, block: list, pos: dict) -> None:
    """Moves `block` (in order) to just before `target`, keeping `pos` (node -> a number in
    graph order) right without renumbering the graph: one pass over it per move would make
    the pass quadratic on a real step."""
    prev = target.prev
    while prev in block:  # (a block node right before the target is moved too)
        prev = prev.prev
    low = pos.get(prev, pos[target] - 1.0)
    for k, n in enumerate(block):
        target.prepend(n)
        pos[n] = low + (pos[target] - low) * (k + 1) / (len(block) + 1)


def apply_wait_points(graph: torch.fx.Graph, schedule: Optional[Mapping[str, Any]]) -> int:
    """Moves the last wait of every entry found in `graph` to just before its wait point
    (module docstring); returns how many waits moved."""
    entries = wait_entries(schedule)
    if not entries:
        return 0
    op_of: dict = {}    # planned node name -> its op's first lowered node ("<node>:op")
    by_edge: dict = {}  # edge -> its lowered nodes
    end = None
    for n in graph.nodes:
        if n.op == "output":
            end = n
        edge = _stamp(n, "edge")
        if edge is None:
            continue
        by_edge.setdefault(edge, []).append(n)
        if edge.endswith(":op"):
            op_of.setdefault(edge[:-3], n)
    pos = {n: float(k) for k, n in enumerate(graph.nodes)}
    moved = 0
    for edge, before, where in entries:
        nodes = by_edge.get(edge, [])
        waits = [n for n in nodes if is_wait(n)]
        target = end if before is None else op_of.get(before)
        if not waits or target is None:
            continue  # not in this graph (or nothing to wait for: a synchronous move)
        wait = max(waits, key=pos.get)
        if pos[target] <= pos[wait.args[0]]:
            raise ScheduleError(f"{where}/wait_before: {before!r} runs before the edge's "
                                f"collective is issued")
        if pos[target] < pos[wait]:
            _move_before(target, [wait], pos)
            moved += 1
            continue
        block = _arrived_block(wait, nodes, pos[target], pos)
        inside = set(block)
        # no later than the value's first reader outside what moves with the wait
        readers = [u for n in block for u in n.users if u not in inside]
        target = min([target, *readers], key=pos.get)
        if _follows(block[0], block[1:]) and block[-1].next is target:
            continue  # already there
        _move_before(target, block, pos)
        moved += 1
    return moved


def _movable(node: torch.fx.Node, pos: dict, limit: int, chosen: set) -> bool:
    """Adds to `chosen` what must move with `node` to run before position `limit`: its inputs
    that come later and depend on placeholders only (no collective among them)."""
    for i in node.all_input_nodes:
        if i in chosen or i.op in ("placeholder", "get_attr") or pos[i] < limit:
            continue
        if (i.op != "call_function" or collective_kind(i) is not None or is_wait(i)
                or pos[i] == limit):  # the issue point itself: nothing to run before it
            return False
        chosen.add(i)
        if not _movable(i, pos, limit, chosen):
            return False
    return True


def apply_prefetch(graph: torch.fx.Graph, schedule: Optional[Mapping[str, Any]]) -> int:
    """Moves the collectives of every scheduled edge found in `graph` to its issue point;
    returns how many edges moved."""
    entries = prefetch_entries(schedule)
    if not entries:
        return 0
    nodes = list(graph.nodes)
    first_of: dict = {}   # planned node name -> its first lowered node
    by_edge: dict = {}    # "consumer:slot" -> its lowered nodes, in graph order
    start = None          # the first node that is not a placeholder
    for n in nodes:
        if n.op in ("placeholder", "get_attr", "output"):
            continue
        start = start or n
        planned = _stamp(n, "node")
        if planned is not None:
            first_of.setdefault(planned, n)
        edge = _stamp(n, "edge")
        if edge is not None:
            by_edge.setdefault(edge, []).append(n)
    moved = 0
    for edge, before, _ in entries:
        group = by_edge.get(edge, [])
        if not any(collective_kind(n) is not None for n in group):
            continue
        target = start if before is None else first_of.get(before)
        if target is None:
            continue  # the issue point is in another graph (e.g. a recomputed gather)
        pos = {n: k for k, n in enumerate(graph.nodes)}
        waits = [n for n in group if is_wait(n)]
        # The issue part: the edge's nodes before its last wait (what follows that wait, the
        # local ops on the arrived value, stays at the use).
        end = pos[waits[-1]] if waits else len(pos)
        chosen = {n for n in group if pos[n] < end}
        if not chosen or pos[target] >= min(pos[n] for n in chosen):
            continue
        if not all(_movable(n, pos, pos[target], chosen) for n in list(chosen)):
            continue
        for n in sorted(chosen, key=pos.get):
            target.prepend(n)
        moved += 1
    return moved


def run_order(gm: torch.fx.GraphModule, names: Mapping[torch.fx.Node, str],
              schedule: Optional[Mapping[str, Any]], origin: str = "") -> Optional[list]:
    """The nodes of `gm` (names: node -> graph JSON name) in the order the plan runs them: the
    schedule's "order" (op names, the simulator's order), each node after the unnamed nodes it
    reads (getitem, ...), placeholders first, nodes the order does not name (dead ones)
    after, the output last.  None for a plan without a schedule (the graph's order); a
    schedule before version 5 (an older writer) has no order: a warning (naming `origin`, the
    file), and the graph's order.  ScheduleError where the order is not one the graph can run
    (an op before its input), naming the key."""
    if not schedule:
        return None
    order = op_order(schedule)
    if order is None:
        warnings.warn(f"{origin}/schedule: version {schedule.get('version')} has no op order "
                      f"(an older writer): the runtime runs the traced graph's order; plan it "
                      f"again to run the planned one", stacklevel=4)
        return None
    by_name = {name: n for n, name in names.items() if n.graph is gm.graph}
    rank = {name: k for k, name in enumerate(order)}
    nodes = list(gm.graph.nodes)
    out: list = []
    done: set = set()

    def emit(node: torch.fx.Node, k: int) -> None:
        todo = [node]
        while todo:
            x = todo[-1]
            if x in done:
                todo.pop()
                continue
            wait = [i for i in x.all_input_nodes if i not in done]
            for i in wait:
                r = rank.get(names.get(i))
                if r is not None and r > k:
                    raise ScheduleError(f"/schedule/order: {names.get(x, x.name)} is run "
                                        f"before its input {names[i]}")
            if wait:
                todo.extend(wait)
                continue
            todo.pop()
            done.add(x)
            out.append(x)

    for n in nodes:
        if n.op in ("placeholder", "get_attr"):
            emit(n, -1)
    for k, name in enumerate(order):
        if name in by_name:  # (a node an eager island replaced is not in this graph)
            emit(by_name[name], k)
    for n in nodes:
        emit(n, len(order))
    return out
