"""Few-shot data sets. Each is a factory ``(data_dir=None, download=True, **options)``; a data set
is built by its registered name with :func:`zoo.load_dataset` (this package does not know the
registry, so that it does not import the plugin host that registers it). Families of functions
(regression) and streams (sequential tasks) load the same way."""

from __future__ import annotations

from zoo.data.base import FewShotDataset, FileDataset, TensorDataset
from zoo.data.cub import load_cub
from zoo.data.digits import load_digits
from zoo.data.emnist import load_emnist
from zoo.data.functions import FunctionFamily, load_affine_sinusoid, load_gp_rbf, load_sinusoid
from zoo.data.glyphs import load_glyphs
from zoo.data.miniimagenet import load_miniimagenet
from zoo.data.omniglot import load_omniglot
from zoo.data.omniglot_lake_runs import load_omniglot_lake_runs
from zoo.data.omniglot_minimal import load_omniglot_minimal
from zoo.data.streams import StreamData, load_diabetes_stream, load_digits_stream, load_mnist_stream
from zoo.paths import cache_root, data_root

DATASETS = {
    "glyphs": load_glyphs,
    "digits": load_digits,
    "omniglot": load_omniglot,
    "omniglot-minimal": load_omniglot_minimal,
    "omniglot-lake-runs": load_omniglot_lake_runs,
    "cub": load_cub,
    "miniimagenet": load_miniimagenet,
    "emnist": load_emnist,
}

__all__ = ["DATASETS", "FewShotDataset", "FileDataset", "FunctionFamily", "StreamData",
           "TensorDataset", "cache_root", "data_root", "load_affine_sinusoid",
           "load_diabetes_stream", "load_digits_stream",
           "load_gp_rbf", "load_mnist_stream", "load_sinusoid"]
