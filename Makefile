# Every target creates .venv (Python 3.10+, pip) on first use and reinstalls when pyproject.toml changes.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# nbgrader shells out to alembic: the environment's bin must come first on PATH.
export PATH := $(CURDIR)/$(BIN):$(PATH)
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: lab hub test test-fast test-lesson test-full release check-release autograde report bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

# npm packages (package.json, exact versions in package-lock.json): JupyterHub's proxy, configurable-http-proxy,
# for `make hub` and its test (tests/test_hub.py). Needs node and npm (.ci/run installs them).
NODE_MODULES := node_modules/.installed
$(NODE_MODULES): package.json package-lock.json
	@command -v npm >/dev/null || { echo "Нужны Node.js и npm (прокси JupyterHub для make hub и его теста): sudo apt-get install npm"; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

## lab: start JupyterLab on the student notebooks (notebooks/ is its root: solutions/ is out of reach),
##      e.g. make lab PORT=8890 NO_BROWSER=1 TOKEN=secret   (INSTRUCTOR=1: the course root, with nbgrader's formgrader)
# Jupyter settings of the course live in .jupyter/ (the config dir of this lab): Russian UI, no news
# toast (labconfig/default_setting_overrides.json), the Validate dialog wraps long lines
# (custom/custom.css), an untouched notebook opens unmodified (jupyter_server_config.json: autograder/course/lab.py);
# for students, nbgrader's exchange and instructor panels are off
# (student/labconfig/page_config.json); jupytext (a build tool of `make release`) adds nothing to
# the lab (labconfig/page_config.json, jupyter_server_config.json). What the lab saves goes to
# .jupyter/lab/ (git-ignored). The published student repository's Makefile (student/Makefile)
# starts the same lab.
PORT       ?=
NO_BROWSER ?=
TOKEN      ?=
INSTRUCTOR ?=
LAB_ROOT   ?= $(if $(INSTRUCTOR),$(CURDIR),$(CURDIR)/notebooks)
lab: $(VENV)/.installed
	JUPYTER_CONFIG_DIR="$(CURDIR)/.jupyter" JUPYTER_CONFIG_PATH="$(if $(INSTRUCTOR),,$(CURDIR)/.jupyter/student)" \
	"$(CURDIR)/$(BIN)/jupyter" lab --LabApp.custom_css=True --ServerApp.root_dir="$(LAB_ROOT)" \
	  --LabApp.default_url=$(if $(INSTRUCTOR),/lab/tree/notebooks,/lab) $(if $(PORT),--ServerApp.port=$(PORT)) \
	  $(if $(filter-out 0 no false,$(NO_BROWSER)),--no-browser) $(if $(TOKEN),--IdentityProvider.token="$(TOKEN)") \
	  $(if $(filter 0,$(shell id -u)),--allow-root,)

## hub: the course's JupyterHub on this machine, as root (sudo make hub): local users log in with their Unix
##      password; members of COURSE_ID-instructors get the course folder with Formgrader, COURSE_ID-students the
##      students' lab with Assignment List (deploy/jupyterhub_config.py, docs/instructor.md), e.g. sudo make hub HUB_URL=https://:443
HUB_URL ?= http://:8000
hub: $(VENV)/.installed $(NODE_MODULES)
	"$(CURDIR)/$(BIN)/jupyterhub" -f "$(CURDIR)/deploy/jupyterhub_config.py" --JupyterHub.bind_url="$(HUB_URL)"

# pytest-xdist workers: three times the 2 cores CI has, because the end-to-end tests spend part of their time
# waiting on nbgrader's, the kernels' and the killed runs' subprocesses: with 6 both cores stay 99 % busy from the
# first minute to the last (make test on 2 cores, fresh clone: 1055 s with -n 2, 890 s with -n 3, 834 s with -n 4,
# 2026-12-03/04; 933 s with -n 4 and 802 s with -n 6 on 2026-12-04, with a test sample made smaller between the two);
# e.g. make test TEST_WORKERS=12 on a larger machine.
TEST_WORKERS ?= 6

# Colab's CPU runtime: CuPy installed, no GPU (students land there when the free T4 is rationed). The GPU lessons
# then run on the PTX emulator with real CuPy imported, which the stand-in must survive (CuPy 14's lazily loaded
# cupyx once made every GPU check fail there: benchmarks/results/gpu_grading_time.txt). .venv has no CuPy (a
# laptop without a GPU); this second environment has the gpu extra, for the tests of that path.
COLAB_VENV := .venv-colab-cpu
$(COLAB_VENV)/.installed: pyproject.toml
	test -x $(COLAB_VENV)/bin/python || $(PYTHON) -m venv $(COLAB_VENV)
	$(COLAB_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(COLAB_VENV)/bin/python -m pip install --quiet -e '.[dev,gpu]'
	touch $@
COLAB_CPU_TESTS := tests/test_lesson06_cuda_basics.py tests/test_lesson07_cupy_rmsnorm.py \
	tests/test_lesson08_cupy_flash_attention.py tests/test_lesson09_tensor_cores.py tests/test_lesson11_flash_decoding.py \
	tests/test_emulator_cupy.py tests/test_emulator_banks.py \
	tests/test_hardening_worker.py::test_the_guard_never_loads_a_lazily_imported_module

## test: the whole test suite (what CI runs), then the GPU lessons' tests once more with CuPy installed and no GPU
test: $(VENV)/.installed $(NODE_MODULES) $(COLAB_VENV)/.installed
	$(BIN)/python -m pytest -n $(TEST_WORKERS)
	$(COLAB_VENV)/bin/python -c "import cupy"  # the stage below tests nothing without it
	PATH="$(CURDIR)/$(COLAB_VENV)/bin:$$PATH" $(COLAB_VENV)/bin/python -m pytest -n $(TEST_WORKERS) -q $(COLAB_CPU_TESTS)

## test-fast: the unit tests (no nbgrader run, no notebook kernel, no browser, no publish) and the banks of the
##            lessons touched since BASE (tests/touched_lessons.py); under 3 minutes on 2 cores, e.g. make test-fast BASE=origin/main
BASE ?= main
test-fast: $(VENV)/.installed
	selection="$$($(BIN)/python tests/touched_lessons.py $(BASE))" && \
	$(BIN)/python -m pytest -n $(TEST_WORKERS) -q -m "$$selection"

## test-lesson: everything of one lesson: its unit tests, its bank and its end-to-end tests, e.g. make test-lesson L=02
L ?=
test-lesson: $(VENV)/.installed
	@case "$(L)" in [0-9][0-9]|[0-9][0-9]_*) ;; *) echo "make test-lesson L=NN: номер урока из двух цифр, например L=02" >&2; exit 2;; esac
	$(BIN)/python -m pytest -n $(TEST_WORKERS) -m "lesson(n='$(shell printf %.2s '$(L)')')"

