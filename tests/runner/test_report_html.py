"""The HTML report (``report/report.html``), opened in headless Chromium: the page's script runs
without an error or a console message, a screenshot is taken, and every number laid out on the
page is the number ``table.json`` holds for that method and setting."""

from __future__ import annotations

import base64
import json
import math
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from zoo.plugins import registry
from zoo.runner.bench import run_suite
from zoo.runner.collect import load_report
from zoo.runner.report import write_report
from zoo.runner.report_html import script_json
from zoo.runner.suite import suite_from_dict

from .conftest import TINY

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser")
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """Two labelled variants of ProtoNet (one name not ASCII), two seeds, a setting on the
    training data set and one across data sets."""
    raw = {"suite": {**TINY["suite"], "seeds": [0, 1], "train_episodes": 2, "val_every": 2,
                     "val_episodes": 1, "test_episodes": 3},
           "part": [{"variant": "α", "hparams": {"lr": 0.01}}, {"variant": "β"}]}
    out = tmp_path_factory.mktemp("html") / "results"
    run_suite(suite_from_dict("tiny-html", raw, "tests", registry=registry()), out=out, device="cpu",
              progress=False)
    write_report(out)
    return out


def chromium() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    message = ("the HTML report is checked in headless Chromium, which is not installed: "
               "`apt-get install chromium-headless-shell` (Debian; .ci/run installs it)")
    if os.environ.get("ZOO_STRICT_PLUGINS") or os.environ.get("CI"):
        pytest.fail(message)  # CI and `make test` must run it
    pytest.skip(message)


