"""Context-parallel attention (autoshard.context_parallel) on CPU with gloo.

Unit checks (one process): the head-tail layout, and that the blockwise pieces the lowerings
use (attention of a query block against one K/V chunk with the causal mask of their global
positions, merged by logsumexp; the per-chunk backward) equal the CPU flash kernel on the
whole sequence.

Numerics (2 processes, mesh [2] dim "cp"): autoshard's plan of a 2-layer LLaMA (seq 8) whose
sequence-indexed placeholders are pinned to shard on the sequence over cp; the planner makes
its SDPA nodes context-parallel (placements.json "context_parallel", load balanced).  The plan
runs with the ring lowering and with the all-gather lowering (the plan's kind, and the other
one forced), each compared with one process: loss, every gradient and the parameters after 3
AdamW steps within 1e-5 relative.  A third job runs the unpinned optimum, whose CP attention
asks for load balancing while the sequence is cut after its sources (tokens and rope tables
replicated): it must run with contiguous positions (reported) and the same numerics.  The
audit must see each lowering's communication on the
attention nodes: ring -> one P2P exchange per forward and per backward node; all-gather ->
2 all-gathers per forward, 2 all-gathers + 2 reduce-scatters per backward, on the cp dim, and
every collective of the step must match the plan's edges plus that exchange (count and bytes
per edge and per type).

Nested views (4 processes, mesh [2, 2] dims "dp", "cp"): the same LLaMA with one sequence per
dp rank, its sequence cut over cp: the linear layers' flatten of [B, S, D] cut S(0)S(1) to
[B * S, D] cut S(0)S(0), and the split back, keep both cuts (strategy/view_rules.cc, "Nested
cuts") and run on the local shards (autoshard.local.nested_view): same numerics, no
mismatch, and every collective the plan's.
"""
import functools
import os
import shutil
import tempfile
import unittest

from _paths import PYTHON_DIR  # noqa: F401  (sets sys.path)

try:
    import torch
    import _apply_worker as W
    import _cp_worker as C
    import _dtensor_ref
    from autoshard.audit import planned_collectives
except ImportError:  # pragma: no cover
    torch = None

TOL = 1e-5
TIMEOUT_S = 240


