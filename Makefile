# `make test` and `make bench` build .venv when it is missing or stale (a stamp file tracks the
# inputs), then run. Everything is pinned by constraints.txt.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.zoo-installed
PLUGIN_DIRS := $(sort $(dir $(wildcard plugins/*/pyproject.toml)))
PIP    := $(BIN)/python -m pip --disable-pip-version-check -q
OUT    ?= results/bench-$(shell date +%Y%m%d-%H%M%S)
WORKERS ?= 2

.PHONY: venv test bench lint docs constraints clean

venv: $(STAMP)

$(STAMP): Makefile constraints.txt pyproject.toml $(wildcard plugins/*/pyproject.toml)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -c constraints.txt pip setuptools Cython
	$(PIP) install -c constraints.txt torch torchvision numpy
	# learn2learn 0.2.0 ships C files that do not compile on Python 3.11: let Cython regenerate
	# them (see ../shared/INSTALL-NOTES.md), then add what it imports (not qpth, gsutil).
	$(PIP) install -c constraints.txt --no-deps learn2learn --config-settings=--build-option=build_ext
	$(PIP) install -c constraints.txt gym requests tqdm scipy
	$(PIP) install -c constraints.txt --no-build-isolation -e '.[dev]' $(addprefix -e ,$(PLUGIN_DIRS))
	touch $@

test: $(STAMP)
	ZOO_STRICT_PLUGINS=1 $(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/zoo bench quick --workers $(WORKERS) --out $(OUT)

lint: $(STAMP)
	$(BIN)/ruff check .

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict   # the site, into build/site

constraints: $(STAMP)
	{ sed -n '1,2p' constraints.txt; $(BIN)/pip freeze --exclude-editable | grep -v '^zoo'; } > constraints.tmp
	mv constraints.tmp constraints.txt

clean:
	rm -rf $(VENV)
