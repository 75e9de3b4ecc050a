"""Do the deployment's files (deploy/) agree with each other and keep the course's answers from the students?

The hub itself, with real users, is tests/test_hub.py; these are the parts that need no root and no hub.
"""
import re
import stat
import tempfile
import types
from pathlib import Path

import pytest
import yaml

from autograder.course import cli, hub
from autograder.course.paths import ROOT

DEPLOY = ROOT / "deploy"


def test_the_image_holds_exactly_what_the_students_may_read():
    """The Dockerfile copies what the one-machine hub leaves readable to students (hub.SHARED), nothing more."""
    dockerfile = (DEPLOY / "kubernetes" / "Dockerfile").read_text()
    copied = set()
    for line in re.findall(r"^COPY (.+) \S+$", dockerfile, re.MULTILINE):
        copied |= {source.rstrip("/") for source in line.split()}
    assert copied == hub.SHARED - {".venv"}
    assert {"solutions", "lessons", "tests", "nbgrader_config.py"}.isdisjoint(hub.SHARED)


def test_the_course_folder_is_closed_to_other_users_but_what_they_need(tmp_path):
    course = tmp_path / "course"
    for name in ("solutions", "tests", "notebooks", ".venv", "autograder"):
        (course / name).mkdir(parents=True)
        (course / name).chmod(0o755)
    (course / "nbgrader_config.py").write_text("c = get_config()\n")
    (course / "nbgrader_config.py").chmod(0o644)
    course.chmod(0o755)
    closed = hub.close_private_paths(course)
    assert {p.name for p in closed} == {"solutions", "tests", "nbgrader_config.py"}
    others = {p.name: p.stat().st_mode & stat.S_IRWXO for p in course.iterdir()}
    assert others == {"solutions": 0, "tests": 0, "nbgrader_config.py": 0,
                      "notebooks": 0o5, ".venv": 0o5, "autograder": 0o5}
    assert course.stat().st_mode & stat.S_IRWXO == stat.S_IXOTH  # passed through, never listed
    assert hub.close_private_paths(course) == []  # a second start changes nothing


def test_a_users_home_is_closed_to_the_others_as_the_server_starts(tmp_path, monkeypatch):
    """useradd's 755 home becomes 700; one that holds the course (an instructor's) 711: the students' servers
    pass through to the course's environment but list nothing; a home that is not the user's own is left alone."""
    import os
    import pwd

    homes = {name: tmp_path / name for name in ("student", "teacher", "shared")}
    for home in homes.values():
        home.mkdir(mode=0o755)
        home.chmod(0o755)
    (homes["teacher"] / "course").mkdir()

    def entry(name):
        uid = os.getuid() + (1 if name == "shared" else 0)
        return types.SimpleNamespace(pw_dir=str(homes[name]), pw_uid=uid)

    monkeypatch.setattr(pwd, "getpwnam", entry)
    course = homes["teacher"] / "course"
    assert hub.close_home("student", passed_through=(course,)) == homes["student"].resolve()
    assert hub.close_home("teacher", passed_through=(course,)) == homes["teacher"].resolve()
    assert hub.close_home("shared", passed_through=(course,)) is None
    modes = {name: stat.S_IMODE(home.stat().st_mode) for name, home in homes.items()}
    assert modes == {"student": 0o700, "teacher": 0o711, "shared": 0o755}, {k: oct(v) for k, v in modes.items()}
    assert hub.close_home("student") is None  # closed already: nothing to say


def test_a_python_in_a_private_folder_is_found():
    """The hub refuses to start with a Python other users cannot run (e.g. a pyenv under /root): which folder."""
    with tempfile.TemporaryDirectory() as scratch:  # pytest's tmp_path lies in a folder only its owner enters
        base = Path(scratch)
        base.chmod(0o755)
        private = base / "private"
        (private / "bin").mkdir(parents=True)
        python = private / "bin" / "python"
        python.write_text("")
        python.chmod(0o755)
        (private / "bin").chmod(0o755)
        private.chmod(0o700)
        assert hub.closed_to_others(python) == private
        private.chmod(0o755)
        assert hub.closed_to_others(python) is None
        python.chmod(0o700)
        assert hub.closed_to_others(python) == python