@unittest.skipIf(torch is None, "PyTorch not installed")
class Blockwise(unittest.TestCase):
    def test_head_tail_layout(self):
        from autoshard.context_parallel import head_tail_order, permute_sequence, positions

        self.assertEqual(positions(0, 2, 4, True).tolist(), [0, 1, 6, 7])
        self.assertEqual(positions(1, 2, 4, True).tolist(), [2, 3, 4, 5])
        self.assertEqual(positions(1, 2, 4, False).tolist(), [4, 5, 6, 7])
        self.assertEqual(head_tail_order(8, 2).tolist(), [0, 1, 6, 7, 2, 3, 4, 5])
        t = torch.arange(16).reshape(2, 8)
        self.assertEqual(permute_sequence(t, 1, 2)[1].tolist(), [8, 9, 14, 15, 10, 11, 12, 13])

    def test_the_sequence_layout_is_read_not_derived(self):
        from types import SimpleNamespace as NS

        from autoshard.context_parallel import ContextParallelError, planned_layout

        mesh = NS(size=lambda dim: 2)
        balanced = {"sdpa": NS(context_parallel=NS(mesh_dim=0, load_balance=True))}
        plain = {"sdpa": NS(context_parallel=None)}
        doc = {"sequence_layout": {"head_tail": True, "permute": {"tokens": [[1, 2]]}}}
        layout = planned_layout(doc, balanced, mesh, "p.json: ")
        self.assertEqual((layout.head_tail, layout.permute), (True, {"tokens": [(1, 2)]}))
        self.assertEqual(planned_layout({}, plain, mesh).permute, {})
        # an older file: the runtime does not guess which sources the planner cut
        with self.assertRaisesRegex(ContextParallelError, r"^p\.json: /sequence_layout: "
                                                          r"missing.*plan it again"):
            planned_layout({}, balanced, mesh, "p.json: ")

    def test_sequence_split_attention_needs_an_entry(self):
        from torch.distributed.tensor import Replicate, Shard

        from autoshard.context_parallel import ContextParallelError, check_uncovered

        op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
        check_uncovered(op, [[Shard(0)]] * 3, "sdpa")  # batch-split: plain attention
        check_uncovered(torch.ops.aten.mm.default, [[Shard(2)]] * 2, "mm")
        with self.assertRaisesRegex(ContextParallelError, "node sdpa: .* input 1 .* no "
                                                          "\"context_parallel\" entry"):
            check_uncovered(op, [[Replicate()], [Shard(2)], [Shard(2)]], "sdpa")

    def test_chunks_merge_to_the_kernel(self):
        from autoshard.context_parallel import attend, attend_backward, merge, positions

        g = torch.Generator().manual_seed(0)
        q, k, v, do = (torch.randn(2, 3, 8, 4, generator=g) for _ in range(4))
        scale = 0.5
        ref_o, ref_l = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, True, scale=scale)
        ref_g = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            do, q, k, v, ref_o, ref_l, 0.0, True, scale=scale)
        world = 2
        order = torch.cat([positions(r, world, 4, True) for r in range(world)])
        for r in range(world):  # rank r's queries against each rank's chunk, in ring order
            qpos = positions(r, world, 4, True)
            rows = qpos
            out = lse = None
            for src in [(r - i) % world for i in range(world)]:
                kpos = positions(src, world, 4, True)
                o, s = attend(q[:, :, rows], k[:, :, kpos], v[:, :, kpos], qpos, kpos, True, scale)
                out, lse = (o, s) if out is None else merge(out, lse, o, s)
            self.assertLess((out - ref_o[:, :, rows]).abs().max().item(), 1e-5)
            self.assertLess((lse - ref_l[:, :, rows]).abs().max().item(), 1e-5)
            dq, dk, dv = attend_backward(do[:, :, rows], q[:, :, rows], k[:, :, order],
                                         v[:, :, order], out, lse, qpos, order, True, scale)
            self.assertLess((dq - ref_g[0][:, :, rows]).abs().max().item(), 1e-5)
            if r == 0:
                dk_sum, dv_sum = dk, dv
            else:
                dk_sum, dv_sum = dk_sum + dk, dv_sum + dv
        self.assertLess((dk_sum - ref_g[1][:, :, order]).abs().max().item(), 1e-5)
        self.assertLess((dv_sum - ref_g[2][:, :, order]).abs().max().item(), 1e-5)


