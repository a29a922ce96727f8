# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""k8s_converge's engine (module_utils/_cluster/kube/converger) on a fake DynamicClient: writes only when something differs."""
import copy

import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import converger as K

PARAMS = dict(field_manager='gpuops-k8s-gpu', hash_annotation='gpuops.io/desired-hash', labels_only_kinds=['Node'],
              delete_unmanaged=False, backup=True, backup_namespace=None)
CM = {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'cfg', 'namespace': 'ns'}, 'data': {'k': 'v'}}
NODE = {'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': 'n1', 'labels': {'gpushare': 'true'}}}


class Res(object):
    def __init__(self, kind):
        self.kind = kind
        self.namespaced = kind != 'Node'


class Obj(object):
    def __init__(self, d):
        self.d = d

    def to_dict(self):
        return copy.deepcopy(self.d)


def not_found(cls):
    return cls.__new__(cls)


class FakeDynamic(object):
    """The few DynamicClient calls the converger makes, over an in-memory store; records every write."""

    def __init__(self, objects=(), served=('ConfigMap', 'Node')):
        self.store = dict(((o['kind'], o['metadata'].get('namespace'), o['metadata']['name']), copy.deepcopy(o))
                          for o in objects)
        self.served = served
        self.writes = []
        self.version = 0
        self.before_delete = None  # a concurrent writer's turn, between a run's decision and its delete
        outer = self

        class Resources(object):
            def get(self, api_version, kind):
                if kind not in outer.served:
                    raise not_found(K.ResourceNotFoundError)
                return Res(kind)

        self.resources = Resources()

    def get(self, res, name, namespace=None):
        if (res.kind, namespace, name) not in self.store:
            raise not_found(K.NotFoundError)
        return Obj(self.store[(res.kind, namespace, name)])

    def patch(self, res, body, name, namespace=None, content_type=None, field_manager=None, force_conflicts=None):
        self.writes.append(('patch', res.kind, name, content_type))
        key = (res.kind, namespace, name)
        if content_type == 'application/merge-patch+json':
            if key not in self.store:
                raise not_found(K.NotFoundError)
            for field in ('labels', 'annotations'):
                values = self.store[key]['metadata'].setdefault(field, {})
                for k, v in (body['metadata'].get(field) or {}).items():
                    if v is None:
                        values.pop(k, None)
                    else:
                        values[k] = v
        else:
            live = copy.deepcopy(body)
            # server-side apply keeps what other writes (a merge patch: operation Update) own, here the users
            kept = dict((k, v) for k, v in ((self.store.get(key) or {}).get('metadata', {}).get('annotations') or {}).items()
                        if k.startswith(K.USER_PREFIX))
            if kept:
                live['metadata'].setdefault('annotations', {}).update(kept)
            self.store[key] = live
        self.bump(key)
        return Obj(self.store[key])

    def bump(self, key):
        self.version += 1
        self.store[key]['metadata']['resourceVersion'] = str(self.version)

    def create(self, res, body, namespace=None):
        self.writes.append(('create', res.kind, body['metadata']['name'], None))
        self.store[(res.kind, namespace, body['metadata']['name'])] = copy.deepcopy(body)
        return Obj(body)

    def delete(self, res, name, namespace=None, body=None):
        if self.before_delete:
            turn, self.before_delete = self.before_delete, None
            turn()
        self.writes.append(('delete', res.kind, name, None))
        key = (res.kind, namespace, name)
        if key not in self.store:
            raise not_found(K.NotFoundError)
        want = ((body or {}).get('preconditions') or {}).get('resourceVersion')
        if want is not None and want != self.store[key]['metadata'].get('resourceVersion'):
            e = K.ApiException()
            e.status, e.reason = 409, 'Conflict'
            raise e
        del self.store[key]


def run(client, defs, state='present', check_mode=False, **params):
    conv = K.Converger(dict(PARAMS, **params), client, check_mode=check_mode, diff=True)
    return K.converge(conv, defs, state)


def test_create_then_rerun_writes_nothing():
    client = FakeDynamic()
    first = run(client, [CM])
    assert first['created'] == 1 and first['changed'] and client.writes == [
        ('patch', 'ConfigMap', 'cfg', 'application/apply-patch+yaml')]
    second = run(client, [CM])
    assert second['unchanged'] == 1 and not second['changed'] and len(client.writes) == 1


