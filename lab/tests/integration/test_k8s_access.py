"""The Kubernetes access layer against the lab's API emulator (a stand-in for an API server).

A play that gives the kubeconfig only through module_defaults for the action group gpuops.k8s_gpu.k8s reaches the
emulator with our modules and kubernetes.core's; without it, the same play cannot connect (so the kubeconfig came
from the group and nowhere else).  Nothing skips: a dead emulator or a failed play is a failure.
"""
import json
import os
import subprocess

import pytest
import yaml

from conftest import PLAY_TIMEOUT, ROOT, VENV_BIN, emulator_get, kube_emulator

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-1", "labels": {"site": "kept"}},
        "status": {"allocatable": {"nvidia.com/gpu": "2"}, "capacity": {"nvidia.com/gpu": "2"}}}
# What k8s_objects_info reads in the play below (K8S-08): one object of each kind it serves
SEED = [NODE,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
         "data": {"config.conf": "mode: ipvs"}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hami-tls", "namespace": "kube-system"},
         "type": "kubernetes.io/tls", "data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5"}},
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"}]
READS = [{"key": "nodes", "kind": "Node", "label_selectors": ["site=kept"]},
         {"key": "runtime_classes", "api_version": "node.k8s.io/v1", "kind": "RuntimeClass"},
         {"key": "kube_proxy", "kind": "ConfigMap", "name": "kube-proxy", "namespace": "kube-system"},
         {"key": "secret", "kind": "Secret", "name": "hami-tls", "namespace": "kube-system"},
         {"key": "missing", "kind": "ConfigMap", "name": "volcano-scheduler-configmap", "namespace": "volcano-system"}]


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    with kube_emulator(tmp_path_factory.mktemp("seed"), "k8s-access", SEED) as info:
        yield info