def test_every_users_server_starts_through_the_course_launcher():
    """The one-machine hub and the Kubernetes image start every server with deploy/course-singleuser, which gives
    it the repository's .jupyter/ (the lab of `make lab`) and, for students, .jupyter/student/."""
    launcher = DEPLOY / "course-singleuser"
    assert launcher.stat().st_mode & stat.S_IXOTH
    text = launcher.read_text()
    assert 'JUPYTER_CONFIG_DIR="$course/.jupyter"' in text and "--LabApp.custom_css=True" in text
    assert '$course/.jupyter/student' in text
    assert 'c.Spawner.cmd = [str(HERE / "course-singleuser")]' in (DEPLOY / "jupyterhub_config.py").read_text()
    values = yaml.safe_load((DEPLOY / "kubernetes" / "values.yaml").read_text())
    assert values["singleuser"]["cmd"] == "/opt/module07/deploy/course-singleuser"
    assert "/opt/module07/deploy/course-singleuser" in (DEPLOY / "kubernetes" / "Dockerfile").read_text()


def test_kubernetes_has_a_gpu_profile_and_the_roles_of_the_one_machine_hub():
    values = yaml.safe_load((DEPLOY / "kubernetes" / "values.yaml").read_text())
    gpu = [p for p in values["singleuser"]["profileList"]
           if p.get("kubespawner_override", {}).get("extra_resource_limits", {}).get("nvidia.com/gpu") == "1"]
    assert len(gpu) == 1 and not gpu[0].get("default")
    mounts = values["singleuser"]["storage"]["extraVolumeMounts"]
    exchange = types.SimpleNamespace()
    exec((DEPLOY / "jupyter" / "nbgrader_config.py").read_text(),
         {"get_config": lambda: types.SimpleNamespace(CourseDirectory=exchange, Exchange=exchange)})
    assert [m["mountPath"] for m in mounts] == [exchange.root]

    c = types.SimpleNamespace(KubeSpawner=types.SimpleNamespace())
    exec(values["hub"]["extraConfig"]["course-role"], {"c": c})
    claim = yaml.safe_load((DEPLOY / "kubernetes" / "course-pvc.yaml").read_text())["metadata"]["name"]
    job_claim = cli.build_parser().parse_args(["jobs", "k8s", "--shards", "1"]).volume_claim
    for groups, role in ((["instructors"], "instructor"), ([], "student")):
        user = types.SimpleNamespace(groups=[types.SimpleNamespace(name=g) for g in groups])
        spawner = types.SimpleNamespace(user=user, environment={}, volumes=[], volume_mounts=[])
        c.KubeSpawner.pre_spawn_hook(spawner)
        assert spawner.environment["COURSE_ROLE"] == role
        # The instructors' course folder is the claim the grading Job mounts by default; students never get it.
        claims = [v["persistentVolumeClaim"]["claimName"] for v in spawner.volumes]
        assert claims == ([claim] if role == "instructor" else []) and claim == job_claim
        assert [m["mountPath"] for m in spawner.volume_mounts] == (
            [spawner.environment["COURSE_DIR"]] if role == "instructor" else [])


#: The Kubernetes version the files are checked against (kubernetes-validate's schemas): a release of 2025-26.
K8S_VERSION = "1.33"


def test_the_kubernetes_files_pass_the_api_schemas(tmp_path):
    """deploy/kubernetes/*-pvc.yaml and the Job of `course jobs k8s` (with the resources it asks for) are valid
    objects of the Kubernetes API (strict: no field the API does not know)."""
    import kubernetes_validate

    from helpers import bare_class
    from autograder.course import jobs

    course = bare_class(tmp_path / "class", {"06_cuda_basics": 10.0}, {"ann": {}}, [("ann", "06_cuda_basics")])
    job = yaml.safe_load(jobs.render("k8s", course, 2, image="registry.example/course:1",
                                     slurm=jobs.SlurmOptions(cpus=4, mem="24Gi")))
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"] == {"requests": {"cpu": 4, "memory": "24Gi"},
                                      "limits": {"memory": "24Gi", "nvidia.com/gpu": 1}}
    documents = [job] + [d for name in ("exchange-pvc.yaml", "course-pvc.yaml")
                         for d in yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text())]
    assert len(documents) == 4
    for document in documents:
        kubernetes_validate.validate(document, K8S_VERSION, strict=True)
    broken = {**documents[1], "spec": {**documents[1]["spec"], "accessMode": ["ReadWriteMany"]}}
    with pytest.raises(kubernetes_validate.ValidationError):  # the check can fail: a misspelt field
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)
