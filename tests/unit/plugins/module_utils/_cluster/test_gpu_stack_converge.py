# -*- coding: utf-8 -*-
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube.converger import desired_hash, is_subset, with_hash


def test_subset_and_quantities():
    assert is_subset({'a': {'b': 1}}, {'a': {'b': '1', 'c': 2}})
    assert is_subset({'l': [{'n': 'x'}]}, {'l': [{'n': 'x', 'p': 'TCP'}]})
    assert not is_subset({'l': [{'n': 'x'}]}, {'l': [{'n': 'x'}, {'n': 'y'}]})
    assert not is_subset({'a': True}, {'a': 'true'})
    assert not is_subset({'a': 'x'}, {})


def test_hash_is_stable_and_ignores_itself():
    d = {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'x'}, 'data': {'k': 'v'}}
    h = with_hash(d, 'gpuops.io/desired-hash')
    assert desired_hash(h, 'gpuops.io/desired-hash') == desired_hash(d, 'gpuops.io/desired-hash')
    assert h['metadata']['annotations']['gpuops.io/desired-hash'] == desired_hash(d, 'gpuops.io/desired-hash')
