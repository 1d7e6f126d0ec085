"""Tracing tests; skipped when PyTorch is not installed (Debian: python3-torch)."""
import io
import json
import os
import resource
import tempfile
import textwrap
import unittest
from contextlib import redirect_stderr, redirect_stdout

from _paths import PYTHON_DIR  # noqa: F401  (sets sys.path)
from autoshard.tracer.validate import validate_graph

try:
    import torch
    import torch.nn as nn
except ImportError:  # pragma: no cover
    torch = None

try:
    import torchvision  # noqa: F401
except ImportError:  # pragma: no cover
    torchvision = None


def check_graph(test, g):
    """Invariants every exported training graph must satisfy."""
    test.assertEqual(validate_graph(g), [])
    nodes = g["nodes"]
    for n in nodes:
        if n["kind"] != "output":
            test.assertTrue(n["outputs"], n["name"])
            for o in n["outputs"]:
                test.assertIsInstance(o["shape"], list)
    params = [n["name"] for n in nodes if n["kind"] == "parameter"]
    test.assertEqual([p["param"] for p in g["grad_pairs"]], params)
    test.assertEqual(nodes[-1]["kind"], "output")
    ref = g["loss"]
    name, k = (ref, 0) if isinstance(ref, str) else (ref["node"], ref["output"])
    loss = next(n for n in nodes if n["name"] == name)
    test.assertEqual(loss["outputs"][k]["shape"], [])
    test.assertFalse([n for n in nodes if n.get("op") == "getitem"])


@unittest.skipIf(torch is None, "PyTorch not installed")
class LlamaTraceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from autoshard.tracer import export_training_graph
        from autoshard.tracer.examples.llama import llama_tiny

        model, inputs, loss_fn, targets = llama_tiny(batch=2, seq=64, dtype="bf16")
        cls.graph = export_training_graph(model, inputs, loss_fn, targets=targets,
                                          name="llama2l")

    def test_structure(self):
        check_graph(self, self.graph)
        nodes = self.graph["nodes"]
        self.assertGreater(len(nodes), 500)
        self.assertLess(len(nodes), 1000)
        kinds = [n["kind"] for n in nodes]
        self.assertEqual(kinds.count("parameter"), 21)
        self.assertEqual(kinds.count("buffer"), 2)
        self.assertEqual(kinds.count("input"), 2)  # tokens, target

    def test_parameters_named_like_the_checkpoint(self):
        names = {n["name"]: n for n in self.graph["nodes"]}
        for suffix in ("attention.wq", "attention.wk", "attention.wv", "attention.wo",
                       "feed_forward.w1", "feed_forward.w2", "feed_forward.w3",
                       "attention_norm", "ffn_norm"):
            p = names[f"layers.1.{suffix}.weight"]
            self.assertEqual(p["kind"], "parameter")
            self.assertEqual(p["module"], f"layers.1.{suffix}")
        self.assertEqual(names["tok_embeddings.weight"]["outputs"][0]["shape"], [1024, 256])
        self.assertEqual(names["output.weight"]["outputs"][0]["shape"], [1024, 256])

    def test_modules_and_phases(self):
        nodes = self.graph["nodes"]
        fwd_mm = [n for n in nodes if n.get("op") == "mm" and n["phase"] == "forward"]
        self.assertEqual(fwd_mm[0]["module"], "layers.0.attention.wq")
        self.assertTrue(fwd_mm[0]["source"].startswith("llama.py:"))
        bwd_mm = [n for n in nodes if n.get("op") == "mm" and n["phase"] == "backward"]
        self.assertEqual(len(bwd_mm), 2 * len(fwd_mm))
        # Backward ops are attributed to the module whose forward they differentiate.
        self.assertEqual({n["module"] for n in bwd_mm}, {n["module"] for n in fwd_mm})

    def test_grad_shapes_match_params(self):
        shapes = {n["name"]: n["outputs"] for n in self.graph["nodes"] if n["kind"] != "output"}
        for gp in self.graph["grad_pairs"]:
            ref = gp["grad"]
            name, k = (ref, 0) if isinstance(ref, str) else (ref["node"], ref["output"])
            self.assertEqual(shapes[name][k], shapes[gp["param"]][0], gp["param"])

    def test_multi_output_refs(self):
        split = [n for n in self.graph["nodes"] if n.get("op") == "split.Tensor"]
        self.assertEqual(len(split[0]["outputs"]), 2)
        refs = [i for n in self.graph["nodes"] for i in n.get("inputs", [])
                if isinstance(i, dict) and i["node"] == split[0]["name"]]
        self.assertEqual(sorted(r["output"] for r in refs), [0, 1])

    def test_matches_checked_in_fixture(self):
        # Same torch as the one that produced the fixture -> same graph (modulo source lines).
        from _paths import FIXTURES
        with open(os.path.join(FIXTURES, "llama2l.graph.json"), encoding="utf-8") as f:
            fixture = json.load(f)
        strip = lambda g: [{k: v for k, v in n.items() if k != "source"}  # noqa: E731
                           for n in g["nodes"]]
        if torch.__version__.split("+")[0].startswith("1.13"):
            self.assertEqual(strip(fixture), strip(self.graph))
        else:  # other releases decompose differently; only the parameters must agree
            p = lambda g: [n for n in strip(g) if n["kind"] == "parameter"]  # noqa: E731
            self.assertEqual(p(fixture), p(self.graph))


