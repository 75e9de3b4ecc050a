"""Lesson 10: FlashAttention-3 copy/compute overlap on a virtual clock, and FP8 with incoherent processing.

Contracts (the notebook, the bank and instructors rely on them):

* ``makespan_sequential(n_tiles, t_load, t_gemm, t_softmax) -> float``
* ``makespan_pipelined(n_tiles, t_load, t_gemm, t_softmax, stages) -> float``
* ``is_copy_bound(t_load, t_gemm, t_softmax) -> bool``
* ``tensor_utilisation(events) -> float``
* ``pingpong_utilisation(t_gemm, t_softmax, warpgroups) -> float`` (steady state)
* ``overlap_program(n_tiles) -> [(op, tile), ...]`` (the 2-stage softmax/GEMM overlap)
* ``run_program(Q, K, V, program, Bc=64) -> (n_q, d) float32``
* ``quantize_per_block(x, block) -> (float8_e4m3fn (n, d), scales (ceil(n / block),))``
* ``random_hadamard(d, seed) -> (d, d)`` orthogonal, ``incoherent_qk(Q, K, seed) -> (Q H, K H)``

Every expected time comes from :mod:`autograder.lessons.lesson10.fa3sim` on its virtual clock: nothing graded
depends on wall time.

The checks live in :mod:`.schedules`, :mod:`.program` and :mod:`.fp8` (helpers they share in
:mod:`.common`); importing this package registers them all.
"""
from . import fp8, program, schedules  # noqa: F401  (registers the checks)
