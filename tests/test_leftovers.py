"""Do the temporary folders of a grader killed with SIGKILL go at the next grader's start, and only those?"""
import os
import signal
import subprocess
import sys
import tempfile
import textwrap

from autograder.isolation import leftovers

MAKER = textwrap.dedent("""
    import os, sys
    from autograder.isolation import leftovers
    folder = leftovers.OwnedFolder(leftovers.SANDBOX_SCRATCH)
    open(os.path.join(folder.name, "submission.ipynb"), "w").write("{}")
    print(folder.name, flush=True)
    sys.stdin.readline()      # until told to end (normally)
""")


def start_maker(tmp_path):
    process = subprocess.Popen([sys.executable, "-c", MAKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "TMPDIR": str(tmp_path)})
    return process, process.stdout.readline().strip()


def test_the_folders_of_a_killed_grader_are_removed_and_a_living_ones_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    killed, killed_folder = start_maker(tmp_path)
    living, living_folder = start_maker(tmp_path)
    unlocked = tempfile.mkdtemp(prefix=leftovers.SANDBOX_SCRATCH)  # being made, or made before locks: left alone
    try:
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait()
        assert os.path.isdir(killed_folder) and os.path.exists(leftovers.lock_of(killed_folder))
        assert leftovers.remove_abandoned() == 1
        assert not os.path.exists(killed_folder) and not os.path.exists(leftovers.lock_of(killed_folder))
        assert os.path.isdir(living_folder) and os.path.isdir(unlocked)
        assert leftovers.remove_abandoned() == 0
    finally:
        living.communicate("\n", timeout=30)
    assert not os.path.exists(living_folder) and not os.path.exists(leftovers.lock_of(living_folder))  # its own exit
    assert os.listdir(tmp_path) == [os.path.basename(unlocked)]


def test_a_forked_child_leaves_its_parents_folder_alone():
    code = textwrap.dedent("""
        import os, sys
        from autograder.isolation import leftovers
        folder = leftovers.OwnedFolder(leftovers.HOME_TEMPLATE)
        child = os.fork()
        if child == 0:
            sys.exit(0)           # a normal exit: the child's finalizers run
        os.waitpid(child, 0)
        print(os.path.isdir(folder.name), flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True", done.stderr
