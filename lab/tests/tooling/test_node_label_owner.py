"""Node labels have exactly one writer: role gpu_node_labels, through module gpu_node_labels_apply.

Every task of every role and playbook of the collection is read; a task that sends Node label patches any other way
fails this test, naming the file and the task:
  * k8s_converge given a Node (it writes only a Node's labels), or a stack's node_manifests;
  * kubernetes.core.k8s / k8s_json_patch on a Node with labels (a Node's annotations, e.g. upgrade_driver.yml's
    marker, are not labels);
  * gpu_node_labels_apply outside role gpu_node_labels.
In Python, only the label writer (module_utils/_cluster/node_labels_apply.py) and the MIG-change drain
(module_utils/_cluster/gpu_sharing_drain.py: it pauses and resumes the GPU clients through their deploy labels for the
time of a MIG change, as NVIDIA's mig-manager does, and puts back what it found) call patch_node.

Run: .venv/bin/pytest -q lab/tests/tooling/test_node_label_owner.py   (seconds; no simulator)
"""
import glob
import importlib.util
import os
import re

import yaml

from conftest import ROOT

# The role-conventions checker's reader: its YAML loader (Ansible's !unsafe / !vault tags) and its walk over nested
# task lists (block / rescue / always).
_SPEC = importlib.util.spec_from_file_location('check_role_conventions',
                                               os.path.join(ROOT, 'lab', 'bin', 'check-role-conventions.py'))
conventions = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(conventions)

CONVERGE = {'gpuops.k8s_gpu.k8s_converge', 'k8s_converge'}
K8S = {'kubernetes.core.k8s', 'k8s', 'kubernetes.core.k8s_json_patch', 'k8s_json_patch'}
APPLY = {'gpuops.k8s_gpu.gpu_node_labels_apply', 'gpu_node_labels_apply'}
OWNER = os.path.join('roles', 'gpu_node_labels')
PLAY_LISTS = ('pre_tasks', 'tasks', 'post_tasks', 'handlers')
KIND_NODE = re.compile(r"""kind['"]?\s*[:=]\s*['"]?Node\b""")
PATCH_NODE_ALLOWED = {os.path.join('plugins', 'module_utils', '_cluster', 'node_labels_apply.py'),
                      os.path.join('plugins', 'module_utils', '_cluster', 'gpu_sharing_drain.py')}


def tasks_of(path):
    data = conventions.load(path)
    if not isinstance(data, list):
        return
    if path.startswith(os.path.join(ROOT, 'playbooks')):
        for play in data:
            if isinstance(play, dict):
                for key in PLAY_LISTS:
                    for task in conventions.walk(play.get(key)):
                        yield task
    else:
        for task in conventions.walk(data):
            yield task


def node_label_writes(rel, task):
    """Why ``task`` (in file ``rel``) writes Node labels outside role gpu_node_labels, or None."""
    text = yaml.safe_dump(task, default_flow_style=True, width=10 ** 6)
    modules = set(task) & (CONVERGE | K8S | APPLY)
    if 'node_manifests' in text:
        return 'uses a stack\'s node_manifests (the stack labels go to gpu_node_labels_stacks)'
    if modules & CONVERGE and KIND_NODE.search(text):
        return 'sends a Node to %s (it writes only the labels of a Node)' % ', '.join(sorted(modules))
    if modules & K8S and KIND_NODE.search(text) and 'labels' in text:
        return 'patches the labels of a Node with %s' % ', '.join(sorted(modules))
    if modules & APPLY and not rel.startswith(OWNER + os.sep):
        return 'calls gpu_node_labels_apply outside role gpu_node_labels'
    return None


def collection_task_files():
    files = glob.glob(os.path.join(ROOT, 'roles', '*', 'tasks', '*.yml'))
    files += glob.glob(os.path.join(ROOT, 'roles', '*', 'handlers', '*.yml'))
    files += glob.glob(os.path.join(ROOT, 'playbooks', '*.yml'))
    return sorted(files)


def test_one_writer_of_node_labels_in_roles_and_playbooks():
    files = collection_task_files()
    assert len(files) > 20, files
    problems, owner_calls = [], []
    for path in files:
        rel = os.path.relpath(path, ROOT)
        for task in tasks_of(path):
            why = node_label_writes(rel, task)
            if why:
                problems.append('%s: task %r %s' % (rel, task.get('name'), why))
            if set(task) & APPLY:
                owner_calls.append(rel)
    assert problems == []
    # the one writer is there, exactly once
    assert owner_calls == [os.path.join(OWNER, 'tasks', 'main.yml')]


def test_the_check_sees_a_second_writer():
    """The check is not vacuous: each way of writing Node labels it must catch is caught."""
    stack = 'roles/gpu_sharing_stack/tasks/present.yml'
    assert node_label_writes(stack, {'name': 'x', 'gpuops.k8s_gpu.k8s_converge': {
        'definitions': '{{ gpu_sharing_stack__stack.manifests + gpu_sharing_stack__stack.node_manifests }}'}})
    assert node_label_writes(stack, {'name': 'x', 'kubernetes.core.k8s': {
        'definition': {'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': 'n', 'labels': {'a': 'b'}}}}})
    assert node_label_writes(stack, {'name': 'x', 'kubernetes.core.k8s': {
        'kind': 'Node', 'name': 'n', 'state': 'patched', 'definition': {'metadata': {'labels': {'a': 'b'}}}}})
    assert node_label_writes(stack, {'name': 'x', 'block': [], 'gpuops.k8s_gpu.gpu_node_labels_apply': {'patches': []}})
    assert node_label_writes('playbooks/cluster.yml', {'name': 'x', 'gpuops.k8s_gpu.k8s_converge': {
        'definitions': [{'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': 'n'}}]}})
    # what is allowed: reading Nodes, the owner's patch, other kinds, a Node's annotations
    assert node_label_writes('playbooks/upgrade_driver.yml', {'name': 'x', 'kubernetes.core.k8s': {
        'kind': 'Node', 'name': 'n', 'state': 'patched', 'definition': {'metadata': {'annotations': {'a': 'b'}}}}}) is None
    assert node_label_writes(stack, {'name': 'x', 'kubernetes.core.k8s_info': {'kind': 'Node'}}) is None
    assert node_label_writes(os.path.join(OWNER, 'tasks', 'main.yml'),
                             {'name': 'x', 'gpuops.k8s_gpu.gpu_node_labels_apply': {'patches': []}}) is None
    assert node_label_writes(stack, {'name': 'x', 'gpuops.k8s_gpu.k8s_converge': {
        'definitions': [{'apiVersion': 'v1', 'kind': 'NodeFeatureRule', 'metadata': {'name': 'n'}}]}}) is None


def test_only_the_label_writer_and_the_mig_drain_patch_nodes_in_python():
    callers = []
    for path in glob.glob(os.path.join(ROOT, 'plugins', '**', '*.py'), recursive=True):
        with open(path, encoding='utf-8') as f:
            if '.patch_node(' in f.read():  # a call (kube/rest only defines the method: it sends what it is given)
                callers.append(os.path.relpath(path, ROOT))
    assert set(callers) <= PATCH_NODE_ALLOWED, sorted(set(callers) - PATCH_NODE_ALLOWED)
    assert os.path.join('plugins', 'module_utils', '_cluster', 'node_labels_apply.py') in callers
