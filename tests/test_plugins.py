"""The plugin host: isolation of broken plugins, strict and disable switches, the JSON contract,
and a third-party plugin distribution built, installed for real, used and removed."""

import importlib.metadata as md
import json
import re
import subprocess
import sys
import textwrap

import pytest

from zoo import plugins
from zoo.errors import PluginError, UnknownNameError
from zoo.hookspecs import DISTRIBUTION

# the distribution that provides the protonet plugin where the tests run (the installed name, so
# that an environment installed before a rename still passes; tests/test_packaging.py checks the names)
PROTONET = next(e.dist.name for e in md.entry_points(group="zoo.plugins") if e.name == "protonet")

MODULES = {
    "zt_good": """
        import zoo
        from zoo_protonet import ProtoNet

        class Good(ProtoNet):
            name = "good-method"

        @zoo.hookimpl
        def zoo_register_methods(register):
            register(Good)

        @zoo.hookimpl
        def zoo_register_kernels(register):
            from zoo.kernels import RBFKernel
            register("good-rbf", RBFKernel)
    """,
    "zt_import_error": "import this_module_does_not_exist\n",
    "zt_half_registers": """
        import zoo
        from zoo.kernels import LinearKernel

        @zoo.hookimpl
        def zoo_register_kernels(register):
            register("half-kernel", LinearKernel)
            raise RuntimeError("boom while registering")
    """,
    "zt_bad_name": """
        import zoo

        @zoo.hookimpl
        def zoo_register_backbones(register):
            register("Bad_Name", object)
    """,
    "zt_zz_duplicate": """
        import zoo
        from zoo_protonet import ProtoNet

        @zoo.hookimpl
        def zoo_register_methods(register):
            register(ProtoNet)
    """,
}


@pytest.fixture
def fake_plugins(tmp_path, monkeypatch):
    for name, source in MODULES.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    installed = list(md.entry_points(group="zoo.plugins"))
    fakes = [md.EntryPoint(name.removeprefix("zt_").replace("_", "-"), name, "zoo.plugins")
             for name in MODULES]
    return installed + fakes


def test_broken_plugins_are_recorded_and_skipped(fake_plugins):
    reg = plugins.load(entry_points=fake_plugins, strict=False, disabled=())
    by_name = {p.name: p for p in reg.plugins}
    assert by_name["good"].error is None
    assert by_name["good"].registered["methods"] == ["good-method"]
    assert "ModuleNotFoundError" in by_name["import-error"].error
    assert "boom while registering" in by_name["half-registers"].error
    assert "lowercase" in by_name["bad-name"].error
    # two plugins claim 'protonet': neither gets it, each error names both distributions
    assert "claimed by plugin 'zz-duplicate' (no distribution) and plugin 'protonet' " \
        f"(distribution {PROTONET} 0.1.0); neither gets it" in by_name["zz-duplicate"].error
    assert f"plugin 'protonet' (distribution {PROTONET}" in by_name["protonet"].error
    assert "protonet" not in reg.names("methods")
    # nothing of a failed plugin is kept, everything else works
    assert "half-kernel" not in reg.names("kernels")
    assert "good-method" in reg.names("methods")
    assert reg.get("kernels", "good-rbf").__name__ == "RBFKernel"


IMPOSTOR = """
    import zoo
    from zoo_protonet import ProtoNet

    class Impostor(ProtoNet):
        name = "protonet"

    @zoo.hookimpl
    def zoo_register_methods(register):
        register(Impostor)
"""

KERNEL_THIEF = """
    import zoo
    from zoo.kernels import RBFKernel

    @zoo.hookimpl
    def zoo_register_kernels(register):
        register("rbf", RBFKernel)
"""


