"""autoshard.checkpoint: sharded save/load (torch.distributed.checkpoint) across plans, full
state dicts in and out, on CPU with gloo (127.0.0.1).

The models of test_apply.py: the 2-layer LLaMA-style model on 2 ranks (mesh 2, dim dp: plan A
is FSDP, plan B DP) and the 3-layer MLP on 4 ranks (mesh 2x2, dims dp,tp: plan A is FSDP2 over
TP, `--algo fsdp+tp --shard-orders`, its column weights strided `_S(0,2)S(0)`; plan B Megatron
TP over tp), the others pinned with `autoshard plan --pin`.  Per rank:
  * plan A trains 2 AdamW steps, is saved (twice: the second replaces the first) and trains 2
    more; the checkpoint read whole (read_full_state_dict) equals plan A's full state; a
    plan-B module with a fresh AdamW and other initial weights loads the checkpoint
    and trains 2 steps: its losses match the uninterrupted run's to 1e-5 relative; the plan-A
    module reloaded and run on matches bitwise;
  * the MLP's state_dict loaded into a module (plan B on 2 ranks, the strided plan A on 2x2;
    load_full_state_dict), one step, exported with full_state_dict: equal to the eager
    single-process step to 1e-5, and loads into the plain model;
  * a parameter whose strided pieces are two blocks of rows each (`_S(0,2)` on dp) saved,
    read whole, and loaded into the default order and into its own layout: every element in
    place;
  * refused inputs (missing, unexpected key, wrong shape, Partial parameter, a checkpoint of
    another model) raise CheckpointError naming the key.
Without the autoshard binary only the single-process tests run.
"""
import functools
import os
import shutil
import tempfile

import pytest

from _paths import PYTHON_DIR  # noqa: F401  (sets sys.path)

torch = pytest.importorskip("torch")

import _apply_worker as W  # noqa: E402
import _checkpoint_worker as CW  # noqa: E402
import _dtensor_ref  # noqa: E402

TOL = 1e-5
#: Plan A of the 2x2 mesh: torchtitan's FSDP2 over TP, column weights `_S(0,2)S(0)`.
STRIDED_RECIPE = ["--algo", "fsdp+tp", "--shard-orders"]
TIMEOUT_S = 240  # per launch; workers are killed past it

#: name -> (world, mesh, dims, the model of the resume case).  The 2x2 mesh resumes the MLP:
#: applying a plan to the LLaMA model takes ~15 s per module on 4 ranks sharing 2 cores.
MESHES = {
    "dp2": (2, [2], ["dp"], "llama"),
    "dp2xtp2": (4, [2, 2], ["dp", "tp"], "mlp"),
}


def _plans(binary: str, key: str, mesh, dims, tmp: str) -> tuple[dict, dict]:
    """(plan A, plan B) placements: FSDP, then DP (1-D mesh) or Megatron TP (2-D mesh)."""
    graph = W.trace(key)[1]
    tp = "tp" in dims
    dp_in = "S(0)R" if tp else "S(0)"
    shard = "S(0)R" if tp else "S(0)"
    rep = "RR" if tp else "R"
    fsdp = W.input_pins(graph, dp_in) + W.param_pins(
        graph, lambda n, s: shard if s[0] % 2 == 0 else rep)
    if tp:
        other = W.input_pins(graph, dp_in) + W.param_pins(
            graph, lambda n, s: "R" + W.megatron(n, s))
    else:
        other = W.input_pins(graph, dp_in) + W.param_pins(graph, lambda n, s: rep)
    out = []
    for name, pins in (("a", fsdp), ("b", other)):
        d = os.path.join(tmp, f"plan-{key}-{name}")
        os.makedirs(d)
        if tp and name == "a":  # FSDP2 over TP: strided weights (test_apply.STRIDED_RECIPE)
            out.append(W.plan(binary, graph, mesh, dims, [], d, STRIDED_RECIPE,
                              hardware=W.H100))
        else:
            out.append(W.plan(binary, graph, mesh, dims, pins, d))
    return out[0], out[1]


@pytest.fixture(scope="module", params=sorted(MESHES))
def ranks(request):
    """Per-rank results of one launch on the mesh named by the parameter."""
    binary = _dtensor_ref.autoshard_binary()
    if binary is None:
        pytest.skip("autoshard binary not built (set AUTOSHARD_BIN)")
    world, mesh, dims, model = MESHES[request.param]
    tmp = tempfile.mkdtemp(prefix="autoshard-ckpt-")
    try:
        plan_a, plan_b = _plans(binary, model, mesh, dims, tmp)
        # the MLP's full state dict goes into plan A on 2x2 (strided), plan B (DP) on 2
        mlp_plan = plan_a if model == "mlp" else _plans(binary, "mlp", mesh, dims, tmp)[1]
        job = {"model": model, "plan_a": plan_a, "plan_b": plan_b,
               "full_model": "mlp", "full_plan": mlp_plan}
        run = functools.partial(CW.run_cases, job=job, ckpt_dir=os.path.join(tmp, "ckpt"))
        yield W.launch(world, mesh, dims, run, tmp, TIMEOUT_S)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def test_resume_on_another_plan(ranks):
    for rank, res in enumerate(ranks):
        where = f"rank {rank}"
        changed = [n for n in res["placements_a"]
                   if res["placements_a"][n] != res["placements_b"][n]]
        assert changed, f"{where}: plans A and B lay the parameters out alike"
        assert any("S(" in p for p in res["placements_a"].values()), where
        assert res["info"] == {"step": 2, "extra": {"note": "plan A"},
                               "mesh_shape": ranks[0]["info"]["mesh_shape"], "format": 1}
        assert res["info_placements_ok"], where
        assert res["loaded_differs"] == [], f"{where}: loaded parameters differ from the saved"
        assert res["lr_after_load"] == CW.LR, f"{where}: the saved lr was not restored"
        assert res["leftovers"] == [], f"{where}: save left {res['leftovers']}"
        for i, (got, want) in enumerate(zip(res["b_losses"], res["ref_losses"][2:])):
            assert _rel(got, want) <= TOL, f"{where}: step {i + 3} loss {got} vs {want}"


