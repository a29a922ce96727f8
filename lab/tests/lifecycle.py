"""The day-2 lifecycle suite's driver and invariants (issue #37; lab/tests/integration/test_lifecycle_suite_real.py).

Drives the collection's Python layer in this process, as the roles' modules call it, against a real API server:

* ``apply``: role gpu_sharing_stack (present) then role gpu_node_labels with the stack's labels, as playbook cluster.yml
  runs them (lab/tests/integration/test_gpu_sharing_stack.py stack_steps): filter stack_settings (the pool's settings
  over the role's defaults), stacks/live.queries + kube/read (module k8s_objects_info), stacks/render.render with
  the module's argument spec (action gpu_stack_manifests), kube/converger (module k8s_converge: the stack's objects with
  the pool recorded as user, then the stale shared objects), the Volcano scheduler restart, then label_plan's
  label_static_plan (filter node_labels_plan) and node_labels_apply.plan_and_apply (module gpu_node_labels_apply).
  Role gpu_sharing_stack's ``ready`` entry point (validation pods, Helm release, the MIG manager's wait) is not run: no
  pod runs on a kwok node and the suite installs no Helm chart (gpu_sharing_stack_helm_install: false).
* ``remove``: tasks/absent.yml (the pool's objects; the shared ones unless another pool uses them), then the labels
  with state absent; ``leave``: the labels of some of a pool's nodes only (a node leaving its pool's inventory group).

The invariants (``check``) are read from the API server after every step; ``rerun`` applies every pool again and
counts the writes the suite's own user sent (audit log) and the converger's and the label module's reports.
The lab may import the collection; never the reverse.
"""
from __future__ import annotations

import copy
import json
import time

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.gpuops.k8s_gpu.plugins.filter.stack_settings import PREFIX, role_options, stack_settings
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster import (
    gpu_sharing_drain, label_plan, node_labels_apply, strategy_migration)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import (
    access, converger, read, rest as kube_rest)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.report import model
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import (
    live as stacks_live, render as stacks_render, shared as stacks_shared)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import (
    StackError, stack_readiness)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.dra import (
    DRIVER as DRA_DRIVER, GPU_CLASS as DRA_GPU_CLASS, OPERATOR_DEVICE_PLUGIN_LABEL, OPERATOR_DEVICE_PLUGIN_OFF)
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.operator import (
    OPERANDS_LABEL, OPERANDS_OFF)
from ansible_collections.gpuops.k8s_gpu.plugins.modules import k8s_converge

POOL = 'gpuops.io/sharing-pool'
STRATEGY = 'gpuops.io/sharing-strategy'
RECORD = 'gpuops.io/managed-labels'
USER_PREFIX = 'user.gpuops.io/'
SCOPE = 'gpuops.io/sharing-scope'
MANAGED = 'app.kubernetes.io/managed-by=gpuops.k8s_gpu'
# node annotations the stacks' agents write (HAMi, Volcano), which uninstall clears
AGENT_ANNOTATION_PREFIXES = ('hami.io/', 'volcano.sh/')
# the GPU operator's operands follow nvidia.com/gpu.present=true unless the node carries deploy.operands=false
# (gpu-operator v26.7.0 controllers/state_manager.go gpuStateLabels / hasOperandsDisabled; GPUOP-13)
OPERATOR_PRESENT = 'nvidia.com/gpu.present'
BACKUP_PREFIX = 'gpuops-backup-'
# the lab's control-plane node (kubeadm's label and taint): control-plane agents of a stack (gpu-admission) go there
CONTROL_PLANE = 'lcs-control-plane'
CONTROL_PLANE_LABEL = 'node-role.kubernetes.io/control-plane'


class Refused(Exception):
    """The collection refused a step before any write (StackError, a label plan error, a converge error)."""


