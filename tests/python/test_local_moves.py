"""The runtime's local moves: shard-to-shard redistributions as all-to-alls on a gloo mesh
(autoshard.local, autoshard.lower.cpu_all_to_all) give torch's pieces, and
autoshard.partition.drop_chunk_copies drops only the copies it may."""
import itertools
import json
import operator
import os
import shutil
import tempfile
import unittest

import _paths  # noqa: F401

try:
    import torch
    import torch.fx
    import _apply_worker as W
except ImportError:  # pragma: no cover
    torch = None


def _graph(dim: int, edge: str, returned: bool = False, mutate: bool = False):
    """x -> y = x * 2; piece = clone(split(y, 2, dim)[1]) stamped with `edge`; out = piece + 1
    (and the piece itself when `returned`; an in-place add on y first when `mutate`)."""
    from autoshard.lower import META_KEY

    aten = torch.ops.aten
    g = torch.fx.Graph()
    x = g.placeholder("x")
    y = g.call_function(aten.mul.Tensor, (x, 2.0))
    if mutate:
        y = g.call_function(aten.add_.Tensor, (y, 1.0))
    parts = g.call_function(aten.split.Tensor, (y, 2, dim))
    piece = g.call_function(operator.getitem, (parts, 1))
    copy = g.call_function(aten.clone.default, (piece,))
    copy.meta[META_KEY] = {"node": "mm", "edge": edge}
    out = g.call_function(aten.add.Tensor, (copy, 1.0))
    g.output((out, copy) if returned else (out,))
    x_val = torch.arange(16.0).reshape(4, 4)
    # shape meta as the lowering leaves it (make_fx's "val")
    y_val = x_val * 2
    piece.meta["val"] = torch.split(y_val, 2, dim)[1]
    return g, x_val


def _clones(g) -> int:
    return sum(n.target is torch.ops.aten.clone.default for n in g.nodes)


@unittest.skipIf(torch is None, "PyTorch not installed")
class DropChunkCopies(unittest.TestCase):
    def _run(self, g, x):
        return torch.fx.GraphModule(torch.nn.Module(), g)(x)

    def test_a_contiguous_piece_of_a_redistribution_is_read_in_place(self):
        from autoshard.partition import drop_chunk_copies

        g, x = _graph(0, "mm:1")
        before = self._run(g, x)
        self.assertEqual(drop_chunk_copies(g), 1)
        g.lint()
        self.assertEqual(_clones(g), 0)
        torch.testing.assert_close(self._run(g, x), before)

    def test_copies_that_must_stay(self):
        from autoshard.partition import drop_chunk_copies

        cases = {
            "a non-contiguous piece": _graph(1, "mm:1"),
            "the op's own clone": _graph(0, "mm:op"),
            "a piece the graph returns": _graph(0, "mm:1", returned=True),
            "a graph that writes in place": _graph(0, "mm:1", mutate=True),
        }
        for what, (g, x) in cases.items():
            with self.subTest(what):
                self.assertEqual(drop_chunk_copies(g), 0)
                self.assertEqual(_clones(g), 1)


#: placements on a 2x2 mesh between which one mesh dim's move is tried (strided ones included)
SPECS = ["S(1)S(0)", "_S(0,2)S(0)", "S(0)S(0)", "S(1)S(1)", "S(0)S(1)", "S(1)R", "S(0)R",
         "RS(0)", "RS(1)", "_S(1,2)S(1)"]


def _moves_rank(rank: int, port: int, out_dir: str) -> None:
    """Every one-mesh-dim move between SPECS of two tensors, on this rank: the local piece
    after `redistribute` (under cpu_all_to_all) against torch's cut of the full tensor."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from autoshard import local as L
    from autoshard.lower import cpu_all_to_all
    from autoshard.plan_file import parse_placements

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=4)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    res = {"checked": 0, "all_to_all": 0, "wrong": []}
    for shape in [(8, 4), (4, 8)]:
        full = torch.arange(float(shape[0] * shape[1])).reshape(shape)
        for a, b in itertools.product(SPECS, SPECS):
            src, dst = parse_placements(a), parse_placements(b)
            if sum(p != q for p, q in zip(src, dst)) != 1:
                continue
            x = L.local_slice(full, mesh, src)
            want = L.local_chunk(full, mesh, dst, mesh.get_coordinate())
            moved = L._all_to_all(x, mesh, dst)  # read at once: every collective waited
            if moved is not None:
                res["all_to_all"] += 1
                if not torch.equal(moved.to_local(), want):
                    res["wrong"].append(f"{shape} {a} -> {b} (all-to-all)")
            with cpu_all_to_all():
                got = L.redistribute(x, mesh, dst).to_local()
            if not torch.equal(got, want):
                res["wrong"].append(f"{shape} {a} -> {b}")
            res["checked"] += 1
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)
    dist.barrier()  # no rank closes its connections while a peer still reads from them
    dist.destroy_process_group()


@unittest.skipIf(torch is None, "PyTorch not installed")
class ShardMoves(unittest.TestCase):
    def test_moves_on_gloo_give_torchs_pieces(self):
        import socket

        import torch.multiprocessing as mp

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        out = tempfile.mkdtemp(prefix="autoshard-moves-")
        try:
            W.forkserver_context()  # the ranks fork from the session's preloaded server
            mp.start_processes(_moves_rank, args=(port, out), nprocs=4, join=True,
                               start_method="forkserver")
            for rank in range(4):
                with open(os.path.join(out, f"rank{rank}.json")) as f:
                    res = json.load(f)
                self.assertEqual(res["wrong"], [], f"rank {rank}")
                self.assertGreater(res["checked"], 40, f"rank {rank}")
                # S(1)S(0) -> _S(0,2)S(0) and the plain innermost moves ran as all-to-alls
                self.assertGreater(res["all_to_all"], 10, f"rank {rank}")
        finally:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