def test_resume_on_the_same_plan_is_bitwise(ranks):
    for rank, res in enumerate(ranks):
        assert res["a_losses"] == res["ref_losses"][2:], f"rank {rank}"


def test_full_state_dict_round_trip(ranks):
    for rank, res in enumerate(ranks):
        where = f"rank {rank}"
        assert res["full_keys_ok"], where
        assert res["full_plain_types"] == ["Tensor"], where
        assert res["full_aliases"] == [], f"{where}: full_state_dict shares storage"
        assert res["full_loss_err"] <= TOL, where
        for k, e in res["full_param_err"].items():
            assert e <= TOL, f"{where}: {k} after one AdamW step"
        assert res["plain_load_ok"], where


def test_strided_plan_checkpoint_holds_every_element_in_place(ranks):
    strided = [n for n, p in ranks[0]["placements_a"].items() if p.startswith("_S(")]
    if len(ranks) == 4:  # 2x2: plan A holds FSDP2-over-TP weights, loaded into Megatron (B)
        assert "0.weight" in strided and "4.weight" in strided, ranks[0]["placements_a"]
        assert not any("_S(" in p for p in ranks[0]["placements_b"].values())
    for rank, res in enumerate(ranks):
        where = f"rank {rank}"
        assert res["read_full_keys_ok"], where
        assert res["read_full_differs"] == [], f"{where}: the checkpoint read whole differs"
        # a strided piece of two blocks: saved in the default order, every element in place
        assert res["odd_read_full"] == [], where
        assert res["odd_into_default"] == [], where
        assert res["odd_into_odd"] == [], where


def test_module_state_dict_keys_are_the_models(ranks):
    assert ranks[0]["extra_keys"] == []  # LLaMA's non-persistent rope tables stay so


def test_refusals_name_the_key(ranks):
    for rank, res in enumerate(ranks):
        where = f"rank {rank}"
        assert res["err_missing"].startswith("CheckpointError: "), res["err_missing"]
        assert f"'{res['missing_key']}' is missing" in res["err_missing"], where
        assert "unexpected key 'bogus.weight'" in res["err_unexpected"], where
        assert f"'{res['shape_key']}' has shape" in res["err_shape"], where
        assert res["unchanged_after_errors"] == [], where
        assert "'weight' is planned as Partial" in res["err_partial"], where
        assert "save: 'weight' is planned as Partial" in res["err_save_partial"], where
        assert "load: 'weight' is not in the checkpoint" in res["err_ckpt_missing"], where
        for k in ("err_missing", "err_unexpected", "err_shape", "err_partial"):
            assert "\n" not in res[k], f"{where}: {k} is not one line"


# --- single process (no process group, no binary) -------------------------------------------
def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def test_plain_module_save_load_and_full_state_dict(tmp_path):
    from autoshard import checkpoint as C

    model = _mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(3, 4)
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
    path = tmp_path / "ckpt"
    C.save(path, model, opt, step=1)
    C.save(f"{path}/", model, opt, step=1)  # replaces the first
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]
    fresh = _mlp()
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1.0)
    assert C.load(path, fresh, fresh_opt)["step"] == 1
    for (n, p), q in zip(model.named_parameters(), fresh.parameters()):
        assert torch.equal(p, q), n
        assert torch.equal(opt.state[p]["exp_avg"], fresh_opt.state[q]["exp_avg"]), n
    assert fresh_opt.param_groups[0]["lr"] == 1e-2

    full = C.full_state_dict(fresh)
    assert all(full[k].data_ptr() != v.data_ptr() for k, v in fresh.state_dict().items())
    other = _mlp()
    C.load_full_state_dict(other, full)
    assert all(torch.equal(other.state_dict()[k], v) for k, v in full.items())


def test_plain_module_refusals(tmp_path):
    from autoshard import checkpoint as C

    model = _mlp()
    sd = model.state_dict()
    with pytest.raises(C.CheckpointError, match=r"'2\.bias' is missing"):
        C.load_full_state_dict(model, {k: v for k, v in sd.items() if k != "2.bias"})
    with pytest.raises(C.CheckpointError, match=r"'0\.weight' has shape \[8, 5\]"):
        C.load_full_state_dict(model, {**sd, "0.weight": torch.zeros(8, 5)})
    with pytest.raises(FileNotFoundError, match="no checkpoint directory"):
        C.load(tmp_path / "nothing", model)
    C.save(tmp_path / "model-only", model)
    with pytest.raises(C.CheckpointError, match="no optimizer state"):
        C.load(tmp_path / "model-only", model, torch.optim.AdamW(model.parameters()))
    with pytest.raises(C.CheckpointError, match=r"'0\.weight' has shape \[8, 4\] in the "):
        C.load(tmp_path / "model-only", torch.nn.Sequential(
            torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)))
