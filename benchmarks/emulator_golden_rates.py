"""How often the PTX emulator gives the H200's exact bits, per family of opcode forms (no GPU needed).

    python benchmarks/emulator_golden_rates.py

Runs every form of the golden data (``tests/golden/emulator/``, see docs/emulator-golden.md) on the emulator and
counts, per family, the forms whose every output element has the H200's bits and the share of such elements.  The
rule is the golden test's own (``tests/test_emulator_golden.mismatches`` without a tolerance): bit for bit, any NaN
equal to any NaN.  The mma forms are left to the test (fragments compared as values, held bit-equal there).
Approximate instructions are not meant to be bit-equal: the test holds them to their bounds.
"""
import collections
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
warnings.simplefilter("ignore")  # signalling NaNs in the comparison's float views

import test_emulator_golden as golden  # noqa: E402


def main() -> None:
    families = collections.defaultdict(lambda: [0, 0, 0, 0])  # forms, bit-equal forms, equal elements, elements
    inexact = []
    for name, form in golden.FORMS.items():
        if form["family"] == "mma":
            continue
        outputs, _ = golden.run_form(name)
        bad = total = 0
        for arg, kind in form["outputs"].items():
            wrong = golden.mismatches(kind, outputs[arg], golden._expected(form, arg))
            bad, total = bad + int(np.count_nonzero(wrong)), total + wrong.size
        row = families[form["family"]]
        row[0], row[1], row[2], row[3] = row[0] + 1, row[1] + (bad == 0), row[2] + total - bad, row[3] + total
        if bad:
            inexact.append(f"{name} {total - bad}/{total}")
    device = golden.MANIFEST.get('device', {})
    print(f"golden data: {device.get('name', '?')} (CuPy {device.get('cupy', '?')}), {golden.MANIFEST.get('date', '?')}")
    print(f"{'family':<9} {'forms':>5} {'bit-equal':>9} {'elements bit-equal':>19}")
    for family, (forms, equal, elements_equal, elements) in sorted(families.items()):
        print(f"{family:<9} {forms:>5} {equal:>9} {elements_equal / elements:>18.2%}")
    print("not bit-equal (all approximate, within their bounds in the test):", "; ".join(inexact) or "none")


if __name__ == "__main__":
    main()
