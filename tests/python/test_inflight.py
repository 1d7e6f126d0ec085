"""autoshard.inflight on hand-made graphs: the in-flight rules and gloo's limit."""
import unittest

import _paths  # noqa: F401

try:
    import torch
    import torch.fx
    import torch.distributed  # noqa: F401  (registers _c10d_functional)
except ImportError:  # pragma: no cover
    torch = None


def _graph(n_collectives: int, waits_at_end: bool = True):
    """x -> n all-gathers of relu(x)+k on group '1' (each then waited), summed.  With
    waits_at_end every collective is issued before the first wait."""
    ops = torch.ops._c10d_functional
    aten = torch.ops.aten
    g = torch.fx.Graph()
    x = g.placeholder("x")
    issued, outs = [], []
    for k in range(n_collectives):
        y = g.call_function(aten.add.Tensor, (x, float(k)))
        c = g.call_function(ops.all_gather_into_tensor.default, (y, 2, "1"))
        if waits_at_end:
            issued.append(c)
        else:
            outs.append(g.call_function(ops.wait_tensor.default, (c,)))
    outs += [g.call_function(ops.wait_tensor.default, (c,)) for c in issued]
    total = outs[0]
    for o in outs[1:]:
        total = g.call_function(aten.add.Tensor, (total, o))
    g.output(total)
    return g


@unittest.skipIf(torch is None, "PyTorch not installed")
class InFlight(unittest.TestCase):
    def test_a_graph_that_keeps_the_rules_passes(self):
        from autoshard.inflight import check_in_flight

        self.assertEqual(check_in_flight(_graph(3)), [])
        self.assertEqual(check_in_flight(_graph(3, waits_at_end=False), limit=1), [])

    def test_the_limit_counts_pending_collectives(self):
        from autoshard.inflight import check_in_flight

        problems = check_in_flight(_graph(3), limit=1)
        self.assertEqual(len(problems), 2)
        self.assertIn("2 collectives in flight (limit 1)", problems[0])

    def test_limit_in_flight_moves_waits_up_and_keeps_the_values(self):
        from autoshard.inflight import check_in_flight, limit_in_flight

        g = _graph(4)
        self.assertEqual(limit_in_flight(g, 1), 3)
        g.lint()
        self.assertEqual(check_in_flight(g, limit=1), [])
        order = [n.target.__name__.split(".")[0] for n in g.nodes
                 if n.op == "call_function" and "c10d" in str(n.target)]
        self.assertEqual(order, ["all_gather_into_tensor", "wait_tensor"] * 4)
        g2 = _graph(4)
        self.assertEqual(limit_in_flight(g2, 2), 2)
        self.assertEqual(check_in_flight(g2, limit=2), [])
        self.assertEqual(limit_in_flight(g2, 2), 0)  # already within the limit
        with self.assertRaisesRegex(ValueError, "limit must be >= 1"):
            limit_in_flight(g2, 0)

    def test_a_collective_read_before_its_wait_or_never_waited_is_reported(self):
        from autoshard.inflight import check_in_flight

        ops = torch.ops._c10d_functional
        g = torch.fx.Graph()
        x = g.placeholder("x")
        c = g.call_function(ops.all_gather_into_tensor.default, (x, 2, "1"))
        early = g.call_function(torch.ops.aten.relu.default, (c,))
        w = g.call_function(ops.wait_tensor.default, (c,))
        c2 = g.call_function(ops.all_gather_into_tensor.default, (x, 2, "1"))
        g.output((early, w, c2))
        problems = check_in_flight(g)
        self.assertTrue(any("exactly one reader" in p and "relu" in p for p in problems),
                        problems)
        self.assertTrue(any("never waited" in p for p in problems), problems)

    def test_writing_a_collectives_input_before_its_wait_is_reported(self):
        from autoshard.inflight import check_in_flight

        ops = torch.ops._c10d_functional
        g = torch.fx.Graph()
        x = g.placeholder("x")
        c = g.call_function(ops.all_gather_into_tensor.default, (x, 2, "1"))
        g.call_function(torch.ops.aten.add_.Tensor, (x, 1.0))
        w = g.call_function(ops.wait_tensor.default, (c,))
        g.output(w)
        problems = check_in_flight(g)
        self.assertEqual(len(problems), 1, problems)
        self.assertRegex(problems[0], r"node add_\w*: writes x while all_gather_into_tensor\w* still reads it")

    def test_enforce_raises_on_a_broken_rule(self):
        from autoshard.inflight import enforce_in_flight

        ops = torch.ops._c10d_functional
        g = torch.fx.Graph()
        x = g.placeholder("x")
        g.output(g.call_function(ops.all_gather_into_tensor.default, (x, 2, "1")))
        gm = torch.fx.GraphModule(torch.nn.Module(), g)
        with self.assertRaisesRegex(AssertionError, "exactly one reader.*readers: output"):
            enforce_in_flight(gm, None)
        gm2 = torch.fx.GraphModule(torch.nn.Module(), _graph(3))
        self.assertEqual(enforce_in_flight(gm2, 1, rank_in=lambda group: 1), 2)
        self.assertIn("wait_tensor", gm2.code)
        self.assertNotIn("all_gather", gm2.code)  # on gloo the gathers are sums

    def test_gathers_become_sums_of_a_padded_buffer(self):
        from autoshard.inflight import check_in_flight, gather_buffer, gathers_as_sums
        from autoshard.lower import collective_kind

        g = _graph(2)
        self.assertEqual(gathers_as_sums(g, lambda group: 1 if group == "1" else -1), 2)
        g.lint()
        self.assertEqual(check_in_flight(g), [])
        colls = [n for n in g.nodes if collective_kind(n) is not None]
        self.assertEqual([collective_kind(n) for n in colls], ["all_gather", "all_gather"])
        self.assertTrue(all(n.target is torch.ops._c10d_functional.all_reduce.default
                            and n.args[1:] == ("sum", "1") for n in colls))
        self.assertEqual([n.args[0].args[1:] for n in colls], [(2, 1), (2, 1)])
        self.assertEqual(gathers_as_sums(g, lambda group: 0), 0)  # nothing left to rewrite
        # The buffers of the group's ranks sum to the gather: x at each rank's rows.
        parts = [torch.randn(3, 2) for _ in range(4)]
        total = sum(gather_buffer(p, 4, i) for i, p in enumerate(parts))
        self.assertTrue(torch.equal(total, torch.cat(parts)))


