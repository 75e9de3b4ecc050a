"""One bank of reference-variant and known-wrong submissions per lesson (see tests/bank.py)."""
