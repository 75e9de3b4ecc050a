"""The figures lessons 06 and 09 quote from benchmarks/results/review_measurements_h200.json (the H200 run of
benchmarks/review_measurements.py) are that run's."""
import json

import pytest

from autograder.course import paths as course

RESULTS = json.loads((course.ROOT / "benchmarks" / "results" / "review_measurements_h200.json").read_text("utf-8"))


def lesson(name: str) -> str:
    return (course.ROOT / "lessons" / name).read_text(encoding="utf-8")


def test_the_run_records_its_device_date_and_command():
    assert "H200" in RESULTS["device"] and RESULTS["date"] and "review_measurements.py" in RESULTS["command"]


def test_lesson09_quotes_the_mma_sync_ceiling_and_the_reachable_ratio():
    peak = max(r["tflops"] for r in RESULTS["mma_sync_peak"])
    assert peak == pytest.approx(630, rel=0.02)
    assert "примерно на 630 TFLOP/s — около 64 % паспорта" in lesson("09_tensor_cores.py")
    assert min(r["share_of_datasheet"] for r in RESULTS["mma_sync_peak"]) >= 0.63
    assert f"630 / 67 ≈ {630 / 67:.1f}×" in lesson("09_tensor_cores.py")


def test_lesson09_quotes_the_sign_and_size_of_the_tensor_cores_accumulation_error():
    for row in RESULTS["mma_matmul_error"]:
        assert row["tc_share_negative"] == 1.0
        assert 0.05 <= row["tc_max_abs"] / row["bound_K_2^-24"] <= 0.15  # «около десятой доли K·2^-24»
    assert "всегда отрицательна" in lesson("09_tensor_cores.py")


def test_lesson06_quotes_the_plain_copy_and_the_stride_1_permutation():
    copy = RESULTS["strided_copy"]
    text = lesson("06_cuda_basics.py")
    assert f"около {copy['plain_copy_GBps'] / 1e3:.1f} ТБ/с против {copy['lesson06_stride_1_GBps'] / 1e3:.2f} ТБ/с" in text