def test_check_mode_reads_only():
    client = FakeDynamic()
    result = run(client, [CM], check_mode=True)
    assert result['created'] == 1 and result['changed'] and client.writes == []
    assert result['diff'][0]['before_header'] == 'ConfigMap ns/cfg'


def test_site_owned_object_is_backed_up_before_the_first_change():
    client = FakeDynamic([dict(CM, data={'k': 'site'})])
    result = run(client, [CM])
    assert result['updated'] == 1 and result['backups'] == ['ns/gpuops-backup-configmap-cfg']
    assert client.writes[0][:3] == ('create', 'ConfigMap', 'gpuops-backup-configmap-cfg')
    assert '"site"' in client.store[('ConfigMap', 'ns', 'gpuops-backup-configmap-cfg')]['data']['object.json']


def test_node_labels_are_merge_patched_and_other_labels_kept():
    client = FakeDynamic([{'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': 'n1', 'labels': {'site': 'x'}}}])
    result = run(client, [NODE])
    assert result['updated'] == 1 and client.writes == [('patch', 'Node', 'n1', 'application/merge-patch+json')]
    assert client.store[('Node', None, 'n1')]['metadata']['labels'] == {'site': 'x', 'gpushare': 'true'}
    assert not run(client, [NODE])['changed'] and len(client.writes) == 1
    removed = run(client, [NODE], state='absent')
    assert removed['deleted'] == 1 and client.store[('Node', None, 'n1')]['metadata']['labels'] == {'site': 'x'}


def test_missing_node_is_a_warning_not_a_create():
    client = FakeDynamic()
    result = run(client, [NODE])
    assert not result['changed'] and client.writes == [] and 'n1 does not exist' in result['warnings_list'][0]


def test_absent_keeps_objects_it_did_not_apply():
    client = FakeDynamic([CM])
    result = run(client, [CM], state='absent')
    assert result['objects'][0]['action'] == 'kept' and client.writes == []
    assert run(client, [CM], state='absent', delete_unmanaged=True)['deleted'] == 1


def test_unserved_kind_stops_with_a_clear_error():
    with pytest.raises(K.ConvergeError, match='does not serve v1 ConfigMap'):
        run(FakeDynamic(served=('Node',)), [CM])


def test_validate_definitions():
    assert K.validate_definitions([CM, NODE]) is None
    assert K.validate_definitions([CM, {'kind': 'X'}]).startswith('definitions[1] needs apiVersion, kind and metadata.name')


POD = {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': 'gpu-validate', 'namespace': 'ns'},
       'spec': {'restartPolicy': 'Never', 'runtimeClassName': 'nvidia',
                'tolerations': [{'key': 'nvidia.com/gpu', 'operator': 'Exists', 'effect': 'NoSchedule'}],
                'volumes': [{'name': 'data', 'emptyDir': {}}],
                'containers': [{'name': 'cuda', 'image': 'cuda:1', 'volumeMounts': [{'name': 'data', 'mountPath': '/d'}]}],
                'initContainers': [{'name': 'init', 'image': 'cuda:1',
                                    'volumeMounts': [{'name': 'data', 'mountPath': '/d'}]}]}}


def admitted(pod):
    """The pod as kube-apiserver stores it: DefaultTolerationSeconds appends the not-ready/unreachable tolerations,
    the ServiceAccount plugin appends the kube-api-access volume and its mount in every container."""
    live = copy.deepcopy(pod)
    spec = live['spec']
    spec['tolerations'] += [{'key': 'node.kubernetes.io/not-ready', 'operator': 'Exists', 'effect': 'NoExecute',
                             'tolerationSeconds': 300},
                            {'key': 'node.kubernetes.io/unreachable', 'operator': 'Exists', 'effect': 'NoExecute',
                             'tolerationSeconds': 300}]
    spec['volumes'].append({'name': 'kube-api-access-x1', 'projected': {'sources': []}})
    for c in spec['containers'] + spec['initContainers']:
        c['volumeMounts'].append({'name': 'kube-api-access-x1', 'mountPath': '/var/run/secrets/kubernetes.io/serviceaccount',
                                  'readOnly': True})
    return live


