"""Module gpuops.k8s_gpu.grafana_dashboard against a real API server serving Grafana's dashboard API group.

Grafana 12 and later serve their dashboard API (/apis/dashboard.grafana.app/<version>/namespaces/<ns>/dashboards)
with Kubernetes' API server library; Grafana itself is AGPL and not in the lab. The stand-in: the shared real
kube-apiserver 1.37 (lab/kube/real.py) with a CustomResourceDefinition for dashboards.dashboard.grafana.app, versions
v1 and v1beta1, the spec left open. What it shows is that library's side of the protocol, as Grafana answers through
it: discovery of the group and its versions, GET/POST/PUT/DELETE of a namespaced object, 404 for an absent one, the
resourceVersion an update must carry, 403 Status objects for a token without the right, bearer tokens. What it cannot
show: Grafana's own checks of the dashboard model (the lab checks the model against Grafana's schema types instead:
lab/tests/oracles/test_grafana_dashboard.py), its folders, its namespaces per organisation, its service account
tokens and permissions (here a ServiceAccount token and RBAC), and the defaults Grafana adds to a stored model (the
module compares only the model's own keys).

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_grafana_dashboard_real.py
"""
from __future__ import annotations

import json
import os

import pytest

import monitoring_crds  # lab/tests: the shared plane's CRDs
from conftest import lab_collections_path, run_module, wait_until

SUFFIX = '%d' % os.getpid()
UID = 'gpuops-test-%s' % SUFFIX
SITE_UID = 'site-board-%s' % SUFFIX
GROUP, NS = 'dashboard.grafana.app', 'default'
WRITER, READER = 'grafana-writer-%s' % SUFFIX, 'grafana-reader-%s' % SUFFIX
CRD = {
    'apiVersion': 'apiextensions.k8s.io/v1', 'kind': 'CustomResourceDefinition',
    'metadata': {'name': 'dashboards.%s' % GROUP},
    'spec': {'group': GROUP, 'scope': 'Namespaced',
             'names': {'plural': 'dashboards', 'singular': 'dashboard', 'kind': 'Dashboard', 'listKind': 'DashboardList'},
             'versions': [{'name': v, 'served': True, 'storage': v == 'v1',
                           'schema': {'openAPIV3Schema': {'type': 'object', 'properties': {
                               'spec': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True}}}}}
                          for v in ('v1', 'v1beta1')]},
}


@pytest.fixture(scope='module')
def grafana(kube_real):
    from kubernetes import client
    from kubernetes.client.rest import ApiException
    api = kube_real.api()
    ext, core, rbac = client.ApiextensionsV1Api(api), client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    co = monitoring_crds.ensure(api, [CRD])
    tokens = {}
    for name, verbs in ((WRITER, ['get', 'create', 'update', 'delete']), (READER, ['get'])):
        core.create_namespaced_service_account(NS, {'metadata': {'name': name}})
        rbac.create_namespaced_role(NS, {'metadata': {'name': name}, 'rules': [
            {'apiGroups': [GROUP], 'resources': ['dashboards'], 'verbs': verbs}]})
        rbac.create_namespaced_role_binding(NS, {'metadata': {'name': name}, 'roleRef': {
            'apiGroup': 'rbac.authorization.k8s.io', 'kind': 'Role', 'name': name},
            'subjects': [{'kind': 'ServiceAccount', 'name': name, 'namespace': NS}]})
        tokens[name] = core.create_namespaced_service_account_token(
            name, NS, {'spec': {'expirationSeconds': 3600}}).status.token
    # the RBAC authorizer reads bindings from an informer: wait until it sees both (a binding created a moment ago may
    # not be seen yet), so that the first request of a test is not refused for that
    authz = client.AuthorizationV1Api(api)
    for name, verb in ((WRITER, 'create'), (READER, 'get')):
        wait_until('RoleBinding %s seen by the RBAC authorizer' % name, lambda name=name, verb=verb: authz.create_subject_access_review({
            'spec': {'user': 'system:serviceaccount:%s:%s' % (NS, name), 'resourceAttributes': {
                'namespace': NS, 'verb': verb, 'group': GROUP, 'resource': 'dashboards'}}}).status.allowed, 30)
    try:
        yield {'co': co, 'url': kube_real.server, 'ca': kube_real.ca, 'tokens': tokens}
    finally:
        for uid in (UID, SITE_UID):
            try:
                co.delete_namespaced_custom_object(GROUP, 'v1', NS, 'dashboards', uid)
            except ApiException as e:
                if e.status != 404:
                    raise
        for name in (WRITER, READER):
            rbac.delete_namespaced_role_binding(name, NS)
            rbac.delete_namespaced_role(name, NS)
            core.delete_namespaced_service_account(name, NS)
        ext.delete_custom_resource_definition(CRD['metadata']['name'])   # no other file uses the group


