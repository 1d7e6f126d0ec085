"""apply_placement numerics and communication audit, on CPU with gloo (127.0.0.1).

4 processes (mesh 2x2, dims dp,tp) and 2 processes (mesh 2, dim dp) run, as the lowered per-rank
graphs (autoshard.lower, split by autoshard.partition), a 3-layer MLP and a 2-layer LLaMA-style
model (hidden 16, 4 heads, 2 KV heads) under autoshard's optimum and under hand-pinned DP, FSDP
and (on 2x2) Megatron-TP plans (`autoshard plan --pin`; on 2x2 the LLaMA's DP and FSDP pins are
left to the 2-rank mesh), all planned with `--comm-model dtensor` (the walk DTensor executes).
On 2x2 also the LLaMA with Meta's complex rotary (complex64 tensors: torch.polar,
view_as_complex, complex mul, view_as_real), its table a buffer under Megatron and
built by polar in the step under the optimum, and the LLaMA under FSDP2 over TP with strided
weights (`--algo fsdp+tp --shard-orders` on an H100, autoshard's comm model: parameters held as
_StridedShard DTensors, planned "via" paths to and from them).  Besides: one plan per mesh
compiled (torch.compile, inductor); on 2 ranks the DP plan with every layer recomputed
(`--recompute full`), an MLP with uneven shards (15 features over 2 ranks), and the MLP traced
without a loss (AutoParallel's way: the module returns its outputs as DTensors and the test's own loss of them back-propagates).  Each rank compares with
the single-process eager step: loss and every gradient within 1e-5 relative (max |diff| / max
|ref|, fp32), and the parameters after three AdamW steps.  The audit of the first step (eager)
must match autoshard's schedule for the plan's edges exactly (count and bytes per collective
type and mesh dim; uneven shards: counts, as DTensor pads them), DTensor must have produced
every planned output placement itself, and the lowered graph holds no DTensor.
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
    import _dtensor_ref
    from autoshard.audit import planned_collectives
except ImportError:  # pragma: no cover
    torch = None

TOL = 1e-5
TIMEOUT_S = 300  # per launch (generous for a loaded CI machine); workers are killed past it


#: Plans also run compiled (torch.compile, inductor on CPU): one per mesh, since each rank's
#: inductor compile of a LLaMA step takes a minute of a loaded 2-core machine.  On 2x2 the
#: MLP's Megatron plan (tensor-parallel collectives inside the compiled graphs): compiling the
#: LLaMA there on 4 ranks cost 90 s of CPU of the test's 145 s, the MLP 30 s.
#: AUTOSHARD_COMPILE_ALL=1 compiles every plan (minutes more; docs/benchmarks.md).
COMPILED = {"2": "llama/optimum", "2x2": "mlp/megatron"}
#: The strided plan of the 2x2 mesh: torchtitan's FSDP2-over-TP layout, parameters held as
#: DTensors with _StridedShard (planned on an H100, where compute stays whole and each
#: column weight is one dp all-gather from _S(0,2)S(0) to RS(0)).
STRIDED_RECIPE = ["--algo", "fsdp+tp", "--shard-orders"]
#: ... under autoshard's own comm model (the default), whose schedule plans "via" paths from
#: and to the strided specs (the embedding's _S(0,2)S(0) -> RS(0) -> RR, the output weight's
#: gradient P(sum)P(sum) -> P(sum)S(0) -> _S(0,2)S(0)) that the runtime follows.
STRIDED_COMM_MODEL = "nccl"
COMPILE_ALL = os.environ.get("AUTOSHARD_COMPILE_ALL") == "1"
if COMPILE_ALL:
    TIMEOUT_S = 3600


def swap_independent_ops(doc: dict, graph: dict) -> None:
    """Swaps the first two adjacent ops of the schedule's "order" that the graph lets run
    either way (the second does not read the first; neither mutates, draws random
    numbers nor is a detach, which lowers to nothing): another order the step can run, which
    the runtime must follow."""
    nodes = {n["name"]: n for n in graph["nodes"]}

    def plain(name: str) -> bool:
        op = nodes[name].get("op", "")
        return not any(w in op for w in ("_.", "rand", "dropout", "bernoulli", "copy", "detach"))

    def reads(b: str, a: str) -> bool:
        return any((r if isinstance(r, str) else r["node"]) == a for r in nodes[b]["inputs"])

    order = doc["schedule"]["order"]
    for k in range(len(order) - 1):
        a, b = order[k], order[k + 1]
        if plain(a) and plain(b) and not reads(b, a):
            order[k], order[k + 1] = b, a
            return
    raise AssertionError("no two independent adjacent ops to swap")


def _plans(binary, graphs, mesh, dims, tmp):
    """name -> (model, placements) for the optimum and the hand-pinned plans."""
    tp = "tp" in dims
    dp_in = "S(0)R" if tp else "S(0)"
    rep = "RR" if tp else "R"
    out = {}
    for key, graph in graphs.items():
        if key == "mlp_odd":  # uneven shards: the 15-wide layer split over 2 ranks (8 + 7)
            if not tp:
                pins = W.param_pins(graph, lambda n, s: "S(0)" if s[0] == 15 else None)
                d = os.path.join(tmp, "mlp_odd-uneven")
                os.makedirs(d)
                out["mlp_odd/uneven"] = (key, W.plan(binary, graph, mesh, dims, pins, d,
                                                     divisible=False))
            continue
        if key in W.MESH_2X2_ONLY:
            if tp:
                out[f"{key}/{W.MESH_2X2_ONLY[key]}"] = (key, _one_plan(
                    binary, graph, mesh, dims, W.MESH_2X2_ONLY[key], dp_in, tmp, key))
            continue
        specs = {"optimum": []}
        # The LLaMA's DP and FSDP pins run on the 2-rank mesh only: on 2x2 the MLPs' pins check
        # the same walks with a replicated tp dim, and every LLaMA plan there is lowered on 4 ranks.
        if not (tp and key == "llama"):
            specs["dp"] = W.input_pins(graph, dp_in) + W.param_pins(graph, lambda n, s: rep)
            specs["fsdp"] = W.input_pins(graph, dp_in) + W.param_pins(
                graph, lambda n, s: ("S(0)R" if tp else "S(0)") if s[0] % 2 == 0 else rep)
        if tp:
            specs["megatron"] = W.input_pins(graph, dp_in) + W.param_pins(
                graph, lambda n, s: "R" + W.megatron(n, s))
            if key == "llama":  # FSDP2 over TP: column weights _S(0,2)S(0), gathered on dp
                d = os.path.join(tmp, f"{key}-fsdp+tp-strided")
                os.makedirs(d)
                out[f"{key}/fsdp+tp-strided"] = (key, W.plan(
                    binary, graph, mesh, dims, [], d, STRIDED_RECIPE, hardware=W.H100,
                    comm_model=STRIDED_COMM_MODEL))
        elif key == "llama":  # data parallel, each layer recomputed (plan --recompute full)
            specs["recompute"] = specs["dp"]
        for name, pins in specs.items():
            d = os.path.join(tmp, f"{key}-{name}")
            os.makedirs(d)
            extra = ["--recompute", "full"] if name == "recompute" else []
            out[f"{key}/{name}"] = (key, W.plan(binary, graph, mesh, dims, pins, d, extra))
    return out


def _one_plan(binary, graph, mesh, dims, name, dp_in, tmp, key):
    """The optimum or the Megatron plan of `graph` (placements.json object)."""
    pins = [] if name == "optimum" else W.input_pins(graph, dp_in) + W.param_pins(
        graph, lambda n, s: "R" + W.megatron(n, s))
    d = os.path.join(tmp, f"{key}-{name}")
    os.makedirs(d)
    return W.plan(binary, graph, mesh, dims, pins, d)


def jobs_recompute_listed(jobs, name) -> bool:
    """The plan lists the nodes to recompute (placements.json "recompute")."""
    job = next(j for j in jobs if j["name"] == name)
    return bool(job["placements"].get("recompute"))


@unittest.skipIf(torch is None, "PyTorch not installed")
class PlacementStrings(unittest.TestCase):
    def test_parse_and_print(self):
        from torch.distributed.tensor import Partial, Replicate, Shard

        from autoshard.plan_file import PlanError, _output_list, parse_placements, placements_str

        self.assertEqual(parse_placements("S(0)RP(sum)"), [Shard(0), Replicate(), Partial("sum")])
        self.assertEqual(parse_placements("P"), [Partial("sum")])
        self.assertEqual(parse_placements("Shard(1), Replicate()"), [Shard(1), Replicate()])
        self.assertEqual(placements_str(parse_placements("S(1)P(avg)R")), "S(1)P(avg)R")
        self.assertEqual(_output_list("(S(0)R, None)", ""), [[Shard(0), Replicate()], None])
        with self.assertRaisesRegex(PlanError, "/placements/mm: placements 'Q'"):
            parse_placements("Q", "/placements/mm: ")
        # Strided shards are torch's _StridedShard (the runtime applies them); split factor 1
        # is a plain shard.
        from torch.distributed.tensor.placement_types import _StridedShard

        self.assertEqual(parse_placements("_S(0,2)S(0)", "/placements/w: "),
                         [_StridedShard(0, split_factor=2), Shard(0)])
        self.assertEqual(placements_str(parse_placements("_S(1,4)RS(1)")), "_S(1,4)RS(1)")
        self.assertEqual(parse_placements("_S(0,1)R"), [Shard(0), Replicate()])
        with self.assertRaisesRegex(PlanError, "/placements/w: .*split factor 0"):
            parse_placements("_S(0,0)R", "/placements/w: ")

    def test_strided_conversions(self):
        from torch.distributed.tensor import Shard
        from torch.distributed.tensor._dtensor_spec import ShardOrderEntry
        from torch.distributed.tensor.placement_types import _StridedShard

        from autoshard import placements as pl

        objs = pl.to_dtensor("_StridedShard(dim=0, sf=8), Shard(dim=0)")
        self.assertEqual(objs, (_StridedShard(0, split_factor=8), Shard(0)))
        self.assertEqual(pl.to_string(objs), "_S(0,8)S(0)")
        # torch's docstring example (_dtensor_spec.py): mesh (4, 3, 2), order 2, 0, 1.
        self.assertEqual(pl.decode_order("_S(0,2)_S(0,2)S(0)", (4, 3, 2)), {0: [2, 0, 1]})
        self.assertEqual(pl.encode_order("S(0)S(0)S(0)", {0: [2, 0, 1]}, (4, 3, 2)),
                         "_S(0,2)_S(0,2)S(0)")
        self.assertIsNone(pl.decode_order("_S(0,2)", (4,)))
        plain, order = pl.to_shard_order("_S(0,8)S(0)", (8, 8))
        self.assertEqual(plain, (Shard(0), Shard(0)))
        self.assertEqual(order, (ShardOrderEntry(tensor_dim=0, mesh_dims=(1, 0)),))
        self.assertEqual(pl.from_shard_order(plain, order, (8, 8)), "_S(0,8)S(0)")
        with self.assertRaisesRegex(ValueError, "cannot parse at position 4"):
            pl.parse("S(0)_S(1)")

    def test_top_level_name(self):
        import autoshard
        from autoshard.apply import apply_placement

        self.assertIs(autoshard.apply_placement, apply_placement)


class _Mesh:
    """What local_chunk reads of a DeviceMesh: its dim sizes."""

    def __init__(self, shape):
        self.shape = tuple(shape)

    def size(self, i):
        return self.shape[i]


@unittest.skipIf(torch is None, "PyTorch not installed")
class StridedPieces(unittest.TestCase):
    """autoshard.local cuts _StridedShard pieces as torch 2.13 lays them out (its
    _StridedShard._split_tensor, the layout DTensor's redistributions assume) and tells whether
    a piece is one block of the full tensor (what a DCP chunk's offset describes)."""

    def test_local_chunk_is_torchs_layout(self):
        import itertools

        from autoshard.plan_file import parse_placements
        from autoshard.local import local_chunk

        cases = [((2, 2), "_S(0,2)S(0)"), ((3, 2), "_S(0,2)S(0)"), ((2, 2, 2), "_S(0,4)S(0)S(0)"),
                 ((2, 3, 2), "_S(0,2)_S(0,2)S(0)"), ((2, 2), "S(1)_S(0,2)"), ((2, 2), "_S(1,2)S(1)")]
        checked = 0
        for mesh, spec in cases:
            pl = parse_placements(spec)
            for rows in (8, 12, 7, 13, 3):
                full = torch.arange(rows * 6.0).reshape(rows, 6)
                for coord in itertools.product(*(range(n) for n in mesh)):
                    want = full
                    for m, p in enumerate(pl):  # torch's own split, mesh dim by mesh dim
                        if not p.is_replicate():  # Shard and _StridedShard
                            want = p._split_tensor(want, mesh[m], with_padding=False)[0][coord[m]]
                    got = local_chunk(full, _Mesh(mesh), pl, coord)
                    self.assertTrue(torch.equal(got, want), f"{spec} on {mesh}, {rows} rows, {coord}")
                    checked += 1
        self.assertEqual(checked, 5 * (4 + 6 + 8 + 12 + 4 + 4))

    def test_contiguous_pieces(self):
        from autoshard.plan_file import parse_placements
        from autoshard.local import contiguous_pieces

        def ok(shape, mesh, spec):
            return contiguous_pieces(shape, mesh, parse_placements(spec))

        self.assertTrue(ok((8, 4), (2, 2), "_S(0,2)S(0)"))       # FSDP2 over TP, even
        self.assertTrue(ok((8, 4), (2, 2, 2), "_S(0,4)S(0)S(0)"))
        self.assertTrue(ok((7, 4), (2, 2), "S(0)S(0)"))           # no strided shard
        self.assertTrue(ok((7, 4), (2, 2), "_S(0,2)S(0)"))        # uneven, still blocks
        self.assertFalse(ok((13, 4), (3, 2), "_S(0,2)S(0)"))      # rank (2, 0): rows 6, 11
        self.assertFalse(ok((8, 4), (2, 2), "_S(0,2)R"))          # no order: rows 0-1, 4-5
        self.assertTrue(ok((4, 16), (2, 2), "_S(1,2)S(1)"))


@unittest.skipIf(torch is None, "PyTorch not installed")
class Launch(unittest.TestCase):
    def test_a_native_crash_fails_the_launch(self):
        tmp = tempfile.mkdtemp(prefix="autoshard-launch-")
        try:
            with self.assertRaisesRegex(AssertionError, "rank 0 died of SIGABRT"):
                W.launch(2, [2], ["dp"], W.abort_rank0, tmp, 120)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


@unittest.skipIf(torch is None, "PyTorch not installed")
class ApplyPlacement(unittest.TestCase):
    maxDiff = None
    binary = None
    graphs = None

    @classmethod
    def setUpClass(cls):
        cls.binary = _dtensor_ref.autoshard_binary()
        if cls.binary is None:
            raise unittest.SkipTest("autoshard binary not built (set AUTOSHARD_BIN)")
        cls.graphs = {k: W.trace(k)[1] for k in W.MODELS}

    def check(self, world, mesh, dims):
        tmp = tempfile.mkdtemp(prefix="autoshard-apply-")
        try:
            plans = _plans(self.binary, self.graphs, mesh, dims, tmp)
            for key, doc in plans.values():  # the runtime runs the file's order, not its own
                swap_independent_ops(doc, self.graphs[key])
            jobs = [{"name": n, "model": k, "placements": p} for n, (k, p) in plans.items()]
            twin = COMPILED["x".join(map(str, mesh))]
            jobs += [{**j, "name": j["name"] + "/compiled", "compile": True}
                     for j in jobs if COMPILE_ALL or j["name"] == twin]
            per_rank = W.launch(world, mesh, dims, functools.partial(W.run_jobs, jobs=jobs),
                                tmp, TIMEOUT_S)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        sharded_params = 0
        for job in jobs:
            model = STRIDED_COMM_MODEL if job["name"].startswith("llama/fsdp+tp-strided") \
                else "dtensor"
            planned, planned_edges = planned_collectives(
                self.binary, self.graphs[job["model"]], job["placements"], mesh,
                comm_model=model)
            planned = {f"{k[0]}|{k[1]}": v for k, v in planned.items()}
            for rank, results in enumerate(per_rank):
                res = next(r for r in results if r["name"] == job["name"])
                where = f"{job['name']} rank {rank}"
                W.check_job(self, res, where, TOL)
                if job.get("compile"):
                    self.assertGreater(res["compiled_graphs"], 0, where)
                    # inductor runs the planned schedule: the same collectives, issued and
                    # waited in the lowered graphs' order (autoshard.inflight)
                    self.assertEqual(res["compiled_order"], res["graph_order"], where)
                    continue
                # the lowered step runs the ops in the plan's order (schedule "order")
                order = job["placements"]["schedule"]["order"]
                ran = [n for n in res["op_order"] if n in set(order)]
                self.assertEqual(ran, [n for n in order if n in set(ran)], where)
                if W.returns_outputs(job["model"]):  # the user's loss adds its own collectives
                    continue
                issued_edges = {k: [tuple(x) for x in v] for k, v in res["issued_edges"].items()
                                if not k.startswith("loss")}
                planned_e = {k: v for k, v in planned_edges.items() if v}
                issued_e = {k: v for k, v in issued_edges.items() if v}
                issued_t = res["issued"]
                if job["model"] == "mlp_odd":  # DTensor pads uneven shards: same collectives,
                    strip = lambda d: {k: [x[:2] for x in v] for k, v in d.items()}  # noqa
                    issued_e, planned_e = strip(issued_e), strip(planned_e)   # more bytes
                    issued_t = {k: v[0] for k, v in issued_t.items()}
                    planned_t = {k: v[0] for k, v in planned.items()}
                else:
                    planned_t = planned
                self.assertEqual(issued_e, planned_e,
                                 f"{where}: per-edge collectives (issued vs planned)")
                self.assertEqual(issued_t, planned_t, f"{where}: collectives per type")
                # the plan's parameter layouts are the ones the module holds
                pl = job["placements"]["placements"]
                for n, ps in res["placements"].items():
                    self.assertEqual(ps, pl[n]["output"], n)
                    sharded_params += "S(" in ps
        self.assertGreater(sharded_params, 0)  # the pinned plans really shard something
        if mesh == [2, 2]:  # the strided plan's weights are held as _StridedShard DTensors
            strided = per_rank[0][[j["name"] for j in jobs].index("llama/fsdp+tp-strided")]
            held = [n for n, ps in strided["placements"].items() if ps.startswith("_S(0,2)S(0)")]
            self.assertIn("layers.0.feed_forward.w1.weight", held)
            self.assertGreaterEqual(len(held), 10, strided["placements"])
            job = next(j for j in jobs if j["name"] == "llama/fsdp+tp-strided")
            pl = job["placements"]["placements"]
            to_strided = [e["edge"] for e in job["placements"]["schedule"].get("via") or []
                          if e["edge"].startswith("grad:") and
                          pl[e["edge"][5:].rsplit(":", 1)[0]]["output"].startswith("_S(")]
            self.assertIn("grad:output.weight:-1", to_strided)  # a planned path to _S(0,2)S(0)
        by_name = {r["name"]: r for r in per_rank[0]}
        if "llama/recompute" in by_name:  # the plan's recomputation is honoured
            self.assertTrue(jobs_recompute_listed(jobs, "llama/recompute"))
            self.assertGreater(by_name["llama/recompute"]["recomputed"], 0)
            self.assertLess(by_name["llama/recompute"]["saved"], by_name["llama/dp"]["saved"])
            self.assertEqual(by_name["llama/dp"]["recomputed"], 0)

    def test_mesh_2x2_dp_tp(self):
        self.check(4, [2, 2], ["dp", "tp"])

    def test_mesh_2_dp(self):
        self.check(2, [2], ["dp"])


if __name__ == "__main__":
    unittest.main()