if __name__ == "__main__":
    unittest.main()


COMPILED_SCRIPT = r"""
import json, re, sys
import torch, torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch._inductor.utils import run_and_get_code
from autoshard.inflight import compile_in_order

dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
group = dist.group.WORLD.group_name
ops = torch.ops._c10d_functional

def gathers(x, y, z):
    a = ops.all_gather_into_tensor(x.contiguous(), 2, group)
    b = ops.all_gather_into_tensor(torch.relu(y), 2, group)
    c = ops.all_gather_into_tensor(z * 2, 2, group)
    return ops.wait_tensor(a).sum() + ops.wait_tensor(b).sum() + ops.wait_tensor(c).sum()

def overlapped(x, w):  # a gather waited at its use, a reduction at the end: compute between
    a = ops.all_gather_into_tensor(x, 2, group)
    h = torch.tanh(torch.relu(w @ w) @ w)
    r = ops.reduce_scatter_tensor(h * 3, "sum", 2, group)
    h2 = torch.sigmoid(h @ w)
    return ops.wait_tensor(a) @ h2, ops.wait_tensor(r)

def events(code):  # per collective: compute kernels run between its issue and its wait
    issued, gaps, most = {}, [], 0
    for line in code.splitlines():
        m = re.search(r"(?:(\w+) = )?torch\.ops\._c10d_functional\.(\w+)\.default\((\w+)", line)
        if m and m.group(2) == "wait_tensor":
            gaps.append(issued.pop(m.group(3)))
        elif m:
            issued[m.group(1) or m.group(3)] = 0
            most = max(most, len(issued))
        elif re.search(r"^\s+(extern_kernels\.\w+|cpp_fused_\w+)\(", line):
            issued = {k: v + 1 for k, v in issued.items()}
    return most, gaps

rand = lambda *s: torch.randn(*s)
res = {}
for mode in ("plain", "order", "limit"):
    torch._dynamo.reset()
    compiled = (lambda f: torch.compile(f)) if mode == "plain" else (
        lambda f: compile_in_order(f, 1 if mode == "limit" else None))
    _, g = run_and_get_code(compiled(gathers), *(rand(4, 4) for _ in range(3)))
    _, o = run_and_get_code(compiled(overlapped), rand(4, 4), rand(4, 4))
    res[mode] = {"gathers": events(g[0]), "overlapped": events(o[0])}
print(json.dumps(res))
"""


@unittest.skipIf(torch is None, "PyTorch not installed")
class CompiledInFlight(unittest.TestCase):
    def test_inductor_keeps_the_graphs_order_and_gloos_limit(self):
        """compile_in_order keeps the graph's issue and wait points (inductor alone issues a
        collective just before its reader and waits on it at once: no overlap), and with a
        limit (gloo) waits for each gather before it issues the next."""
        import json
        import os
        import subprocess
        import sys

        env = dict(os.environ, PYTHONPATH=_paths.PYTHON_DIR, TORCHINDUCTOR_COMPILE_THREADS="1")
        r = subprocess.run([sys.executable, "-c", COMPILED_SCRIPT], env=env,
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        res = json.loads(r.stdout.strip().splitlines()[-1])
        # inductor's own order: each collective waited with no compute after its issue
        self.assertEqual(res["plain"]["overlapped"][1], [0, 0])
        # the graph's order: the gather runs under the matmuls, the reduction under the last
        most, gaps = res["order"]["overlapped"]
        self.assertEqual(most, 2)
        self.assertTrue(all(g > 0 for g in gaps), gaps)
        self.assertEqual(res["order"]["gathers"][0], 3)  # all three waited at the sum
        self.assertEqual(res["limit"]["gathers"][0], 1)
        self.assertEqual(res["limit"]["overlapped"][0], 1)