def browse(page: Path, work: Path, *args: str, fragment: str = "") -> subprocess.CompletedProcess:
    """Chromium on ``page`` with ``args``; its console written to stderr."""
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--enable-logging=stderr", "--v=0", "--hide-scrollbars",
               f"--user-data-dir={work / 'profile'}", "--virtual-time-budget=10000", *args,
               page.resolve().as_uri() + fragment]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def console(stderr: str) -> list[str]:
    """The page's console lines (the report logs nothing: any line is an error or a warning)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


class Node:
    def __init__(self, tag: str, attrs: dict[str, str], parent: Node | None):
        self.tag, self.attrs, self.parent, self.children = tag, attrs, parent, []
        self.parts: list[Any] = []

    def text(self) -> str:
        return "".join(p if isinstance(p, str) else p.text() for p in self.parts)

    def find(self, tag: str, **attrs: str) -> list[Node]:
        found = []
        for child in self.children:
            if child.tag == tag and all(
                    child.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items()):
                found.append(child)
            found += child.find(tag, **attrs)
        return found

    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())


class Tree(HTMLParser):
    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.root = self.at = Node("#document", {}, None)
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs}, self.at)
        self.at.children.append(node)
        self.at.parts.append(node)
        if tag not in VOID:
            self.at = node

    def handle_endtag(self, tag):
        node = self.at
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.at = node.parent

    def handle_data(self, data):
        self.at.parts.append(data)


def rendered(results: Path, work: Path, fragment: str = "") -> Node:
    done = browse(results / "report" / "report.html", work, "--dump-dom", fragment=fragment)
    assert console(done.stderr) == []
    root = Tree(done.stdout).root
    (html,) = root.find("html")
    assert "data-script-error" not in html.attrs, html.attrs.get("data-script-error")
    (body,) = root.find("body")
    assert body.attrs.get("data-rendered") == "yes"  # the script ran to its end
    return root


def number(text: str) -> float:
    return float(text.strip().lstrip("+").replace("\u2212", "-"))


def close(shown: str, value: float, digits: int) -> bool:
    """``shown`` is ``value`` rounded to ``digits`` decimals (either way at an exact half)."""
    if not math.isfinite(value):
        return shown.strip() in ("\u2013", "\u221e", "-\u221e")
    return abs(number(shown) - value) <= 0.5 * 10 ** -digits + 1e-9 * max(1.0, abs(value))


def check_results_table(root: Node, table: dict[str, Any], results: Path, key: str,
                        scale: float, digits: int, ci: str | None,
                        kind: str = "classification") -> None:
    """Every number of ``kind``'s table on the page is its row's ``key`` in ``table.json``
    (shown times ``scale`` with ``digits`` decimals, +- its ``ci``), under its method and
    setting, and every row of the kind is there once."""
    report = load_report(results)
    rows = table["rows"]
    (dom,) = root.find("table", data_kind=kind, **{"class": "results"})
    assert dom.attrs["data-metric"] == key
    labels = [th.text().strip() for th in dom.find("th")][1:]
    seen = set()
    for tr in dom.find("tr")[1:]:
        method = tr.attrs["data-method"]
        cells = tr.find("td")[1:]
        assert len(cells) == len(labels)
        for label, td in zip(labels, cells):
            row = rows[int(td.attrs["data-row"])]
            setting = (kind, row["train_dataset"], row["dataset"], report.tasks[kind].setting(row))
            assert (row["method"], report.label(setting)) == (method, label)
            assert float(td.attrs["data-value"]) == row[key] or (  # the very number
                math.isnan(row[key]) and td.attrs["data-value"] == "NaN")
            (shown,) = td.find("span", **{"class": "num"})
            assert close(shown.text(), scale * row[key], digits)
            if ci:
                (interval,) = td.find("span", **{"class": "ci"})
                assert close(interval.text().replace("±", ""), scale * row[ci], digits)
            seen.add(int(td.attrs["data-row"]))
    assert seen == {i for i, r in enumerate(rows) if r["task"] == kind}  # each row once


def best_marks(root: Node, rows: list[dict[str, Any]], key: str, better: str) -> None:
    (dom,) = root.find("table", data_kind="classification", **{"class": "results"})
    columns: dict[int, list[tuple[float, bool]]] = {}
    for tr in dom.find("tr")[1:]:
        for i, td in enumerate(tr.find("td")[1:]):
            columns.setdefault(i, []).append((rows[int(td.attrs["data-row"])][key],
                                              "best" in td.classes()))
    pick = max if better == "higher" else min
    for cells in columns.values():
        best = pick(v for v, _ in cells)
        assert [marked for _, marked in cells] == [v == best for v, _ in cells]


def test_the_page_is_one_file_with_every_figure_embedded(results):
    page = (results / "report" / "report.html").read_text()
    assert "<link" not in page and "src=\"http" not in page and "src='http" not in page
    figures = sorted(p.name for p in (results / "report").glob("*.png"))
    assert {"reliability-protonet-alpha.png", "reliability-protonet-beta.png"} <= set(figures)
    embedded = [chunk.split('"', 1)[0] for chunk in page.split('src="data:image/png;base64,')[1:]]
    assert len(embedded) == len(figures)
    assert all(base64.b64decode(e)[:8] == b"\x89PNG\r\n\x1a\n" for e in embedded)
    for name in figures:
        assert f"<code>{name}</code>" in page
    for what in ("commit", "torch", "threads (intra-op)", "device", "zoo-protonet"):
        assert what in page  # the provenance


def test_without_plots_the_page_links_the_figures_already_there(results, tmp_path):
    """``zoo report --no-plots`` on a folder whose figures were drawn before says they were not
    redrawn and links them (they may show other results); with none there, it says so."""
    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    write_report(copy, plots=False)
    page = (copy / "report" / "report.html").read_text()
    figures = sorted(p.name for p in (copy / "report").glob("*.png"))
    assert figures and "data:image/png" not in page and "were not drawn" not in page
    assert f"not redrawn (<code>--no-plots</code>). This folder holds {len(figures)} figure(s)" in page
    for name in figures:
        assert f'<a href="{name}"><code>{name}</code></a>' in page
    for png in (copy / "report").glob("*.png"):
        png.unlink()
    write_report(copy, plots=False)
    page = (copy / "report" / "report.html").read_text()
    assert "Figures were not drawn (<code>--no-plots</code>); run" in page and ".png" not in page


def test_numbers_travel_without_loss_and_cannot_end_the_script_block():
    text = script_json({"a": math.nan, "b": [math.inf, -math.inf], "c": "</script><!--"})
    assert "</script" not in text and "<!--" not in text
    assert json.loads(text) == {"a": "NaN", "b": ["Infinity", "-Infinity"], "c": "</script><!--"}


def test_the_page_in_a_browser_shows_table_json_s_numbers(results, tmp_path):
    table = json.loads((results / "report" / "table.json").read_text())
    root = rendered(results, tmp_path)
    check_results_table(root, table, results, "accuracy", 100, 1, "ci95")
    best_marks(root, table["rows"], "accuracy", "higher")
    buttons = [b.attrs["data-metric"] for b in root.find("button")]
    assert {"accuracy", "ece", "nll", "brier", "mce"} <= set(buttons)
    pressed = [b.attrs["data-metric"] for b in root.find("button") if
               b.attrs.get("aria-pressed") == "true"]
    assert pressed == ["accuracy"]
    # the seeds are pooled, and a cell says so
    assert all(r["seeds"] == 2 for r in table["rows"])
    assert "2 seeds" in root.find("table", data_kind="classification", **{"class": "results"})[0].text()
    pairs = table["paired"]
    assert pairs
    (paired,) = root.find("table", **{"class": "paired"})
    for tr in paired.find("tr")[1:]:
        pair = pairs[int(tr.attrs["data-pair"])]
        diff, ci = (td for td in tr.find("td") if td.attrs.get("data-key") in ("difference", "ci95"))
        assert float(diff.attrs["data-value"]) == pair["difference"]
        assert close(diff.text(), 100 * pair["difference"], 1)
        assert close(ci.text().replace("\u2731", ""), 100 * pair["ci95"], 1)
        assert ("\u2731" in ci.text()) == pair["significant"]
        assert [td.text() for td in tr.find("td")[:3]] == [pair["setting"], pair["a"], pair["b"]]


def test_another_metric_is_one_click_away(results, tmp_path):
    """The metric buttons set ``#metric=KEY``; the page opened at it shows that metric."""
    table = json.loads((results / "report" / "table.json").read_text())
    root = rendered(results, tmp_path, "#metric=nll")
    check_results_table(root, table, results, "nll", 1, 3, None)
    best_marks(root, table["rows"], "nll", "lower")
    root = rendered(results, tmp_path, "#metric=ece_calibrated")
    check_results_table(root, table, results, "ece_calibrated", 100, 1, None)