def module(g, check=False, diff=False, token=WRITER, **args):
    params = {'url': g['url'], 'token': g['tokens'][token], 'ca_path': g['ca'],
              'dashboard_options': {'uid': UID, 'idle_for': '2h'}}
    params.update(args)
    env = {'ANSIBLE_DIFF_ALWAYS': '1'} if diff else None
    return run_module(lab_collections_path(), 'gpuops.k8s_gpu.grafana_dashboard', json.dumps(params), env=env,
                      check=check)


def stored(g, uid=UID):
    from kubernetes.client.rest import ApiException
    try:
        return g['co'].get_namespaced_custom_object(GROUP, 'v1', NS, 'dashboards', uid)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def model(**options):
    lab_collections_path(importable=True)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import dashboard
    return dashboard.dashboard(**options)


def test_GRAF_02_create_rerun_update_refuse_and_delete(grafana):
    g = grafana
    r = module(g, check=True, folder='gpu-team')
    assert r.get('failed') is not True and (r['changed'], r['operation'], r['api_version']) == (True, 'created', 'v1'), r
    assert stored(g) is None

    r = module(g, folder='gpu-team')
    assert r.get('failed') is not True and (r['changed'], r['operation']) == (True, 'created'), r
    obj = stored(g)
    want = model(uid=UID, idle_for='2h')
    for key in ('uid', 'id', 'version'):   # the object's name, and what Grafana assigns itself
        want.pop(key, None)
    assert obj['spec'] == want
    assert obj['metadata']['labels'] == {'app.kubernetes.io/managed-by': 'gpuops.k8s_gpu'}
    assert obj['metadata']['annotations'] == {'grafana.app/folder': 'gpu-team'}
    assert r['resource_version'] == obj['metadata']['resourceVersion']

    r = module(g, folder='gpu-team')
    assert (r['changed'], r['operation']) == (False, 'none'), r
    assert stored(g)['metadata']['resourceVersion'] == obj['metadata']['resourceVersion']   # nothing written

    # edited in "Grafana" (another client): the module writes its model back, with the version it read
    obj['spec']['title'] = 'edited'
    g['co'].replace_namespaced_custom_object(GROUP, 'v1', NS, 'dashboards', UID, obj)
    r = module(g, diff=True, folder='gpu-team')
    assert (r['changed'], r['operation']) == (True, 'updated'), r
    assert r['diff']['before']['spec']['title'] == 'edited' and r['diff']['after']['spec']['title'] == want['title']
    assert stored(g)['spec']['title'] == want['title']

    # the v1beta1 version of the group, named
    r = module(g, api_version='v1beta1', folder='gpu-team')
    assert (r['changed'], r['api_version']) == (False, 'v1beta1'), r

    # a token that may only read: the write is refused by the real authorizer, named
    obj = stored(g)
    obj['spec']['refresh'] = '5s'
    g['co'].replace_namespaced_custom_object(GROUP, 'v1', NS, 'dashboards', UID, obj)
    r = module(g, token=READER, folder='gpu-team')
    assert r.get('failed') is True and 'updating dashboard %s failed (HTTP 403' % UID in r['msg'] \
        and 'cannot update resource "dashboards"' in r['msg'], r

    # the site's own dashboard of that uid: refused, named; replaced with force
    g['co'].create_namespaced_custom_object(GROUP, 'v1', NS, 'dashboards', {
        'apiVersion': '%s/v1' % GROUP, 'kind': 'Dashboard', 'metadata': {'name': SITE_UID},
        'spec': {'title': 'The site board', 'schemaVersion': 42}})
    r = module(g, dashboard_options={'uid': SITE_UID})
    assert r.get('failed') is True and "%s ('The site board') in default was not made by gpuops.k8s_gpu" % SITE_UID \
        in r['msg'], r
    assert stored(g, SITE_UID)['spec']['title'] == 'The site board'
    r = module(g, state='absent', dashboard_options={'uid': SITE_UID})
    assert r.get('failed') is True and 'set force to delete it' in r['msg'], r
    r = module(g, force=True, dashboard_options={'uid': SITE_UID})
    assert r['operation'] == 'updated' and stored(g, SITE_UID)['spec']['panels'], r

    for uid in (UID, SITE_UID):
        r = module(g, state='absent', dashboard_options={'uid': uid})
        assert (r['changed'], r['operation']) == (True, 'deleted'), r
        assert stored(g, uid) is None
    r = module(g, state='absent')
    assert (r['changed'], r['operation']) == (False, 'none'), r


