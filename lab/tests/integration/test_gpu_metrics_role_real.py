"""Role gpu_metrics on the lab's real API server (the shared `kube_real` cluster, kube-apiserver 1.37): the exporters of
two pools, the alert rules and the dashboard; the Prometheus Operator's CRDs (prometheus-operator v0.85.0, from the Go
module proxy) installed, so `gpu_metrics_monitoring: auto` finds them and makes ServiceMonitors and a PrometheusRule.
A re-run writes nothing (counted in the audit log), a pool left out of the list keeps its exporter (pruning is per
pool: another inventory may own it) until state absent names it, and state absent removes every object the role made.
A switch of the monitoring form (forced, while the Operator's API stays served) leaves exactly one form: the other
one's objects are pruned or removed. A pool whose strategy changes (time-slicing -> mig -> dra -> exclusive) holds
exactly the new strategy's objects after each converge. The CRDs come from lab/tests/monitoring_crds (left installed on the shared plane).
Everything else lives in this file's own namespace.

No exporter container runs here (the DaemonSet selects GPU nodes of the pools' labels; none carries them): what the
exporter does on a node is DCGM's (docs/observability.md says what the lab cannot show).

Run: .venv/bin/pytest -q -p no:xdist lab/tests/integration/test_gpu_metrics_role_real.py
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import monitoring_crds
from conftest import new_namespace, run_role_on_localhost

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / 'build' / 'collections'))
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import exporter  # noqa: E402

S = '%d' % os.getpid()
NS = 'metrics-%s' % S
USER = 'gpuops-test-metrics-role-%s' % S
POOLS = [{'name': 'met-ex-%s' % S, 'strategy': 'exclusive'}, {'name': 'met-ts-%s' % S, 'strategy': 'time-slicing'}]
# the pool whose strategy changes (test_a_strategy_change_...)
MOVING = 'met-sc-%s' % S


@pytest.fixture(scope='module')
def cluster(kube_real):
    from kubernetes import client
    from kubernetes.client.rest import ApiException
    api = kube_real.api()
    custom = monitoring_crds.install(api)
    core = client.CoreV1Api(api)
    new_namespace(core, NS)
    try:
        yield {'kube': kube_real, 'kubeconfig': kube_real.user(USER, reads=True), 'core': core,
               'apps': client.AppsV1Api(api), 'custom': custom,
               'rbac': client.RbacAuthorizationV1Api(api)}
    finally:
        core.delete_namespace(NS)
        rbac = client.RbacAuthorizationV1Api(api)
        for pool in [p['name'] for p in POOLS] + [MOVING]:
            for call in (rbac.delete_cluster_role, rbac.delete_cluster_role_binding):
                try:
                    call('gpuops-dcgm-exporter-%s' % pool)   # the dra pools' (exporter.render)
                except ApiException:
                    pass


def role(collections_path, tmp_path, cluster, **variables):
    proc, doc = run_role_on_localhost(collections_path, tmp_path, 'gpu_metrics', dict({
        'gpu_metrics_pools': POOLS, 'gpu_metrics_namespace': NS, 'gpuops_k8s_kubeconfig': cluster['kubeconfig'],
        'gpu_metrics_registry': 'mirror.example.com/nvcr'}, **variables))
    return proc, doc


def state(cluster):
    """What of the role's is in the namespace: {kind: sorted names}."""
    def names(items):
        return sorted(i['metadata']['name'] if isinstance(i, dict) else i.metadata.name for i in items)
    return {
        'DaemonSet': names(cluster['apps'].list_namespaced_daemon_set(NS).items),
        'Service': names(cluster['core'].list_namespaced_service(NS).items),
        'ConfigMap': [n for n in names(cluster['core'].list_namespaced_config_map(NS).items)
                      if n != 'kube-root-ca.crt'],
        'ServiceMonitor': names(cluster['custom'].list_namespaced_custom_object(
            'monitoring.coreos.com', 'v1', NS, 'servicemonitors')['items']),
        'PrometheusRule': names(cluster['custom'].list_namespaced_custom_object(
            'monitoring.coreos.com', 'v1', NS, 'prometheusrules')['items']),
    }