def test_a_name_collision_never_resolves_by_sort_order(tmp_path, monkeypatch):
    """A name claimed by two plugins goes to neither, whether the impostor's entry point sorts
    first ('aaa') or last ('zzz'): both are refused, each with an error naming both."""
    (tmp_path / "zt_impostor.py").write_text(textwrap.dedent(IMPOSTOR))
    (tmp_path / "zt_kernel_thief.py").write_text(textwrap.dedent(KERNEL_THIEF))
    monkeypatch.syspath_prepend(str(tmp_path))
    installed = list(md.entry_points(group="zoo.plugins"))
    for fake in ("aaa", "zzz"):  # first or last in sort order: the same outcome
        eps = [*installed, md.EntryPoint(fake, "zt_impostor", "zoo.plugins")]
        reg = plugins.load(entry_points=eps, strict=False, disabled=())
        by_name = {p.name: p for p in reg.plugins}
        assert "protonet" not in reg.names("methods")
        assert PROTONET in by_name[fake].error and PROTONET in by_name["protonet"].error
        assert f"ZOO_DISABLE_PLUGINS={fake}" in by_name["protonet"].error
        with pytest.raises(PluginError, match="neither gets it"):
            plugins.load(entry_points=eps, strict=True, disabled=())
    # a built-in name stays the zoo's, whatever the plugin's name
    eps = [md.EntryPoint("aaa", "zt_kernel_thief", "zoo.plugins")]
    reg = plugins.load(entry_points=eps, strict=False, disabled=())
    assert reg.owner("kernels", "rbf") == "zoo"
    assert f"kernel 'rbf' is already registered by plugin 'zoo' (distribution {DISTRIBUTION} " in \
        reg.plugins[-1].error


def fake_distribution(root, name: str, entry: str, module: str, source: str):
    """An installed distribution ``name`` 9.9 under ``root`` whose entry point ``entry`` loads
    ``module``; its entry points as ``importlib.metadata`` finds them."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{name.replace('-', '_')}-9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 9.9\n")
    (info / "entry_points.txt").write_text(f"[zoo.plugins]\n{entry} = {module}\n")
    (dist,) = md.distributions(path=[str(root)])
    return list(dist.entry_points)


def test_an_entry_point_name_published_twice_goes_to_neither(tmp_path, monkeypatch):
    """A second distribution whose entry point is also named ``protonet`` neither replaces the
    genuine plugin nor is skipped unseen: both are listed, refused, and named in each error."""
    installed = list(md.entry_points(group="zoo.plugins"))
    shadow = fake_distribution(tmp_path, "zoo-shadow", "protonet", "zt_shadow", IMPOSTOR)
    monkeypatch.syspath_prepend(str(tmp_path))
    for eps in ([*installed, *shadow], [*shadow, *installed]):  # either order: the same
        reg = plugins.load(entry_points=eps, strict=False, disabled=())
        claims = [r for r in reg.plugins if r.name == "protonet"]
        assert sorted(r.distribution for r in claims) == sorted([PROTONET, "zoo-shadow"])
        for record in claims:
            assert "neither is loaded" in record.error
            assert f"distribution {PROTONET} 0.1.0" in record.error
            assert "distribution zoo-shadow 9.9" in record.error
            assert record.registered["methods"] == []
        assert "protonet" not in reg.names("methods")
        assert "zt_shadow" not in sys.modules
    with pytest.raises(PluginError, match="claimed by"):
        plugins.load(entry_points=[*installed, *shadow], strict=True, disabled=())
    # one distribution seen twice (two paths to one installation) is one plugin
    reg = plugins.load(entry_points=[*installed, *installed], strict=True, disabled=())
    assert [r.name for r in reg.plugins].count("protonet") == 1 and "protonet" in reg.names("methods")


BAD_SUITE = """
    import zoo

    @zoo.hookimpl
    def zoo_register_suites(register):
        register("fine-suite", {"suite": {"methods": ["protonet"], "train_datasets": ["glyphs"]}})
        register("broken-suite", {"suite": {"methods": ["protonet"], "ways": "five"}})
"""

SLEEPY = """
    import time

    time.sleep(0.4)