def test_K8S_10_K8S_11_pod_lists_admission_appends_to_are_compared_as_prefixes():
    """A Pod re-run writes nothing although the API server appended tolerations, a volume and mounts (found by make
    demo on the real control plane: the validation pods were re-applied on every run)."""
    client = FakeDynamic([admitted(K.with_hash(POD, PARAMS['hash_annotation']))], served=('Pod',))
    result = run(client, [POD])
    assert result['unchanged'] == 1 and not result['changed'] and client.writes == []


@pytest.mark.parametrize('change', ['toleration', 'mount', 'volume-first'])
def test_K8S_10_K8S_11_a_pod_that_lacks_a_wanted_entry_is_still_applied(change):
    live = admitted(K.with_hash(POD, PARAMS['hash_annotation']))
    if change == 'toleration':
        live['spec']['tolerations'] = live['spec']['tolerations'][1:]   # the wanted one missing, two others there
    elif change == 'mount':
        live['spec']['containers'][0]['volumeMounts'] = live['spec']['containers'][0]['volumeMounts'][1:]
    else:
        live['spec']['volumes'].reverse()                                # same entries, wanted one not first
    client = FakeDynamic([live], served=('Pod',))
    result = run(client, [POD])
    if change == 'toleration':  # an update may add tolerations
        assert result['updated'] == 1 and client.writes == [
            ('patch', 'Pod', 'gpu-validate', 'application/apply-patch+yaml')]
    else:  # volumes and mounts cannot change in place (422): the pod is replaced
        assert result['updated'] == 1 and client.writes == [('delete', 'Pod', 'gpu-validate', None),
                                                            ('create', 'Pod', 'gpu-validate', None)]


@pytest.mark.parametrize('change, replaced', [
    ('runtimeClassName', True), ('resources', True), ('image', False), ('activeDeadlineSeconds', False)])
def test_a_changed_pod_spec_replaces_the_pod_the_module_applied(change, replaced):
    """A validation pod whose spec changed in a field no update may change (the lifecycle suite's ready step after
    a changed RuntimeClass name: 422 'pod updates may not change fields other than ...') is deleted and created again;
    a change an update may make (an image, activeDeadlineSeconds) is applied in place."""
    live = admitted(K.with_hash(POD, PARAMS['hash_annotation']))
    live['metadata']['uid'] = 'u1'
    want = copy.deepcopy(POD)
    if change == 'runtimeClassName':
        want['spec']['runtimeClassName'] = 'nvidia-x'
    elif change == 'resources':
        want['spec']['containers'][0]['resources'] = {'limits': {'nvidia.com/mig-3g.40gb': '1'}}
    elif change == 'image':
        want['spec']['containers'][0]['image'] = 'cuda:2'
    else:
        want['spec']['activeDeadlineSeconds'] = 600
    client = FakeDynamic([live], served=('Pod',))
    result = run(client, [want])
    assert result['updated'] == 1
    if replaced:
        assert client.writes == [('delete', 'Pod', 'gpu-validate', None), ('create', 'Pod', 'gpu-validate', None)]
        stored = client.store[('Pod', 'ns', 'gpu-validate')]
        assert stored['spec'] == want['spec'] and PARAMS['hash_annotation'] in stored['metadata']['annotations']
    else:
        assert client.writes == [('patch', 'Pod', 'gpu-validate', 'application/apply-patch+yaml')]
    # check mode writes nothing
    client = FakeDynamic([live], served=('Pod',))
    assert run(client, [want], check_mode=True)['updated'] == 1 and client.writes == []


def test_a_pod_the_module_did_not_apply_is_never_replaced():
    live = admitted(POD)  # no hash annotation: a user's pod of that name
    want = dict(POD, spec=dict(POD['spec'], runtimeClassName='nvidia-x'))
    client = FakeDynamic([live], served=('Pod', 'ConfigMap'))
    run(client, [want])
    assert [w[:2] for w in client.writes] == [('create', 'ConfigMap'), ('patch', 'Pod')]  # its backup, then the apply


def test_K8S_10_K8S_11_other_kinds_keep_exact_list_lengths():
    """Only a Pod's own lists are admitted so; a DaemonSet's pod template is stored as sent, a longer list differs."""
    ds = {'apiVersion': 'apps/v1', 'kind': 'DaemonSet', 'metadata': {'name': 'dp', 'namespace': 'ns'},
          'spec': {'template': {'spec': {'tolerations': [{'key': 'a', 'operator': 'Exists'}]}}}}
    live = K.with_hash(ds, PARAMS['hash_annotation'])
    live['spec']['template']['spec']['tolerations'].append({'key': 'b', 'operator': 'Exists'})
    client = FakeDynamic([live], served=('DaemonSet',))
    assert run(client, [ds])['updated'] == 1
    assert not K.is_subset({'spec': {'tolerations': [1]}}, {'spec': {'tolerations': [1, 2]}})