@unittest.skipIf(torch is None, "PyTorch not installed")
class LazyFxGraphTest(unittest.TestCase):
    """The dispatch recorder keeps a plain node list; the FX graph is built from it on first
    use of `.graph`, with the same nodes, and exporting either gives the same graph."""

    def test_export_from_the_list_equals_export_from_fx(self):
        import operator

        from autoshard.tracer.dispatch_trace import TraceNode
        from autoshard.tracer.examples.llama import llama_tiny
        from autoshard.tracer.export import to_graph_dict
        from autoshard.tracer.trace import trace_training_step

        model, inputs, loss_fn, targets = llama_tiny(batch=2, seq=32, dtype="bf16")
        traced = trace_training_step(model, inputs, loss_fn, targets, mark_outputs=True)
        self.assertFalse(traced.gm.has_fx_graph)
        from_list = to_graph_dict(traced, "m")
        self.assertFalse(traced.gm.has_fx_graph)  # planning never needs the FX graph
        recorded = list(traced.gm.trace_nodes)
        fx_nodes = list(traced.gm.graph.nodes)  # built now
        self.assertTrue(traced.gm.has_fx_graph)
        self.assertEqual([n.name for n in fx_nodes], [n.name for n in recorded])
        self.assertEqual([(n.op, n.target) for n in fx_nodes],
                         [(n.op, n.target) for n in recorded])
        fx_of = dict(zip(recorded, fx_nodes))
        for r, f in zip(recorded, fx_nodes):
            self.assertEqual(f.all_input_nodes, [fx_of[i] for i in r.all_input_nodes], r.name)
            self.assertEqual(f.meta, r.meta, r.name)
        self.assertTrue(any(n.target is operator.getitem for n in recorded))
        self.assertTrue(all(isinstance(n, TraceNode) for n in recorded))
        self.assertEqual(to_graph_dict(traced, "m"), from_list)  # now read from the FX graph
        # The marks the tracer reports name nodes of both.
        names = {n.name for n in recorded}
        self.assertTrue(traced.output_nodes and set(traced.output_nodes) <= names)
        self.assertIn(traced.loss_tangent, names)
        # The FX graph is a runnable GraphModule's graph.
        gm = torch.fx.GraphModule(traced.gm, traced.gm.graph)
        out = gm(*traced.flat_args)
        self.assertEqual(len(out), 1 + len(traced.grad_params))

    def test_names_are_fx_namespace_names(self):
        """The recorder's fast namer gives exactly what FX's namespace gives, for plain op
        names and for the candidates FX renames (suffixes, keywords, builtins, bad chars)."""
        from torch.fx.graph import _Namespace

        from autoshard.tracer.dispatch_trace import _Names

        candidates = ["mm", "mm", "mm_1", "mm", "arg0", "arg0", "getitem", "getitem_2",
                      "getitem", "getitem", "_tensor_constant0", "add_", "add", "list", "for",
                      "1abc", "a.b", "", "output", "mm_1", "sum_1", "sum", "sum", "add_1"]
        fx, ours = _Namespace(), _Names()
        self.assertEqual([ours.create(c) for c in candidates],
                         [fx.create_name(c, None) for c in candidates])