"""


def test_zoo_suites_lists_the_good_suites_and_names_the_bad_one(tmp_path, monkeypatch, capsys):
    """One plugin suite with an invalid setting no longer hides every suite."""
    from zoo.cli import main

    (tmp_path / "zt_bad_suite.py").write_text(textwrap.dedent(BAD_SUITE))
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = [*md.entry_points(group="zoo.plugins"), md.EntryPoint("suites", "zt_bad_suite",
                                                                "zoo.plugins")]
    monkeypatch.setattr(plugins, "_REGISTRY", plugins.load(entry_points=eps, strict=True))
    assert main(["suites"]) == 1
    out, err = capsys.readouterr()
    names = [line.split()[0] for line in out.splitlines()[1:]]
    assert {"quick", "fine-suite", "broken-suite"} <= set(names)
    assert "zoo: error: suite 'broken-suite' of plugin 'suites' is invalid:" in " ".join(err.split())
    assert "ways" in err and "Traceback" not in err
    assert main(["suites", "--json"]) == 1
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["fine-suite"]["error"] is None and "ways" in rows["broken-suite"]["error"]


def test_a_slow_plugin_import_is_named(tmp_path, monkeypatch, caplog, capsys):
    """While it runs (after SLOW_IMPORT_SECONDS) and when it ends, with how long it took."""
    from zoo.cli import plugins_cmd

    (tmp_path / "zt_sleepy.py").write_text(textwrap.dedent(SLEEPY))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugins, "SLOW_IMPORT_SECONDS", 0.1)
    with caplog.at_level("WARNING"):
        reg = plugins.load(entry_points=[md.EntryPoint("sleepy", "zt_sleepy", "zoo.plugins")],
                           strict=True)
    assert "still importing plugin 'sleepy' (no distribution) after 0 s" in caplog.text
    took = re.search(r"plugin 'sleepy' \(no distribution\) took (\d+\.\d) s to import", caplog.text)
    assert took and float(took[1]) >= 0.4, caplog.text  # it sleeps 0.4 s; a loaded machine adds
    assert "ZOO_DISABLE_PLUGINS=sleepy skips it" in caplog.text
    (record,) = [r for r in reg.plugins if r.name == "sleepy"]
    assert record.import_seconds >= 0.4 and record.to_json()["import_seconds"] == record.import_seconds
    monkeypatch.setattr(plugins, "_REGISTRY", reg)
    plugins_cmd(type("Args", (), {"json": False, "detail": False})())
    shown = re.search(r"sleepy: took (\d+\.\d) s to import", capsys.readouterr().out)
    assert shown and shown[1] == f"{record.import_seconds:.1f}"


def test_provenance_names_the_distribution_and_digests_the_code(tmp_path, monkeypatch):
    reg = plugins.load(entry_points=[e for e in md.entry_points(group="zoo.plugins")
                                     if e.name == "protonet"])
    prov = reg.provenance("methods", "protonet")
    assert prov["plugin"] == "protonet" and prov["distribution"] == PROTONET
    assert prov["version"] == "0.1.0" and len(prov["digest"]) == 64
    assert reg.provenance("kernels", "rbf")["distribution"] == DISTRIBUTION
    # the digest follows the code: a changed copy of the plugin gives another digest
    pkg = tmp_path / "zt_copy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent(MODULES["zt_good"]))
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = [md.EntryPoint("copy", "zt_copy", "zoo.plugins")]
    first = plugins.load(entry_points=eps).provenance("methods", "good-method")["digest"]
    plugins.code_digest.cache_clear()
    (pkg / "extra.py").write_text("X = 1\n")
    second = plugins.load(entry_points=eps).provenance("methods", "good-method")["digest"]
    assert first != second


def test_strict_mode_makes_a_failure_fatal(fake_plugins):
    with pytest.raises(PluginError, match="plugin 'bad-name' failed.*ZOO_STRICT_PLUGINS"):
        plugins.load(entry_points=fake_plugins, strict=True, disabled=())


def test_disabled_plugins_are_listed_but_not_loaded(fake_plugins, monkeypatch):
    monkeypatch.setenv("ZOO_DISABLE_PLUGINS", "good, import-error")
    monkeypatch.setenv("ZOO_STRICT_PLUGINS", "1")
    fakes = [ep for ep in fake_plugins if ep.name in ("good", "import-error")]
    reg = plugins.load(entry_points=fakes)
    assert [p.disabled for p in reg.plugins if p.name != "zoo"] == [True, True]
    with pytest.raises(UnknownNameError, match="unknown method 'good-method'"):
        reg.get("methods", "good-method")


def test_builtins_register_through_the_hooks():
    core = plugins.load(entry_points=[]).plugins[0]
    assert core.name == "zoo" and core.error is None
    assert core.registered["backbones"] == ["conv4", "conv4s", "mlp", "resnet10", "resnet18"]
    assert core.registered["kernels"] == ["bncosine", "cosine", "linear", "matern", "polynomial",
                                          "preconditioned-rbf", "rbf"]
    assert {"glyphs", "digits"} <= set(core.registered["datasets"])
    assert core.registered["estimators"] == ["control-functional", "gauss-hermite", "mc",
                                             "meta-cv", "neural-cv", "poly-cv", "sobol", "vv-cv"]


def test_unknown_names_list_the_choices():
    reg = plugins.registry()
    with pytest.raises(UnknownNameError, match="unknown backbone 'conv5'; choose one of: conv4, "):
        reg.get("backbones", "conv5")
    from zoo import build_method

    with pytest.raises(UnknownNameError, match="unknown method 'nope'.*protonet"):
        build_method("nope", way=5, in_channels=1, image_size=28, registry=reg)


def test_plugins_json_contract():
    out = subprocess.run([sys.executable, "-m", "zoo.cli", "plugins", "--json"],
                         capture_output=True, text=True, check=True).stdout
    records = json.loads(out)
    for r in records:
        assert {"name", "distribution", "version", "hooks", "registered", "error"} <= set(r)
        assert set(r["registered"]) == set(plugins.KINDS)
        assert {"methods", "backbones", "kernels", "datasets", "suites", "estimators",
                "tasks"} <= set(r["registered"])
        assert r["error"] is None, r
    assert any("protonet" in r["registered"]["methods"] for r in records)
    table = subprocess.run([sys.executable, "-m", "zoo.cli", "plugins"], capture_output=True,
                           text=True, check=True).stdout
    assert "protonet" in table and "ok" in table


def test_every_sub_command_is_summarised_in_whole_sentences():
    """``zoo -h`` lists each sub-command with its docstring's first paragraph, not a first line
    cut in the middle of a sentence."""
    from zoo.cli import COMMANDS, build_parser, summary

    build_parser()
    assert COMMANDS
    for name, (_, fn) in COMMANDS.items():
        line = summary(fn)
        assert line.endswith("."), (name, line)
        assert "  " not in line and "\n" not in line, (name, line)
    assert summary(test_every_sub_command_is_summarised_in_whole_sentences).endswith(
        "sentence.")


THIRD_PARTY = {
    "pyproject.toml": """
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "zoo-nearest-mean"
        version = "0.0.1"

        [project.entry-points."zoo.plugins"]
        nearest-mean = "zoo_nearest_mean"
    """,
    "zoo_nearest_mean/__init__.py": """
        import torch
        import zoo


        class NearestMean(zoo.Method):
            name = "nearest-mean"
            hyperparameters = {"scale": 10.0}

            def logits(self, episode):
                s, q = self.features(episode.support_x), self.features(episode.query_x)
                means = torch.stack([s[episode.support_y == c].mean(0) for c in range(episode.way)])
                return self.hparams["scale"] * torch.nn.functional.normalize(q, dim=-1) @ \\
                    torch.nn.functional.normalize(means, dim=-1).T

            def meta_loss(self, episode):
                return torch.nn.functional.cross_entropy(self.logits(episode), episode.query_y)

            def predict(self, episode):
                return zoo.Prediction(torch.softmax(self.logits(episode), -1))


        @zoo.hookimpl
        def zoo_register_methods(register):
            register(NearestMean)
    """,
}

USE_IT = """
import json, sys
from zoo.plugins import registry
from zoo.testing import check_method, toy_episode, build_for_tests
names = registry().names("methods")
if "nearest-mean" in names:
    check_method("nearest-mean")
    probs = build_for_tests("nearest-mean", 3).eval().predict(toy_episode(3, 2)).probs
    print(json.dumps({"listed": True, "shape": list(probs.shape)}))