class LostAnswer(FakeDynamic):
    """A create whose answer is lost (status 0, as kube/access's retry policy reports a POST it will not resend):
    ``landed`` says whether the server ran it."""

    def __init__(self, landed, objects=()):
        FakeDynamic.__init__(self, objects)
        self.landed = landed
        self.failed = False

    def create(self, res, body, namespace=None):
        if not self.failed:
            self.failed = True
            if self.landed:
                FakeDynamic.create(self, res, body, namespace)
            else:
                self.writes.append(('create', res.kind, body['metadata']['name'], 'lost'))
            raise K.ApiException(status=0, reason='connection dropped after the request was sent')
        return FakeDynamic.create(self, res, body, namespace)


@pytest.mark.parametrize('landed', [True, False])
def test_backup_create_that_may_have_landed_is_read_before_it_is_sent_again(landed):
    """Issue #31: a POST that may have landed is re-read before it is resent; exactly one backup either way."""
    client = LostAnswer(landed, [dict(CM, data={'k': 'site'})])
    result = run(client, [CM])
    creates = [w for w in client.writes if w[0] == 'create']
    assert len(creates) == (1 if landed else 2), client.writes
    assert result['backups'] == ['ns/gpuops-backup-configmap-cfg']
    assert ('ConfigMap', 'ns', 'gpuops-backup-configmap-cfg') in client.store


def test_backup_create_conflict_is_settled_by_reading():
    """409 AlreadyExists on the backup's create (another writer, or an earlier try that landed): read, keep it."""
    class Conflict(FakeDynamic):
        def create(self, res, body, namespace=None):
            FakeDynamic.create(self, res, body, namespace)
            raise K.ApiException(status=409, reason='AlreadyExists')

    client = Conflict([dict(CM, data={'k': 'site'})])
    result = run(client, [CM])
    assert result['backups'] == ['ns/gpuops-backup-configmap-cfg'] and result['updated'] == 1


# ---------------------------------------------------------------------------------------------- shared objects' users
RC = {'apiVersion': 'node.k8s.io/v1', 'kind': 'RuntimeClass', 'handler': 'nvidia',
      'metadata': {'name': 'nvidia', 'labels': {'gpuops.io/sharing-scope': 'shared'}}}
POOL_CM = {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'cfg', 'namespace': 'ns', 'labels': {
    'gpuops.io/sharing-scope': 'pool'}}, 'data': {'k': 'v'}}
SHARED = dict(user_labels={'gpuops.io/sharing-scope': 'shared'})


def users(client, kind='RuntimeClass', ns=None, name='nvidia'):
    ann = client.store[(kind, ns, name)]['metadata'].get('annotations') or {}
    return sorted(k for k in ann if k.startswith(K.USER_PREFIX))


def test_a_pool_records_itself_on_shared_objects_only_and_a_rerun_writes_nothing():
    client = FakeDynamic(served=('ConfigMap', 'RuntimeClass'))
    first = run(client, [RC, POOL_CM], user='pool-a', **SHARED)
    assert first['changed'] and first['users'] == [
        {'kind': 'RuntimeClass', 'namespace': None, 'name': 'nvidia', 'user': 'pool-a', 'action': 'registered'}]
    assert users(client) == ['user.gpuops.io/pool-a'] and users(client, 'ConfigMap', 'ns', 'cfg') == []
    writes = len(client.writes)
    again = run(client, [RC, POOL_CM], user='pool-a', **SHARED)
    assert not again['changed'] and again['users'] == [] and len(client.writes) == writes
    # a second pool: its record beside the first one's, the object's fields unchanged
    run(client, [RC], user='pool-b', **SHARED)
    assert users(client) == ['user.gpuops.io/pool-a', 'user.gpuops.io/pool-b']
    # the first pool's apply again (its server-side apply) keeps the other's record
    assert not run(client, [RC], user='pool-a', **SHARED)['changed']
    assert users(client) == ['user.gpuops.io/pool-a', 'user.gpuops.io/pool-b']


