# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a sharing stack reads from the cluster before it renders, and how the renderer uses it.

queries() says what to read for a strategy (one k8s_objects_info run: Nodes always; RuntimeClasses for the NVIDIA
device plugin strategies; Volcano's scheduler ConfigMap, kube-proxy's ConfigMap, HAMi's webhook Secret and the API
server version where the strategy's settings do not already give them). merge() puts the answers where the renderer
takes them: live_nodes, live_runtime_classes and the strategy's settings (Volcano's existing_conf, HAMi's
kube_version, gpushare's kube_proxy_config), and refuses a HAMi webhook Secret that does not exist.
"""

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common import gpu_strategy
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import gpu_stack_volcano
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.gpu_stack_common import StackError

VOLCANO_CONFIGMAP = gpu_stack_volcano.CONFIGMAP  # the default of gpu_sharing_stack_volcano.scheduler_configmap
VOLCANO_CONF_KEY = 'volcano-scheduler.conf'
KUBE_PROXY = ('kube-system', 'kube-proxy', 'config.conf')


def _settings(settings, name):
    value = (settings or {}).get(name)
    return value if isinstance(value, dict) else {}


def queries(strategy, state='present', settings=None, namespace='kube-system'):
    """{queries: [...], version: bool} for k8s_objects_info."""
    present = state == 'present'
    out = [{'key': 'nodes', 'kind': 'Node'}]
    known = strategy in gpu_strategy.STRATEGIES
    if known and gpu_strategy.strategy(strategy)['runtime_class']:
        out.append({'key': 'runtime_classes', 'api_version': 'node.k8s.io/v1', 'kind': 'RuntimeClass'})
    volcano = _settings(settings, 'volcano')
    if strategy == 'volcano' and present and not volcano.get('existing_conf'):
        out.append({'key': 'volcano_conf', 'kind': 'ConfigMap', 'name': volcano.get('scheduler_configmap') or VOLCANO_CONFIGMAP,
                    'namespace': volcano.get('namespace') or 'volcano-system'})
    gpushare = _settings(settings, 'gpushare')
    if strategy == 'gpushare' and present and (gpushare.get('registration') or 'node-port') == 'node-port' \
            and not gpushare.get('kube_proxy_mode'):
        out.append({'key': 'kube_proxy', 'kind': 'ConfigMap', 'name': KUBE_PROXY[1], 'namespace': KUBE_PROXY[0]})
    hami = _settings(settings, 'hami')
    if strategy == 'hami' and present and hami.get('webhook_tls_secret'):
        out.append({'key': 'hami_webhook_secret', 'kind': 'Secret', 'name': hami['webhook_tls_secret'],
                    'namespace': namespace or 'kube-system'})
    dra = _settings(settings, 'dra')
    version = (strategy == 'hami' and not hami.get('kube_version')) or \
        (strategy == 'volcano' and present and not volcano.get('kube_version')) or \
        (strategy == 'dra' and not dra.get('kube_version'))  # removal too: claims go in the version served
    return {'queries': out, 'version': bool(version)}


def merge(params, live, var='gpu_sharing_stack_'):
    """params with live's answers filled in (a new dict; params is not changed). live: k8s_objects_info's result."""
    objects = (live or {}).get('objects') or {}
    out = dict(params)
    if 'nodes' in objects:
        out['live_nodes'] = objects['nodes']
    if 'runtime_classes' in objects:
        out['live_runtime_classes'] = objects['runtime_classes']
    settings = dict(out.get('settings') or {})
    if objects.get('volcano_conf'):
        data = objects['volcano_conf'][0].get('data') or {}
        if VOLCANO_CONF_KEY in data:
            settings['volcano'] = dict(_settings(settings, 'volcano'), existing_conf=data[VOLCANO_CONF_KEY])
    if objects.get('kube_proxy'):
        data = objects['kube_proxy'][0].get('data') or {}
        settings['gpushare'] = dict(_settings(settings, 'gpushare'), kube_proxy_config=data.get(KUBE_PROXY[2]) or '')
    version = ((live or {}).get('version') or {}).get('gitVersion')
    if version and out.get('strategy') == 'hami' and not _settings(settings, 'hami').get('kube_version'):
        settings['hami'] = dict(_settings(settings, 'hami'), kube_version=version)
    if version and out.get('strategy') == 'volcano' and not _settings(settings, 'volcano').get('kube_version'):
        settings['volcano'] = dict(_settings(settings, 'volcano'), kube_version=version)
    if version and out.get('strategy') == 'dra' and not _settings(settings, 'dra').get('kube_version'):
        settings['dra'] = dict(_settings(settings, 'dra'), kube_version=version)
    if 'hami_webhook_secret' in objects and not objects['hami_webhook_secret']:
        raise StackError('%shami.webhook_tls_secret names Secret %s/%s, which does not exist; create a kubernetes.io/tls '
                         'Secret (e.g. with cert-manager) first.'
                         % (var, out.get('namespace') or 'kube-system', _settings(settings, 'hami')['webhook_tls_secret']))
    out['settings'] = settings
    return out
