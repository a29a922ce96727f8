"""The collection's Grafana dashboard (plugins/module_utils/_cluster/metrics/dashboard.py) against Grafana's own
dashboard schema: grafana-foundation-sdk v0.0.22's types (generated from Grafana's schemas; Apache-2.0; Grafana itself
is AGPL and not used here), driven by lab/go/grafana-dashboard (our program over the SDK's strict decoder, with every
panel and query type registered). Row GRAF-01 of docs/conformance/grafana-dashboard.md.

1. The model, with its defaults and with other options, and the very file the dashboard ConfigMap carries: the strict
   decoder accepts every field (dashboard, variables, panels, their options and Prometheus queries), Validate passes,
   and the SDK writes the model back unchanged - nothing of ours unknown to it, nothing it would add or drop.
2. The model declares the schema version the SDK's types describe (Grafana migrates an older version on load).
3. The oracle can fail: an unknown field anywhere and a required field missing (a time-series legend's `calcs`, which
   the model once lacked) are refused, naming the path.

Run: .venv/bin/pytest -q -p no:xdist lab/tests/oracles/test_grafana_dashboard.py
"""
from __future__ import annotations

import copy
import json
import os
import subprocess

import pytest

from conftest import lab_collections_path
from oracle_util import go_set


def _dashboard_module():
    lab_collections_path(importable=True)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import dashboard
    return dashboard


@pytest.fixture(scope='module')
def check():
    path = os.path.join(go_set('grafana-dashboard'), 'grafana-dashboard-check')
    assert os.access(path, os.X_OK), 'lab/go/build.sh grafana-dashboard made no grafana-dashboard-check'

    def run(model):
        out = subprocess.run([path], input=json.dumps(model), capture_output=True, text=True, timeout=60)
        return out.returncode, (json.loads(out.stdout) if out.returncode == 0 else None), out.stderr
    run.path = path
    return run


def models():
    d = _dashboard_module()
    cm = d.config_map('gpuops-gpu-sharing-dashboard', 'monitoring', labels={'team': 'gpu'}, idle_percent=5,
                      idle_for='30m')
    return {
        'defaults': d.dashboard(),
        'options': d.dashboard(title='GPUs of team A', uid='team-a-gpus', pool_label='pool', idle_percent=2.5,
                               idle_for='2h'),
        'config-map-file': json.loads(cm['data'][d.FILE_NAME]),
    }


@pytest.mark.parametrize('name', sorted(models()))
def test_GRAF_01_grafana_schema_accepts_the_model_and_writes_it_back_unchanged(check, name):
    model = models()[name]
    rc, back, err = check(model)
    assert rc == 0, err
    assert back == model


def test_GRAF_01_the_model_has_the_schema_version_of_the_sdk(check):
    out = subprocess.run([check.path, '--schema-version'], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert _dashboard_module().dashboard()['schemaVersion'] == int(out.stdout)


def test_GRAF_01_the_oracle_refuses_unknown_and_missing_fields(check):
    model = _dashboard_module().dashboard()
    series = next(i for i, p in enumerate(model['panels']) if p['type'] == 'timeseries')
    cases = []
    bad = copy.deepcopy(model)
    bad['panels'][series]['options']['legend'].pop('calcs')
    cases.append((bad, 'panels[%d].options.legend.calcs: required field is missing' % series))
    bad = copy.deepcopy(model)
    bad['panels'][0]['targets'][0]['exprs'] = bad['panels'][0]['targets'][0].pop('expr')
    cases.append((bad, "panels[0].targets[0].Dataquery: unexpected field 'exprs'"))
    bad = copy.deepcopy(model)
    bad['templating']['list'][1]['regexp'] = '.*'
    cases.append((bad, "templating.list[1].VariableModel: unexpected field 'regexp'"))
    bad = copy.deepcopy(model)
    bad['schemaVersion'] = 'forty-two'
    cases.append((bad, 'schemaVersion'))
    for doc, want in cases:
        rc, _, err = check(doc)
        assert rc == 1 and want in err, (want, err)