@unittest.skipIf(torch is None or torchvision is None, "PyTorch/torchvision not installed")
class ResNetTraceTest(unittest.TestCase):
    def test_resnet18(self):
        from autoshard.tracer import export_training_graph
        from autoshard.tracer.examples.resnet import resnet18

        model, inputs, loss_fn, targets = resnet18(batch=2, image_size=64)
        g = export_training_graph(model, inputs, loss_fn, targets=targets)
        check_graph(self, g)
        ops = [n.get("op") for n in g["nodes"]]
        self.assertEqual(ops.count("convolution"), 20)
        self.assertEqual(ops.count("convolution_backward"), 20)
        self.assertEqual(ops.count("native_batch_norm"), 20)
        self.assertEqual(sum(1 for n in g["nodes"] if n["kind"] == "parameter"), 62)
        self.assertEqual(sum(1 for n in g["nodes"] if n["kind"] == "buffer"), 60)
        conv1 = next(n for n in g["nodes"] if n.get("op") == "convolution")
        self.assertEqual(conv1["outputs"][0]["shape"], [2, 64, 32, 32])
        self.assertEqual(conv1["attrs"]["stride"], [2, 2])
        # the first conv has no bias: its backward marks grad_bias as not produced
        cb = [n for n in g["nodes"] if n.get("op") == "convolution_backward"][-1]
        self.assertEqual(cb["outputs"][2], {"shape": [0], "dtype": "f32", "none": True})


@unittest.skipIf(torch is None, "PyTorch not installed")
class VitTraceTest(unittest.TestCase):
    def test_vit_tiny(self):
        from autoshard.tracer import export_training_graph
        from autoshard.tracer.examples.vit import vit_tiny

        model, inputs, loss_fn, targets = vit_tiny()
        g = export_training_graph(model, inputs, loss_fn, targets=targets)
        check_graph(self, g)
        ln = [n for n in g["nodes"] if n.get("op") == "native_layer_norm"]
        self.assertEqual(len(ln), 5)
        self.assertEqual([o["shape"] for o in ln[0]["outputs"]], [[2, 17, 64], [2, 17, 1],
                                                                  [2, 17, 1]])


