"""testinfra checks for molecule/lab_smoke (run by molecule/_shared/verify.yml)."""


def test_node_is_debian_12(host):
    assert host.system_info.distribution == "debian"
    assert host.system_info.release.split(".")[0] == "12"


def test_reached_through_docker(host):
    # testinfra's ansible backend maps ansible_connection community.docker.docker to docker://NAME
    # (commands go through `docker exec`, not through an Ansible module per command)
    inner = host.backend.ansible_runner.get_host(host.backend.host)
    assert inner is not None
    assert inner.backend.NAME == "docker"
    assert inner.backend.name == "lab-smoke-node1"


def test_smoke_config(host):
    f = host.file("/etc/gpuops-lab/smoke.conf")
    assert f.is_file
    assert f.mode == 0o644
    assert f.user == "root"
    assert "node=lab-smoke-node1" in f.content_string
    assert "hostname=smoke1" in f.content_string


def test_environment_line(host):
    lines = host.file("/etc/environment").content_string.splitlines()
    assert lines.count("GPUOPS_LAB_SMOKE=1") == 1


def test_smoke_service(host):
    svc = host.service("gpuops-smoke.service")
    assert svc.is_enabled
    assert svc.is_running


def test_systemd_is_up(host):
    state = host.run("systemctl is-system-running").stdout.strip()
    assert state in ("running", "degraded"), state