@unittest.skipIf(torch is None, "PyTorch not installed")
class ContextParallelRuns(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.binary = _dtensor_ref.autoshard_binary()
        if cls.binary is None:
            raise unittest.SkipTest("autoshard binary not built (set AUTOSHARD_BIN)")

    def test_llama_cp2_ring_and_allgather(self):
        traced, graph = W.trace("llama")
        tmp = tempfile.mkdtemp(prefix="autoshard-cp-")
        try:
            doc = W.plan(self.binary, graph, [2], ["cp"], C.SEQUENCE_PINS, tmp)
            cp = C.cp_nodes(doc)
            sdpa = [n["name"] for n in graph["nodes"] if n.get("op", "").startswith(C.SDPA)]
            self.assertEqual(sorted(cp), sorted(sdpa), "the planner made every SDPA node CP")
            for entry in cp.values():
                self.assertEqual(entry["mesh_dim"], "cp")
                self.assertTrue(entry["load_balance"])
            jobs = [{"name": kind, "model": "llama", "placements": C.force_kind(doc, kind)}
                    for kind in ("ring", "allgather")]
            # the unpinned optimum: CP attention too, but the sequence is cut after the
            # sources (tokens, rope tables replicated): contiguous positions, no balance
            os.makedirs(os.path.join(tmp, "natural"))
            natural = W.plan(self.binary, graph, [2], ["cp"], [], os.path.join(tmp, "natural"))
            self.assertEqual(sorted(C.cp_nodes(natural)), sorted(sdpa))
            self.assertEqual(natural["placements"]["tokens"]["output"], "R")
            # The planner's sequence layout (placements.json) is what the rule gives: head-tail
            # with the sequence cut at its sources, natural order when it is cut later.
            self.assertTrue(doc["sequence_layout"]["head_tail"])
            self.assertEqual(doc["sequence_layout"]["permute"]["tokens"], [[1, 2]])
            self.assertEqual(natural["sequence_layout"], {"head_tail": False, "permute": {}})
            jobs.append({"name": "natural", "model": "llama", "placements": natural})
            per_rank = W.launch(2, [2], ["cp"], functools.partial(C.run_cp, jobs=jobs), tmp,
                                TIMEOUT_S)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for rank, results in enumerate(per_rank):
            for res in results:
                where = f"{res['name']} rank {rank}"
                self.assertLessEqual(res["loss_err"], TOL, where)
                for n, e in res["grad_err"].items():
                    self.assertLessEqual(e, TOL, f"{where}: grad of {n}")
                for n, e in res["param_err"].items():
                    self.assertLessEqual(e, TOL, f"{where}: {n} after 3 AdamW steps")
                self.assertEqual(res["mismatches"], [], where)
                if res["name"] == "natural":
                    self.assertEqual(sorted(res["unbalanced"]), sorted(sdpa), where)
                else:
                    self.assertEqual(res["unbalanced"], [], f"{where}: head-tail order in force")
                edges = res["issued_edges"]
                for node in sdpa:
                    kinds = sorted(k for k, _, _ in edges.get(f"{node}:op", []))
                    backward = node.endswith("_backward") or "_backward_" in node
                    kind = C.cp_nodes(next(j for j in jobs if j["name"] == res["name"])
                                      ["placements"])[node]["kind"]
                    if kind == "ring":
                        self.assertEqual(kinds, ["send_recv"], f"{where}: {node}")
                    elif backward:
                        self.assertEqual(kinds, ["all_gather"] * 2 + ["reduce_scatter"] * 2,
                                         f"{where}: {node}")
                    else:
                        self.assertEqual(kinds, ["all_gather"] * 2, f"{where}: {node}")
                # the audit: every collective issued, CP attention included, is the planned
                # edges' schedule plus the CP lowering's own exchange (audit.cp_collectives)
                job = next(j for j in jobs if j["name"] == res["name"])
                planned, planned_edges = planned_collectives(self.binary, graph,
                                                             job["placements"], [2])
                issued_e = {k: [tuple(x) for x in v] for k, v in edges.items()
                            if v and not k.startswith("loss")}
                self.assertEqual(issued_e, {k: v for k, v in planned_edges.items() if v},
                                 f"{where}: per-edge collectives (issued vs planned)")
                self.assertEqual(res["issued"], {f"{k[0]}|{k[1]}": v
                                                 for k, v in planned.items()}, where)

    def test_nested_views_keep_the_sequence_cut(self):
        from autoshard.local import nested_cuts
        from autoshard.placements import to_dtensor

        traced, graph = W.trace("llama_b2")
        tmp = tempfile.mkdtemp(prefix="autoshard-cp-nested-")
        try:
            pins = ["tokens=S(0)S(1)", "target=S(0)S(1)", "rope_cos=RS(0)", "rope_sin=RS(0)"]
            doc = W.plan(self.binary, graph, [2, 2], ["dp", "cp"], pins, tmp)
            views = {n["name"] for n in graph["nodes"]
                     if n.get("op", "").split(".")[0] in ("view", "_unsafe_view", "reshape")}
            nested = []
            for name in sorted(views):
                e = doc["placements"][name]
                src, dst = to_dtensor(e["inputs"][0]), to_dtensor(e["output"])
                if nested_cuts(src, dst):
                    nested.append(name)
            self.assertGreaterEqual(len(nested), 4, "the linear layers' flattens and splits")
            jobs = [{"name": "nested", "model": "llama_b2", "placements": doc}]
            per_rank = W.launch(4, [2, 2], ["dp", "cp"], functools.partial(C.run_cp, jobs=jobs),
                                tmp, TIMEOUT_S)
            planned, planned_edges = planned_collectives(self.binary, graph, doc, [2, 2])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for rank, results in enumerate(per_rank):
            res = results[0]
            where = f"rank {rank}"
            W.check_job(self, res, where, TOL)
            self.assertEqual(res["mismatches"], [], where)
            issued = {k: [tuple(x) for x in v] for k, v in res["issued_edges"].items()
                      if v and not k.startswith("loss")}
            self.assertEqual(issued, {k: v for k, v in planned_edges.items() if v}, where)
            for name in nested:
                self.assertNotIn(f"{name}:0", issued, f"{where}: {name} communicates")


if __name__ == "__main__":
    unittest.main()