def test_check_mode_shows_the_record_and_writes_nothing():
    client = FakeDynamic(served=('RuntimeClass',))
    result = run(client, [RC], check_mode=True, user='pool-a', **SHARED)
    assert result['changed'] and result['users'][0]['action'] == 'registered' and client.writes == []


def test_uninstall_keeps_a_shared_object_another_pool_uses_and_drops_only_its_own_record():
    client = FakeDynamic(served=('RuntimeClass',))
    run(client, [RC], user='pool-a', **SHARED)
    run(client, [RC], user='pool-b', **SHARED)
    out = run(client, [RC], state='absent', user='pool-a', **SHARED)
    assert out['deleted'] == 0 and out['changed']
    assert out['objects'] == [{'kind': 'RuntimeClass', 'namespace': None, 'name': 'nvidia', 'action': 'kept',
                               'users': ['pool-b']}]
    assert users(client) == ['user.gpuops.io/pool-b']
    last = run(client, [RC], state='absent', user='pool-b', **SHARED)
    assert last['deleted'] == 1 and ('RuntimeClass', None, 'nvidia') not in client.store


def test_keep_removes_the_record_but_not_the_object():
    """keep: pools the caller knows of otherwise (their nodes carry the family's labels; installed before users were
    recorded) keep the object."""
    client = FakeDynamic(served=('RuntimeClass',))
    run(client, [RC], user='pool-a', **SHARED)
    out = run(client, [RC], state='absent', user='pool-a', keep=True, **SHARED)
    assert out['objects'][0]['action'] == 'kept' and users(client) == []
    assert ('RuntimeClass', None, 'nvidia') in client.store


def test_a_pool_recorded_between_the_decision_and_the_delete_keeps_the_object():
    """The race of issue 37 item 8: pool A's uninstall decided that nobody uses the RuntimeClass; before its delete
    lands, pool B's install (another inventory) records itself. The delete's resourceVersion precondition fails (409),
    A decides again and keeps the object for B."""
    client = FakeDynamic(served=('RuntimeClass',))
    run(client, [RC], user='pool-a', **SHARED)
    client.before_delete = lambda: run(client, [RC], user='pool-b', **SHARED)
    out = run(client, [RC], state='absent', user='pool-a', **SHARED)
    assert ('RuntimeClass', None, 'nvidia') in client.store, client.writes
    assert users(client) == ['user.gpuops.io/pool-b']
    assert out['deleted'] == 0 and out['objects'][-1]['users'] == ['pool-b']


def test_an_object_deleted_by_a_concurrent_uninstall_is_applied_again_before_the_record():
    client = FakeDynamic(served=('RuntimeClass',))
    conv = K.Converger(dict(PARAMS, user='pool-b', **SHARED), client, diff=False)
    live = conv.present(RC)
    del client.store[('RuntimeClass', None, 'nvidia')]  # pool A's uninstall, between B's apply and B's record
    conv.register(conv.resource(RC), RC, live)
    assert users(client) == ['user.gpuops.io/pool-b'] and client.store[('RuntimeClass', None, 'nvidia')]['handler'] == 'nvidia'


SCHED_CM = {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'hami-scheduler', 'namespace': 'kube-system',
            'labels': {'gpuops.io/sharing-scope': 'shared'}}, 'data': {'scale': '1'}}


def test_a_shared_object_another_inventorys_pool_uses_is_not_changed_and_nothing_is_written():
    """Issue 37 (cross-inventory): pool-x of another inventory applied the shared config with its settings and recorded
    itself; this inventory's pool-a (knowing only pool-a, pool-b) would change it: refused before any write (its own
    ConfigMap included), naming the object, the other user and the field."""
    client = FakeDynamic(served=('ConfigMap',))
    run(client, [SCHED_CM], user='pool-x', known_users=['pool-x'], **SHARED)
    writes = len(client.writes)
    mine = dict(SCHED_CM, data={'scale': '2'})
    with pytest.raises(K.ConvergeError) as e:
        run(client, [POOL_CM, mine], user='pool-a', known_users=['pool-a', 'pool-b'], **SHARED)
    msg = str(e.value)
    assert 'ConfigMap kube-system/hami-scheduler (recorded users pool-x) would change in data.scale' in msg, msg
    assert 'nothing was changed' in msg and len(client.writes) == writes
    assert client.store[('ConfigMap', 'kube-system', 'hami-scheduler')]['data'] == {'scale': '1'}
    # the same settings: the pool records itself beside pool-x, nothing refused
    same = run(client, [SCHED_CM], user='pool-a', known_users=['pool-a'], **SHARED)
    assert same['users'][0]['action'] == 'registered'
    assert users(client, 'ConfigMap', 'kube-system', 'hami-scheduler') == [
        'user.gpuops.io/pool-a', 'user.gpuops.io/pool-x']
    # a pool this run knows (same inventory, checked to agree) may change it; and without known_users no check is made
    assert run(client, [mine], user='pool-a', known_users=['pool-a', 'pool-x'], **SHARED)['updated'] == 1
    assert run(client, [SCHED_CM], user='pool-a', **SHARED)['updated'] == 1