class Lab(object):
    """One cluster as the collection sees it, and the suite's model of it: pools (name -> Pool)."""

    def __init__(self, kube, user='lifecycle-suite'):
        self.kube = kube
        self.user = user
        self.kubeconfig = kube.user(user)
        self.auth = {'kubeconfig': self.kubeconfig, 'validate_certs': True}
        self.api = access.api_client(self._params({}))
        self.rest = kube_rest.client_module(access.ApiClient)
        self.core = self.rest.CoreV1Api(self.api)
        self.apis = read.typed_apis(self.rest, self.api)
        self.dynamic = access.get_client(self._params({}))
        self.pools = {}      # name -> {'strategy', 'nodes', 'settings'}
        self.renders = {}    # name -> the render of the pool's last present run
        self.kinds = set()   # (apiVersion, kind) of every object any render made: what check lists
        self.validated = {}  # name -> the validation workloads the pool's ready step applied
        self.readiness = {}  # name -> stack_readiness' answer of the pool's last ready step (the MIG manager's wait)
        self.bound = {}      # validation pod uid -> the node the scheduler bound it to (a bound pod stays there)
        self.outcomes = {}   # pool -> [(pod, outcome, detail)] of its validation pods after the last step
        self.dra_devices = None  # node -> the devices NVIDIA's DRA kubelet plugin publishes for it (the test's)
        self.mig_manager = None  # a stand-in for NVIDIA's MIG manager on kwok nodes (the test's), called by ready
        self.options = role_options()

    # -- the modules' parameters -----------------------------------------------------------------------------------
    def _params(self, extra):
        spec = access.auth_arg_spec(lambda *a, **k: None)
        out = dict((k, v.get('default')) for k, v in spec.items())
        out.update(self.auth)
        out.update(extra)
        return out

    def _converge(self, defs, state, **extra):
        spec = k8s_converge.argument_spec()
        params = dict((k, v.get('default')) for k, v in spec.items())
        params.update(self.auth)
        params.update(definitions=defs, state=state, **extra)
        err = converger.validate_definitions(defs) or k8s_converge.check_user(params)
        if err:
            raise Refused(err)
        conv = converger.Converger(params, self.dynamic)
        try:
            result = converger.converge(conv, defs, state)
            if params.get('prune') and state == 'present':  # the module's order (k8s_converge main)
                result = converger.prune(conv, defs, params['prune'])
            return result
        except converger.ConvergeError as e:
            raise Refused('k8s_converge: %s (%s)' % (e, conv.result()))

    def cfg(self, pool):
        """The pool's settings as role gpu_sharing_stack works them out (tasks/settings.yml)."""
        settings = dict((PREFIX + k, copy.deepcopy(v)) for k, v in pool['settings'].items())
        settings.setdefault(PREFIX + 'helm_install', False)
        return stack_settings(settings, options=self.options)

    def render(self, name, pool, state):
        cfg = self.cfg(pool)
        settings = cfg['settings']  # every block whole, each key present (filled once by stack_settings)
        namespace = cfg[PREFIX + 'namespace']
        q = stacks_live.queries(pool['strategy'], state=state, settings=settings, namespace=namespace)
        live = read.read(self.apis, q['queries'], version=q['version'])
        live['objects'] = read.project(live['objects'], {'nodes': ['metadata.labels', 'status.allocatable']})
        args = {'strategy': pool['strategy'], 'pool': name, 'nodes': list(pool['nodes']),
                'node_selector': cfg[PREFIX + 'node_selector'], 'namespace': namespace,
                'registry': cfg[PREFIX + 'registry'], 'image_pull_secrets': cfg[PREFIX + 'image_pull_secrets'],
                'settings': settings, 'facts': dict((n, pool['facts'][n]) for n in pool['nodes']),
                'require_facts': True, 'check_conflicts': state == 'present',
                'allow_mixed_accounting': cfg[PREFIX + 'allow_mixed_accounting'], 'live': live,
                'validation': {'enabled': bool(cfg[PREFIX + 'validation']) or state == 'absent',
                               'namespace': 'default',
                               'image': cfg[PREFIX + 'validation_image']}}
        checked = ArgumentSpecValidator(stacks_render.argument_spec()).validate(args)
        if checked.error_messages:
            raise Refused('gpu_stack_manifests: %s' % checked.error_messages)
        try:
            return stacks_render.render(checked.validated_parameters)
        except StackError as e:
            raise Refused(str(e))

    def labels(self, stacks, state, **role_vars):
        static = label_plan.label_static_plan({}, {}, group='', pools=[], state=state, stacks=stacks, **role_vars)
        if static['errors']:
            raise Refused('gpu_node_labels: %s' % '; '.join(static['errors']))
        options = {'state': state, 'strategy_label': STRATEGY, 'record_annotation': RECORD, 'check_resources': True,
                   'fail_on_missing_nodes': True}
        plan, results = node_labels_apply.plan_and_apply(self.core, static, options)
        if results is None:
            raise Refused('gpu_node_labels refused, nothing was changed: %s' % '; '.join(plan['errors']))
        return results

    @staticmethod
    def published(out, state):
        """What role gpu_sharing_stack publishes for role gpu_node_labels (gpu_sharing_stack_rendered[pool])."""
        return {'state': state, 'strategy': out['strategy'], 'namespace': out['namespace'],
                'node_labels': out['node_labels'], 'node_label_defaults': out['node_label_defaults'],
                'readiness': out['readiness'], 'validation_manifests': out['validation_manifests'],
                'runtime_class_wait': out['runtime_class_wait'], 'helm': out['helm'], 'extender': out['extender']}

    # -- the operations ----------------------------------------------------------------------------------------------
    def plan(self, changed):
        """The pools' plan of playbook cluster.yml over one inventory holding every pool of the model with ``changed``
        (name -> pool, None: removed): filter sharing_pools' agreement checks (what pools of one strategy share must
        agree; the GPU operator beside a mig pool with the MIG manager). Refused before anything is written."""
        pools = dict(self.pools)
        pools.update(changed)
        ordered = [{'name': n, 'strategy': p['strategy'],
                    'settings': dict((PREFIX + k, v) for k, v in p['settings'].items())}
                   for n, p in sorted(pools.items()) if p is not None]
        errors = stacks_shared.conflicts(ordered) + stacks_shared.operator_mix(ordered)
        if errors:
            raise Refused('sharing_pools: %s' % '; '.join(errors))

    def apply_all(self, changed):
        """Several pools changed in one run of cluster.yml (the plan first, then each pool)."""
        self.plan(changed)
        out = []
        for name in sorted(changed):
            out += self.apply(name, changed[name], planned=True)
        return out

    def apply(self, name, pool, planned=False):
        """Roles gpu_sharing_stack and gpu_node_labels for one pool (present). Returns the writes each reported.
        The model takes the pool only when the collection accepted it."""
        if not planned:
            self.plan({name: pool})
        out = self.render(name, pool, 'present')
        applied = self._converge(out['manifests'], 'present', user=name,
                                 user_labels={'gpuops.io/sharing-scope': 'shared'}, prune=out.get('prune'))
        changed = ['%s %s/%s' % (o['action'], o['kind'], o['name']) for o in applied['objects']
                   if o.get('action') in ('created', 'updated', 'deleted')]
        changed += ['record %s on %s/%s' % (u['user'], u['kind'], u['name']) for u in applied['users']]
        if out['stale_shared_manifests']:
            stale = self._converge(out['stale_shared_manifests'], 'absent', user=name, keep=out['keep_shared'])
            changed += ['stale %s %s/%s' % (o['action'], o['kind'], o['name']) for o in stale['objects']
                        if stale['changed']]
        for r in out['restarts']:
            hit = [o for o in applied['objects'] if o.get('kind') == r['when_changed']['kind']
                   and o.get('namespace') == r['when_changed']['namespace']
                   and o.get('name') == r['when_changed']['name'] and o.get('action') in ('created', 'updated')]
            if hit:
                changed.append('restart %s/%s' % (r['kind'], r['name']))
                self._restart(r)
        results = self.labels({name: self.published(out, 'present')}, 'present')
        changed += ['labels %s' % r['node'] for r in results if r['changed']]
        self.pools[name] = copy.deepcopy(pool)
        self.renders[name] = out
        self._seen(out)
        changed += self.ready(name, out)
        return changed

    def ready(self, name, out):
        """Role gpu_sharing_stack's ``ready`` entry point (tasks/ready.yml) for a pool its main entry point rendered:
        the Helm release is not installed (gpu_sharing_stack_helm_install: false, the suite's setting: no chart runs on
        kwok); the RuntimeClass the validation workloads name is read (one read: the role's bounded wait), and a pool
        whose RuntimeClass is missing is refused before they are applied; the validation workloads are applied with
        k8s_converge (no user, as the role does); the MIG manager's wait reads the pool's nodes (label selector on the
        pool label) and evaluates filter stack_readiness on them, once ``mig_manager`` (the test's stand-in for the
        MIG manager and the device plugin's resources on kwok nodes) has acted. Returns the writes reported."""
        pub = self.published(out, 'present')
        assert pub['helm'] is None or self.cfg(self.pools[name])[PREFIX + 'helm_install'] is False
        changed = []
        manifests = pub['validation_manifests']
        if manifests and pub['runtime_class_wait']:
            rcs = self.dynamic.resources.get(api_version='node.k8s.io/v1', kind='RuntimeClass')
            if not [i for i in rcs.get().to_dict().get('items') or []
                    if i['metadata']['name'] == pub['runtime_class_wait']]:
                raise Refused('ready: RuntimeClass %s, which the validation workloads name, does not exist; the '
                              'validation workloads were not applied' % pub['runtime_class_wait'])
        if manifests:
            applied = self._converge(manifests, 'present')
            changed += ['validation %s %s/%s' % (o['action'], o['kind'], o['name']) for o in applied['objects']
                        if o.get('action') in ('created', 'updated', 'deleted')]
        self.validated[name] = manifests
        self._seen({'manifests': manifests, 'pool_manifests': [], 'shared_manifests': [],
                    'stale_shared_manifests': []})
        if pub['readiness']:
            if self.mig_manager is not None:
                self.mig_manager(self, name, pub['readiness'])
            nodes = [n for n in self.nodes().values()
                     if ((n['metadata'].get('labels') or {}).get(POOL) == name)]
            state = stack_readiness(nodes, pub['readiness'], pool=name, namespace=pub['namespace'])
            self.readiness[name] = state
            if not state['ready']:
                raise Refused('ready: %s' % state['msg'])
        else:
            self.readiness.pop(name, None)
        return changed

    def _restart(self, r):
        body = {'spec': {'template': {'metadata': {'annotations': {r['annotation']: r['value']}}}}}
        try:
            self.dynamic.resources.get(api_version=r['api_version'], kind=r['kind']).patch(
                body=body, name=r['name'], namespace=r['namespace'], content_type='application/merge-patch+json')
        except Exception as e:  # absent: kubernetes.core's state=patched only warns
            if getattr(e, 'status', None) != 404:
                raise

    def remove(self, name):
        """tasks/absent.yml, then role gpu_node_labels with state absent (playbook uninstall.yml's order)."""
        pool = self.pools[name]
        out = self.render(name, pool, 'absent')
        changed = []
        gone = self._converge(out['pool_manifests'] + out['validation_manifests'], 'absent')
        shared = self._converge(out['shared_manifests'] + out['stale_shared_manifests'], 'absent', user=name,
                                keep=out['keep_shared'])
        changed += [o['name'] for o in gone['objects'] + shared['objects'] if o.get('action') == 'deleted']
        results = self.labels({name: self.published(out, 'absent')}, 'absent')
        changed += ['labels %s' % r['node'] for r in results if r['changed']]
        del self.pools[name]
        self.renders.pop(name, None)
        self.validated.pop(name, None)
        self.readiness.pop(name, None)
        self._seen(out)
        return changed

    def leave(self, name, nodes):
        """Nodes leave pool ``name``'s inventory group: role gpu_node_labels with state absent for those nodes (the
        pool's stack rendered for them), then the pool applied again without them."""
        pool = self.pools[name]
        part = dict(pool, nodes=list(nodes))
        out = self.render(name, part, 'absent')
        results = self.labels({name: self.published(out, 'absent')}, 'absent')
        rest = dict(pool, nodes=[n for n in pool['nodes'] if n not in nodes])
        return ['labels %s' % r['node'] for r in results if r['changed']] + self.apply(name, rest, planned=True)

    def switch_nodes(self, src, dst, nodes, serial=1, stop_after_switch=False, accept_capacity_loss=False,
                     settle=None, timeout=60):
        """Playbook migrate_to_dra.yml for ``nodes`` from pool ``src`` to pool ``dst`` (one of them dra), in process as
        its tasks call the collection: filter strategy_migration_plan over the live nodes (refused before any write),
        then ``serial`` nodes at a time: module gpu_node_drain (mark, cordon, evict the GPU pods), role
        gpu_node_labels with the step's stacks (gfd_labels, require_facts and check_capabilities off, as the play
        sets them), the waits for the target's plugin and for the source's to be gone (``settle``: the test's
        stand-ins of the plugins act first), gpu_node_drain state restored. ``stop_after_switch``: the run stops
        after the first node's switch (as a run that failed in a wait does: the node stays cordoned and marked).
        The model moves each switched node to ``dst``. Returns {'changed', 'evicted' (node -> pods), 'steps'}."""
        drain = gpu_sharing_drain
        source = {'pool': src, 'strategy': self.pools[src]['strategy']}
        target = {'pool': dst, 'strategy': self.pools[dst]['strategy']}
        plan = strategy_migration.migration_plan(list(self.nodes().values()), [{'host': n, 'node': n} for n in nodes],
                                                 source, target, accept_capacity_loss)
        if plan['errors']:
            raise Refused('migrate_to_dra refused, nothing was changed: %s' % '; '.join(plan['errors']))
        worker = drain.Drainer(self.core, check_mode=False)
        out = {'changed': [], 'evicted': {}, 'steps': [(s['node'], s['action']) for s in plan['steps']]}
        steps = plan['steps']
        for i in range(0, len(steps), serial):
            batch = [s for s in steps[i:i + serial] if s['action'] != 'skip']
            restores = {}
            for step in batch:
                if step['action'] != 'migrate':
                    continue
                # the playbook's drain arguments (migrate_to_dra.yml): a DaemonSet pod holding a GPU stops the move
                # (gpuops_migrate_accept_daemonset_gpus false); force as with gpuops_migrate_force=true, because the
                # bare pods here are the pools' validation pods, which kwok keeps Running (on a real node they finish
                # and the drain passes finished pods by)
                res = worker.drain(step['node'], 'gpu', drain.default_gpu_resources(), timeout, 1,
                                   mark={'annotation': strategy_migration.MARK_ANNOTATION, 'value': step['to']},
                                   pause_gpu_clients=False, force=True, keep_gpu_daemonset_pods=False)
                restores[step['node']] = res.get('restore')
                out['evicted'][step['node']] = list(res.get('evicted') or [])
                results = self.labels(step['stacks'], 'present', gfd_labels=False, require_facts=False,
                                      check_capabilities=False)
                out['changed'] += ['labels %s' % r['node'] for r in results if r['changed']]
                self.pools[src] = dict(self.pools[src], nodes=[n for n in self.pools[src]['nodes'] if n != step['node']])
                self.pools[dst] = dict(self.pools[dst], nodes=self.pools[dst]['nodes'] + [step['node']])
                if stop_after_switch:
                    return out
            if settle is not None:
                settle()
            for step in batch:
                self._wait_plugins(step, timeout)
                restore = restores.get(step['node']) or {'mark': strategy_migration.MARK_ANNOTATION}
                worker.restore(step['node'], restore)
            out['changed'] += ['uncordon %s' % s['node'] for s in batch]
        return out

    def _wait_plugins(self, step, timeout):
        """The play's two waits: the target's plugin serves the node, the source's devices are gone."""
        end = time.time() + timeout
        while True:
            node = self.nodes()[step['node']]
            alloc = (node.get('status') or {}).get('allocatable') or {}
            slices = [s for s in self.slices() if s['spec'].get('nodeName') == step['node']]

            def serving(sign):
                if sign['kind'] == 'slice':
                    return bool(slices)
                return int(str(alloc.get(sign['resource'], '0')) or 0) > 0
            if serving(step['wait']) and not serving(step['leave']):
                return
            if time.time() > end:
                raise AssertionError('migrate_to_dra: %s: the target plugin serves %s, the source %s after %d s'
                                     % (step['node'], serving(step['wait']), serving(step['leave']), timeout))
            time.sleep(0.5)

    def _seen(self, out):
        for m in out['manifests'] + out['pool_manifests'] + out['shared_manifests'] + out['stale_shared_manifests'] \
                + (out.get('validation_manifests') or []):
            if m['kind'] != 'Node':
                self.kinds.add((m['apiVersion'], m['kind']))

    def rerun(self):
        """Every pool applied again: (writes the suite's user sent, what the modules reported changed)."""
        start = self.kube.mark()
        reported = []
        for name in sorted(self.pools):
            reported += ['%s: %s' % (name, c) for c in self.apply(name, self.pools[name], planned=True)]
        writes = self.kube.writes(start, self.kube.mark(), user=self.user)
        return writes, reported

    def mark(self):
        return self.kube.mark()

    def writes_since(self, start):
        return self.kube.writes(start, self.kube.mark(), user=self.user)

    # -- the DRA driver's kubelet plugin on kwok nodes (the suite installs no Helm release) -----------------------
    def dra_release(self):
        """The Helm values of the one DRA driver release the dra pools share (None: no dra pool)."""
        for name in sorted(self.renders):
            if self.pools[name]['strategy'] == 'dra':
                return self.renders[name]['helm']['values']
        return None

    def dra_plugin(self, admin):
        """Plays the driver's kubelet plugin DaemonSet for kwok nodes (no kubelet runs one there): the nodes its pods
        land on (the chart's kubeletPlugin values as the collection renders them: nodeSelector, affinity,
        tolerations; ``dra_plugin_nodes``) publish their ResourceSlice (``dra_devices``, NVIDIA's recorded devices),
        every other node has none (the plugin is gone, and with it its slices). ``admin``: an ApiClient of another
        user than the suite's (these writes are the driver's, not the collection's)."""
        from kubernetes import client
        co = client.CustomObjectsApi(admin)
        nodes = self.nodes()
        want = dra_plugin_nodes(self, nodes)
        # the release's DeviceClass gpu.nvidia.com, which the validation claims name (the chart's
        # templates/deviceclass-gpu.yaml at v0.5.0: the driver's devices of type gpu), while a dra pool has a release
        classes = [c['metadata']['name'] for c in co.list_cluster_custom_object(
            'resource.k8s.io', 'v1', 'deviceclasses')['items']]
        if self.dra_release() is not None and DRA_GPU_CLASS not in classes:
            co.create_cluster_custom_object('resource.k8s.io', 'v1', 'deviceclasses', {
                'apiVersion': 'resource.k8s.io/v1', 'kind': 'DeviceClass', 'metadata': {'name': DRA_GPU_CLASS},
                'spec': {'selectors': [{'cel': {'expression': "device.driver == '%s' && device.attributes['%s'].type"
                                                              " == 'gpu'" % (DRA_DRIVER, DRA_DRIVER)}}]}})
        elif self.dra_release() is None and DRA_GPU_CLASS in classes:
            co.delete_cluster_custom_object('resource.k8s.io', 'v1', 'deviceclasses', DRA_GPU_CLASS)
        have = {}
        for item in co.list_cluster_custom_object('resource.k8s.io', 'v1', 'resourceslices',
                                                  field_selector='spec.driver=%s' % DRA_DRIVER)['items']:
            have.setdefault(item['spec'].get('nodeName'), []).append(item['metadata']['name'])
        for node, names in have.items():
            if node not in want:
                for n in names:
                    co.delete_cluster_custom_object('resource.k8s.io', 'v1', 'resourceslices', n)
        for node in sorted(want - set(have)):
            co.create_cluster_custom_object('resource.k8s.io', 'v1', 'resourceslices', {
                'apiVersion': 'resource.k8s.io/v1', 'kind': 'ResourceSlice',
                'metadata': {'generateName': '00000-%s-%s-' % (DRA_DRIVER, node),
                             'ownerReferences': [{'apiVersion': 'v1', 'kind': 'Node', 'name': node, 'controller': True,
                                                  'uid': nodes[node]['metadata']['uid']}]},
                'spec': {'driver': DRA_DRIVER, 'nodeName': node,
                         'pool': {'name': node, 'generation': 1, 'resourceSliceCount': 1},
                         'devices': self.dra_devices(node)}})

    def slices(self):
        return self.dynamic.resources.get(api_version='resource.k8s.io/v1', kind='ResourceSlice').get(
            field_selector='spec.driver=%s' % DRA_DRIVER).to_dict().get('items') or []

    # -- reading the cluster ---------------------------------------------------------------------------------------------
    def nodes(self):
        return dict((n['metadata']['name'], n) for n in node_labels_apply.list_nodes(self.core))

    def managed(self):
        """Every object of the kinds the renders made that carries the collection's managed-by label."""
        out = {}
        for api_version, kind in sorted(self.kinds):
            res = self.dynamic.resources.get(api_version=api_version, kind=kind)
            for item in res.get(label_selector=MANAGED).to_dict().get('items') or []:
                meta = item['metadata']
                out[(kind, meta.get('namespace') or '', meta['name'])] = item
        return out


