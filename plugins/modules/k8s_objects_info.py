#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: k8s_objects_info
short_description: Read several Kubernetes objects, and the API server's version, in one module run
version_added: 0.1.0
description:
  - Reads every query of O(queries) (a named object, or a list, optionally by label selector) and, with O(version),
    the API server's C(/version), through one client of the kubernetes.core connection layer. One request per
    query and no API discovery, so a role that needs Nodes, RuntimeClasses and a ConfigMap pays for one module
    process instead of one C(kubernetes.core.k8s_info) run per kind.
  - Reads only the kinds the collection needs; any other kind is refused before any request, naming the supported
    ones.
  - A named object that does not exist gives an empty list, as C(kubernetes.core.k8s_info) does.
  - Secrets come back without C(data) and C(stringData) (metadata and type only), so a registered result never holds
    their content.
author:
  - gpuops.k8s_gpu developers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s_gpu.attributes.info_module
  - gpuops.k8s_gpu.k8s_auth_options
options:
  queries:
    description: What to read. Each query's result is under its O(queries[].key) in RV(objects).
    type: list
    elements: dict
    default: []
    suboptions:
      key:
        description: Name of this query's result in RV(objects) and RV(api_found); unique.
        type: str
        required: true
      api_version:
        description: API version of the kind.
        type: str
        default: v1
      kind:
        description: V(Node), V(ConfigMap) or V(Secret) (C(v1)), V(RuntimeClass) (C(node.k8s.io/v1)), V(DeviceClass)
          or V(ResourceSlice) (C(resource.k8s.io/v1); a server without that API answers an empty list, RV(api_found)
          false), V(CustomResourceDefinition) (C(apiextensions.k8s.io/v1); by name, whether an API such as
          C(monitoring.coreos.com/v1) is installed), or V(ValidatingAdmissionPolicy)
          (C(admissionregistration.k8s.io/v1)).
        type: str
        required: true
      name:
        description: Read this one object; without it the query lists the kind.
        type: str
      namespace:
        description: Namespace of a namespaced kind (required for them, refused for cluster-scoped ones).
        type: str
      label_selectors:
        description: Label selectors of a list (joined with commas); not with O(queries[].name).
        type: list
        elements: str
      field_selectors:
        description:
          - Field selectors of a list (joined with commas), for example V(spec.nodeName=gpu-1) for ResourceSlices;
            not with O(queries[].name). The API server refuses a field it does not index for the kind.
        type: list
        elements: str
  version:
    description: Also read the API server's version (C(/version)) into RV(version).
    type: bool
    default: false
  fields:
    description:
      - Per query key, the dotted paths of each object to return (for example V(metadata.labels),
        V(status.allocatable)); C(apiVersion), C(kind) and C(metadata.name) are always returned, a path an object does
        not have is left out. Query keys not named here come back whole.
      - Keeps the registered result small when a caller needs a few fields of many objects (every Node of a large
        cluster); the requests are the same.
    type: dict
    default: {}
requirements:
  - kubernetes (Python client)
  - kubernetes.core collection (its client configuration)
notes:
  - "RBAC: C(get) on each named object, C(list) on each listed kind (no discovery requests)."
seealso:
  - module: kubernetes.core.k8s_info
  - module: kubernetes.core.k8s_cluster_info
'''

EXAMPLES = r'''
- name: Read what a sharing stack needs from the cluster, in one run
  gpuops.k8s_gpu.k8s_objects_info:
    queries:
      - {key: nodes, kind: Node}
      - {key: runtime_classes, api_version: node.k8s.io/v1, kind: RuntimeClass}
      - {key: kube_proxy, kind: ConfigMap, name: kube-proxy, namespace: kube-system}
    version: true
  register: live

- name: Only the labels and allocatable resources of every Node
  gpuops.k8s_gpu.k8s_objects_info:
    queries:
      - {key: nodes, kind: Node}
    fields:
      nodes: [metadata.labels, status.allocatable]
  register: live_nodes
'''

RETURN = r'''
objects:
  description: Per query key, the objects read (a named object that does not exist gives an empty list).
  returned: always
  type: dict
  sample: {"nodes": [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1"}}], "kube_proxy": []}
api_found:
  description: Per query key, whether the server serves the kind (false when a list answered 404).
  returned: always
  type: dict
  sample: {"nodes": true, "kube_proxy": true}
version:
  description: The API server's C(/version) document (C(gitVersion), C(major), C(minor), ...).
  returned: when O(version) is true
  type: dict
  sample: {"gitVersion": "v1.34.2", "major": "1", "minor": "34"}
'''

from typing import Any

from ansible.module_utils.basic import AnsibleModule, env_fallback, missing_required_lib

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import access
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import read
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import rest

# CoreV1Api and friends as plain requests (kube/rest): the typed API classes of the client cost ~0.5 CPU-s to import
k8s_client = rest.client_module(access.ApiClient)


def argument_spec() -> dict[str, Any]:
    spec = access.auth_arg_spec(env_fallback)
    spec.update(
        queries=dict(type='list', elements='dict', default=[], options=dict(
            key=dict(type='str', required=True, no_log=False),
            api_version=dict(type='str', default='v1'),
            kind=dict(type='str', required=True),
            name=dict(type='str'),
            namespace=dict(type='str'),
            label_selectors=dict(type='list', elements='str'),
            field_selectors=dict(type='list', elements='str'),
        )),
        version=dict(type='bool', default=False),
        fields=dict(type='dict', default={}),
    )
    return spec


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    p = module.params
    queries = [dict((k, v) for k, v in q.items() if v is not None) for q in p['queries']]
    problems = read.check_queries(queries) + read.check_fields(p['fields'], queries)
    if problems:
        module.fail_json(msg='k8s_objects_info refused, nothing was read: %s' % '; '.join(problems))
    if k8s_client is None:
        module.fail_json(msg=missing_required_lib('kubernetes'), exception=access.KUBERNETES_IMPORT_ERROR)
    try:
        apis = read.typed_apis(k8s_client, access.api_client(p))
        result = read.read(apis, queries, version=p['version'])
        result['objects'] = read.project(result['objects'], p['fields'])
    except (access.KubeError, read.ReadError) as e:
        module.fail_json(msg=str(e))
    module.exit_json(changed=False, **result)


if __name__ == '__main__':
    main()
