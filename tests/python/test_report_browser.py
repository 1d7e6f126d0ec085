"""report.html in a real browser: Debian's chromium driven by playwright.

`autoshard plan -o DIR --json` writes DIR/report.html and prints the plan's JSON; the page,
opened from file:// with no network, must render without console errors, show the JSON's
figures (parameter count, simulated and additive step time, one row per parameter), show a
strategy table when a graph node is clicked, and filter the node table from its search box.

Also usable as a script to screenshot a report: python test_report_browser.py REPORT PNG.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
]


def autoshard_bin() -> str:
    """The CLI binary: AUTOSHARD_BIN (set by CTest), else build/autoshard."""
    return os.environ.get("AUTOSHARD_BIN") or str(ROOT / "build" / "autoshard")


def open_browser(playwright: Any, user_data_dir: str) -> Any:
    """A persistent context on a fresh profile directory (chromium's --user-data-dir)."""
    return playwright.chromium.launch_persistent_context(
        user_data_dir,
        executable_path=CHROMIUM,
        headless=True,
        args=CHROMIUM_ARGS,
        viewport={"width": 1400, "height": 1000},
    )


def screenshot(report: str, png: str, full_page: bool = False) -> None:
    """Saves a screenshot of a report page (used for docs/report-llama3-8b.png)."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as profile, sync_playwright() as p:
        ctx = open_browser(p, profile)
        page = ctx.new_page()
        page.goto(Path(report).resolve().as_uri())
        page.wait_for_selector("body[data-ready='1']", timeout=60_000)
        page.screenshot(path=png, full_page=full_page)
        ctx.close()


ISLAND = "layers.1.feed_forward"


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory, core: Any) -> dict:
    """A 2-layer llama3-1b planned on 2x2, its graph marking one MLP as an eager island."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is not installed")
    pytest.importorskip("playwright")
    binary = autoshard_bin()
    if not os.path.exists(binary):
        pytest.fail(f"no autoshard binary at {binary} (set AUTOSHARD_BIN)")
    out = tmp_path_factory.mktemp("report")
    graph = json.loads(core.Graph.builtin("llama3-1b", batch=2, seq=128, layers=2).to_json())
    graph["islands"] = [{"module": ISLAND, "sources": ["moe.py:12"]}]
    (out / "graph.json").write_text(json.dumps(graph))
    res = subprocess.run(
        [binary, "plan", "--graph", str(out / "graph.json"),
         "--mesh", "2x2", "--mesh-dims", "dp,tp", "--time-limit", "30", "--json", "-o", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stderr
    return {"dir": out, "json": json.loads(res.stdout)}


@pytest.fixture(scope="module")
def playwright_api() -> Iterator[Any]:
    """One playwright instance for the module (the sync API cannot be nested)."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is not installed")
    pytest.importorskip("playwright")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def page(planned: dict, playwright_api: Any) -> Iterator[Any]:
    errors: list[str] = []
    with tempfile.TemporaryDirectory() as profile:
        ctx = open_browser(playwright_api, profile)
        pg = ctx.new_page()
        pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        pg.on("pageerror", lambda e: errors.append(str(e)))
        # Any request other than the file itself would be network access.
        requests: list[str] = []
        pg.on("request", lambda r: requests.append(r.url))
        url = (planned["dir"] / "report.html").as_uri()
        pg.goto(url)
        pg.wait_for_selector("body[data-ready='1']", timeout=60_000)
        pg.errors = errors  # type: ignore[attr-defined]
        pg.requests = [u for u in requests if u != url]  # type: ignore[attr-defined]
        yield pg
        ctx.close()


def test_no_console_errors_and_no_network(page: Any) -> None:
    assert page.errors == []
    assert [u for u in page.requests if not u.startswith("data:")] == []


def test_figures_equal_the_json(page: Any, planned: dict) -> None:
    j = planned["json"]
    params = j["parameters"]
    assert int(page.get_attribute("#param-count", "data-count")) == len(params)
    step = float(page.get_attribute("#sim-step", "data-us"))
    assert step == pytest.approx(j["simulation"]["step_us"], rel=1e-6, abs=1e-3)
    additive = float(page.get_attribute("#additive", "data-us"))
    assert additive == pytest.approx(j["additive_us"], rel=1e-6, abs=1e-3)
    assert page.inner_text("#status").startswith(j["status"])
    # One row per parameter, in the JSON's order, with its placement.
    rows = page.eval_on_selector_all(
        "#param-table tbody tr", "rs => rs.map(r => Array.from(r.cells).map(c => c.textContent))")
    assert [r[0] for r in rows] == [p["name"] for p in params]
    assert [r[2] for r in rows] == [p["placement"] for p in params]


def test_eager_islands_are_named(page: Any) -> None:
    """The graph's eager island is listed under the cards, with its source line."""
    text = page.inner_text("#islands")
    assert f"eager island: {ISLAND}" in text and "moe.py:12" in text, text


def test_clicking_a_node_shows_its_strategy_table(page: Any) -> None:
    node = page.locator("#block-svg g.node[id^='n']").first
    node_id = node.get_attribute("id")
    node.click()
    page.wait_for_selector("#strategy-table tbody tr")
    assert page.locator("#strategy-table tbody tr").count() >= 1
    assert page.locator("#strategy-table tbody tr.chosen").count() == 1
    title = page.inner_text("#strategy-title")
    name = page.eval_on_selector(f"#block-svg g#{node_id} text", "t => t.textContent")
    assert title.startswith(name)


def test_search_filters_the_node_table(page: Any, planned: dict) -> None:
    total_text = page.inner_text("#node-table-count")
    total = int(total_text.split(" of ")[1].split()[0])
    query = "attention.wq"
    page.fill("#node-table-search", query)
    text = page.inner_text("#node-table-count")
    shown = int(text.split(" of ")[0])
    assert 0 < shown < total
    cells = page.eval_on_selector_all(
        "#node-table tbody tr", "rs => rs.map(r => r.textContent.toLowerCase())")
    assert cells and all(query in c for c in cells)
    page.fill("#node-table-search", "")
    assert page.inner_text("#node-table-count") == total_text


def test_pipeline_page_draws_every_op_of_the_schedule(tmp_path: Path, playwright_api: Any) -> None:
    """A pipelined plan's page: the stage table and one rectangle per forward and backward of
    every stage and microbatch (the backward drawn as B and W where the schedule splits it),
    drawn without console errors."""
    res = subprocess.run(
        [autoshard_bin(), "plan", "--model", "llama3-1b", "--layers", "4", "--batch", "4",
         "--seq", "128", "--mesh", "2x2", "--mesh-dims", "pp,dp", "--microbatches", "4",
         "--json", "-o", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stderr
    j = json.loads(res.stdout)
    stages = len(j["stages"])
    errors: list[str] = []
    with tempfile.TemporaryDirectory() as profile:
        ctx = open_browser(playwright_api, profile)
        pg = ctx.new_page()
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.goto((tmp_path / "report.html").as_uri())
        pg.wait_for_selector("body[data-ready='1']", timeout=60_000)
        assert pg.locator("#pipeline-table tbody tr").count() == stages
        titles = pg.eval_on_selector_all(
            "#pipeline-svg rect title", "ts => ts.map(t => t.textContent)")
        ctx.close()
    assert errors == []
    # Zero-bubble schedules split each backward into an input-gradient B and a weight-gradient W.
    splits = j["schedule"] in ("InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")
    per_op = 3 if splits else 2
    assert len(titles) == per_op * stages * j["microbatches"]
    weights = sum(t.startswith("W ") for t in titles)
    assert weights == (stages * j["microbatches"] if splits else 0)


def test_screenshot(page: Any, tmp_path: Path) -> None:
    png = tmp_path / "report.png"
    page.screenshot(path=str(png), full_page=False)
    assert png.stat().st_size > 10_000


if __name__ == "__main__":
    screenshot(sys.argv[1], sys.argv[2])
