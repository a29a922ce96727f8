"""Tests for the lab's Docker plumbing (lab/docker): engine, node image, systemd node containers, and
Ansible reaching them through the community.docker.docker connection.

Run: /work/main/.venv/bin/pytest lab/tests/simulators/test_node_container.py
Needs root (dockerd, debootstrap) and the Debian mirror for a first image build (about a minute).
Nothing here skips: an engine that cannot start or an image that cannot be built is an error.
"""

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCKER_DIR = ROOT / "lab" / "docker"
VENV_BIN = Path(sys.executable).parent
IMAGE = "gpuops-lab/node:bookworm"
# Units allowed to be failed in a booted node ("degraded"). Keep empty unless a unit is known to fail
# for a reason the lab cannot fix; everything that cannot work in a container is masked in the image.
KNOWN_FAILED_UNITS: set = set()


def sh(*cmd, check=True, timeout=600, **kw):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(
            "command failed (rc=%s): %s\n--- stdout\n%s\n--- stderr\n%s"
            % (proc.returncode, " ".join(map(str, cmd)), proc.stdout, proc.stderr)
        )
    return proc


def node_sh(*args, **kw):
    return sh(DOCKER_DIR / "node.sh", *args, **kw)


def docker_inspect(name, fmt):
    return sh("docker", "inspect", "-f", fmt, name).stdout.strip()


def ansible_env():
    env = dict(os.environ)
    env["PATH"] = "%s:%s" % (VENV_BIN, env.get("PATH", ""))
    env["ANSIBLE_LOAD_CALLBACK_PLUGINS"] = "1"
    env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.builtin.json"
    env["ANSIBLE_HOST_KEY_CHECKING"] = "0"
    return env


def ansible_adhoc(inventory, module, args=None):
    """Run an ad-hoc module against all hosts of INVENTORY over the docker connection; return per-host results."""
    cmd = [VENV_BIN / "ansible", "-i", inventory, "all", "-c", "community.docker.docker", "-m", module]
    if args:
        cmd += ["-a", args]
    proc = sh(*cmd, check=False, env=ansible_env(), cwd=ROOT)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("ansible output is not JSON (rc=%s):\n%s\n%s" % (proc.returncode, proc.stdout, proc.stderr))
    assert proc.returncode == 0, json.dumps(doc, indent=1)[:4000]
    return doc["plays"][0]["tasks"][0]["hosts"]


@pytest.fixture(scope="module")
def engine():
    sh(DOCKER_DIR / "engine.sh", "up", timeout=300)
    return True


@pytest.fixture(scope="module")
def image(engine):
    sh(DOCKER_DIR / "node-image.sh", timeout=1200)
    return IMAGE


@pytest.fixture(scope="module")
def node(image):
    name = "lab-test-node-%s" % uuid.uuid4().hex[:8]
    t0 = time.monotonic()
    node_sh("up", name, "--hostname", "testnode")
    boot_s = time.monotonic() - t0
    yield {"name": name, "boot_s": boot_s}
    node_sh("down", name, check=False)


@pytest.fixture
def inventory(node, tmp_path):
    inv = tmp_path / "hosts.ini"
    inv.write_text("%s ansible_connection=community.docker.docker ansible_python_interpreter=/usr/bin/python3\n" % node["name"])
    return inv


def test_engine_answers(engine):
    status = sh(DOCKER_DIR / "engine.sh", "status")
    assert "docker: running" in status.stdout
    # a second `up` must be a no-op that leaves the running daemon alone
    pid_before = sh("docker", "info", "--format", "{{.ID}}").stdout
    sh(DOCKER_DIR / "engine.sh", "up")
    assert sh("docker", "info", "--format", "{{.ID}}").stdout == pid_before


def test_image_is_current(image):
    recipe = sh(DOCKER_DIR / "node-image.sh", "--recipe").stdout.strip()
    assert len(recipe) == 64
    assert docker_inspect(image, '{{index .Config.Labels "gpuops.lab.recipe"}}') == recipe
    assert docker_inspect(image, "{{json .Config.Cmd}}") == '["/sbin/init"]'
    # the recipe-tagged alias points at the same image
    assert docker_inspect("%s-%s" % (image, recipe[:12]), "{{.Id}}") == docker_inspect(image, "{{.Id}}")
    # ensuring a current image is a no-op
    out = sh(DOCKER_DIR / "node-image.sh")
    assert "is current" in out.stderr


def test_node_boots_systemd(node):
    name = node["name"]
    state = node_sh("exec", name, "systemctl", "is-system-running", check=False).stdout.strip()
    assert state in ("running", "degraded"), state
    failed = node_sh("exec", name, "systemctl", "list-units", "--failed", "--no-legend", "--plain").stdout
    failed_units = {line.split()[0] for line in failed.splitlines() if line.strip()}
    assert failed_units <= KNOWN_FAILED_UNITS, "unexpected failed units: %s" % (failed_units - KNOWN_FAILED_UNITS)
    assert node_sh("exec", name, "cat", "/proc/1/comm").stdout.strip() == "systemd"
    assert node_sh("exec", name, "hostname").stdout.strip() == "testnode"
    assert node["boot_s"] < 60, "boot took %.1fs" % node["boot_s"]


