import os

import pytest
import torch

torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def glyphs():
    from zoo.plugins import load_dataset

    return load_dataset("glyphs")