else:
    from zoo import build_method
    try:
        build_method("nearest-mean", way=3, in_channels=1, image_size=28, registry=registry())
    except Exception as exc:
        print(json.dumps({"listed": False, "error": str(exc)}))
"""


@pytest.mark.slow
def test_third_party_plugin_installs_runs_and_uninstalls(tmp_path):
    src, site = tmp_path / "src", tmp_path / "site"
    for rel, text in THIRD_PARTY.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(textwrap.dedent(text))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(site), str(src)], check=True)
    os = __import__("os")
    env = {**os.environ, "ZOO_STRICT_PLUGINS": "1",
           "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}

    def use() -> dict:
        out = subprocess.run([sys.executable, "-c", USE_IT], env=env, capture_output=True,
                             text=True, check=True).stdout
        return json.loads(out.strip().splitlines()[-1])

    listing = subprocess.run([sys.executable, "-m", "zoo.cli", "plugins", "--json"], env=env,
                             capture_output=True, text=True, check=True).stdout
    mine = [r for r in json.loads(listing) if r["name"] == "nearest-mean"]
    assert mine and mine[0]["distribution"] == "zoo-nearest-mean" and mine[0]["version"] == "0.0.1"
    assert mine[0]["registered"]["methods"] == ["nearest-mean"]
    assert use() == {"listed": True, "shape": [6, 3]}

    subprocess.run(["rm", "-rf", str(site)], check=True)  # uninstall: the distribution is gone
    gone = use()
    assert gone["listed"] is False and "unknown method 'nearest-mean'" in gone["error"]
