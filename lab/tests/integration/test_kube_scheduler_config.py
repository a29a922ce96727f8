"""Lab tests for gpuops.k8s_gpu.kube_scheduler_config and the role gpuops.k8s_gpu.kube_scheduler_extender.

Run: /work/main/.venv/bin/pytest lab/tests/integration/test_kube_scheduler_config.py
The module runs through `ansible localhost -c local` on copies of the unit-test fixtures (real-world RKE1 cluster.yml,
RKE2 config.yaml, kubeadm manifest); the role runs through ansible-playbook against the lab Kubernetes emulator
(kubeadm-config ConfigMap, write requests counted in its request log) and with a stub `rke` on PATH (RKE1).
Nothing here skips: a missing tool or a dead emulator is a failure.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from conftest import kube_emulator, lab_collections_path, play_json, run_module

ROOT = Path(__file__).resolve().parents[3]
KUBE = ROOT / "lab" / "kube"
VENV_BIN = ROOT / ".venv" / "bin"
FIXTURES = ROOT / "tests" / "unit" / "plugins" / "module_utils" / "fixtures" / "scheduler"
MODULE = "gpuops.k8s_gpu.kube_scheduler_config"
GPUSHARE = {"url_prefix": "http://127.0.0.1:32766/gpushare-scheduler", "filter_verb": "filter", "bind_verb": "bind",
            "node_cache_capable": True, "managed_resources": [{"name": "aliyun.com/gpu-mem", "ignored_by_scheduler": False}]}


def args(**kw):
    return json.dumps(kw)


def files(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in Path(root).rglob("*") if p.is_file()}


# ------------------------------------------------------------------------------------------------ module
@pytest.mark.parametrize("mode,fixture,extra,ours", [
    ("rke1_cluster_yml", "rke1-cluster.yml", {"config_checksum": "c1"}, ["services"]),
    ("rke2_config", "rke2-config.yaml", {}, ["kube-scheduler-arg", "kube-scheduler-extra-mount"]),
    ("kubeadm_manifest", "kubeadm-kube-scheduler.yaml", {"config_checksum": "c1"}, ["spec", "metadata"]),
])
def test_adapter_converge_idempotent_check_backup(collections_path, tmp_path, mode, fixture, extra, ours):
    work = tmp_path / "work"
    work.mkdir()
    target = work / fixture
    shutil.copy(FIXTURES / fixture, target)
    original_text = target.read_text()
    original = yaml.safe_load(original_text)
    # RKE1: the version must match cluster.yml's kubernetes_version (v1.26.15-rancher1-1), both render v1
    version = "v1.26.15" if mode == "rke1_cluster_yml" else "v1.29.4"
    a = dict(mode=mode, path=str(target), kubernetes_version=version, tmp_dir=str(tmp_path / "stage"),
             config_path="/etc/kubernetes/gpuops/scheduler-config.yaml", **extra)
    # check mode first: predicts a change, writes nothing
    res = run_module(collections_path, MODULE, args(**a), check=True)
    assert res["changed"] is True, res
    assert files(tmp_path) == {f"work/{fixture}": original_text.encode()}
    res = run_module(collections_path, MODULE, args(**a))
    assert res["changed"] is True and not res.get("failed"), res
    assert Path(res["backup_file"]).read_text() == original_text
    if mode == "kubeadm_manifest":
        assert Path(res["backup_file"]).parent == tmp_path / "stage"
        assert sorted(os.listdir(work)) == [fixture]
    new = yaml.safe_load(target.read_text())
    for key in original:
        if key not in ours:
            assert new[key] == original[key], key
    again = run_module(collections_path, MODULE, args(**a))
    assert again["changed"] is False, again
    check = run_module(collections_path, MODULE, args(**a), check=True)
    assert check["changed"] is False
    if mode == "rke1_cluster_yml":
        assert new["services"]["scheduler"]["extra_args"] == {"v": "2", "config": a["config_path"]}
        for svc in ("etcd", "kube-api", "kube-controller", "kubelet", "kubeproxy"):
            assert new["services"][svc] == original["services"][svc]
    elif mode == "rke2_config":
        assert new["kube-scheduler-arg"] == ["v=2", "bind-address=0.0.0.0", "config=" + a["config_path"]]
    else:
        assert "--config=" + a["config_path"] in new["spec"]["containers"][0]["command"]


def test_bad_inputs_change_nothing(collections_path, tmp_path):
    target = tmp_path / "rke2-config.yaml"
    shutil.copy(FIXTURES / "rke2-config.yaml", target)
    cfg = tmp_path / "gpuops" / "scheduler-config.yaml"
    before = files(tmp_path)
    cases = [
        (dict(mode="rke2_config", path=str(target), kubernetes_version="v1.38.1"), "kubernetes_version: Kubernetes 1.38 is not supported"),
        (dict(mode="rke2_config", path=str(target), kubernetes_version="v1.15.3"), "supported versions are 1.16-1.37"),
        (dict(mode="scheduler_config", distribution="rke2", config_path=str(cfg), kubernetes_version="1.29",
              extenders=[{"url_prefix": "127.0.0.1:32766", "filter_verb": "filter"}]), "extenders[0].url_prefix"),
        (dict(mode="scheduler_config", distribution="rke2", config_path=str(cfg), kubernetes_version="1.29",
              extenders=[{"url_prefix": "http://a", "filter_verb": "f", "managed_resources": ["gpu-mem"]}]),
         "not an extended resource name"),
    ]
    for a, message in cases:
        res = run_module(collections_path, MODULE, args(**a))
        assert res.get("failed") is True and message in res["msg"], res
    assert files(tmp_path) == before


def test_render_every_version_window(collections_path, tmp_path):
    """One playbook renders the gpushare config for 1.16-1.37 and the apiVersion windows are checked."""
    play = tmp_path / "render.yml"
    versions = [f"v1.{m}.2" for m in range(16, 38)]
    play.write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False, "connection": "local",
        "tasks": [{"name": "render", MODULE: {"mode": "scheduler_config", "distribution": "rke2", "kubernetes_version": "{{ item }}",
                                              "config_path": str(tmp_path) + "/{{ item }}/sched.cfg", "extenders": [GPUSHARE]},
                   "loop": versions, "register": "out"}]}]))
    res = run_playbook(tmp_path, play)
    items = res["plays"][0]["tasks"][0]["hosts"]["localhost"]["results"]
    seen = {}
    for item in items:
        minor = int(item["item"].split(".")[1])
        text = (tmp_path / item["item"] / "sched.cfg").read_text()
        if minor <= 22:
            doc = json.loads(text)
            assert (doc["kind"], doc["apiVersion"], item["flag"]) == ("Policy", "v1", "policy-config-file")
            assert doc["extenders"][0]["enableHttps"] is False and "clientConnection" not in doc
        else:
            doc = yaml.safe_load(text)
            assert doc["kind"] == "KubeSchedulerConfiguration" and item["flag"] == "config"
            assert doc["apiVersion"] == "kubescheduler.config.k8s.io/" + ("v1beta3" if minor <= 24 else "v1")
            assert doc["clientConnection"]["kubeconfig"] == "/var/lib/rancher/rke2/server/cred/scheduler.kubeconfig"
            assert doc["extenders"][0]["managedResources"] == [{"name": "aliyun.com/gpu-mem", "ignoredByScheduler": False}]
        seen[minor] = doc["apiVersion"]
    assert sorted(seen) == list(range(16, 38))


def test_no_schema_for_scheduler_config_in_validate():
    """kubernetes-validate has no schema for kubescheduler.config.k8s.io: it lands in not_validated (custom resource),
    so the rendered documents are checked structurally (unit tests) instead."""
    import sys
    sys.path.insert(0, str(KUBE))
    import validate
    rep = validate.validate_documents([{"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                                        "extenders": []}], source="x")
    assert not rep["results"] and rep["not_validated"], rep
    pod = yaml.safe_load((FIXTURES / "kubeadm-kube-scheduler.yaml").read_text())
    assert validate.validate_documents([pod], source="fixture")["ok"]


# ------------------------------------------------------------------------------------------------ role
@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    cm = yaml.safe_load((FIXTURES / "kubeadm-config-configmap.yaml").read_text())
    cm["data"]["KeepMe"] = "foreign key: must survive\n"
    with kube_emulator(tmp_path_factory.mktemp("seed"), "pytest-sched", [cm]) as info:
        yield info


def get(emu, path):
    with urllib.request.urlopen(emu["url"] + path, timeout=10) as r:
        return json.loads(r.read())


def seq(emu):
    return get(emu, "/_emulator/requests?since=999999999")["seq"]


def writes_since(emu, n):
    return [(i["method"], i["path"]) for i in get(emu, f"/_emulator/requests?since={n}&writes=1")["items"]]


def run_playbook(workdir, playbook, *extra, env=None, inventory=True):
    e = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOCALHOST_WARNING="false",
             ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0",
             ANSIBLE_COLLECTIONS_PATH=lab_collections_path(),
             PATH=f"{VENV_BIN}:{os.environ.get('PATH', '')}")
    e.update(env or {})
    cmd = [str(VENV_BIN / "ansible-playbook"), str(playbook), *extra]
    if inventory:
        cmd += ["-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={VENV_BIN / 'python'}"]
    p = subprocess.run(cmd, cwd=workdir, env=e, capture_output=True, text=True, timeout=180)
    result = play_json(p)
    if p.returncode != 0:
        failed = [(t["task"]["name"], h.get("msg"))
                  for play in result["plays"] for t in play["tasks"] for h in t["hosts"].values() if h.get("failed")]
        pytest.fail(f"ansible-playbook failed rc={p.returncode}: {failed}\n{p.stderr[-2000:]}")
    return result


def role_play(tmp_path, variables):
    play = tmp_path / "site.yml"
    play.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "vars": variables,
                                     "roles": ["gpuops.k8s_gpu.kube_scheduler_extender"]}]))
    return play


def test_role_kubeadm_against_emulator(emu, tmp_path):
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    shutil.copy(FIXTURES / "kubeadm-kube-scheduler.yaml", manifests / "kube-scheduler.yaml")
    cfg = tmp_path / "gpuops" / "scheduler-config.yaml"
    play = role_play(tmp_path, {
        "kube_scheduler_extender_distribution": "kubeadm",
        "kube_scheduler_extender_config_path": str(cfg),
        "kube_scheduler_extender_kubeadm_manifest": str(manifests / "kube-scheduler.yaml"),
        "kube_scheduler_extender_kubeadm_tmp_dir": str(tmp_path / "stage"),
        "kube_scheduler_extender_api_kubeconfig": emu["kubeconfig"],
    })
    cm_before = get(emu, "/api/v1/namespaces/kube-system/configmaps/kubeadm-config")
    # check mode: nothing written on disk, no write request reaches the API server
    n = seq(emu)
    run_playbook(tmp_path, play, "--check")
    assert writes_since(emu, n) == [] and not cfg.exists()
    assert sorted(os.listdir(manifests)) == ["kube-scheduler.yaml"]
    # first converge: version detected from /version (v1.29.4 -> v1), one write (the ConfigMap patch)
    n = seq(emu)
    first = run_playbook(tmp_path, play)
    first_writes = writes_since(emu, n)
    assert first_writes == [("PATCH", "/api/v1/namespaces/kube-system/configmaps/kubeadm-config")], first_writes
    assert yaml.safe_load(cfg.read_text())["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    pod = yaml.safe_load((manifests / "kube-scheduler.yaml").read_text())
    assert "--config=" + str(cfg) in pod["spec"]["containers"][0]["command"]
    assert sorted(os.listdir(manifests)) == ["kube-scheduler.yaml"]
    cm = get(emu, "/api/v1/namespaces/kube-system/configmaps/kubeadm-config")
    assert cm["data"]["KeepMe"] == "foreign key: must survive\n"
    cc = yaml.safe_load(cm["data"]["ClusterConfiguration"])
    old_cc = yaml.safe_load(cm_before["data"]["ClusterConfiguration"])
    assert cc["scheduler"]["extraArgs"] == {"v": "2", "config": str(cfg)}
    assert {k: v for k, v in cc.items() if k != "scheduler"} == {k: v for k, v in old_cc.items() if k != "scheduler"}
    assert first["stats"]["localhost"]["changed"] >= 3
    # re-run: changed=0 and zero write requests
    n = seq(emu)
    second = run_playbook(tmp_path, play)
    assert writes_since(emu, n) == []
    assert second["stats"]["localhost"]["changed"] == 0, second["stats"]
    print(f"kubeadm role: writes first converge={len(first_writes)} second=0")


def test_role_rke1_runs_rke_once(tmp_path):
    stub_bin = tmp_path / "bin"
    stub_bin.mkdir()
    calls = tmp_path / "rke-calls.log"
    (stub_bin / "rke").write_text(f'#!/bin/sh\necho "$(pwd) $*" >> {calls}\n')
    (stub_bin / "rke").chmod(0o755)
    rke_dir = tmp_path / "rke"
    rke_dir.mkdir()
    shutil.copy(FIXTURES / "rke1-cluster.yml", rke_dir / "cluster.yml")
    cfg = tmp_path / "gpuops" / "scheduler-config.yaml"
    play = role_play(tmp_path, {
        "kube_scheduler_extender_distribution": "rke1",
        "kube_scheduler_extender_kubernetes_version": "v1.26.15-rancher1-1",
        "kube_scheduler_extender_config_path": str(cfg),
        "kube_scheduler_extender_rke1_cluster_yml": str(rke_dir / "cluster.yml"),
        "kube_scheduler_extender_rke1_host": "localhost",
    })
    env = {"PATH": f"{stub_bin}:{VENV_BIN}:{os.environ.get('PATH', '')}"}
    run_playbook(tmp_path, play, "--check", env=env)
    assert not calls.exists() and not cfg.exists()
    run_playbook(tmp_path, play, env=env)
    assert calls.read_text().splitlines() == [f"{rke_dir} up --config cluster.yml"]
    cluster = yaml.safe_load((rke_dir / "cluster.yml").read_text())
    sched = cluster["services"]["scheduler"]
    assert sched["extra_args"]["config"] == str(cfg)
    assert sched["extra_binds"] == [f"{cfg.parent}:{cfg.parent}:ro"]           # outside /etc/kubernetes
    assert any(e.startswith("GPUOPS_SCHEDULER_CONFIG_CHECKSUM=") for e in sched["extra_env"])
    assert yaml.safe_load(cfg.read_text())["clientConnection"]["kubeconfig"] == "/etc/kubernetes/ssl/kubecfg-kube-scheduler.yaml"
    backups = [p for p in rke_dir.iterdir() if p.name.startswith("cluster.yml.")]
    assert len(backups) == 1 and backups[0].read_text() == (FIXTURES / "rke1-cluster.yml").read_text()
    second = run_playbook(tmp_path, play, env=env)
    assert len(calls.read_text().splitlines()) == 1
    assert second["stats"]["localhost"]["changed"] == 0


def test_role_rke2_restarts_changed_servers_one_at_a_time(tmp_path):
    """Three RKE2 "servers" (local connections, each with its own files); srv2 is converged first. The full run must
    restart srv1 then srv3 - one systemctl restart each, in order, srv2 untouched - and a re-run none.
    systemctl is a stub on PATH (no systemd in the lab); each host's interpreter wrapper tells it which host it is."""
    stub_bin = tmp_path / "bin"
    stub_bin.mkdir()
    log = tmp_path / "systemctl.log"
    (stub_bin / "systemctl").write_text(
        "#!/bin/sh\n"
        "case \"$1\" in\n"
        "  show) printf 'Id=%s.service\\nLoadState=loaded\\nActiveState=active\\nSubState=running\\n' \"$2\" ;;\n"
        "  is-enabled) echo enabled ;;\n"
        f"  restart|start|stop) echo \"$LAB_HOST $1 $2\" >> {log} ;;\n"
        "esac\n")
    (stub_bin / "systemctl").chmod(0o755)
    hosts = {}
    for name in ("srv1", "srv2", "srv3"):
        home = tmp_path / name
        home.mkdir()
        shutil.copy(FIXTURES / "rke2-config.yaml", home / "config.yaml")
        wrapper = home / "python"
        wrapper.write_text(f"#!/bin/sh\nLAB_HOST={name}; export LAB_HOST\nexec {VENV_BIN / 'python'} \"$@\"\n")
        wrapper.chmod(0o755)
        hosts[name] = {"ansible_connection": "local", "ansible_python_interpreter": str(wrapper),
                       "kube_scheduler_extender_config_path": str(home / "gpuops" / "scheduler-policy.json"),
                       "kube_scheduler_extender_rke2_config_file": str(home / "config.yaml")}
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    play = tmp_path / "site.yml"
    play.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "vars": {
        "kube_scheduler_extender_distribution": "rke2",
        "kube_scheduler_extender_kubernetes_version": "v1.22.17+rke2r1",
        "kube_scheduler_extender_rke2_wait_port": 0},
        "roles": ["gpuops.k8s_gpu.kube_scheduler_extender"]}]))
    env = {"PATH": f"{stub_bin}:{VENV_BIN}:{os.environ.get('PATH', '')}"}
    run_playbook(tmp_path, play, "-i", str(inventory), "--limit", "srv2", env=env, inventory=False)
    assert log.read_text().splitlines() == ["srv2 restart rke2-server"]
    run_playbook(tmp_path, play, "-i", str(inventory), env=env, inventory=False)
    assert log.read_text().splitlines() == ["srv2 restart rke2-server", "srv1 restart rke2-server", "srv3 restart rke2-server"]
    for name in hosts:
        cfg = tmp_path / name / "gpuops" / "scheduler-policy.json"
        assert json.loads(cfg.read_text())["kind"] == "Policy"
        conf = yaml.safe_load((tmp_path / name / "config.yaml").read_text())
        assert conf["kube-scheduler-arg"] == ["v=2", "bind-address=0.0.0.0", f"policy-config-file={cfg}"]
        assert conf["kube-scheduler-extra-mount"] == [f"{cfg.parent}:{cfg.parent}:ro"]
        assert conf["token"] == "K10c0ffee::server:deadbeef" and conf["etcd-snapshot-retention"] == 12
    third = run_playbook(tmp_path, play, "-i", str(inventory), env=env, inventory=False)
    assert len(log.read_text().splitlines()) == 3
    assert all(s["changed"] == 0 for s in third["stats"].values()), third["stats"]
