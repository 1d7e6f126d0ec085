"""The documentation runs: every shell and Python block of README.md and docs/*.md runs, every
relative link of those pages and python/README.md resolves, and the API reference builds.

Each page runs in its own temporary directory, laid out like a built checkout: `build/autoshard`
(AUTOSHARD_BIN), `build/venv` (this interpreter's venv), `build/_core*.so` (AUTOSHARD_CORE) and
links to the repository's python/, examples/, tests/, bench/, scripts/ and docs/, so that a block
writes its outputs there and never into the tree.  The page's fenced blocks run in order:
consecutive ```sh blocks as one `bash -euo pipefail` script, consecutive ```python blocks as one
Python process (later blocks see the names of earlier ones).  Other fences (json, cpp, text) are
not run unless marked as a file.  An HTML comment on the line before a fence changes what
happens to it:

    <!-- docs-test: skip (why) -->                 not run
    <!-- docs-test: file NAME -->                  written to NAME (for a later block to use)
    <!-- docs-test: replace "OLD" "NEW" (why) -->  run with OLD replaced by NEW (tiny sizes)

A skip or a replacement must say why.  docs/benchmarks.md is a record of measurements whose
commands take minutes: its links are checked, its blocks are not run.
"""
from __future__ import annotations

import glob
import os
import re
import resource
import shlex
import subprocess
import sys
import time

import pytest

from conftest import PYTHON_DIR, ROOT

NOT_RUN = {"docs/benchmarks.md"}
PAGES = ["README.md"] + sorted(os.path.relpath(p, ROOT)
                               for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
RUN_PAGES = [p for p in PAGES if p not in NOT_RUN]
LINK_PAGES = PAGES + ["python/README.md"]
SHELL = {"sh", "bash", "shell"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                   re.S | re.M)
MARKER = re.compile(r"<!--\s*docs-test:\s*(?P<kind>\w+)\s*(?P<args>.*?)\s*-->")
LINKED_DIRS = ("python", "examples", "tests", "bench", "scripts", "docs", "src")


class Block:
    def __init__(self, page: str, line: int, lang: str, body: str, marker):
        self.page, self.line, self.lang, self.body = page, line, lang, body
        self.kind = marker.group("kind") if marker else "run"
        self.args = marker.group("args") if marker else ""

    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: str) -> list[Block]:
    """The fenced blocks of a page, with the docs-test marker each one carries."""
    text = open(os.path.join(ROOT, page), encoding="utf-8").read()
    out = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.search(before)
        indent = m.group("indent")
        body = "\n".join(line[len(indent):] if line.startswith(indent) else line
                         for line in m.group("body").split("\n"))
        out.append(Block(page, text.count("\n", 0, m.start()) + 1, m.group("lang"), body, marker))
    return out


def prepared(block: Block) -> str | None:
    """The block's code as the test runs it, or None when it is not run."""
    if block.kind == "skip":
        assert re.fullmatch(r"\(.+\)", block.args), f"{block.where()}: a skip says why: (...)"
        return None
    if block.kind == "replace":
        parts = shlex.split(block.args.split("(", 1)[0])
        assert "(" in block.args and len(parts) >= 2 and len(parts) % 2 == 0, \
            f"{block.where()}: replace \"OLD\" \"NEW\" ... (why)"
        code = block.body
        for old, new in zip(parts[::2], parts[1::2]):
            assert old in code, f"{block.where()}: replace: {old!r} is not in the block"
            code = code.replace(old, new)
        return code
    assert block.kind in ("run", "file"), f"{block.where()}: unknown marker {block.kind}"
    return block.body


