"""The documentation site builds strictly, offline, and every code block on it runs.

Blocks by language: ``python`` and ``bash`` blocks of a page run in order, in one fresh folder per
page (python blocks share one namespace), unless their first line is ``# not run: REASON``;
``toml`` blocks parse, and a suite among them expands into cells; ``text`` blocks are output or
layout, not code. A block whose first line is ``# FILE`` (``# pyproject.toml``) is a file of the
plugin template, built, installed and run by ``test_plugin_template.py``. Any other language is
an error, so a new block cannot go unchecked.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"^```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.S | re.M)
NOT_RUN = re.compile(r"# not run: \w")
FILE = re.compile(r"# [\w./-]+\.(py|toml)$")
LANGUAGES = {"python", "bash", "toml", "text"}
# a network access fails at once instead of waiting: the build must work offline
OFFLINE = {"http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
           "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
           "NO_MKDOCS_2_WARNING": "1"}


def blocks(page: Path) -> list[tuple[str, str]]:
    return [(m["lang"], m["body"]) for m in FENCE.finditer(page.read_text())]


def is_file(body: str) -> bool:
    return bool(FILE.fullmatch(body.partition("\n")[0]))


def test_every_block_has_a_known_language():
    for page in PAGES:
        for lang, body in blocks(page):
            assert lang in LANGUAGES, (f"{page.relative_to(ROOT)}: a ```{lang or '(none)'} block; "
                                       f"use one of {sorted(LANGUAGES)}:\n{body[:200]}")
            if lang in ("python", "bash") and body.startswith("# not run"):
                assert NOT_RUN.match(body), f"{page}: '# not run:' needs a reason:\n{body[:200]}"


def test_toml_blocks_parse_and_suites_expand():
    from zoo.plugins import registry
    from zoo.runner.bench import prepare_suite
    from zoo.runner.cells import expand_cells
    from zoo.runner.suite import suite_from_dict

    checked = 0
    for page in PAGES:
        for lang, body in blocks(page):
            if lang != "toml" or is_file(body):
                continue
            raw = tomllib.loads(body)
            if "suite" in raw:
                suite, methods = prepare_suite(suite_from_dict("docs", raw, str(page), registry=registry()),
                                               registry=registry())
                assert expand_cells(suite, methods, registry()), f"{page}: the suite has no cell"
            checked += 1
    assert checked


def test_cards_links_to_repository_files_become_their_paths():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = SimpleNamespace(file=SimpleNamespace(src_uri="cards/quick.md"))
    text = ("[the script](../allocator.py), [a card](dkt.md), [gone](../suites/nothing.toml), "
            "![a figure](dkt.png), [the README](../../README.md), [web](https://example.org)")
    assert hooks._card_links(text, page) == (
        "the script (`benchmarks/allocator.py`), [a card](dkt.md), "
        "[gone](../suites/nothing.toml), ![a figure](dkt.png), the README (`README.md`), "
        "[web](https://example.org)")


def test_the_readme_is_short_and_its_links_resolve():
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) <= 8 * 1024, "the README is over 8 KB: move detail into docs/"
    for target in re.findall(r"\]\(([^)#\s]+)", text):
        if not re.match(r"[a-z]+:", target):
            assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"


def test_measured_numbers_on_the_site_are_the_cards():
    """The pages that quote measurements (calibration, GPU) take every number from a card."""
    cards = "\n".join(p.read_text() for p in (ROOT / "benchmarks" / "cards").glob("*.md"))
    for name in ("calibration.md", "gpu.md"):
        text = (ROOT / "docs" / name).read_text()
        numbers = set(re.findall(r"(?<![\w.])\d+\.\d+(?![\w.])", text))
        assert numbers, name
        missing = sorted(n for n in numbers if not re.search(rf"(?<![\d.]){re.escape(n)}(?!\d)", cards))
        assert not missing, f"docs/{name} quotes numbers that no card has: {missing}"


DRIVER = r"""
import json, subprocess, sys
namespace = {"__name__": "__main__"}
for lang, body in json.load(open(sys.argv[1])):
    print(f"--- {lang} block:\n{body}", flush=True)
    if lang == "python":
        exec(compile(body, "<docs block>", "exec"), namespace)
    else:
        subprocess.run(["bash", "-euo", "pipefail", "-c", body], check=True)
"""


def runnable(page: Path) -> list[tuple[str, str]]:
    return [(lang, body) for lang, body in blocks(page) if lang in ("python", "bash")
            and not body.startswith("# not run") and not is_file(body)]


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if runnable(p)],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_code_blocks_run(page, tmp_path):
    script = tmp_path / "blocks.json"
    script.write_text(json.dumps(runnable(page)))
    work = tmp_path / "work"
    work.mkdir()
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, **OFFLINE, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
           "ZOO_STRICT_PLUGINS": "1"}
    done = subprocess.run([sys.executable, "-c", DRIVER, str(script)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


@pytest.mark.slow
def test_site_builds_strictly_offline(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                           "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          cwd=ROOT, env={**os.environ, **OFFLINE}, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    site = tmp_path / "site"
    for page in ("index.html", "cli/index.html", "plugins/index.html", "reference/index.html",
                 "cards/index.html", "calibration/index.html"):
        assert (site / page).is_file(), page
    cli = (site / "cli" / "index.html").read_text()
    assert "zoo bench" in cli and "--workers" in cli  # generated from the parser