def ident(m):
    return (m['kind'], m['metadata'].get('namespace') or '', m['metadata']['name'])


# -- where a DaemonSet's pods go, as the scheduler and the DaemonSet controller decide it ---------------------------
def _expr(e, labels):
    op, key, values = e['operator'], e['key'], e.get('values') or []
    if op == 'In':
        return key in labels and labels[key] in values
    if op == 'NotIn':
        return key not in labels or labels[key] not in values
    if op == 'Exists':
        return key in labels
    if op == 'DoesNotExist':
        return key not in labels
    if op in ('Gt', 'Lt'):
        try:
            v, w = int(labels[key]), int(values[0])
        except (KeyError, ValueError, IndexError):
            return False
        return v > w if op == 'Gt' else v < w
    raise AssertionError('unknown node selector operator %r' % op)


def _tolerated(taint, tolerations):
    for t in tolerations or []:
        if t.get('effect') and t['effect'] != taint.get('effect'):
            continue
        if t.get('operator') == 'Exists' and (not t.get('key') or t['key'] == taint['key']):
            return True
        if t.get('key') == taint['key'] and (t.get('value') or '') == (taint.get('value') or ''):
            return True
    return False


def lands_on(pod_spec, node):
    """Whether a DaemonSet pod of ``pod_spec`` is placed on ``node``: nodeSelector, required node affinity (terms ORed,
    expressions ANDed; matchFields on metadata.name) and NoSchedule/NoExecute taints, as
    k8s.io/component-helpers scheduling/corev1/nodeaffinity and the DaemonSet controller's predicates decide."""
    labels = (node.get('metadata') or {}).get('labels') or {}
    for k, v in (pod_spec.get('nodeSelector') or {}).items():
        if labels.get(k) != v:
            return False
    req = ((pod_spec.get('affinity') or {}).get('nodeAffinity') or {}) \
        .get('requiredDuringSchedulingIgnoredDuringExecution')
    if req:
        fields = {'metadata.name': node['metadata']['name']}
        terms = req.get('nodeSelectorTerms') or []
        if not any((t.get('matchExpressions') or t.get('matchFields'))
                   and all(_expr(e, labels) for e in t.get('matchExpressions') or [])
                   and all(_expr(e, fields) for e in t.get('matchFields') or []) for t in terms):
            return False
    tolerations = list(pod_spec.get('tolerations') or []) + DAEMONSET_TOLERATIONS
    for taint in (node.get('spec') or {}).get('taints') or []:
        if taint.get('effect') in ('NoSchedule', 'NoExecute') and not _tolerated(taint, tolerations):
            return False
    return True