def workdir(tmp_path, cli: str) -> str:
    """A temporary directory laid out like a built checkout (see the module's docstring)."""
    work = tmp_path / "work"
    build = work / "build"
    build.mkdir(parents=True)
    os.symlink(cli, build / "autoshard")
    venv = os.path.dirname(os.path.dirname(sys.executable))
    if os.path.exists(os.path.join(venv, "pyvenv.cfg")):
        os.symlink(venv, build / "venv")
    else:
        (build / "venv" / "bin").mkdir(parents=True)
        os.symlink(sys.executable, build / "venv" / "bin" / "python")
    core = os.environ.get("AUTOSHARD_CORE")
    if core:
        os.symlink(core, build / os.path.basename(core))
    for d in LINKED_DIRS:
        os.symlink(os.path.join(ROOT, d), work / d)
    return str(work)


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_page(page: str, work: str, env: dict) -> None:
    groups: list[tuple[str, list[Block], list[str]]] = []  # (kind, blocks, code), in order
    for b in blocks(page):
        lang = "sh" if b.lang in SHELL else b.lang
        if lang not in ("sh", "python") and b.kind != "file":
            continue
        code = prepared(b)
        if code is None:
            continue
        if b.kind == "file":
            name = b.args.strip()
            assert name and "/" not in name.strip("./"), f"{b.where()}: file NAME"
            groups.append(("file:" + name, [b], [code]))
        elif groups and groups[-1][0] == lang:
            groups[-1][1].append(b)
            groups[-1][2].append(code)
        else:
            groups.append((lang, [b], [code]))
    for kind, group, codes in groups:
        where = ", ".join(b.where() for b in group)
        if kind.startswith("file:"):
            with open(os.path.join(work, kind[5:]), "w", encoding="utf-8") as f:
                f.write(codes[0])
            continue
        if kind == "sh":
            cmd = ["bash", "-euo", "pipefail", "-c", "\n".join(codes)]
        else:
            cmd = [sys.executable, "-c", "\n".join(codes)]
        t, cpu = time.monotonic(), _children_cpu()
        r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=300)
        print(f"\n{where}: {time.monotonic() - t:.1f} s wall, {_children_cpu() - cpu:.1f} s CPU")
        assert r.returncode == 0, (f"{where} failed ({r.returncode}):\n--- stdout\n"
                                   f"{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-3000:]}")


@pytest.mark.parametrize("page", RUN_PAGES)
def test_page_blocks_run(page, core, cli_bin, tmp_path):
    pytest.importorskip("torch")
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, AUTOSHARD_BIN=os.path.abspath(cli_bin),
               OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    run_page(page, workdir(tmp_path, os.path.abspath(cli_bin)), env)


def test_markers_are_few_and_justified():
    """Every marker is well formed; skips stay few (each one is a command nobody runs here)."""
    skips = []
    for page in RUN_PAGES:
        for b in blocks(page):
            prepared(b)
            if b.kind == "skip":
                skips.append(b.where())
    assert len(skips) <= 6, skips


def test_readme_is_short_and_starts_with_the_setup():
    lines = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().split("\n")
    assert len(lines) <= 151, len(lines)  # 150 lines and the final newline
    first = next(b for b in blocks("README.md"))
    assert first.body.split("\n")[0].startswith("scripts/run.sh"), first.body
    assert first.body.split("\n")[1].startswith("scripts/test.sh"), first.body


LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    h = re.sub(r"[`*_]", "", heading.strip().lower())
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(path: str) -> set:
    text = open(path, encoding="utf-8").read()
    text = FENCE.sub("", text)
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


@pytest.mark.parametrize("page", LINK_PAGES)
def test_relative_links_resolve(page):
    base = os.path.dirname(os.path.join(ROOT, page))
    text = FENCE.sub("", open(os.path.join(ROOT, page), encoding="utf-8").read())
    bad = []
    for m in LINK.finditer(text):
        target = m.group(1) or m.group(2)
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(base, path)) if path else os.path.join(ROOT, page)
        if not os.path.exists(full):
            bad.append(f"{target}: no such file")
        elif anchor and full.endswith(".md") and anchor not in anchors(full):
            bad.append(f"{target}: no heading with that anchor")
    assert not bad, f"{page}: " + "; ".join(bad)


def test_api_reference_builds(core, cli_bin, tmp_path):
    """scripts/api_docs.sh: the docstring check, pdoc's pages of every public module and the
    CLI reference (the C++ part needs doxygen, which the test machine may lack)."""
    pytest.importorskip("pdoc", reason="scripts/venv.sh installs pdoc")
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import check_docstrings

    out = tmp_path / "api"
    env = dict(os.environ, AUTOSHARD_PYTHON=sys.executable, AUTOSHARD_BIN=os.path.abspath(cli_bin))
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "api_docs.sh"), str(out)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for name in check_docstrings.PUBLIC_MODULES:
        page = out / "python" / (name.replace(".", "/") + ".html")
        assert page.stat().st_size > 1000, page
    cli = (out / "cli.md").read_text()
    for cmd in ("plan", "show", "explain", "pin", "diff", "export", "cost", "search"):
        assert f"## autoshard {cmd}\n" in cli, cmd
    assert "--memory-limit" in cli
