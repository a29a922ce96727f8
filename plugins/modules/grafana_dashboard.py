#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: grafana_dashboard
short_description: Provision the collection's GPU sharing dashboard in a Grafana through its dashboard API
version_added: 0.1.0
description:
  - Creates, updates or deletes one dashboard in the Grafana at O(url) through the dashboard API of Grafana 12 and
    later (C(/apis/dashboard.grafana.app/<version>/namespaces/<namespace>/dashboards)), by default the collection's
    GPU sharing dashboard (the same model the role C(gpu_metrics) puts in its dashboard ConfigMap).
  - Writes only what differs. A dashboard with the same uid that the collection did not make (it lacks the label
    C(app.kubernetes.io/managed-by=gpuops.k8s_gpu)) belongs to the site and is refused, named, unless O(force).
  - An update carries the resource version it read, so a change made in Grafana meanwhile fails the task instead of
    being overwritten. Keys of the stored dashboard that the model does not have (defaults Grafana adds) are left
    out of the comparison; an update replaces the whole model.
  - A Grafana without that API (before 12) is refused with what to do instead; the legacy C(/api/dashboards/db) is
    not used (Grafana deprecates it from 13).
author:
  - gpuops.k8s_gpu developers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s_gpu.attributes.actionable
options:
  url:
    description: Base URL of the Grafana (for example V(https://grafana.example.com) or V(https://example.com/grafana)).
    type: str
    required: true
  token:
    description: A Grafana service account token (sent as a Bearer token); it needs to read, create, update and delete dashboards in O(folder).
    type: str
    required: true
  namespace:
    description:
      - The API's namespace - V(default) for the first organisation of a Grafana of your own, V(org-<id>) for another
        organisation, V(stacks-<id>) on Grafana Cloud.
    type: str
    default: default
  api_version:
    description: Version of C(dashboard.grafana.app) to use; V(auto) takes the newest the Grafana serves (V(v1) from Grafana 13, V(v1beta1) in 12).
    type: str
    default: auto
    choices: [auto, v1, v1beta1]
  folder:
    description: Uid of the folder the dashboard goes in; empty for the root.
    type: str
    default: ''
  dashboard:
    description:
      - A dashboard model of your own (with C(uid) and C(title)). When left out, the collection's GPU sharing
        dashboard built with O(dashboard_options).
    type: dict
  dashboard_options:
    description: Options of the collection's dashboard when O(dashboard) is left out.
    type: dict
    default: {}
    suboptions:
      title:
        description: The dashboard's title.
        type: str
        default: GPU sharing (gpuops.k8s_gpu)
      uid:
        description: The dashboard's uid.
        type: str
        default: gpuops-gpu-sharing
      pool_label:
        description: The series label that names the pool.
        type: str
        default: gpuops_io_sharing_pool
      idle_percent:
        description: Activity below this percentage counts as idle.
        type: float
        default: 1.0
      idle_for:
        description: How long a pod's GPU must stay idle to be listed.
        type: str
        default: 1h
  state:
    description: V(present) to create or update the dashboard, V(absent) to delete it.
    type: str
    default: present
    choices: [present, absent]
  force:
    description: Replace or delete a dashboard of that uid even when the collection did not make it.
    type: bool
    default: false
  validate_certs:
    description: Verify the Grafana's TLS certificate.
    type: bool
    default: true
  ca_path:
    description: A CA bundle to verify the Grafana's certificate with.
    type: path
  timeout:
    description: Seconds to wait for each request.
    type: int
    default: 30
'''

EXAMPLES = r'''
- name: Provision the GPU sharing dashboard in the team folder
  gpuops.k8s_gpu.grafana_dashboard:
    url: https://grafana.example.com
    token: "{{ vault_grafana_token }}"
    folder: gpu-team
    dashboard_options:
      idle_for: 2h

- name: Remove it
  gpuops.k8s_gpu.grafana_dashboard:
    url: https://grafana.example.com
    token: "{{ vault_grafana_token }}"
    state: absent
'''

RETURN = r'''
operation:
  description: What was done (or would be, in check mode) - created, updated, deleted or none.
  returned: always
  type: str
  sample: created
uid:
  description: The dashboard's uid (the API object's name).
  returned: always
  type: str
  sample: gpuops-gpu-sharing
api_version:
  description: The version of C(dashboard.grafana.app) used.
  returned: always
  type: str
  sample: v1
namespace:
  description: The API namespace used.
  returned: always
  type: str
resource_version:
  description: The dashboard's resource version after the run (before it, in check mode); null when there is none.
  returned: always
  type: str
'''

import json
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.urls import open_url

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import dashboard as model
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.metrics import grafana


def argument_spec() -> dict:
    return dict(
        url=dict(type='str', required=True),
        token=dict(type='str', required=True, no_log=True),
        namespace=dict(type='str', default='default'),
        api_version=dict(type='str', default='auto', choices=list(grafana.API_VERSIONS)),
        folder=dict(type='str', default=''),
        dashboard=dict(type='dict'),
        dashboard_options=dict(type='dict', default={}, options=dict(
            title=dict(type='str', default='GPU sharing (gpuops.k8s_gpu)'),
            uid=dict(type='str', default=model.UID),
            pool_label=dict(type='str', default=model.POOL_LABEL),
            idle_percent=dict(type='float', default=1.0),
            idle_for=dict(type='str', default='1h'),
        )),
        state=dict(type='str', default='present', choices=['present', 'absent']),
        force=dict(type='bool', default=False),
        validate_certs=dict(type='bool', default=True),
        ca_path=dict(type='path'),
        timeout=dict(type='int', default=30),
    )


def requester(module: AnsibleModule) -> grafana.Request:
    p = module.params
    base = p['url'].rstrip('/')
    headers = {'Accept': 'application/json', 'Content-Type': 'application/json',
               'Authorization': 'Bearer %s' % p['token']}

    def request(method: str, path: str, body: Any) -> tuple[int, Any]:
        data = json.dumps(body) if body is not None else None
        try:
            resp = open_url(base + path, method=method, data=data, headers=headers,
                            validate_certs=p['validate_certs'], ca_path=p['ca_path'], timeout=p['timeout'],
                            http_agent='gpuops.k8s_gpu', follow_redirects='safe')
            status, text = resp.getcode(), resp.read()
        except HTTPError as e:
            status, text = e.code, e.read()
        except (URLError, OSError) as e:
            raise grafana.GrafanaError('url: cannot reach %s%s: %s' % (base, path, to_text(e)))
        try:
            return status, json.loads(to_text(text)) if text else None
        except ValueError:
            return status, {'message': to_text(text)[:200]}
    return request


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    p = module.params
    board = p['dashboard']
    if board is None:
        try:
            board = model.dashboard(**p['dashboard_options'])
        except model.DashboardError as e:
            module.fail_json(msg='dashboard_options.%s' % e)
    try:
        grafana.check_options(p['url'], p['namespace'], p['folder'], p['api_version'], board)
        result = grafana.converge(requester(module), board, namespace=p['namespace'], folder=p['folder'] or None,
                                  state=p['state'], api_version=p['api_version'], force=p['force'],
                                  check_mode=module.check_mode)
    except grafana.GrafanaError as e:
        module.fail_json(msg=str(e))
    diff = result.pop('diff')
    if module._diff:
        result['diff'] = diff
    module.exit_json(**result)


if __name__ == '__main__':
    main()