# the tolerations the DaemonSet controller adds to every DaemonSet pod (kubernetes v1.37.0
# pkg/controller/daemon/util/daemonset_util.go AddOrUpdateDaemonPodTolerations): a cordoned node
# (node.kubernetes.io/unschedulable) keeps its DaemonSet pods; network-unavailable only for host-network pods (left out)
DAEMONSET_TOLERATIONS = [
    {'key': 'node.kubernetes.io/not-ready', 'operator': 'Exists', 'effect': 'NoExecute'},
    {'key': 'node.kubernetes.io/unreachable', 'operator': 'Exists', 'effect': 'NoExecute'},
    {'key': 'node.kubernetes.io/disk-pressure', 'operator': 'Exists', 'effect': 'NoSchedule'},
    {'key': 'node.kubernetes.io/memory-pressure', 'operator': 'Exists', 'effect': 'NoSchedule'},
    {'key': 'node.kubernetes.io/pid-pressure', 'operator': 'Exists', 'effect': 'NoSchedule'},
    {'key': 'node.kubernetes.io/unschedulable', 'operator': 'Exists', 'effect': 'NoSchedule'},
]


def dra_plugin_spec(values):
    """The pod placement of the DRA driver's kubelet plugin DaemonSet from the chart values the collection renders
    (dra-driver-nvidia-gpu v0.5.0 templates/kubeletplugin.yaml: kubeletPlugin.nodeSelector, .affinity, .tolerations)."""
    plugin = (values or {}).get('kubeletPlugin') or {}
    return {'nodeSelector': plugin.get('nodeSelector') or {}, 'affinity': plugin.get('affinity') or {},
            'tolerations': plugin.get('tolerations') or []}