def test_bad_input_is_refused_before_any_request(grafana):
    r = module(grafana, namespace='org1')
    assert r.get('failed') is True and 'namespace must be "default", "org-<id>" or "stacks-<id>"' in r['msg'], r
    r = module(grafana, url='https://127.0.0.1:1', dashboard_options={'uid': UID})
    assert r.get('failed') is True and r['msg'].startswith('url: cannot reach https://127.0.0.1:1/apis/'), r


def test_GRAF_02_role_gpu_metrics_provisions_the_dashboard_in_the_named_grafana(grafana, kube_real, tmp_path):
    """Role gpu_metrics with gpu_metrics_grafana_url: the dashboard ConfigMap and the dashboard in the Grafana, then
    state absent removes both. The role checks the Grafana (check mode) before any write: a site's dashboard of that
    uid stops the run with nothing written."""
    from kubernetes import client
    from conftest import new_namespace, run_role_on_localhost
    ns = 'grafana-role-%s' % SUFFIX
    core = client.CoreV1Api(kube_real.api())
    new_namespace(core, ns)
    try:
        variables = {'gpu_metrics_pools': [], 'gpu_metrics_namespace': ns, 'gpu_metrics_rules': False,
                     'gpu_metrics_monitoring': 'annotations', 'gpuops_k8s_kubeconfig': kube_real.kubeconfig,
                     'gpu_metrics_grafana_url': grafana['url'], 'gpu_metrics_grafana_token': grafana['tokens'][WRITER],
                     'gpu_metrics_grafana_ca_path': grafana['ca'], 'gpu_metrics_grafana_folder': 'gpu-team'}
        for step in ('refused', 'present', 'absent'):
            (tmp_path / step).mkdir()
        # the site's dashboard holds the collection's uid: the run stops before it writes anything
        g = grafana
        g['co'].create_namespaced_custom_object(GROUP, 'v1', NS, 'dashboards', {
            'apiVersion': '%s/v1' % GROUP, 'kind': 'Dashboard', 'metadata': {'name': 'gpuops-gpu-sharing'},
            'spec': {'title': 'The site board', 'schemaVersion': 42}})
        try:
            proc, _ = run_role_on_localhost(lab_collections_path(), tmp_path / 'refused', 'gpu_metrics', variables)
            assert proc.returncode != 0 and 'was not made by gpuops.k8s_gpu' in proc.stdout, proc.stdout[-3000:]
            assert [c.metadata.name for c in core.list_namespaced_config_map(ns).items] == ['kube-root-ca.crt']
        finally:
            g['co'].delete_namespaced_custom_object(GROUP, 'v1', NS, 'dashboards', 'gpuops-gpu-sharing')

        proc, doc = run_role_on_localhost(lab_collections_path(), tmp_path / 'present', 'gpu_metrics', variables)
        assert proc.returncode == 0, proc.stdout[-3000:]
        board = stored(g, 'gpuops-gpu-sharing')
        assert board['metadata']['annotations'] == {'grafana.app/folder': 'gpu-team'}
        assert board['spec']['title'] == model()['title']
        assert 'gpuops-gpu-dashboard' in [c.metadata.name for c in core.list_namespaced_config_map(ns).items]

        proc, doc = run_role_on_localhost(lab_collections_path(), tmp_path / 'absent', 'gpu_metrics',
                                          dict(variables, gpu_metrics_state='absent'))
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert stored(g, 'gpuops-gpu-sharing') is None
        assert [c.metadata.name for c in core.list_namespaced_config_map(ns).items] == ['kube-root-ca.crt']
    finally:
        core.delete_namespace(ns)
