"""benchmarks/tc_wgmma.py, lesson 09's wgmma candidate (issue 30), without a GPU: NVRTC builds every kernel for
sm_90a as the H200 would run it. Whether it computes attention is for ``--selftest`` and the timing run on the GPU:
the PTX emulator does not run wgmma."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("tc_wgmma", ROOT / "benchmarks" / "tc_wgmma.py")
tc_wgmma = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tc_wgmma)

REGISTERS_PER_SM = 65536     # sm_90
SHARED_PER_BLOCK = 227 * 1024


def test_every_kernel_builds_for_sm_90a_without_spills_or_serialised_wgmma():
    result, notes = tc_wgmma.compiled()
    assert result.ok, result.log[:3000]
    assert notes == []
    flash = {name: res for name, res in result.resources.items() if name.startswith("wgmma_")}
    assert set(flash) == {tc_wgmma.kernel_name(v, d) for v in tc_wgmma.VARIANTS for d in (64, 128)}
    assert {f"selftest_{form}_n{n}" for form in ("ss", "rs") for n in tc_wgmma.SELFTEST_N} <= set(result.resources)
    for name, res in flash.items():
        threads, shared, _ = tc_wgmma.kernel_shape(name)
        assert res.spill_stores == res.spill_loads == 0, name
        assert res.registers * threads <= REGISTERS_PER_SM, f"{name}: a block does not fit on an SM"
        assert shared <= SHARED_PER_BLOCK, name


def test_the_wrappers_number_their_operands_after_the_accumulators():
    text = tc_wgmma.wrappers(sizes=(64,))
    assert "{%0, %1," in text and "%31}, %32, %33, p, 1, 1, 0, 0;" in text          # ss: descriptors, no transpose
    assert "%31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;" in text                    # rs: A registers, B N-major
    assert 'setp.ne.b32 p, %34, 0' in text and 'setp.ne.b32 p, %37, 0' in text
