# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read Nodes and Pods for gpu_share_report with the kubernetes Python client (read-only: list calls only)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import traceback

KUBERNETES_IMPORT_ERROR = None
try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.client.rest import ApiException
except ImportError:
    k8s_client = k8s_config = None
    ApiException = Exception
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()

# options shared with kubernetes.core's modules, with the same environment fallbacks
AUTH_ARG_SPEC = dict(
    kubeconfig=dict(type='raw', fallback=('K8S_AUTH_KUBECONFIG',)),
    context=dict(type='str', fallback=('K8S_AUTH_CONTEXT',)),
    host=dict(type='str', fallback=('K8S_AUTH_HOST',)),
    api_key=dict(type='str', no_log=True, fallback=('K8S_AUTH_API_KEY',)),
    validate_certs=dict(type='bool', default=True, aliases=['verify_ssl'], fallback=('K8S_AUTH_VERIFY_SSL',)),
    ca_cert=dict(type='path', aliases=['ssl_ca_cert'], fallback=('K8S_AUTH_SSL_CA_CERT',)),
    client_cert=dict(type='path', aliases=['cert_file'], fallback=('K8S_AUTH_CERT_FILE',)),
    client_key=dict(type='path', aliases=['key_file'], no_log=False, fallback=('K8S_AUTH_KEY_FILE',)),
)


class KubeError(Exception):
    """A failure talking to the API server, with a message fit for the user."""


def auth_arg_spec(env_fallback):
    """AUTH_ARG_SPEC with Ansible's env_fallback function filled in."""
    spec = {}
    for name, opts in AUTH_ARG_SPEC.items():
        opts = dict(opts)
        opts['fallback'] = (env_fallback, list(opts['fallback']))
        spec[name] = opts
    return spec


def check_kubeconfig(value):
    """(kubeconfig, error): a path (``~`` expanded, must exist), a dict, or None."""
    if value is None or value == '':
        return None, None
    if isinstance(value, dict):
        return value, None
    if not isinstance(value, str):
        return None, 'kubeconfig must be a path (string) or a dictionary, got %s' % type(value).__name__
    path = os.path.expanduser(value)
    if not os.path.isfile(path):
        return None, 'kubeconfig: file %s does not exist' % value
    return path, None


def build_client(params):
    """An ApiClient from kubeconfig (path or dict) / context / host / api_key / certificates, like kubernetes.core.

    Without kubeconfig and host: the default kubeconfig (KUBECONFIG, ~/.kube/config), else the in-cluster config.
    """
    configuration = k8s_client.Configuration()
    kubeconfig = params.get('kubeconfig')
    context = params.get('context')
    try:
        if isinstance(kubeconfig, dict):
            k8s_config.load_kube_config_from_dict(kubeconfig, context=context, client_configuration=configuration)
        elif kubeconfig:
            k8s_config.load_kube_config(config_file=str(kubeconfig), context=context,
                                        client_configuration=configuration)
        elif not params.get('host'):
            try:
                k8s_config.load_kube_config(context=context, client_configuration=configuration)
            except Exception:  # no kubeconfig: maybe we run in a pod
                try:
                    k8s_config.load_incluster_config(client_configuration=configuration)
                except Exception as e:
                    raise KubeError('no kubeconfig (kubeconfig option, K8S_AUTH_KUBECONFIG, KUBECONFIG, '
                                    '~/.kube/config) and no in-cluster service account: %s' % e)
    except KubeError:
        raise
    except Exception as e:
        raise KubeError('cannot load the kubeconfig %s: %s' % ('(dict)' if isinstance(kubeconfig, dict) else kubeconfig, e))
    if params.get('host'):
        configuration.host = params['host']
    if params.get('api_key'):
        configuration.api_key = {'authorization': 'Bearer %s' % params['api_key']}
    if params.get('validate_certs') is not None:
        configuration.verify_ssl = params['validate_certs']
    if params.get('ca_cert'):
        configuration.ssl_ca_cert = params['ca_cert']
    if params.get('client_cert'):
        configuration.cert_file = params['client_cert']
    if params.get('client_key'):
        configuration.key_file = params['client_key']
    return k8s_client.ApiClient(configuration)


def _list_all(call, what, **kwargs):
    items = []
    token = None
    while True:
        args = dict(kwargs, limit=500, _preload_content=False)
        if token:
            args['_continue'] = token
        try:
            response = call(**args)
        except Exception as e:  # ApiException (HTTP status) or a connection/TLS error
            if isinstance(e, ApiException) and getattr(e, 'status', None):
                raise KubeError('listing %s failed: %s %s %s' % (what, e.status, getattr(e, 'reason', ''),
                                                                 (getattr(e, 'body', '') or '')[:500]))
            raise KubeError('listing %s failed: %s' % (what, e))
        data = json.loads(response.data)
        items.extend(data.get('items') or [])
        token = (data.get('metadata') or {}).get('continue')
        if not token:
            return items


def read_cluster(api_client, node_selector=None, nodes=None, namespace=None):
    """(nodes, pods) as plain dicts in API field names. Pods that finished are filtered out by the server."""
    core = k8s_client.CoreV1Api(api_client)
    kwargs = {}
    if node_selector:
        kwargs['label_selector'] = node_selector
    node_items = _list_all(core.list_node, 'nodes', **kwargs)
    if nodes:
        wanted = set(nodes)
        node_items = [n for n in node_items if (n.get('metadata') or {}).get('name') in wanted]
    selector = 'status.phase!=Succeeded,status.phase!=Failed'
    if namespace:
        pod_items = _list_all(core.list_namespaced_pod, 'pods in namespace %s' % namespace, namespace=namespace,
                              field_selector=selector)
    else:
        pod_items = _list_all(core.list_pod_for_all_namespaces, 'pods', field_selector=selector)
    return node_items, pod_items