@unittest.skipIf(torch is None, "PyTorch not installed")
class ConventionsTest(unittest.TestCase):
    def trace(self, model, inputs, loss_fn=None, targets=None):
        from autoshard.tracer import export_training_graph
        g = export_training_graph(model, inputs, loss_fn, targets=targets)
        check_graph(self, g)
        return g

    def test_attrs_and_op_names(self):
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = nn.Parameter(torch.empty(1, 8))

            def forward(self, x):
                y = torch.cat([x, x * 2.0], dim=1)          # cat: tensors list, mul.Scalar
                y = y.pow(3).sum(dim=1, keepdim=True)        # pow.Tensor_Scalar, sum.dim_IntList
                y = y.masked_fill(y > 0, float("-inf"))      # non-finite attr
                return (y.to(torch.float16) @ self.w.half()).float()

        g = self.trace(M(), torch.empty(4, 2, device="meta"))
        by_op = {}
        for n in g["nodes"]:
            by_op.setdefault(n.get("op"), n)
        self.assertEqual(by_op["cat"]["attrs"], {"tensors_count": 2, "dim": 1})
        self.assertEqual(len(by_op["cat"]["inputs"]), 2)
        self.assertEqual(by_op["mul.Tensor" if "mul.Tensor" in by_op else "mul.Scalar"]
                         ["attrs"].get("other", 2.0), 2.0)
        self.assertEqual(by_op["pow.Tensor_Scalar"]["attrs"]["exponent"], 3)
        self.assertEqual(by_op["sum.dim_IntList"]["attrs"], {"dim": [1], "keepdim": True})
        fill = next(n for n in g["nodes"] if n.get("op", "").startswith("masked_fill"))
        self.assertEqual(fill["attrs"]["value"], {"float": "-inf"})
        self.assertIn("_to_copy", by_op)
        self.assertEqual(by_op["_to_copy"]["attrs"]["dtype"], "f16")
        self.assertEqual(by_op["mm"]["outputs"][0]["dtype"], "f16")
        self.assertNotIn("device", by_op["_to_copy"]["attrs"])

    def test_keyword_inputs_frozen_params_and_default_loss(self):
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(8, 8)
                self.b = nn.Linear(8, 8)
                self.b.weight.requires_grad_(False)
                self.unused = nn.Linear(2, 2)

            def forward(self, x, scale=None):
                return self.b(self.a(x)) * scale

        from autoshard.tracer import export_training_graph
        g = export_training_graph(M(), {"x": torch.empty(3, 8), "scale": torch.empty(3, 8)})
        self.assertEqual(validate_graph(g), [])
        names = {n["name"]: n for n in g["nodes"]}
        self.assertEqual(names["x"]["kind"], "input")
        self.assertEqual(names["scale"]["kind"], "input")
        self.assertEqual(names["b.weight"]["kind"], "parameter")  # frozen: no gradient
        with_grad = {p["param"] for p in g["grad_pairs"]}
        self.assertEqual(with_grad, {"a.weight", "a.bias", "b.bias"})

    def test_index_with_holes_and_tensor_constants(self):
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = nn.Parameter(torch.empty(4, 6, 8))

            def forward(self, x, idx):
                c = torch.tensor([float(i) for i in range(8)], device=x.device)
                return self.w[:, idx] * x * c

        g = self.trace(M(), (torch.empty(4, 3, 8), torch.zeros(3, dtype=torch.long)))
        index = next(n for n in g["nodes"] if n.get("op") == "index.Tensor")
        self.assertEqual(index["attrs"], {"indices_count": 1, "indices_positions": [1]})
        self.assertEqual(index["inputs"][1], "idx")
        consts = [n for n in g["nodes"] if n["kind"] == "buffer"]
        self.assertEqual(len(consts), 1)  # one node although forward and backward both use it
        self.assertEqual(consts[0]["outputs"], [{"shape": [8], "dtype": "f32"}])

    def test_non_tensor_outputs(self):
        from autoshard.tracer.export import _constant, _metas
        t = torch.empty(2, 3, device="meta")
        self.assertEqual(_metas((t, None, 5)), [([2, 3], torch.float32), None, None])
        self.assertEqual(_constant(_metas(7)), (True, 7))
        self.assertEqual(_constant(_metas(t))[0], False)

    def test_real_cpu_model_is_moved_to_meta(self):
        g = self.trace(nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 1)),
                       (torch.randn(4, 8),))
        self.assertEqual(sum(1 for n in g["nodes"] if n["kind"] == "parameter"), 4)

    def test_written_file_roundtrips(self):
        from autoshard.tracer import export_training_graph
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "g.graph.json")
            g = export_training_graph(nn.Linear(4, 4), torch.empty(2, 4), None, path)
            with open(path, encoding="utf-8") as f:
                self.assertEqual(json.load(f), g)