def result(doc):
    tasks = [t for play in doc['plays'] for t in play['tasks']]
    return [t['hosts']['localhost'] for t in tasks if t['task']['name'].endswith('Publish what the role did')][0][
        'ansible_facts']['gpu_metrics_result']


def test_present_rerun_prune_and_absent(collections_path, tmp_path, cluster):
    kube = cluster['kube']
    ex, ts = ('dcgm-exporter-%s' % p['name'] for p in POOLS)
    proc, doc = role(collections_path, tmp_path, cluster)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert result(doc)['monitoring'] is True and result(doc)['changed'] is True
    assert state(cluster) == {'DaemonSet': [ex, ts], 'Service': [ex, ts],
                              'ConfigMap': sorted([ex, ts, 'gpuops-gpu-dashboard']),
                              'ServiceMonitor': [ex, ts], 'PrometheusRule': ['gpuops-gpu-alerts']}
    ds = cluster['apps'].read_namespaced_daemon_set(ts, NS)
    assert ds.spec.template.spec.containers[0].image.startswith('mirror.example.com/nvcr/')
    assert ds.spec.template.spec.host_pid is True                      # time-slicing: per-process attribution
    # a re-run writes nothing
    since = kube.mark()
    proc, doc = role(collections_path, tmp_path, cluster)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert kube.writes(since, kube.mark(), user=USER) == [] and result(doc)['changed'] is False
    # the time-slicing pool leaves this inventory's list: its exporter stays (the role prunes per pool - another
    # inventory sharing the namespace may own it, as with the sharing stacks); uninstall.yml (state absent with that
    # pool) removes it. The other pool's objects and the cluster objects are unchanged: nothing written.
    since = kube.mark()
    proc, doc = role(collections_path, tmp_path, cluster, gpu_metrics_pools=POOLS[:1])
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert kube.writes(since, kube.mark(), user=USER) == [] and state(cluster)['DaemonSet'] == [ex, ts]
    proc, doc = role(collections_path, tmp_path, cluster, gpu_metrics_state='absent', gpu_metrics_pools=POOLS[1:],
                     gpu_metrics_rules=False, gpu_metrics_dashboard=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert state(cluster) == {'DaemonSet': [ex], 'Service': [ex], 'ConfigMap': sorted([ex, 'gpuops-gpu-dashboard']),
                              'ServiceMonitor': [ex], 'PrometheusRule': ['gpuops-gpu-alerts']}
    # absent with the rules and the dashboard: everything of the role goes
    proc, doc = role(collections_path, tmp_path, cluster, gpu_metrics_state='absent', gpu_metrics_pools=POOLS[:1])
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert state(cluster) == {'DaemonSet': [], 'Service': [], 'ConfigMap': [], 'ServiceMonitor': [],
                              'PrometheusRule': []}


def test_DCGMX_14_a_switch_of_form_leaves_exactly_one_form(collections_path, tmp_path, cluster):
    """The Operator's API stays served (the shared plane's CRDs); the form is forced: servicemonitor -> annotations ->
    servicemonitor. After each step exactly one form exists (the ServiceMonitor or the Service's scrape annotations;
    the PrometheusRule or the rules ConfigMap) and a re-run after the first switch writes nothing (the first form's re-run is
    test_present_rerun_prune_and_absent's: auto with the CRDs is that form); state absent with annotations forced still
    removes the ServiceMonitor form's objects (the API is served)."""
    kube = cluster['kube']
    ex = 'dcgm-exporter-%s' % POOLS[0]['name']
    scrape = ('prometheus.io/scrape', 'prometheus.io/port', 'prometheus.io/path')
    forms = {
        'servicemonitor': {'DaemonSet': [ex], 'Service': [ex], 'ConfigMap': sorted([ex, 'gpuops-gpu-dashboard']),
                           'ServiceMonitor': [ex], 'PrometheusRule': ['gpuops-gpu-alerts']},
        'annotations': {'DaemonSet': [ex], 'Service': [ex],
                        'ConfigMap': sorted([ex, 'gpuops-gpu-alerts', 'gpuops-gpu-dashboard']),
                        'ServiceMonitor': [], 'PrometheusRule': []}}
    for step, form in enumerate(('servicemonitor', 'annotations', 'servicemonitor')):
        proc, doc = role(collections_path, tmp_path, cluster, gpu_metrics_monitoring=form, gpu_metrics_pools=POOLS[:1])
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert result(doc)['monitoring'] is (form == 'servicemonitor')
        assert state(cluster) == forms[form], form
        annotations = cluster['core'].read_namespaced_service(ex, NS).metadata.annotations or {}
        assert [a for a in scrape if a in annotations] == ([] if form == 'servicemonitor' else list(scrape)), form
        if step != 1:   # one re-run, after the switch away from the first form
            continue
        since = kube.mark()
        proc, doc = role(collections_path, tmp_path, cluster, gpu_metrics_monitoring=form, gpu_metrics_pools=POOLS[:1])
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert kube.writes(since, kube.mark(), user=USER) == [] and result(doc)['changed'] is False, form
    proc, _doc = role(collections_path, tmp_path, cluster, gpu_metrics_monitoring='annotations',
                      gpu_metrics_pools=POOLS[:1], gpu_metrics_state='absent')
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert state(cluster) == {'DaemonSet': [], 'Service': [], 'ConfigMap': [], 'ServiceMonitor': [],
                              'PrometheusRule': []}


def test_bad_input_is_refused_before_any_write(collections_path, tmp_path, cluster):
    since = cluster['kube'].mark()
    proc, _doc = role(collections_path, tmp_path, cluster, gpu_metrics_monitoring='prometheus')
    assert proc.returncode != 0 and 'gpu_metrics_monitoring' in proc.stdout and 'auto' in proc.stdout
    proc, _doc = role(collections_path, tmp_path, cluster, gpu_metrics_rules_options={'thresold': 1})
    assert proc.returncode != 0 and 'unknown key(s) thresold' in proc.stdout, proc.stdout[-2000:]
    assert cluster['kube'].writes(since, cluster['kube'].mark(), user=USER) == []


HAMI_POOLS = [{'name': 'met-hb-%s' % S, 'strategy': 'hami', 'settings': {'gpu_sharing_stack_namespace': NS}},
              {'name': 'met-ha-%s' % S, 'strategy': 'hami', 'settings': {'gpu_sharing_stack_namespace': NS}}]


def test_STKM_10_hami_pools_get_their_monitor_and_the_scheduler_once(collections_path, tmp_path, cluster):
    """Two HAMi pools: each its vGPU monitor's Service and ServiceMonitor, HAMi's scheduler once - by the first pool of
    the stack in gpu_metrics_pools (met-hb, listed first though it sorts after met-ha) - in the stack's namespace (the
    pools' settings); no dcgm-exporter. A re-run writes nothing (no pool takes the scheduler's objects from the other);
    state absent removes them all."""
    kube = cluster['kube']
    first, second = (p['name'] for p in HAMI_POOLS)
    want = sorted(['hami-monitor-%s' % first, 'hami-monitor-%s' % second, 'hami-scheduler-metrics'])
    extra = {'gpu_metrics_pools': HAMI_POOLS, 'gpu_metrics_rules': False, 'gpu_metrics_dashboard': False}
    proc, doc = role(collections_path, tmp_path, cluster, **extra)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert state(cluster) == {'DaemonSet': [], 'Service': want, 'ConfigMap': [], 'ServiceMonitor': want,
                              'PrometheusRule': []}
    svc = cluster['core'].read_namespaced_service('hami-scheduler-metrics', NS)
    assert svc.metadata.labels['gpuops.io/sharing-pool'] == first and svc.spec.selector == {
        'app.kubernetes.io/name': 'hami-scheduler'}
    mon = cluster['custom'].get_namespaced_custom_object('monitoring.coreos.com', 'v1', NS, 'servicemonitors',
                                                         'hami-monitor-%s' % second)
    assert mon['spec']['endpoints'][0]['honorLabels'] is True
    since = kube.mark()
    proc, doc = role(collections_path, tmp_path, cluster, **extra)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert kube.writes(since, kube.mark(), user=USER) == [] and result(doc)['changed'] is False
    proc, doc = role(collections_path, tmp_path, cluster, gpu_metrics_state='absent', **extra)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert state(cluster)['Service'] == [] and state(cluster)['ServiceMonitor'] == []


def pool_objects(cluster, pool):
    """Every object of one pool's exporter on the server, as {(kind, name)}: the namespaced ones in NS, the RBAC by the
    pool label (cluster-scoped)."""
    sel = 'gpuops.io/sharing-pool=%s' % pool
    core, apps, rbac = cluster['core'], cluster['apps'], cluster['rbac']
    found = [('ServiceAccount', core.list_namespaced_service_account(NS, label_selector=sel).items),
             ('ConfigMap', core.list_namespaced_config_map(NS, label_selector=sel).items),
             ('DaemonSet', apps.list_namespaced_daemon_set(NS, label_selector=sel).items),
             ('Service', core.list_namespaced_service(NS, label_selector=sel).items),
             ('ClusterRole', rbac.list_cluster_role(label_selector=sel).items),
             ('ClusterRoleBinding', rbac.list_cluster_role_binding(label_selector=sel).items)]
    out = set((kind, i.metadata.name) for kind, items in found for i in items)
    out |= set(('ServiceMonitor', i['metadata']['name']) for i in cluster['custom'].list_namespaced_custom_object(
        'monitoring.coreos.com', 'v1', NS, 'servicemonitors', label_selector=sel)['items'])
    return out


def test_a_strategy_change_leaves_the_new_strategys_exporter_only(collections_path, tmp_path, cluster):
    """One pool through time-slicing -> dra -> exclusive (the role with the CRDs served, form auto): after each
    converge the pool's objects on the server are exactly those render gives for the new strategy (the dra step's
    RBAC pruned after it), the DaemonSet's pod spec (env, node selector, hostPID, token) is render's, and a re-run
    after the dra step (the most objects) writes nothing. (mig renders as exclusive but for one node label: left out
    to keep the file's CPU down.)"""
    kube = cluster['kube']
    api = kube.api()
    for strategy in ('time-slicing', 'dra', 'exclusive'):
        pools = [{'name': MOVING, 'strategy': strategy}]
        proc, doc = role(collections_path, tmp_path, cluster, gpu_metrics_pools=pools, gpu_metrics_rules=False,
                         gpu_metrics_dashboard=False)
        assert proc.returncode == 0, proc.stdout[-3000:]
        want = exporter.render({'strategy': strategy, 'pool': MOVING, 'namespace': NS,
                                'registry': 'mirror.example.com/nvcr', 'monitoring_api': True})
        assert pool_objects(cluster, MOVING) == set((o['kind'], o['metadata']['name']) for o in want['objects']), \
            strategy
        [ds] = [o for o in want['objects'] if o['kind'] == 'DaemonSet']
        live = api.sanitize_for_serialization(cluster['apps'].read_namespaced_daemon_set(ds['metadata']['name'], NS))
        w, g = ds['spec']['template']['spec'], live['spec']['template']['spec']
        assert g['containers'][0]['env'] == w['containers'][0]['env'], strategy
        for key in ('nodeSelector', 'hostPID', 'automountServiceAccountToken', 'runtimeClassName'):
            assert g.get(key) == w.get(key), (strategy, key)
        if strategy != 'dra':
            continue
        since = kube.mark()
        proc, doc = role(collections_path, tmp_path, cluster, gpu_metrics_pools=pools, gpu_metrics_rules=False,
                         gpu_metrics_dashboard=False)
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert kube.writes(since, kube.mark(), user=USER) == [] and result(doc)['changed'] is False, strategy
    proc, _doc = role(collections_path, tmp_path, cluster, gpu_metrics_state='absent', gpu_metrics_rules=False,
                      gpu_metrics_dashboard=False, gpu_metrics_pools=[{'name': MOVING, 'strategy': 'exclusive'}])
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert pool_objects(cluster, MOVING) == set()