def test_differing_names_every_field_that_would_change():
    want = {'metadata': {'name': 'a', 'labels': {'x': '1'}}, 'data': {'k': 'v', 'n': '1'}, 'spec': {'l': [1, 2]}}
    have = {'metadata': {'name': 'a', 'labels': {'x': '2'}}, 'data': {'k': 'v'}, 'spec': {'l': [1, 3]}}
    assert K.differing(want, have) == ['data.n', 'metadata.labels.x', 'spec.l']
    assert K.differing(want, want) == []


def test_absent_of_an_unrecorded_legacy_shared_object_still_needs_the_hash_annotation():
    client = FakeDynamic([dict(RC)], served=('RuntimeClass',))
    out = run(client, [RC], state='absent', user='pool-a', **SHARED)
    assert out['objects'][0]['action'] == 'kept' and ('RuntimeClass', None, 'nvidia') in client.store


# ---------------------------------------------------------------------------------------------------------------
# prune: a pool's objects it rendered before and no longer renders (found by the lifecycle suite: a MIG pool switched to
# manager: false kept NVIDIA's MIG manager DaemonSet and its RBAC running on its node)
class Listing(FakeDynamic):
    """FakeDynamic that also lists by label selector (name None), every namespace at once as the client does."""

    def get(self, res, name=None, namespace=None, label_selector=None):
        if name is not None:
            return FakeDynamic.get(self, res, name, namespace)
        want = dict(kv.split('=', 1) for kv in (label_selector or '').split(',') if kv)
        items = [o for (kind, ns, n), o in sorted(self.store.items(), key=lambda kv: (kv[0][0], kv[0][1] or '', kv[0][2]))
                 if kind == res.kind and (namespace is None or ns == namespace)
                 and all(((o['metadata'].get('labels') or {}).get(k)) == v for k, v in want.items())]
        return Obj({'items': items})


POOL_SEL = 'gpuops.io/sharing-pool=p1,gpuops.io/sharing-scope=pool'
POOL_KINDS = [{'api_version': 'v1', 'kind': 'ConfigMap'}, {'api_version': 'apps/v1', 'kind': 'DaemonSet'}]
RULES = [{'label_selector': POOL_SEL, 'kinds': POOL_KINDS}]


def pool_obj(kind, name, pool='p1', ns='kube-system'):
    api = 'apps/v1' if kind == 'DaemonSet' else 'v1'
    return {'apiVersion': api, 'kind': kind, 'metadata': {'name': name, 'namespace': ns, 'labels': {
        'gpuops.io/sharing-pool': pool, 'gpuops.io/sharing-scope': 'pool'}}, 'data': {'k': name}}


def test_prune_deletes_the_pool_objects_it_no_longer_renders_and_nothing_else():
    client = Listing(served=('ConfigMap', 'DaemonSet'))
    plugin, manager, cfg = pool_obj('DaemonSet', 'dp-p1'), pool_obj('DaemonSet', 'mig-manager-p1'), pool_obj('ConfigMap', 'c')
    other = pool_obj('DaemonSet', 'dp-p2', pool='p2')
    run(client, [cfg, plugin, manager, other])
    # a site's object with the pool's labels but not applied by the module (no hash annotation) is never pruned
    site = pool_obj('ConfigMap', 'site-cm')
    client.store[('ConfigMap', 'kube-system', 'site-cm')] = site
    conv = K.Converger(dict(PARAMS), client)
    K.converge(conv, [cfg, plugin], 'present')
    out = K.prune(conv, [cfg, plugin], RULES)
    assert out['deleted'] == 1 and out['changed']
    assert [o for o in out['objects'] if o['action'] == 'deleted'] == [
        {'kind': 'DaemonSet', 'namespace': 'kube-system', 'name': 'mig-manager-p1', 'action': 'deleted'}]
    assert set(k for k in client.store) == {('ConfigMap', 'kube-system', 'c'), ('DaemonSet', 'kube-system', 'dp-p1'),
                                            ('DaemonSet', 'kube-system', 'dp-p2'),
                                            ('ConfigMap', 'kube-system', 'site-cm')}
    # a re-run writes nothing
    writes = len(client.writes)
    conv = K.Converger(dict(PARAMS), client)
    K.converge(conv, [cfg, plugin], 'present')
    again = K.prune(conv, [cfg, plugin], RULES)
    assert not again['changed'] and len(client.writes) == writes