def test_a_screenshot_of_the_page(results, tmp_path):
    from PIL import Image

    shot = tmp_path / "report.png"
    done = browse(results / "report" / "report.html", tmp_path, "--window-size=1280,1800",
                  f"--screenshot={shot}")
    assert console(done.stderr) == []
    image = Image.open(shot).convert("L")
    assert image.size == (1280, 1800)
    low, high = image.getextrema()
    assert high - low > 100  # not a blank page
    keep = os.environ.get("ZOO_KEEP_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)


def test_a_script_error_is_caught_and_shown(results, tmp_path):
    """The check above would see a failing script: the page marks itself and says so."""
    page = tmp_path / "broken.html"
    text = (results / "report" / "report.html").read_text()
    page.write_text(text.replace('JSON.parse(document.getElementById("zoo-data").textContent)',
                                 'JSON.parse("{")', 1))
    done = browse(page, tmp_path, "--dump-dom")
    assert console(done.stderr)
    root = Tree(done.stdout).root
    (html,) = root.find("html")
    assert "JSON" in html.attrs.get("data-script-error", "")
    (box,) = root.find("div", id="script-errors")
    assert "script failed" in box.text()
    (body,) = root.find("body")
    assert "data-rendered" not in body.attrs


def test_a_training_no_longer_than_val_every_still_has_a_loss_curve(results):
    """Two training episodes, validated every two: one validation, but a loss point per episode;
    and the method's name for its meta-loss recorded with each result."""
    lines = [json.loads(line) for line in (results / "results.jsonl").read_text().splitlines()]
    assert {r["meta_loss_name"] for r in lines} == {"query cross-entropy"}
    for line in lines:
        curve = json.loads((results / "cells" / line["config_hash"] / "training.json")
                           .read_text())["curve"]
        assert [p["episode"] for p in curve] == [1, 2]
        assert [p["episode"] for p in curve if "val_accuracy" in p] == [2]