## test-full: the same, with every bank submission graded through nbgrader autograde (slow)
test-full: $(VENV)/.installed $(NODE_MODULES)
	COURSE_FULL_AUTOGRADE=1 $(BIN)/python -m pytest -n $(TEST_WORKERS)

## release: build solutions/ from the lesson sources lessons/*.py, then notebooks/ (nbgrader generate_assignment)
release: $(VENV)/.installed
	$(BIN)/course release

## check-release: fail when solutions/ or notebooks/ is not what lessons/ builds, or a notebook carries outputs
check-release: $(VENV)/.installed
	$(BIN)/course check-release

## autograde: grade submitted/ in parallel with progress, e.g. make autograde LESSON=02_fused_rmsnorm WORKERS=4
WORKERS ?= 2
autograde: $(VENV)/.installed
	$(BIN)/course autograde $(LESSON) --workers $(WORKERS)

## report: one HTML page on the class (score distributions, failing checks, named mistakes)
report: $(VENV)/.installed
	$(BIN)/course report --out class_report.html

## bench: the CPU benchmarks (no GPU needed), each printing its table: NumPy attention naive vs FlashAttention,
##        lesson 10's FP8 error at n=4096. The GPU ones run by hand on a GPU machine (docs/developer.md).
# fp8_error_cpu.py writes a JSON file: a temporary one, so that benchmarks/results/ keeps what was measured there.
bench: $(VENV)/.installed
	$(BIN)/python benchmarks/flash_attention_cpu.py
	$(BIN)/python benchmarks/fp8_error_cpu.py --sizes 4096 --seeds 0 1 --out "$${TMPDIR:-/tmp}/fp8_error_cpu.json"

clean:
	rm -rf $(VENV) $(COLAB_VENV) *.egg-info .pytest_cache node_modules
