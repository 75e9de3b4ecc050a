"""Does the GPU lessons' machinery work where CI runs (no GPU): NVRTC compiles, clear "нужен GPU"?"""
import re

import nbformat
import pytest

from autograder import course, gpu
from autograder.core import all_checks
from autograder.notebook import run

HAS_GPU = gpu.gpu_status()[0]
GPU_LESSONS = {"07_cupy_rmsnorm": ("RMSNORM_SRC", ("rms_norm",)),
               "08_cupy_flash_attention": ("FLASH_SRC", ("flash_attention_d64", "flash_attention_d128"))}

GOOD = 'extern "C" __global__ void k(float* y, int n) { if (threadIdx.x < n) y[threadIdx.x] = 1.0f; }'


def reference_source(lesson: str) -> str:
    ns = {}
    exec(course.reference_answers(lesson)[{"07_cupy_rmsnorm": "rmsnorm_source",
                                           "08_cupy_flash_attention": "flash_source"}[lesson]], ns)
    return ns[GPU_LESSONS[lesson][0]]


@pytest.mark.parametrize("lesson", sorted(GPU_LESSONS))
def test_reference_kernels_compile_for_sm90_without_a_gpu(lesson):
    """Do the reference kernels compile with NVRTC here, and does ptxas report their registers?"""
    name, kernels = GPU_LESSONS[lesson]
    result = gpu.compile_source(reference_source(lesson))
    assert result.ok, result.log
    for kernel in kernels:
        r = result.resources[kernel]
        assert 0 < r.registers <= 255 and r.spill_stores == 0, r
    detail = gpu.compile_check(reference_source(lesson), kernels, what=name)
    assert "регистров" in detail


def test_compile_error_names_line_column_and_hint():
    """Does a missing semicolon come back with its line, column, the code and a Russian hint?"""
    source = 'extern "C" __global__ void k(float* y)\n{\n    float a = 1.0f\n    y[0] = a;\n}\n'
    result = gpu.compile_source(source)
    assert not result.ok
    assert (result.errors[0].line, result.errors[0].column) == (4, 5)
    message = gpu.format_errors(result, source)
    assert "строка 4, столбец 5" in message and "y[0] = a;" in message and "точки с запятой" in message


def test_lowercase_builtin_gets_its_hint():
    source = 'extern "C" __global__ void k(float* y)\n{\n    y[threadidx.x] = 1.0f;\n}\n'
    message = gpu.format_errors(gpu.compile_source(source), source)
    assert "строка 3, столбец 7" in message and "threadIdx" in message


def test_ptxas_error_without_line_is_reported():
    """Is too much static shared memory (a ptxas error, no line number) still explained?"""
    source = 'extern "C" __global__ void k(float* y)\n{\n    __shared__ float s[20000];\n' \
             '    s[threadIdx.x] = 1.0f; __syncthreads(); y[threadIdx.x] = s[threadIdx.x ^ 1];\n}\n'
    result = gpu.compile_source(source)
    assert not result.ok
    assert "extern __shared__" in gpu.format_errors(result, source)


def test_resources_are_parsed_from_the_ptxas_log():
    result = gpu.compile_source(GOOD)
    assert result.ok and result.resources["k"].registers > 0


@pytest.mark.parametrize("source, says", [
    ("# ВАШ КОД ЗДЕСЬ\nraise NotImplementedError()", "заглушки"),
    ('__global__ void rms_norm(float* y) { y[0] = 1.0f; }', 'extern "C"'),
    (GOOD, "rms_norm"),
    (42, "строкой"),
])
def test_compile_check_refuses_stubs_and_missing_kernels(source, says):
    """Are the untouched stub, a kernel without extern "C" and a wrong name each refused clearly?"""
    result = run("lesson07.compiles", source)
    assert not result.passed and says in result.message


def test_gpu_checks_are_registered_without_memory_cap():
    """Does every run check of lessons 07/08 need a GPU and run without the address-space cap?"""
    checks = {**all_checks("lesson07."), **all_checks("lesson08.")}
    run_checks = {k: c for k, c in checks.items() if not k.endswith(".compiles")}
    assert len(run_checks) == 13
    assert all(c.needs_gpu and c.memory_limit_gib is None for c in run_checks.values())
    assert not any(checks[k].needs_gpu for k in ("lesson07.compiles", "lesson08.compiles"))


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU: the run checks really run")
def test_run_checks_without_a_gpu_fail_with_zero_points_and_say_so():
    """Without a GPU, is every run check a clear failure ("нужен GPU", 0 points), never a pass?"""
    for check_id, check in {**all_checks("lesson07."), **all_checks("lesson08.")}.items():
        if check.needs_gpu:
            result = run(check_id, lambda *a, **k: None)
            assert not result.passed and result.score == 0, check_id
            assert result.message.startswith("нужен GPU"), result.message


@pytest.mark.parametrize("lesson", sorted(GPU_LESSONS))
def test_notebooks_open_in_colab_and_install_from_the_course_repository(lesson):
    """Do both notebooks carry the Colab link and install from gpu.COURSE_REPOSITORY (one constant)?"""
    for path in (course.source_notebook(lesson), course.student_notebook(lesson)):
        cells = nbformat.read(path, as_version=4).cells
        assert gpu.colab_url(lesson) in cells[0].source
        install = cells[1].source
        assert f'COURSE_REPOSITORY = "{gpu.COURSE_REPOSITORY}"' in install
        assert re.search(r'find_spec\("autograder"\) is None', install)
