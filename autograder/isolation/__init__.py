"""Isolation: where student code runs — the worker process, the fork server, the guard, the OS sandbox.

``run`` starts a check in a worker and reads its signed reply; ``worker`` is that process; ``guard`` the audit
hook inside it and inside the student's kernel; ``sandbox`` and ``sandboxed_kernel`` the bubblewrap sandbox
around both; ``export`` the kernel side of passing the student's objects to a check.
"""
