# -*- coding: utf-8 -*-
"""gpu-manager stack against tkestack/gpu-manager v1.1.5 and tkestack/gpu-admission 47d56ae (master; it has no tags):
rows of docs/conformance/gpu-manager.md. Each RBAC row is one API call read from the code at that tag/commit."""
import pytest

from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import gpu_manager as gm
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import render as r
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.scheduler import render as ksr
from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks.common import StackError

T4 = {'gpus': [{'index': 0, 'name': 'Tesla T4', 'memory_total_mib': 15360}], 'sharing': {}}
OK = {'accept_unmaintained': True, 'admission_image': 'reg.example/tkestack/gpu-admission:47d56ae'}


def render(removing=False, **settings):
    return r.render(dict(strategy='gpu-manager', pool='p1', nodes=['n1'], facts={'n1': T4},
                         settings={'gpu_manager': settings}, check_conflicts=not removing, removing=removing))


def objs(out, kind, name=None):
    return [m for m in out['manifests'] if m['kind'] == kind and (name is None or m['metadata']['name'] == name)]


def rules(out, role):
    return objs(out, 'ClusterRole', role)[0]['rules']


def grants(out, role, resource, verb):
    return any(resource in rule['resources'] and verb in rule['verbs'] and rule['apiGroups'] == [''] for rule in rules(out, role))


def manager_grants(resource, verb):
    return grants(render(**OK), 'gpu-manager-p1', resource, verb)


def admission_grants(resource, verb):
    return grants(render(**OK), 'gpu-admission', resource, verb)


def test_GPUM_01_refused_without_the_acknowledgement_naming_hami():
    with pytest.raises(StackError) as e:
        render()
    msg = str(e.value)
    for needle in ('gpu_sharing_stack_gpu_manager.accept_unmaintained: true', 'unmaintained', 'gpu-admission',
                   'gpu_sharing_stack_strategy: hami', 'nvidia.com/gpumem', 'admission_image', gm.ADMISSION_COMMIT,
                   'gpu_sharing_stack_state: absent'):
        assert needle in msg, needle
    # an explicit false is refused the same way
    with pytest.raises(StackError, match='accept_unmaintained'):
        render(accept_unmaintained=False, admission_image=OK['admission_image'])


def test_GPUM_02_image_tag_follows_upstream_scheme():
    # hack/build.sh tags the image with VERSION (1.1.5), without a leading v
    assert gm.IMAGE == 'docker.io/tkestack/gpu-manager:1.1.5'
    ds = objs(render(**OK), 'DaemonSet', 'gpu-manager-p1')[0]
    assert ds['spec']['template']['spec']['containers'][0]['image'] == gm.IMAGE


def test_GPUM_03_existing_pool_can_still_be_removed():
    out = render(removing=True)
    assert [m['metadata']['name'] for m in objs(out, 'DaemonSet')] == ['gpu-manager-p1', 'gpu-admission']
    assert objs(out, 'ClusterRole', 'gpu-admission')


def test_GPUM_04_gpu_manager_gets_its_node():
    # pkg/services/watchdog/label.go: nl.client.Nodes().Get(nl.hostName)
    assert manager_grants('nodes', 'get')


def test_GPUM_05_gpu_manager_updates_its_node_labels():
    # pkg/services/watchdog/label.go: nl.client.Nodes().Update(node); a failure ends server.go's Run
    assert manager_grants('nodes', 'update')


def test_GPUM_06_gpu_manager_watches_the_pods_of_its_node():
    # pkg/services/watchdog/watchdog.go: pod informer with fieldSelector spec.nodeName (list + watch)
    assert manager_grants('pods', 'list') and manager_grants('pods', 'watch')


def test_GPUM_07_gpu_manager_lists_pods_of_its_node():
    # pkg/services/allocator/nvidia/allocator.go getPodsOnNode: Pods(NamespaceAll).List(spec.nodeName[, status.phase])
    assert manager_grants('pods', 'list')


def test_GPUM_08_gpu_manager_gets_pods():
    # allocator.go updatePodStatus: Pods(ns).Get on conflict
    assert manager_grants('pods', 'get')


def test_GPUM_09_gpu_manager_updates_pod_status():
    # allocator.go updatePodStatus: Pods(ns).UpdateStatus(pod)
    assert manager_grants('pods/status', 'update')


def test_GPUM_10_gpu_manager_patches_pod_annotations():
    # allocator.go patchPodWithAnnotations: Pods(ns).Patch(StrategicMergePatchType)
    assert manager_grants('pods', 'patch')


def test_GPUM_11_gpu_manager_deletes_owned_pods():
    # allocator.go deletePodWithOwnerRef: Pods(ns).Delete
    assert manager_grants('pods', 'delete')