def test_prune_finds_the_pool_objects_in_another_namespace():
    """The pool's namespace changed: its objects in the old one are no longer rendered."""
    client = Listing(served=('ConfigMap', 'DaemonSet'))
    old = pool_obj('DaemonSet', 'dp-p1', ns='old')
    new = pool_obj('DaemonSet', 'dp-p1', ns='new')
    run(client, [old])
    conv = K.Converger(dict(PARAMS), client)
    K.converge(conv, [new], 'present')
    out = K.prune(conv, [new], RULES)
    assert ('DaemonSet', 'old', 'dp-p1') not in client.store and ('DaemonSet', 'new', 'dp-p1') in client.store
    assert out['deleted'] == 1


def test_prune_in_check_mode_writes_nothing():
    client = Listing(served=('ConfigMap', 'DaemonSet'))
    run(client, [pool_obj('DaemonSet', 'gone')])
    writes = len(client.writes)
    conv = K.Converger(dict(PARAMS), client, check_mode=True)
    out = K.prune(conv, [], RULES)
    assert out['changed'] and out['deleted'] == 1 and len(client.writes) == writes


def test_prune_skips_a_kind_the_cluster_does_not_serve():
    client = Listing(served=('ConfigMap',))
    conv = K.Converger(dict(PARAMS), client)
    out = K.prune(conv, [], RULES)
    assert not out['changed'] and client.writes == []


DEPLOY = {'apiVersion': 'apps/v1', 'kind': 'Deployment', 'metadata': {'name': 'gpushare-binpack-p1', 'namespace': 'ns'},
          'spec': {'replicas': 2, 'selector': {'matchLabels': {'app.kubernetes.io/name': 'gpushare-binpack',
                                                               'gpuops.io/sharing-pool': 'p1'}},
                   'template': {'metadata': {'labels': {'app.kubernetes.io/name': 'gpushare-binpack',
                                                        'gpuops.io/sharing-pool': 'p1'}},
                                'spec': {'containers': [{'name': 'binpack', 'image': 'cuda:1'}]}}}}


@pytest.mark.parametrize('applied', [True, False])
def test_a_deployment_whose_selector_changed_is_replaced_when_the_module_applied_it(applied):
    """A Deployment's selector is immutable (apps/v1: 422): the validation Deployment an earlier release applied with
    the strategy's selector only (before a pool's Deployment named its pool in the selector) is deleted and created
    again; a user's Deployment of that name is never replaced; an unchanged selector is updated in place."""
    old = copy.deepcopy(DEPLOY)
    del old['spec']['selector']['matchLabels']['gpuops.io/sharing-pool']
    live = K.with_hash(old, PARAMS['hash_annotation']) if applied else copy.deepcopy(old)
    live['metadata']['uid'] = 'u1'
    client = FakeDynamic([live], served=('Deployment', 'ConfigMap'))
    result = run(client, [DEPLOY])
    assert result['updated'] == 1
    if applied:
        assert client.writes == [('delete', 'Deployment', 'gpushare-binpack-p1', None),
                                 ('create', 'Deployment', 'gpushare-binpack-p1', None)]
    else:
        assert ('delete', 'Deployment', 'gpushare-binpack-p1', None) not in client.writes
    same = K.with_hash(DEPLOY, PARAMS['hash_annotation'])
    same['spec']['replicas'] = 3
    client = FakeDynamic([same], served=('Deployment',))
    assert run(client, [DEPLOY])['updated'] == 1
    assert client.writes == [('patch', 'Deployment', 'gpushare-binpack-p1', 'application/apply-patch+yaml')]
