import pytest


@pytest.fixture(scope="session")
def glyphs():
    from zoo.plugins import load_dataset

    return load_dataset("glyphs")