def test_GPUM_12_gpu_manager_gets_nothing_else():
    assert rules(render(**OK), 'gpu-manager-p1') == [
        {'apiGroups': [''], 'resources': ['nodes'], 'verbs': ['get', 'update']},
        {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['get', 'list', 'watch', 'patch', 'delete']},
        {'apiGroups': [''], 'resources': ['pods/status'], 'verbs': ['update']},
    ]
    out = render(**OK)
    binding = objs(out, 'ClusterRoleBinding', 'gpu-manager-p1')[0]
    assert binding['roleRef']['name'] == 'gpu-manager-p1'
    ds = objs(out, 'DaemonSet', 'gpu-manager-p1')[0]
    assert ds['spec']['template']['spec']['serviceAccountName'] == binding['subjects'][0]['name']


def test_GPUM_13_gpu_admission_watches_nodes():
    # pkg/predicate/gpu_predicate.go NewGPUFilter: node informer (list + watch)
    assert admission_grants('nodes', 'list') and admission_grants('nodes', 'watch')


def test_GPUM_14_gpu_admission_watches_pods():
    # gpu_predicate.go NewGPUFilter: pod informer, all namespaces, fieldSelector status.phase!=Succeeded
    assert admission_grants('pods', 'list') and admission_grants('pods', 'watch')


def test_GPUM_15_gpu_admission_patches_the_predicate_annotations():
    # gpu_predicate.go patchPodWithAnnotations: Pods(ns).Patch(StrategicMergePatchType)
    assert admission_grants('pods', 'patch')


def test_GPUM_16_gpu_admission_gets_nothing_else():
    out = render(**OK)
    assert rules(out, 'gpu-admission') == [
        {'apiGroups': [''], 'resources': ['nodes'], 'verbs': ['list', 'watch']},
        {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['list', 'watch', 'patch']},
    ]
    binding = objs(out, 'ClusterRoleBinding', 'gpu-admission')[0]
    assert binding['subjects'] == [{'kind': 'ServiceAccount', 'name': 'gpu-admission', 'namespace': out['namespace']}]


def test_GPUM_17_extender_url_and_filter_verb_as_gpu_admission_serves_them():
    out = render(**OK)
    ext = out['extender']
    # routes.go: POST /scheduler/predicates; kube-scheduler posts to urlPrefix + "/" + verb
    assert ext['url_prefix'] == 'http://127.0.0.1:3456/scheduler' == out['extender_url']
    assert ext['filter_verb'] == 'predicates'
    assert 'bind_verb' not in ext and 'prioritize_verb' not in ext and 'preempt_verb' not in ext
    # through the collection's scheduler-extender config, as kube-scheduler 1.37 reads it
    doc = ksr.render('v1.37.2', [ext], kubeconfig='/etc/kubernetes/scheduler.conf')
    assert doc['apiVersion'] == 'kubescheduler.config.k8s.io/v1'
    assert doc['extenders'] == [{'urlPrefix': 'http://127.0.0.1:3456/scheduler', 'filterVerb': 'predicates',
                                 'enableHTTPS': False, 'nodeCacheCapable': False,
                                 'managedResources': [{'name': 'tencent.com/vcuda-core', 'ignoredByScheduler': False},
                                                      {'name': 'tencent.com/vcuda-memory', 'ignoredByScheduler': False}],
                                 'ignorable': False}]
    # next to gpushare's default entry (it binds; gpu-admission does not, so both fit)
    both = ksr.normalize_extenders([ext, {'url_prefix': 'http://127.0.0.1:32766/gpushare-scheduler', 'filter_verb': 'filter',
                                          'bind_verb': 'bind', 'managed_resources': ['aliyun.com/gpu-mem']}])
    assert len(both) == 2


def test_GPUM_18_node_cache_capable_false():
    # the filter reads capacity from the node objects in ExtenderArgs.Nodes; upstream's policy sets nodeCacheCapable false
    assert render(**OK)['extender']['node_cache_capable'] is False


def test_GPUM_19_managed_resources_and_ignorable():
    ext = render(**OK)['extender']
    assert ext['managed_resources'] == [
        {'name': 'tencent.com/vcuda-core', 'ignored_by_scheduler': False},
        {'name': 'tencent.com/vcuda-memory', 'ignored_by_scheduler': False}]
    assert ext['ignorable'] is False


