"""The one exception of the emulator."""


class Unsupported(Exception):
    """An opcode, a form (modifiers, operand kinds) or a PTX construct the emulator does not implement.

    :func:`autograder.gpu.emulator.launch` turns it into a finding of kind ``"unsupported"`` and stops the run:
    a clean "cannot emulate", never a silent result."""
