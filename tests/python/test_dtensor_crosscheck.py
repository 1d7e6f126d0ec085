"""autoshard's DTensor profile and strategy lists against torch 2.13's own code.

Cost: `autoshard cost --cases FILE --comm-model dtensor` against
torch.distributed.tensor._collective_utils.redistribute_cost under a fake process group, on
random cases.  Tolerance 1e-9 relative: both sides evaluate the same closed form in binary64
and differ only in the order of the scalings (bytes / num_shards, / 1024^3, * n), i.e. a few ulp
(~1e-15); the smallest term either model could get wrong, one 0.6 us hop against costs below
~1e6 us, is 6e-7 relative, so 1e-9 separates rounding from a modelling difference.
"""
import math
import unittest

from _paths import PYTHON_DIR  # noqa: F401  (sets sys.path)

try:
    import torch
    import _dtensor_ref as ref
except ImportError:  # pragma: no cover
    torch = None

REL_TOL = 1e-9
N_CASES = 300


@unittest.skipIf(torch is None, "PyTorch not installed")
class RedistributeCostCrossCheck(unittest.TestCase):
    def setUp(self):
        self.binary = ref.autoshard_binary()
        if self.binary is None:
            self.skipTest("autoshard binary not built (set AUTOSHARD_BIN)")

    def assert_agree(self, cases):
        ours = ref.autoshard_costs(self.binary, cases)
        self.assertEqual(len(ours), len(cases))
        bad = []
        for case, got in zip(cases, ours):
            want = ref.torch_cost(case)
            if math.isinf(want) or got is None:
                if not (math.isinf(want) and got is None):
                    bad.append((case, got, want))
            elif not math.isclose(got, want, rel_tol=REL_TOL, abs_tol=1e-12):
                bad.append((case, got, want))
        self.assertEqual(bad, [], f"{len(bad)} of {len(cases)} disagree (case, ours, torch)")

    def test_torch_version_pinned(self):
        # The DTensor profile reproduces 2.13's walk (src/cost/redistribute.h); another release
        # may price some transitions differently.
        self.assertTrue(torch.__version__.startswith("2.13"), torch.__version__)

    def test_random_cases(self):
        cases = ref.random_cases(N_CASES)
        self.assertGreaterEqual(len({c.mesh for c in cases}), 20)
        self.assertTrue(any(len(c.mesh) == 3 for c in cases))
        impossible = [c for c in cases if math.isinf(ref.torch_cost(c))]
        self.assertGreater(len(impossible), 10)           # S -> P and P(x) -> P(y) are covered
        self.assertGreater(len(cases) - len(impossible), 200)  # and 200+ finite ones
        self.assert_agree(cases)

    def test_reference_table(self):
        # ../shared/reference/cost-model.md section 1 validation rows, and nested sharding,
        # where the walk order matters.
        cases = [ref.Case((8,), 8, (8192, 4096), "bf16", "S(0)", "R"),
                 ref.Case((8,), 8, (8192, 4096), "bf16", "P(sum)", "R"),
                 ref.Case((8,), 8, (8192, 4096), "bf16", "P(sum)", "S(0)"),
                 ref.Case((2, 4), 8, (64, 64), "f32", "S(0)S(0)", "RS(0)"),
                 ref.Case((2, 4), 4, (64, 64), "f32", "S(0)P(sum)", "RR"),
                 ref.Case((2, 2, 2), 2, (64, 64), "f32", "S(1)S(0)S(1)", "S(0)S(1)R")]
        self.assertAlmostEqual(ref.torch_cost(cases[0]), 634.375, places=2)
        self.assertAlmostEqual(ref.torch_cost(cases[1]), 1262.149, places=2)
        self.assert_agree(cases)


if __name__ == "__main__":
    unittest.main()