def test_GPUM_20_gpu_admission_on_the_control_plane_host_network_or_behind_a_cluster_ip():
    out = render(**OK)
    ds = objs(out, 'DaemonSet', 'gpu-admission')[0]
    spec = ds['spec']['template']['spec']
    assert spec['hostNetwork'] is True and spec['dnsPolicy'] == 'ClusterFirstWithHostNet'
    c = spec['containers'][0]
    assert c['image'] == OK['admission_image']
    assert c['command'] == ['/usr/bin/gpu-admission', '--address=127.0.0.1:3456', '--v=4', '--logtostderr=true']
    terms = spec['affinity']['nodeAffinity']['requiredDuringSchedulingIgnoredDuringExecution']['nodeSelectorTerms']
    assert terms[0]['matchExpressions'][0]['key'] == 'node-role.kubernetes.io/control-plane'
    assert not objs(out, 'Service') and not objs(out, 'Deployment')
    out = render(admission_registration='cluster-ip', admission_cluster_ip='10.96.0.60', **OK)
    dep = objs(out, 'Deployment', 'gpu-admission')[0]
    c = dep['spec']['template']['spec']['containers'][0]
    assert c['command'][1] == '--address=0.0.0.0:3456'
    svc = objs(out, 'Service', 'gpu-admission')[0]
    assert svc['spec']['clusterIP'] == '10.96.0.60' and svc['spec']['ports'][0]['targetPort'] == 3456
    assert out['extender']['url_prefix'] == 'http://10.96.0.60:3456/scheduler'
    with pytest.raises(StackError, match='admission_cluster_ip'):
        render(admission_registration='cluster-ip', **OK)
    with pytest.raises(StackError, match='only used with'):
        render(admission_cluster_ip='10.96.0.60', **OK)


def test_GPUM_21_admission_image_required():
    with pytest.raises(StackError) as e:
        render(accept_unmaintained=True)
    for needle in ('gpu_sharing_stack_gpu_manager.admission_image is required', gm.ADMISSION_COMMIT,
                   'gpu-admission-tke:36', 'hami'):
        assert needle in str(e.value), needle


def test_GPUM_22_gpu_manager_daemonset_as_upstream():
    out = render(**OK)
    spec = objs(out, 'DaemonSet', 'gpu-manager-p1')[0]['spec']['template']['spec']
    assert spec['hostPID'] is True and spec['priorityClassName'] == 'system-node-critical'
    assert spec['nodeSelector']['nvidia-device-enable'] == 'enable'
    assert {'key': 'tencent.com/vcuda-core', 'operator': 'Exists', 'effect': 'NoSchedule'} in spec['tolerations']
    c = spec['containers'][0]
    assert c['securityContext'] == {'privileged': True}
    assert c['ports'][0]['containerPort'] == 5678
    mounts = dict((m['name'], m['mountPath']) for m in c['volumeMounts'])
    hosts = dict((v['name'], (v['hostPath']['path'], v['hostPath']['type'])) for v in spec['volumes'])
    assert mounts['log'] == '/var/log/gpu-manager' and hosts['log'] == ('/etc/gpu-manager/log', 'DirectoryOrCreate')
    assert mounts['usr-directory'] == '/usr/local/host' and hosts['usr-directory'] == ('/usr', 'Directory')
    assert hosts['device-plugin'] == ('/var/lib/kubelet/device-plugins', 'Directory')
    assert hosts['run-dir'] == ('/var/run', 'Directory') and hosts['cgroup'] == ('/sys/fs/cgroup', 'Directory')
    env = dict((e['name'], e.get('value')) for e in c['env'])
    assert env['LOG_LEVEL'] == '4' and 'NODE_NAME' in env
    assert out['node_labels']['n1']['nvidia-device-enable'] == 'enable'
    assert out['resources'] == ['tencent.com/vcuda-core', 'tencent.com/vcuda-memory']


def test_GPUM_23_container_runtime_endpoint_passed():
    env = dict((e['name'], e.get('value')) for e in
               objs(render(**OK), 'DaemonSet', 'gpu-manager-p1')[0]['spec']['template']['spec']['containers'][0]['env'])
    assert env['EXTRA_FLAGS'].split() == ['--logtostderr=false', '--container-runtime-endpoint=/var/run/containerd/containerd.sock',
                                          '--cgroup-driver=systemd']
    env = dict((e['name'], e.get('value')) for e in
               objs(render(container_runtime_endpoint='/var/run/crio/crio.sock', extra_flags='', **OK),
                    'DaemonSet', 'gpu-manager-p1')[0]['spec']['template']['spec']['containers'][0]['env'])
    assert env['EXTRA_FLAGS'] == '--container-runtime-endpoint=/var/run/crio/crio.sock --cgroup-driver=systemd'


def test_GPUM_24_cgroup_driver_follows_kubeadm_default_and_is_settable():
    env = dict((e['name'], e.get('value')) for e in
               objs(render(cgroup_driver='cgroupfs', **OK), 'DaemonSet', 'gpu-manager-p1')[0]['spec']['template']['spec']['containers'][0]['env'])
    assert env['EXTRA_FLAGS'].endswith('--cgroup-driver=cgroupfs')
    with pytest.raises(StackError, match='cgroup_driver must be one of systemd, cgroupfs'):
        render(cgroup_driver='none', **OK)


def test_GPUM_25_cri_v1alpha2_noted():
    notes = ' '.join(render(**OK)['notes'])
    assert 'CRI v1alpha2' in notes and 'containerd 2.x does not' in notes


def test_GPUM_26_acknowledged_deploy_warns_naming_hami():
    out = render(**OK)
    assert any('unmaintained' in w and 'gpu_sharing_stack_strategy: hami' in w for w in out['warnings'])
    assert any('kube_scheduler_extender' in n for n in out['notes'])
