# `make test` and `make bench` build .venv when it is missing or stale (a stamp file tracks the
# inputs), then run. Everything is pinned by constraints.txt.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.zoo-installed
PLUGIN_DIRS := $(sort $(dir $(wildcard plugins/*/pyproject.toml)))
PLUGIN_NAMES := $(subst _,-,$(notdir $(patsubst %/,%,$(PLUGIN_DIRS))))
PIP    := $(BIN)/python -m pip --disable-pip-version-check -q
OUT    ?= results/bench-$(shell date +%Y%m%d-%H%M%S)
WORKERS ?= 2
# `make test` runs the tests in this many processes (pytest-xdist): one a core, at most 4
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n < 4 ? n : 4 )))

.PHONY: venv test bench lint docs constraints clean wheels

venv: $(STAMP)

$(STAMP): Makefile constraints.txt pyproject.toml $(wildcard plugins/*/pyproject.toml)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -c constraints.txt pip setuptools Cython
	$(PIP) install -c constraints.txt torch torchvision numpy
	PYTHON=$(BIN)/python sh tools/install-learn2learn.sh -q -c constraints.txt
	# this code under its earlier distribution names (zoo, zoo-<plugin>): a second distribution
	# of the same import packages would shadow the editable install
	$(PIP) uninstall -y zoo $(addprefix zoo-,$(PLUGIN_NAMES)) 2>/dev/null || true
	$(PIP) install -c constraints.txt --no-build-isolation -e '.[dev]' $(addprefix -e ,$(PLUGIN_DIRS))
	touch $@

# wheels of the core and of every plugin into dist/ (`pip install dist/*.whl` installs them all); the
# build's by-products are removed, as a distribution's metadata beside the sources would shadow the install
wheels: $(STAMP)
	for d in . $(PLUGIN_DIRS); do \
	  $(BIN)/python -m build --wheel --no-isolation --outdir dist $$d || exit 1; \
	  rm -rf $$d/build $$d/*.egg-info; \
	done

test: $(STAMP)
	ZOO_STRICT_PLUGINS=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal

bench: $(STAMP)
	$(BIN)/zoo bench quick --workers $(WORKERS) --out $(OUT)

lint: $(STAMP)
	$(BIN)/ruff check .

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict   # the site, into build/site

constraints: $(STAMP)
	{ sed -n '1,2p' constraints.txt; $(BIN)/pip freeze --exclude-editable | grep -v -e '^zoo' -e '^bayes-meta-zoo'; } > constraints.tmp
	mv constraints.tmp constraints.txt

clean:
	rm -rf $(VENV) dist
