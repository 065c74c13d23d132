import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(relative: str) -> ModuleType:
    """A script under ``benchmarks/`` imported as a module (the scripts are not a package), so
    that a test can call its functions: ``load_benchmark("uncertainty/paired.py")``."""
    path = BENCHMARKS / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def glyphs():
    from zoo.plugins import load_dataset

    return load_dataset("glyphs")
