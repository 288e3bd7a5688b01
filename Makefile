# gptlib: two commands on a fresh machine (Python and pip only).
#   make run    the main job: the whole pipeline on the embedded Shakespeare corpus
#   make test   everything CI checks
# Both create .venv when it is missing and install what they need.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# The CPU build of torch; a bare `torch` would pull a CUDA build.
TORCH_PIN ?= torch==2.13.0
EXTRAS ?= notebooks,dev,data
STAMP  := $(VENV)/.installed-$(shell echo "$(EXTRAS)" | tr ',' '-')

NOTEBOOKS := $(sort $(wildcard notebooks/[0-9]*.ipynb))
NBSTRIP   := $(VENV)/bin/nbstripout --keep-output --keep-count --keep-id \
             --extra-keys "metadata.language_info metadata.widgets cell.metadata.execution"

.PHONY: run test test-fast lint export check-export check-clean clean-notebooks execute-notebooks lab screenshots venv bench \
        workbooks check-workbooks colab

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_PIN)"
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

# `make run` trains to a time budget, not to a step count, so that it takes the same time on any machine: a new
# run times a few real steps and trains as many as fit (gptlib.probe). The budget covers the run's set-up, probe
# and training; it leaves room, within 10 minutes after the virtual environment's set-up, for the corpus,
# tokenizer, shards, samples and plots, and for a decay slower than the steps the run last measured (its end is
# fixed once the decay begins). What it takes on each CPU kind: benchmarks/RESULTS.md.
RUN_BUDGET ?= 9
run: $(STAMP)
	$(PY) -m gptlib run --budget $(RUN_BUDGET)

# Everything CI checks: notebooks are clean, the unit tests (among them: gptlib regenerated from the
# notebooks equals what is committed), and every notebook run by nbval in smoke mode. The corpus is
# fetched first: the one network path, and only when it is not cached yet.
test: $(STAMP) check-clean
	$(PY) -m gptlib corpus fetch
	GPTLIB_SMOKE=1 $(PY) -m pytest tests $(NOTEBOOKS) --nbval-lax --nbval-current-env \
	    --nbval-sanitize-with notebooks/nbval_sanitize.cfg -p no:cacheprovider $(PYTEST_ARGS); \
	rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests: that is a failure here"; fi; exit $$rc
	$(MAKE) --no-print-directory check-workbooks

# The unit tests alone, for a quick loop while developing.
test-fast: $(STAMP)
	$(PY) -m pytest tests -m "not network and not browser and not slow" -p no:cacheprovider $(PYTEST_ARGS)

# Length is what the formatter makes of the code: unformatted code fails, in the notebooks' cells too.
lint: $(STAMP)
	$(VENV)/bin/ruff format --check gptlib tests benchmarks notebooks
	$(VENV)/bin/ruff check gptlib tests benchmarks notebooks
	$(if $(NOTEBOOKS),$(NBSTRIP) --verify $(NOTEBOOKS))
	$(PY) tests/tools/check_notebooks.py $(NOTEBOOKS)

export: $(STAMP)
	$(PY) notebooks/course/export.py

# Regenerate gptlib from the notebooks in a scratch copy and fail on any difference; import every module.
check-export: $(STAMP)
	$(PY) -m pytest tests/test_export.py -q -p no:cacheprovider

# The learner's copies of the lessons (notebooks/workbooks/), cut along the solution markers. `make workbooks`
# refuses to replace a workbook you edited (FORCE=1 replaces it); `make check-workbooks` fails when one is out of
# step with its lesson or shows an answer, and runs each untouched and filled in smoke mode.
workbooks: $(STAMP)
	$(PY) notebooks/course/workbooks.py write $(if $(FORCE),--force)

check-workbooks: $(STAMP)
	$(PY) notebooks/course/workbooks.py check

# Each lesson's first cell sends the learner to its workbook (its Colab badge), and the install cell follows
# it; both are made from pyproject's [project.urls] Repository.
colab: $(STAMP)
	$(PY) notebooks/course/colab.py

check-clean: $(STAMP)
	$(if $(NOTEBOOKS),$(NBSTRIP) --verify $(NOTEBOOKS))
	$(PY) tests/tools/check_notebooks.py $(NOTEBOOKS)

NB ?= $(NOTEBOOKS)

# Strip widget state and machine-specific metadata, keep outputs, counts and ids: make clean-notebooks NB=notebooks/01_bpe.ipynb
clean-notebooks: $(STAMP)
	$(NBSTRIP) $(NB)

# Re-run notebooks to refresh their stored outputs, then clean them. The committed outputs are full-size runs:
#   make execute-notebooks FULL=1 NB=notebooks/06_training.ipynb   (how long: benchmarks/RESULTS.md)
# Without FULL=1 the notebooks run in smoke mode (seconds each), as CI runs them.
execute-notebooks: $(STAMP)
	cd notebooks && for nb in $(notdir $(NB)); do \
	  $(if $(FULL),env -u GPTLIB_SMOKE,GPTLIB_SMOKE=1) ../$(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace \
	    --ExecutePreprocessor.store_widget_state=False --ExecutePreprocessor.timeout=3600 $$nb || exit 1; done
	$(NBSTRIP) $(NB)

# JupyterLab from .venv on the notebooks; its python3 kernel is this environment. Root (containers) gets --allow-root.
lab: $(STAMP)
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

# Refresh docs/screenshots/ from the browser test (needs Debian's chromium-headless-shell).
screenshots: $(STAMP)
	GPTLIB_SCREENSHOTS=docs/screenshots $(PY) -m pytest tests/browser -m browser -p no:cacheprovider -q

bench: $(STAMP)
	for b in tokenizer data model train; do $(PY) benchmarks/$$b.py || exit 1; done