def dra_plugin_nodes(lab, nodes):
    """The nodes the DRA driver's kubelet plugin lands on (none without a dra pool: no release)."""
    values = lab.dra_release()
    if values is None:
        return set()
    spec = dra_plugin_spec(values)
    return set(n for n, node in nodes.items() if lands_on(spec, node))


# -- the invariants ---------------------------------------------------------------------------------------------------
def check(lab, gpu_nodes):
    """Every invariant, read from the API server; returns the list of violations (empty: all hold)."""
    bad = []
    nodes = lab.nodes()
    member = {}
    for name, pool in lab.pools.items():
        for n in pool['nodes']:
            if n in member:
                bad.append('model: node %s in pools %s and %s' % (n, member[n], name))
            member[n] = name
    # 1. each GPU node carries its own pool's labels only; a node of no pool nothing of the collection or its agents
    for n in gpu_nodes:
        meta = nodes[n]['metadata']
        labels, annotations = meta.get('labels') or {}, meta.get('annotations') or {}
        if n in member:
            pool = member[n]
            want = dict(lab.renders[pool]['node_labels'].get(n) or {})
            got = dict((k, labels.get(k)) for k in want)
            if got != dict((k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in want.items()):
                bad.append('%s (pool %s): labels %s, the stack wants %s' % (n, pool, got, want))
            record = json.loads(annotations.get(RECORD) or '{}')
            recorded = set(record) if isinstance(record, dict) else set()
            stray = sorted(k for k in labels if k.startswith('gpuops.io/') and k not in want and k not in recorded)
            if stray:
                bad.append('%s (pool %s): labels of no pool of it: %s' % (n, pool, stray))
        else:
            left = sorted(k for k in labels if k.startswith('gpuops.io/') or k in (OPERANDS_LABEL,
                                                                                     OPERATOR_DEVICE_PLUGIN_LABEL)
                          or k.startswith('nvidia.com/device-plugin') or k.startswith('nvidia.com/mig.config')
                          or k in ('gpushare', 'gpu'))
            left += sorted(k for k in annotations if k.startswith(('gpuops.io/',) + AGENT_ANNOTATION_PREFIXES))
            left += sorted(k for k in (nodes[n].get('status') or {}).get('allocatable') or {}
                           if k.startswith(('aliyun.com/', 'volcano.sh/')))
            if left:
                bad.append('%s (no pool): still carries %s' % (n, left))
    # 2. the agents: a node runs exactly its own pool's DaemonSets; the operator's operands only on its pools' nodes
    live = lab.managed()
    daemonsets = dict((k, v) for k, v in live.items() if k[0] == 'DaemonSet')
    control = nodes.get(CONTROL_PLANE)
    for n in gpu_nodes:
        got = sorted(k for k, ds in daemonsets.items() if lands_on(ds['spec']['template']['spec'], nodes[n]))
        # a pool's DaemonSets that run on the control plane (gpu-admission on the host network) are no node agents
        want = sorted(ident(m) for m in lab.renders[member[n]]['manifests'] if m['kind'] == 'DaemonSet'
                      and not (control and lands_on(m['spec']['template']['spec'], control))) \
            if n in member else []
        if got != want:
            bad.append('%s (pool %s): runs DaemonSets %s, its pool has %s' % (n, member.get(n), got, want))
    if any(p['strategy'] == 'gpu-operator' for p in lab.pools.values()):
        for n in gpu_nodes:
            labels = nodes[n]['metadata'].get('labels') or {}
            operands = labels.get(OPERATOR_PRESENT) == 'true' and labels.get(OPERANDS_LABEL) != OPERANDS_OFF
            # a dra pool's node keeps the operator's operands but its device plugin (the DRA driver may use the
            # operator's driver container; stacks/operator confinement_labels, stacks/dra DRA-12)
            strategy = lab.pools[member[n]]['strategy'] if n in member else None
            mine = strategy in ('gpu-operator', 'dra')
            if n in member and operands != mine:
                bad.append('%s (pool %s): the GPU operator\'s operands %s' % (
                    n, member[n], 'land there' if operands else 'are kept off its own pool\'s node'))
            if strategy == 'dra' and labels.get(OPERATOR_DEVICE_PLUGIN_LABEL) != OPERATOR_DEVICE_PLUGIN_OFF:
                bad.append('%s (pool %s, dra): the GPU operator\'s device plugin lands there (%s=%r)' % (
                    n, member[n], OPERATOR_DEVICE_PLUGIN_LABEL, labels.get(OPERATOR_DEVICE_PLUGIN_LABEL)))
    # 2b. the DRA driver's kubelet plugin (the one release's values) lands exactly on the dra pools' nodes
    dra_nodes = set(n for n in gpu_nodes if n in member and lab.pools[member[n]]['strategy'] == 'dra')
    plugin = dra_plugin_nodes(lab, nodes) & set(gpu_nodes)
    if plugin != dra_nodes:
        bad.append('the DRA kubelet plugin lands on %s, the dra pools hold %s' % (sorted(plugin), sorted(dra_nodes)))
    if control and lab.dra_release() is not None and CONTROL_PLANE in dra_plugin_nodes(lab, {CONTROL_PLANE: control}):
        bad.append('the DRA kubelet plugin lands on the control-plane node')
    # 3. the collection's objects are exactly the pools' renders; a shared object records exactly its pools
    want = {}
    for name, out in lab.renders.items():
        for m in out['manifests'] + lab.validated.get(name, []):
            if m['kind'] != 'Node':
                want.setdefault(ident(m), set())
        for m in out['shared_manifests']:
            want.setdefault(ident(m), set()).add(name)
    missing = sorted(set(want) - set(live))
    # the converger's backups of a site's objects it changed (Volcano's scheduler ConfigMap) stay: docs/uninstall.md
    # and so does an adopted object of another installation, with the merged configuration (Volcano's scheduler
    # ConfigMap; docs/sharing_stacks.md: state absent leaves it in place), but no pool's record on it
    extra = sorted(k for k in set(live) - set(want) if not k[2].startswith(BACKUP_PREFIX)
                   and ((live[k]['metadata'].get('labels') or {}).get(SCOPE) != 'adopted'
                        or [a for a in live[k]['metadata'].get('annotations') or {} if a.startswith(USER_PREFIX)]))
    if missing:
        bad.append('objects of the pools missing: %s' % missing)
    if extra:
        bad.append('objects of no pool left: %s' % extra)
    for key, users in want.items():
        if key in live and users:
            ann = live[key]['metadata'].get('annotations') or {}
            got = set(k[len(USER_PREFIX):] for k in ann if k.startswith(USER_PREFIX))
            if got != users:
                bad.append('%s/%s/%s records users %s, the pools using it are %s' % (key + (sorted(got), sorted(users))))
    # 4. the report agrees: no node of a pool is reported in conflict, no strategy other than its pool's
    report = model.analyse([nodes[n] for n in gpu_nodes], [])
    for entry in report['nodes']:
        pool = member.get(entry['name'])
        strategies = set(entry.get('strategies') or [])
        if entry.get('conflicts'):
            bad.append('report: %s (pool %s) in conflict: %s' % (entry['name'], pool, entry['conflicts']))
        expect = {lab.pools[pool]['strategy']} if pool else set()
        if strategies - expect:
            bad.append('report: %s (pool %s) shows strategies %s' % (entry['name'], pool, sorted(strategies)))
    # 5. the report's DRA part counts, per node, the devices the driver's slices publish: every dra node's, no other
    if lab.dra_devices is not None:
        dra = model.analyse_dra({'served': True, 'slices': lab.slices(), 'claims': []}, [],
                                report_nodes=list(gpu_nodes))
        got = dict((n, v['devices']) for n, v in dra['nodes'].items())
        want_dev = dict((n, {DRA_DRIVER: len(lab.dra_devices(n))}) for n in sorted(dra_nodes))
        if got != want_dev:
            bad.append('report (DRA): devices per node %s, the dra pools\' nodes publish %s' % (got, want_dev))
    return bad


def daemonset_disagreements(lab, node_names):
    """The managed DaemonSets whose status (kube-controller-manager's DaemonSet controller, upstream's own placement:
    node selector, affinity, taints and the tolerations it adds) does not yet say the number of nodes ``lands_on``
    places them on among ``node_names`` (the cluster's every node). Empty when the two agree."""
    nodes = lab.nodes()
    out = []
    for key, ds in sorted(lab.managed().items()):
        if key[0] != 'DaemonSet':
            continue
        want = sum(1 for n in node_names if lands_on(ds['spec']['template']['spec'], nodes[n]))
        status = ds.get('status') or {}
        if status.get('observedGeneration') != ds['metadata'].get('generation') \
                or status.get('desiredNumberScheduled') != want:
            out.append('%s/%s: the DaemonSet controller says %s nodes (generation %s observed %s), the invariant %d'
                       % (key[1], key[2], status.get('desiredNumberScheduled'), ds['metadata'].get('generation'),
                          status.get('observedGeneration'), want))
    return out


# -- the validation workloads as the real scheduler and kwok's pod stages treat them --------------------------------
DEFAULT_SCHEDULER = 'default-scheduler'  # the lab's kube-scheduler runs this profile only (lab/kube/real.py)
SCHEDULED, REFUSED, NO_SCHEDULER = 'scheduled', 'refused', 'no scheduler'


def _quantity(v):
    from kubernetes.utils.quantity import parse_quantity
    return parse_quantity(str(v))


def _pod_requests(pod):
    out = {}
    for c in (pod.get('spec') or {}).get('containers') or []:
        res = c.get('resources') or {}
        for k, v in (res.get('requests') or res.get('limits') or {}).items():
            if '/' in k:  # extended resources only: what the stacks' agents publish
                out[k] = out.get(k, 0) + _quantity(v)
    return out


def validation_pods(lab, admin):
    """pool -> the live pods of its validation workloads (a Pod by name; a Deployment's pods by its selector), each
    with the workload it belongs to; terminating pods left out."""
    from kubernetes import client
    core = client.CoreV1Api(admin)
    out = {}
    for name, manifests in lab.validated.items():
        for m in manifests or []:
            ns = m['metadata'].get('namespace') or 'default'
            if m['kind'] == 'Pod':
                items = core.list_namespaced_pod(ns, field_selector='metadata.name=%s' % m['metadata']['name']).items
            elif m['kind'] == 'Deployment':
                sel = ','.join('%s=%s' % kv for kv in sorted(m['spec']['selector']['matchLabels'].items()))
                items = core.list_namespaced_pod(ns, label_selector=sel).items
            else:
                continue
            for p in items:
                if p.metadata.deletion_timestamp is None:
                    out.setdefault(name, []).append((m, admin.sanitize_for_serialization(p)))
    return out


def _validation_state(lab, admin):
    """(undecided, violations, outcomes) of every pool's validation pods: see validation_invariant."""
    nodes = lab.nodes()
    pods = validation_pods(lab, admin)
    from kubernetes import client
    every = [admin.sanitize_for_serialization(p) for p in client.CoreV1Api(admin).list_pod_for_all_namespaces().items]
    used = {}
    for p in every:
        spec = p.get('spec') or {}
        if spec.get('nodeName') and (p.get('status') or {}).get('phase') not in ('Succeeded', 'Failed'):
            for r, q in _pod_requests(p).items():
                used.setdefault(spec['nodeName'], {}).setdefault(r, 0)
                used[spec['nodeName']][r] += q
    slices = set(s['spec'].get('nodeName') for s in lab.slices())
    undecided, bad, outcomes = [], [], {}
    for name, found in sorted(pods.items()):
        pool = lab.pools[name]
        for m, pod in found:
            spec, status, meta = pod['spec'], pod.get('status') or {}, pod['metadata']
            what = 'validation pod %s/%s (pool %s, %s)' % (meta.get('namespace'), meta['name'], name, pool['strategy'])
            sched = spec.get('schedulerName') or DEFAULT_SCHEDULER
            cond = [c for c in status.get('conditions') or [] if c.get('type') == 'PodScheduled']
            node = spec.get('nodeName')
            if sched != DEFAULT_SCHEDULER:
                # no scheduler of that name runs in the lab (the stack's scheduler is a Deployment on kwok nodes):
                # kube-scheduler leaves the pod alone - not bound, and no PodScheduled condition of its writing
                if node or cond:
                    bad.append('%s: schedulerName %s, which no scheduler here serves, yet bound to %s / %s'
                               % (what, sched, node, cond))
                outcomes.setdefault(name, []).append((meta['name'], NO_SCHEDULER, sched))
                continue
            req = _pod_requests(pod)
            claims = bool(spec.get('resourceClaims'))
            # the pool's nodes with room for the pod: extended resources published less what bound pods use, and
            # for a claim the driver's slices on the node (the DRA stand-in publishes whole GPUs)
            room = []
            short = {}
            for n in pool['nodes']:
                alloc = (nodes[n].get('status') or {}).get('allocatable') or {}
                lack = [r for r, q in sorted(req.items())
                        if _quantity(alloc.get(r, '0')) - used.get(n, {}).get(r, 0) < q]
                for r in lack:
                    short[r] = short.get(r, 0) + 1
                if not lack and (not claims or n in slices):
                    room.append(n)
            if node:
                uid = meta['uid']
                if uid not in lab.bound:
                    # bound since the last look: by the scheduler, onto a node of the pool that publishes it (the
                    # room computed now counts the pod itself as a user)
                    if node not in pool['nodes']:
                        bad.append('%s: bound to %s, which is no node of the pool %s' % (what, node, pool['nodes']))
                    alloc = (nodes[node].get('status') or {}).get('allocatable') or {}
                    lacking = [r for r, q in req.items() if _quantity(alloc.get(r, '0')) < q]
                    if lacking or (claims and node not in slices):
                        bad.append('%s: bound to %s, which publishes no %s' % (
                            what, node, lacking or 'ResourceSlice of %s' % DRA_DRIVER))
                    lab.bound[uid] = node
                elif lab.bound[uid] != node:
                    bad.append('%s: moved from %s to %s' % (what, lab.bound[uid], node))
                # kwok's pod-ready stage (kustomize/stage/pod/fast): Running; Succeeded is for Job pods only
                if status.get('phase') != 'Running':
                    undecided.append('%s on %s: phase %s, kwok gives Running' % (what, node, status.get('phase')))
                    continue
                outcomes.setdefault(name, []).append((meta['name'], SCHEDULED, node))
                continue
            if room:
                undecided.append('%s: not bound although %s of its pool have room (%s)' % (
                    what, room, cond[0].get('message') if cond else 'no PodScheduled condition yet'))
                continue
            if not cond or cond[0].get('status') != 'False' or cond[0].get('reason') != 'Unschedulable':
                undecided.append('%s: no Unschedulable condition yet (%s)' % (what, cond))
                continue
            msg = cond[0].get('message') or ''
            # the scheduler's reason (its NodeResourcesFit filter: "<n> Insufficient <resource>"), per resource
            # counted over the pool's nodes; a claim without room: the DRA plugin's refusal
            want = ['%d Insufficient %s' % (c, r) for r, c in sorted(short.items())]
            if claims and not short:
                want = ['cannot allocate all claims']
            missing = [w for w in want if w not in msg]
            if missing or not want:
                bad.append('%s: refused with %r, expected %s' % (what, msg, want or 'no refusal (room on the pool)'))
            outcomes.setdefault(name, []).append((meta['name'], REFUSED, msg))
    for name in lab.validated:
        want = sum(1 if m['kind'] == 'Pod' else int((m['spec'].get('replicas') or 1))
                   for m in lab.validated[name] or [] if m['kind'] in ('Pod', 'Deployment'))
        got = len(pods.get(name, []))
        if got != want:
            undecided.append('pool %s: %d validation pods, its workloads make %d' % (name, got, want))
    return undecided, bad, outcomes


def validation_invariant(lab, admin, timeout=180):
    """The pools' validation pods as the lab's kube-scheduler and kwok decide them, once they have (waited for, up to
    ``timeout``); returns the violations. A pod whose pool has a node with room for it (the extended resources the
    node publishes, less what pods bound there use; for a claim the DRA driver's slices) is bound to such a node of its
    pool and Running (kwok's pod-ready stage); a pod bound earlier stays where it was; a pod without room is refused by
    the scheduler with its reason ("<n> Insufficient <resource>" counted over the pool's nodes); a pod naming a
    scheduler that does not run here is left alone. ``lab.outcomes``: pool -> [(pod, outcome, node or reason)]."""
    end = time.time() + timeout
    while True:
        undecided, bad, outcomes = _validation_state(lab, admin)
        if bad or not undecided or time.time() > end:
            break
        time.sleep(1)
    lab.outcomes = outcomes
    return bad + ['undecided after %d s: %s' % (timeout, u) for u in undecided]


def wait_terminated(lab, admin, timeout=60):
    """The kubelet's part of a pod's deletion, which kwok's pod-delete stage plays: a deleted validation pod that was
    bound to a node is gone once kwok has finished it. Waited for, so the invariants see the cluster at rest."""
    from kubernetes import client
    core = client.CoreV1Api(admin)
    end = time.time() + timeout
    while True:
        left = [p.metadata.name for p in core.list_pod_for_all_namespaces(label_selector=MANAGED).items
                if p.metadata.deletion_timestamp is not None]
        if not left:
            return
        if time.time() > end:
            raise AssertionError('pods still terminating after %d s: %s' % (timeout, left))
        time.sleep(0.5)
