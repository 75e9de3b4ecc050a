"""Checks: the registry, results, comparisons and tolerances, named mistakes, memory, oracles, inputs.

Everything a lesson's check is made of, and nothing that runs it: no processes, no nbgrader, no GPU.
"""
