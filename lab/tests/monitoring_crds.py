"""The Prometheus Operator's ServiceMonitor and PrometheusRule CustomResourceDefinitions on the shared real control plane
(`kube_real`): the one place the lab tests of issue #42 (test_gpu_metrics_real, test_gpu_metrics_role_real) install
them; ``ensure`` installs any CRD the same way (test_grafana_dashboard_real's). The CRDs are those of github.com/prometheus-operator/prometheus-operator v0.85.0 (lab/go/prometheus-operator:
files of the module, from the Go module proxy).

They stay installed: cluster-wide, the same for every test, created once (an existing one is kept, 409), never
deleted - a test that needs the monitoring.coreos.com/v1 API served finds it whatever ran before, and a test that
needs it absent must not run on the shared plane.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAMES = ('servicemonitors', 'prometheusrules')


def crds():
    """The two CRDs as dictionaries, in NAMES order."""
    import yaml
    if str(HERE / 'oracles') not in sys.path:
        sys.path.insert(0, str(HERE / 'oracles'))
    from oracle_util import go_set
    d = Path(go_set('prometheus-operator')) / 'files' / 'example' / 'prometheus-operator-crd'
    return [yaml.safe_load((d / ('monitoring.coreos.com_%s.yaml' % n)).read_text()) for n in NAMES]


def install(api):
    """Create both CRDs on the cluster of ``api`` (a kubernetes ApiClient) unless there, wait until each is
    Established, and return a CustomObjectsApi on it."""
    return ensure(api, crds())


def ensure(api, wanted):
    """Create the CustomResourceDefinitions ``wanted`` on the cluster of ``api`` unless there (409: another test or run
    made the same one), wait until each is Established; return a CustomObjectsApi."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from conftest import wait_until
    ext = client.ApiextensionsV1Api(api)
    for crd in wanted:
        try:
            ext.create_custom_resource_definition(crd)
        except ApiException as e:
            if e.status != 409:
                raise
    for crd in wanted:
        name = crd['metadata']['name']
        wait_until('CRD %s established' % name, lambda name=name: [
            c for c in (ext.read_custom_resource_definition(name).status.conditions or [])
            if c.type == 'Established' and c.status == 'True'])
    return client.CustomObjectsApi(api)