def test_node_container_flags(node):
    name = node["name"]
    assert docker_inspect(name, '{{index .Config.Labels "gpuops.lab"}}') == "node"
    assert docker_inspect(name, "{{.HostConfig.NetworkMode}}") == "host"
    assert docker_inspect(name, "{{.HostConfig.Privileged}}") == "false"
    assert docker_inspect(name, "{{.HostConfig.CgroupnsMode}}") == "host"
    assert docker_inspect(name, "{{.Config.StopSignal}}") == "SIGRTMIN+3"
    assert "SYS_ADMIN" in docker_inspect(name, "{{json .HostConfig.CapAdd}}")
    sec = docker_inspect(name, "{{json .HostConfig.SecurityOpt}}")
    assert "seccomp=unconfined" in sec and "apparmor=unconfined" in sec
    # the lab's bytecode cache for AnsiballZ payloads (lab/pyc_cache) is active in Debian's python3 of the node
    probe = "import zipimport; print(getattr(zipimport._compile_source, '_gpuops_lab', False))"
    want = "False" if os.environ.get("GPUOPS_LAB_PYC_CACHE") == "off" else "True"
    assert node_sh("exec", name, "python3", "-c", probe).stdout.strip() == want


def test_node_up_is_idempotent(node):
    cid = docker_inspect(node["name"], "{{.Id}}")
    t0 = time.monotonic()
    node_sh("up", node["name"], "--hostname", "testnode")
    assert time.monotonic() - t0 < 20
    assert docker_inspect(node["name"], "{{.Id}}") == cid


def test_ansible_ping(inventory, node):
    hosts = ansible_adhoc(inventory, "ansible.builtin.ping")
    assert hosts[node["name"]]["ping"] == "pong"


def test_ansible_setup_reports_debian_12(inventory, node):
    hosts = ansible_adhoc(inventory, "ansible.builtin.setup", "gather_subset=!all,!min,distribution,virtual,service_mgr")
    facts = hosts[node["name"]]["ansible_facts"]
    assert facts["ansible_distribution"] == "Debian"
    assert facts["ansible_distribution_major_version"] == "12"
    assert facts["ansible_service_mgr"] == "systemd"


def test_apt_works_inside(node):
    name = node["name"]
    # lists ship with the image: apt knows packages before any update (non-free included)
    node_sh("exec", name, "apt-cache", "show", "nvidia-smi", timeout=60)
    node_sh("exec", name, "apt-get", "update", "-q", timeout=300)
    sources = node_sh("exec", name, "cat", "/etc/apt/sources.list.d/debian.sources").stdout
    for suite in ("bookworm bookworm-updates", "bookworm-security"):
        assert suite in sources
    assert "main contrib non-free non-free-firmware" in sources


def test_network_none_node(image):
    name = "lab-test-nonet-%s" % uuid.uuid4().hex[:8]
    try:
        node_sh("up", name, "--network", "none")
        links = node_sh("exec", name, "ip", "-o", "link", "show").stdout
        names = {line.split(":")[1].strip() for line in links.splitlines()}
        assert names == {"lo"}, names
    finally:
        node_sh("down", name, check=False)


def test_stop_is_clean_shutdown(image):
    """docker stop sends SIGRTMIN+3: systemd stops its units in order and exits 0 by itself."""
    name = "lab-test-stop-%s" % uuid.uuid4().hex[:8]
    node_sh("up", name)
    try:
        # a unit whose ExecStop leaves a marker: it is only written if systemd shuts down properly
        unit = (
            "[Unit]\nDescription=stop marker\n[Service]\nType=oneshot\nRemainAfterExit=yes\n"
            "ExecStart=/bin/true\nExecStop=/bin/sh -c 'echo stopped-cleanly > /var/lib/stop-marker'\n"
        )
        node_sh("exec", name, "sh", "-c", "printf \"%s\" > /etc/systemd/system/stop-marker.service" % unit)
        node_sh("exec", name, "systemctl", "daemon-reload")
        node_sh("exec", name, "systemctl", "start", "stop-marker.service")
        t0 = time.monotonic()
        sh("docker", "stop", "-t", "30", name)
        took = time.monotonic() - t0
        assert took < 15, "stop took %.1fs (SIGKILL after timeout?)" % took
        assert docker_inspect(name, "{{.State.ExitCode}}") == "0"
        marker = subprocess.run(["docker", "cp", "%s:/var/lib/stop-marker" % name, "-"], capture_output=True, check=True).stdout
        assert b"stopped-cleanly" in marker
    finally:
        node_sh("down", name, check=False)
    assert sh("docker", "ps", "-a", "-q", "--filter", "name=^%s$" % name).stdout.strip() == ""


def test_down_is_idempotent_and_only_touches_lab_nodes(image):
    node_sh("down", "lab-test-absent-%s" % uuid.uuid4().hex[:8])
    name = "lab-test-foreign-%s" % uuid.uuid4().hex[:8]
    sh("docker", "create", "--name", name, "--network", "none", image, "/bin/true")
    try:
        proc = node_sh("down", name, check=False)
        assert proc.returncode != 0
        assert "not a lab node container" in proc.stderr
        assert docker_inspect(name, "{{.Name}}") == "/" + name
    finally:
        sh("docker", "rm", "-f", name)


def test_collection_path_exposes_repo():
    base = sh(ROOT / "lab" / "bin" / "collections-path.sh").stdout.strip()
    link = Path(base) / "ansible_collections" / "gpuops" / "k8s_gpu"
    assert link.is_symlink() and link.resolve() == ROOT
    env = ansible_env()
    env["ANSIBLE_COLLECTIONS_PATH"] = base
    out = sh(VENV_BIN / "ansible-galaxy", "collection", "list", "gpuops.k8s_gpu", env=env, cwd="/").stdout
    assert "gpuops.k8s_gpu" in out and str(base) in out