def play(tmp_path, collections_path, defaults, emu_url=""):
    mark = "{{ (lookup('ansible.builtin.url', '%s/_emulator/requests?since=999999999', split_lines=False) | from_json).seq }}"
    tasks = [
        {"name": "label through our converger", "gpuops.k8s_gpu.k8s_converge": {"definitions": [
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-1", "labels": {"gpuops.io/probe": "x"}}}]}},
        {"name": "read through our report", "gpuops.k8s_gpu.gpu_share_report": {}, "register": "report"},
        {"name": "read through kubernetes.core", "kubernetes.core.k8s_info": {"kind": "Node", "api_version": "v1"},
         "register": "nodes"},
        {"name": "mark", "ansible.builtin.set_fact": {"seq_before_reader": mark % emu_url}},
        {"name": "read through our one-run reader", "gpuops.k8s_gpu.k8s_objects_info": {"queries": READS, "version": True}},
        {"name": "show", "ansible.builtin.debug": {"msg": "{{ report.nodes | length }} {{ nodes.resources | length }}"}},
    ]
    p = {"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": tasks}
    if defaults is not None:
        p["module_defaults"] = {"group/gpuops.k8s_gpu.k8s": defaults}
    path = tmp_path / "play.yml"
    path.write_text(yaml.safe_dump([p]))
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith("K8S_AUTH_") and k != "KUBECONFIG")
    home = tmp_path / "home"   # no ~/.kube/config here
    home.mkdir(exist_ok=True)
    env.update(HOME=str(home), ANSIBLE_COLLECTIONS_PATH=collections_path, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
               ANSIBLE_PYTHON_INTERPRETER=os.path.join(VENV_BIN, "python"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_REMOTE_TEMP=str(tmp_path / "rtmp"))
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", "localhost,", str(path)],
                          env=env, capture_output=True, text=True, cwd=ROOT, timeout=PLAY_TIMEOUT)
    doc = json.loads(proc.stdout)
    return proc, [t["hosts"]["localhost"] for t in doc["plays"][0]["tasks"]]


def test_K8S_06_K8S_08_module_defaults_group_reaches_the_emulator(emu, tmp_path, collections_path):
    before = emulator_get(emu, "/_emulator/requests?since=999999999")["seq"]
    proc, results = play(tmp_path, collections_path, {"kubeconfig": emu["kubeconfig"]}, emu["url"])
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    converge, report, info, reader = results[0], results[1], results[2], results[4]
    assert converge["changed"] and converge["updated"] == 1, converge
    assert [n["name"] for n in report["nodes"]] == ["gpu-node-1"], report
    assert [n["metadata"]["name"] for n in info["resources"]] == ["gpu-node-1"], info
    assert [n["metadata"]["name"] for n in reader["objects"]["nodes"]] == ["gpu-node-1"], reader
    node = emulator_get(emu, "/api/v1/nodes/gpu-node-1")
    assert node["metadata"]["labels"] == {"site": "kept", "gpuops.io/probe": "x"}
    reqs = emulator_get(emu, "/_emulator/requests?since=%d" % before)["items"]
    assert [r["resource"] for r in reqs if r["write"]] == ["nodes"], reqs
    # again: nothing to change, no write request
    seq = emulator_get(emu, "/_emulator/requests?since=999999999")["seq"]
    proc, results = play(tmp_path, collections_path, {"kubeconfig": emu["kubeconfig"]}, emu["url"])
    assert proc.returncode == 0 and not results[0]["changed"], results[0]
    again = emulator_get(emu, "/_emulator/requests?since=%d" % seq)["items"]
    assert not [r for r in again if r["write"]], again
    check_reader(emu, results[3]["ansible_facts"]["seq_before_reader"], results[4])


def check_reader(emu, seq, reader):
    """K8S-08: k8s_objects_info through the real kubernetes client's typed APIs: one GET per query and one for
    /version, no discovery, no write; a Secret without its data; a missing named object is an empty list."""
    reqs = emulator_get(emu, "/_emulator/requests?since=%d" % int(seq))["items"]
    assert [(r["method"], r["path"].split("?")[0]) for r in reqs] == [
        ("GET", "/api/v1/nodes"), ("GET", "/apis/node.k8s.io/v1/runtimeclasses"),
        ("GET", "/api/v1/namespaces/kube-system/configmaps/kube-proxy"),
        ("GET", "/api/v1/namespaces/kube-system/secrets/hami-tls"),
        ("GET", "/api/v1/namespaces/volcano-system/configmaps/volcano-scheduler-configmap"), ("GET", "/version")], reqs
    assert reqs[0]["query"].get("labelSelector") == "site=kept", reqs[0]
    assert reader["changed"] is False and reader["version"]["gitVersion"].startswith("v1."), reader
    o = reader["objects"]
    assert [x["metadata"]["name"] for x in o["runtime_classes"]] == ["nvidia"]
    assert o["runtime_classes"][0]["kind"] == "RuntimeClass" and o["runtime_classes"][0]["handler"] == "nvidia"
    assert o["kube_proxy"][0]["data"] == {"config.conf": "mode: ipvs"}
    assert o["secret"][0]["type"] == "kubernetes.io/tls" and "data" not in o["secret"][0], o["secret"]
    assert "a2V5" not in json.dumps(reader)
    assert o["missing"] == [] and reader["api_found"] == dict((q["key"], True) for q in READS)
    assert not [r for r in emulator_get(emu, "/_emulator/requests?since=%d" % seq)["items"] if r["write"]]


def test_K8S_06_without_module_defaults_the_play_cannot_connect(emu, tmp_path, collections_path):
    seq = emulator_get(emu, "/_emulator/requests?since=999999999")["seq"]
    proc, results = play(tmp_path, collections_path, None)
    assert proc.returncode != 0 and results[0].get("failed"), results
    assert "cannot configure the Kubernetes client" in results[0]["msg"], results[0]["msg"]
    assert emulator_get(emu, "/_emulator/requests?since=%d" % seq)["items"] == []


def test_K8S_08_K8S_09_plain_requests_are_what_the_real_typed_apis_send(collections_path):
    """kube/rest sends, for every call the collection makes, the request the installed client's typed API sends for
    the same call: method, URL with its query, Content-Type and body, recorded at the client's REST layer (the
    ApiClient is real, only its rest_client is a recorder). Every kind k8s_objects_info serves maps to such a call;
    the end-to-end reads run in test_K8S_06_K8S_08_module_defaults_group_reaches_the_emulator (check_reader)."""
    import sys
    sys.path.insert(0, collections_path)
    from kubernetes import client
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import read as kube_read, rest

    class Recorder(object):
        def __init__(self):
            self.seen = []
            self.status, self.data, self.reason, self.headers = 200, b"{}", "OK", {}

        def request(self, method, url, headers=None, body=None, **kwargs):
            headers = dict(headers or {})
            ctype = headers.get("Content-Type")
            # the REST layer of the client sends an object body given as a JSON patch as a strategic merge patch
            # (kubernetes/client/rest.py, v37.0.2); the recorder stands in for that layer, so it applies the rule
            if ctype == "application/json-patch+json" and not isinstance(body, list):
                ctype = "application/strategic-merge-patch+json"
            self.seen.append((method, url, ctype, body))
            return self

        # what ApiClient and the typed APIs read from a response
        response = property(lambda self: self)

        def read(self):
            return self.data

        def getheaders(self):
            return {}

    def recorded(build):
        api_client = client.ApiClient(client.Configuration(host="https://api.example:6443"))
        api_client.rest_client = Recorder()
        build(api_client)
        return api_client.rest_client.seen

    evict = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p1", "namespace": "ns1"}}
    calls = [
        ("CoreV1Api", "read_node", ("n1",), {}),
        ("CoreV1Api", "list_node", (), {"label_selector": "a=b", "limit": 500, "_continue": "tok"}),
        ("CoreV1Api", "patch_node", ("n1", {"spec": {"unschedulable": True}}), {}),
        ("CoreV1Api", "patch_node", ("n1", {"metadata": {"labels": {"a": None}}}),
         {"_content_type": "application/merge-patch+json", "dry_run": "All"}),
        ("CoreV1Api", "list_pod_for_all_namespaces", (), {"field_selector": "spec.nodeName=n1", "label_selector": "g=1"}),
        ("CoreV1Api", "list_namespaced_pod", ("ns1",), {"field_selector": "status.phase!=Failed", "limit": 500}),
        ("CoreV1Api", "delete_namespaced_pod", ("p1", "ns1"), {"body": {"gracePeriodSeconds": 3}}),
        ("CoreV1Api", "create_namespaced_pod_eviction", ("p1", "ns1", evict), {}),
        ("VersionApi", "get_code", (), {}),
        ("ResourceV1Api", "list_resource_slice", (), {"field_selector": "spec.nodeName=n1,spec.driver=gpu.nvidia.com"}),
    ]
    for (api_version, kind), (api_name, read_m, list_m, namespaced) in kube_read.KINDS.items():
        ns = ("kube-system",) if namespaced else ()
        calls.append((api_name, read_m, ("obj",) + ns, {}))
        calls.append((api_name, list_m, ns, {"label_selector": "x=y"}))
    for api_name, method, args, kwargs in calls:
        typed = recorded(lambda c: getattr(getattr(client, api_name)(c), method)(*args, _preload_content=False, **kwargs))
        plain = recorded(lambda c: getattr(getattr(rest, api_name)(c), method)(*args, _preload_content=False, **kwargs))
        assert len(typed) == 1 and plain == typed, (method, args, kwargs, typed, plain)
    assert sorted(k for dummy, k in kube_read.KINDS) == ["ConfigMap", "CustomResourceDefinition", "DeviceClass", "Node",
                                                         "ResourceSlice", "RuntimeClass", "Secret",
                                                         "ValidatingAdmissionPolicy"]
