#!/bin/sh
# Install learn2learn 0.2.0 (used by bayes-meta-zoo-maml and bayes-meta-zoo-abpml) into the
# environment of PYTHON (default: python3 on PATH). Its published sdist ships C files generated
# for older Pythons, which do not compile on 3.11+ (`longintrepr.h`): Cython regenerates them
# (`build_ext`). It is installed without its declared dependencies, of which `qpth` and `gsutil`
# are unused here and do not install as wheels; what `import learn2learn` needs is added after.
# Pass pip options (e.g. `-c constraints.txt`) as arguments.
set -eu
PYTHON="${PYTHON:-python3}"
"$PYTHON" -m pip install "$@" Cython
"$PYTHON" -m pip install "$@" --no-deps learn2learn==0.2.0 --config-settings=--build-option=build_ext
"$PYTHON" -m pip install "$@" gym requests tqdm scipy
"$PYTHON" -c "import learn2learn; print('learn2learn', learn2learn.__version__, 'installed')"
