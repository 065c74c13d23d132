"""``benchmarks/gp_baselines/ove_predictive.py`` scores a trained OVE model on validation episodes
of its trained shape by default and of another way and shot when asked (the GP classifier has no
per-class parameters); a way beyond the validation split's classes is refused by name."""

from __future__ import annotations

import pytest

from zoo.cli import main as zoo_main

from .conftest import load_benchmark

pytestmark = pytest.mark.slow  # trains a two-episode OVE model first


@pytest.fixture(scope="module")
def script():
    return load_benchmark("gp_baselines/ove_predictive.py")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run = tmp_path_factory.mktemp("ove") / "run"  # 2-way 1-shot, two training episodes
    assert zoo_main(["train", "ove", "--dataset", "glyphs", "--way", "2", "--shot", "1",
                     "--episodes", "2", "--query", "2", "--val-episodes", "1", "--val-every", "2",
                     "--set", "chains=2", "--set", "test_steps=2", "--out", str(run),
                     "--device", "cpu", "--no-progress"]) == 0
    return run


def run_script(script, monkeypatch, argv):
    drawn = []
    sampler = script.EpisodeSampler

    def recording(dataset, split, way, shot, query, seed):
        drawn.append((split, way, shot, query, seed))
        return sampler(dataset, split, way, shot, query, seed=seed)

    monkeypatch.setattr(script, "EpisodeSampler", recording)
    assert script.main(argv) == 0
    return drawn


def test_the_trained_shape_by_default_another_on_request(script, trained, monkeypatch, capsys):
    common = [str(trained), "--episodes", "2", "--query", "2", "--bootstrap", "20",
              "--variant", "chains=2,test_steps=2", "--variant", "chains=1,test_steps=1"]
    assert run_script(script, monkeypatch, common) == [("val", 2, 1, 2, 101)]
    assert "2 2-way 1-shot validation episodes" in capsys.readouterr().out
    drawn = run_script(script, monkeypatch, [*common, "--way", "4", "--shot", "2"])
    assert drawn == [("val", 4, 2, 2, 101)]
    out = capsys.readouterr().out
    assert "ove 2-way 1-shot model" in out and "2 4-way 2-shot validation episodes" in out
    assert "| chains=1,test_steps=1 | " in out.split("paired differences")[1]


def test_a_way_beyond_the_validation_classes_is_refused(script, trained):
    with pytest.raises(SystemExit, match=r"cannot draw 40-way 1-shot validation episodes: .*"
                                         r"has 33 classes, but way=40"):
        script.main([str(trained), "--way", "40", "--episodes", "1"])