@unittest.skipIf(torch is None, "PyTorch not installed")
class MetaInitTest(unittest.TestCase):
    def test_llama3_8b_builds_without_weights(self):
        from autoshard.tracer.examples.llama import llama3_8b
        from autoshard.tracer.meta_init import param_bytes_allocated

        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        model, (tokens,), _, _ = llama3_8b(batch=8, seq=2048)
        n = sum(p.numel() for p in model.parameters())
        self.assertGreater(n, 8.0e9)
        self.assertLess(n, 8.1e9)
        self.assertEqual(param_bytes_allocated(model), 0)
        self.assertTrue(tokens.is_meta)
        grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        self.assertLess(grown_mb, 500)

    def test_llama3_8b_two_layers_trace(self):
        # Full 8B dimensions (vocab 128256, ffn 14336), 2 layers to keep the test fast.
        from autoshard.tracer import export_training_graph
        from autoshard.tracer.examples.llama import llama

        model, inputs, loss_fn, targets = llama(batch=8, seq=2048, layers=2)
        g = export_training_graph(model, inputs, loss_fn, targets=targets)
        check_graph(self, g)
        emb = next(n for n in g["nodes"] if n["name"] == "tok_embeddings.weight")
        self.assertEqual(emb["outputs"][0], {"shape": [128256, 4096], "dtype": "bf16"})

    def test_meta_device_context(self):
        from autoshard.tracer.meta_init import meta_device
        with meta_device():
            lin = nn.Linear(1 << 15, 1 << 15)  # 4 GiB if it were real
            t = torch.zeros(3)
        self.assertTrue(lin.weight.is_meta)
        self.assertTrue(t.is_meta)
        self.assertFalse(torch.zeros(1).is_meta)  # context is gone


@unittest.skipIf(torch is None, "PyTorch not installed")
class CliTest(unittest.TestCase):
    def run_cli(self, argv):
        from autoshard.tracer.cli import main
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            rc = main(argv)
        return rc, out.getvalue(), err.getvalue()

    def test_module_factory(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "v.graph.json")
            rc, out, _ = self.run_cli(["autoshard.tracer.examples.vit:vit_tiny", "--batch", "2",
                                       "--name", "vit", "-o", path])
            self.assertEqual(rc, 0)
            self.assertIn("nodes", out)
            with open(path, encoding="utf-8") as f:
                g = json.load(f)
            self.assertEqual(g["name"], "vit")
            check_graph(self, g)

    def test_file_factory_returning_model_and_inputs(self):
        src = textwrap.dedent('''
            import torch, torch.nn as nn

            def make(batch=4, seq=16):
                model = nn.Sequential(nn.Embedding(100, 32), nn.Linear(32, 100))
                return model, (torch.zeros(batch, seq, dtype=torch.long),)

            class Tiny(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.lin = nn.Linear(8, 8)
                def forward(self, x):
                    return self.lin(x)
                def example_inputs(self, batch=2):
                    return (torch.empty(batch, 8),)

            def model_only():
                return Tiny()
        ''')
        with tempfile.TemporaryDirectory() as d:
            mod = os.path.join(d, "user_model.py")
            with open(mod, "w", encoding="utf-8") as f:
                f.write(src)
            out_path = os.path.join(d, "g.json")
            rc, _, _ = self.run_cli([f"{mod}:make", "--batch", "3", "--seq", "5",
                                     "--dtype", "bf16", "-o", out_path])
            self.assertEqual(rc, 0)
            with open(out_path, encoding="utf-8") as f:
                g = json.load(f)
            check_graph(self, g)
            inp = next(n for n in g["nodes"] if n["kind"] == "input")
            self.assertEqual(inp["outputs"][0], {"shape": [3, 5], "dtype": "i64"})
            w = next(n for n in g["nodes"] if n["kind"] == "parameter")
            self.assertEqual(w["outputs"][0]["dtype"], "bf16")

            rc, _, err = self.run_cli([f"{mod}:model_only", "--batch", "5", "--seq", "7",
                                       "-o", out_path])
            self.assertEqual(rc, 0)
            self.assertIn("seq", err)  # told that the factory ignores --seq
            with open(out_path, encoding="utf-8") as f:
                g = json.load(f)
            inp = next(n for n in g["nodes"] if n["kind"] == "input")
            self.assertEqual(inp["outputs"][0]["shape"], [5, 8])


if __name__ == "__main__":
    unittest.main()
