# Every target creates .venv (Python 3.10+, pip) on first use and reinstalls when pyproject.toml changes.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# nbgrader shells out to alembic: the environment's bin must come first on PATH.
export PATH := $(CURDIR)/$(BIN):$(PATH)
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: lab test test-full release check-release autograde report bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

## lab: start JupyterLab on the course (student notebooks in notebooks/)
lab: $(VENV)/.installed
	$(BIN)/jupyter lab --ServerApp.root_dir=$(CURDIR) --LabApp.default_url=/lab/tree/notebooks $(if $(filter 0,$(shell id -u)),--allow-root,)

## test: the whole test suite (what CI runs)
test: $(VENV)/.installed
	$(BIN)/python -m pytest -n 2 --dist loadgroup

## test-full: the same, with every bank submission graded through nbgrader autograde (slow)
test-full: $(VENV)/.installed
	COURSE_FULL_AUTOGRADE=1 $(BIN)/python -m pytest -n 2 --dist loadgroup

## release: regenerate notebooks/ from solutions/ with nbgrader generate_assignment
release: $(VENV)/.installed
	$(BIN)/course release

## check-release: fail when notebooks/ is stale or a committed notebook carries outputs
check-release: $(VENV)/.installed
	$(BIN)/course check-release

## autograde: grade submitted/ in parallel with progress, e.g. make autograde LESSON=02_fused_rmsnorm WORKERS=4
WORKERS ?= 2
autograde: $(VENV)/.installed
	$(BIN)/course autograde $(LESSON) --workers $(WORKERS)

## report: one HTML page on the class (score distributions, failing checks, named mistakes)
report: $(VENV)/.installed
	$(BIN)/course report --out class_report.html

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
