"""NVIDIA's DRA driver chart as the oracle for strategy dra (docs/conformance/dra-driver-nvidia-gpu.md).

The chart and the driver's source come from the Go module proxy (sigs.k8s.io/dra-driver-nvidia-gpu v0.5.0, the
collection's pin; `go mod download` puts it in the Go module cache, nothing is copied into this repository); helm is
upstream's own (helm.sh/helm/v3 v3.22.0, built by lab/go/build.sh helm).

1. `helm template` renders the chart with the values the collection renders (stacks/render.render, strategy dra):
   the chart accepts them (its templates/validation.yaml fails on what it refuses; the chart has no values.schema.json),
   and what it makes is what the collection relies on (DeviceClasses, CDI root, image, pull secrets, apiVersion).
2. The facts the renderer keeps (feature gates and their exclusions, device attributes, the opaque config API) are read
   from the driver's source at the tag and compared with the renderer's tables.
3. The rendered objects plus the claim templates and the validation workload go to the lab's real API server
   (fixture kube_real): server-side accepted, and a second apply by the collection's converger makes 0 writes (counted
   from the audit log).

Run: .venv/bin/pytest -q -p no:xdist lab/tests/oracles/test_dra_driver_chart.py
"""
import json
import os
import re
import subprocess

import pytest
import yaml

from conftest import lab_collections_path
from oracle_util import go_set

MODULE = 'sigs.k8s.io/dra-driver-nvidia-gpu'
VERSION = 'v0.5.0'
CHART = os.path.join('deployments', 'helm', 'dra-driver-nvidia-gpu')
SUFFIX = '%d' % os.getpid()


def _collection():
    lab_collections_path(importable=True)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.stacks import dra as stacks_dra, render as stacks_render
    return stacks_render, stacks_dra


@pytest.fixture(scope='module')
def module_dir(tmp_path_factory):
    """The module's directory in the Go module cache (downloaded through the proxy on first use; a download that fails
    fails the test, never skips it)."""
    work = tmp_path_factory.mktemp('gomod')
    env = dict(os.environ, GOFLAGS='-mod=mod', GOTOOLCHAIN='local', PATH='/usr/local/go/bin:' + os.environ['PATH'])
    proc = subprocess.run(['go', 'mod', 'download', '-json', '%s@%s' % (MODULE, VERSION)], cwd=str(work), env=env,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        pytest.fail('go mod download %s@%s failed (rc %d): %s' % (MODULE, VERSION, proc.returncode, tail))
    d = json.loads(proc.stdout)['Dir']
    assert os.path.isfile(os.path.join(d, CHART, 'Chart.yaml')), d
    return d


@pytest.fixture(scope='module')
def chart(module_dir):
    return os.path.join(module_dir, CHART)


@pytest.fixture(scope='module')
def helm():
    path = os.path.join(go_set('helm'), 'helm')
    out = subprocess.run([path, 'version', '--short'], capture_output=True, text=True, check=True).stdout
    assert out.startswith('v3.22.0'), out
    return path


def src(module_dir, *path):
    with open(os.path.join(module_dir, *path)) as f:
        return f.read()


def ours(settings=None, registry='', pull=None, kube='v1.37.2', **params):
    render, dra = _collection()
    s = {'chart_path': '/charts/dra-driver-nvidia-gpu', 'chart_version': '0.5.0', 'kube_version': kube}
    s.update(settings or {})
    p = {'strategy': 'dra', 'pool': 'dra-oracle', 'nodes': ['n1'], 'settings': {'dra': s},
         'cdi_enabled': {'n1': True}, 'registry': registry, 'image_pull_secrets': pull or []}
    p.update(params)
    return render.render(p)


def template(helm, chart, values, tmp_path, release='dra', namespace='dra-driver-nvidia-gpu', kube='v1.37.2',
             check=True):
    vf = tmp_path / ('values-%d.json' % len(list(tmp_path.iterdir())))
    vf.write_text(json.dumps(values))
    proc = subprocess.run([helm, 'template', release, chart, '--namespace', namespace, '-f', str(vf),
                           '--kube-version', kube], capture_output=True, text=True, timeout=120)
    if not check:
        return proc
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def by_kind(docs, kind):
    return [d for d in docs if d['kind'] == kind]


# ------------------------------------------------------------------------------------------- the chart and its values

def test_DRA_01_the_chart_accepts_the_rendered_values_and_reads_every_key(helm, chart, tmp_path):
    with open(os.path.join(chart, 'Chart.yaml')) as f:
        meta = yaml.safe_load(f)
    assert (meta['name'], meta['version'], meta['appVersion']) == ('dra-driver-nvidia-gpu', '0.5.0', '0.5.0')
    # no schema at this release: the chart's own checks are templates/validation.yaml, which helm template runs
    assert not os.path.exists(os.path.join(chart, 'values.schema.json'))
    with open(os.path.join(chart, 'values.yaml')) as f:
        defaults = yaml.safe_load(f)
    render, dra = _collection()
    for path in sorted(dra.DOCUMENTED_VALUE_KEYS):
        node = defaults
        for part in path.split('.'):
            assert isinstance(node, dict) and part in node, 'values.yaml has no %s' % path
            node = node[part]
    res = ours({'feature_gates': {'TimeSlicingSettings': True, 'MPSSupport': True}, 'log_verbosity': 6},
               registry='mirror.example.com/m', pull=['regcred'], node_selector={'site': 'a'})
    docs = template(helm, chart, res['helm']['values'], tmp_path)
    ds = by_kind(docs, 'DaemonSet')
    assert [d['metadata']['name'] for d in ds] == ['dra-driver-nvidia-gpu-kubelet-plugin']
    pod = ds[0]['spec']['template']['spec']
    assert pod['nodeSelector'] == {'site': 'a'}
    terms = pod['affinity']['nodeAffinity']['requiredDuringSchedulingIgnoredDuringExecution']['nodeSelectorTerms']
    assert terms == [{'matchExpressions': [{'key': 'gpuops.io/sharing-strategy', 'operator': 'In', 'values': ['dra']}]}]
    env = dict((e['name'], e.get('value')) for c in pod['containers'] for e in c.get('env') or [])
    assert env['FEATURE_GATES'] == 'MPSSupport=true,TimeSlicingSettings=true,'
    assert env['NVIDIA_DRIVER_ROOT'] == '/'
    # compute domains off: no controller Deployment (the controller is the ComputeDomain controller)
    assert not by_kind(docs, 'Deployment')


def test_DRA_02_chart_kube_version_and_the_collection_window(helm, chart, tmp_path):
    with open(os.path.join(chart, 'Chart.yaml')) as f:
        assert yaml.safe_load(f)['kubeVersion'] == '>=1.32.0-0'
    render, dra = _collection()
    assert dra.CHARTS[(0, 5)]['kube_min_minor'] == 32
    values = ours()['helm']['values']
    low = template(helm, chart, values, tmp_path, kube='v1.31.9', check=False)
    assert low.returncode != 0 and 'kubeVersion' in low.stderr and '>=1.32.0-0' in low.stderr, low.stderr
    ok = ours({'kube_dra_enabled': True}, kube='v1.32.4')['helm']['values']
    assert ok['resourceApiVersion'] == 'resource.k8s.io/v1beta1'
    template(helm, chart, ok, tmp_path, kube='v1.32.4')
    with pytest.raises(Exception, match='needs Kubernetes 1.32 or newer'):
        ours(kube='v1.31.9')


def test_DRA_04_device_classes_the_chart_creates(helm, chart, tmp_path):
    render, dra = _collection()
    gpus = sorted(c for c, v in dra.CHART_DEVICE_CLASSES.items() if v == 'resources.gpus.enabled')
    docs = template(helm, chart, ours()['helm']['values'], tmp_path)
    classes = dict((d['metadata']['name'], d) for d in by_kind(docs, 'DeviceClass'))
    assert sorted(classes) == gpus
    for name, kind in ((dra.GPU_CLASS, 'gpu'), (dra.MIG_CLASS, 'mig')):
        expr = classes[name]['spec']['selectors'][0]['cel']['expression']
        assert "device.driver == '%s'" % dra.DRIVER in expr and ".type == '%s'" % kind in expr, expr
    docs = template(helm, chart, ours({'compute_domains': True})['helm']['values'], tmp_path)
    assert sorted(d['metadata']['name'] for d in by_kind(docs, 'DeviceClass')) == sorted(dra.CHART_DEVICE_CLASSES)
    # the collection renders none of them: only claims and the validation workload
    res = ours({'claim_namespace': 'ml', 'claim_templates': [{'name': 'g', 'kind': 'gpu'}]},
               validation={'enabled': True})
    assert not [m for m in res['manifests'] + res['validation_manifests'] if m['kind'] == 'DeviceClass']


def test_DRA_07_the_kubelet_plugin_writes_cdi_specs_into_var_run_cdi(helm, chart, tmp_path):
    docs = template(helm, chart, ours()['helm']['values'], tmp_path)
    pod = by_kind(docs, 'DaemonSet')[0]['spec']['template']['spec']
    env = dict((e['name'], e.get('value')) for c in pod['containers'] for e in c.get('env') or [])
    assert env['CDI_ROOT'] == '/var/run/cdi'
    assert {'name': 'cdi', 'hostPath': {'path': '/var/run/cdi'}} in [
        {'name': v['name'], 'hostPath': {'path': v['hostPath']['path']}} for v in pod['volumes'] if 'hostPath' in v]


def test_DRA_08_the_chart_refuses_gpus_without_the_device_plugin_override(helm, chart, tmp_path):
    values = ours()['helm']['values']
    assert values['gpuResourcesEnabledOverride'] is True and values['resources']['gpus']['enabled'] is True
    proc = template(helm, chart, dict(values, gpuResourcesEnabledOverride=False), tmp_path, check=False)
    assert proc.returncode != 0 and 'gpuResourcesEnabledOverride' in proc.stderr, proc.stderr
    # and the collection keeps the driver off a node of a device plugin
    live = [{'metadata': {'name': 'n1', 'labels': {}}, 'status': {'allocatable': {'nvidia.com/gpu': '4'}}}]
    with pytest.raises(Exception, match='must not run on a node of the GPU device plugin'):
        ours(live_nodes=live, allow_mixed_accounting=True)


def test_DRA_14_the_charts_resourceslice_policy_does_not_name_the_kubelet_plugins_account(helm, chart, tmp_path):
    """Upstream's gap, kept in view (kubernetes-sigs/dra-driver-nvidia-gpu issue 1317, open at v0.5.0): the chart's
    ValidatingAdmissionPolicy, meant to let a kubelet plugin write only its own node's ResourceSlices, matches the
    user system:serviceaccount:NS:FULLNAME-service-account, while the kubelet plugin's DaemonSet runs as
    FULLNAME-service-account-kubeletplugin - so the policy never applies to it. This fails once a chart fixes it (then
    docs/sharing_stacks.md's note goes)."""
    docs = template(helm, chart, ours()['helm']['values'], tmp_path, release='dra-driver-nvidia-gpu',
                    namespace='dra-driver-nvidia-gpu')
    [ds] = [d for d in by_kind(docs, 'DaemonSet') if d['metadata']['name'].endswith('kubelet-plugin')]
    account = ds['spec']['template']['spec']['serviceAccountName']
    [policy] = by_kind(docs, 'ValidatingAdmissionPolicy')
    [cond] = policy['spec']['matchConditions']
    user = 'system:serviceaccount:dra-driver-nvidia-gpu:%s' % account
    assert account == 'dra-driver-nvidia-gpu-service-account-kubeletplugin', account
    assert user not in cond['expression'], cond
    assert cond['expression'].strip().endswith(
        '"system:serviceaccount:dra-driver-nvidia-gpu:dra-driver-nvidia-gpu-service-account"'), cond
    # every account the chart's workloads run as: none is the one the policy names
    accounts = set(d['spec']['template']['spec'].get('serviceAccountName') for d in docs
                   if d['kind'] in ('DaemonSet', 'Deployment'))
    assert not [a for a in accounts if cond['expression'].strip().endswith(':%s"' % a)], (accounts, cond)
    # the collection's policy names the account the chart's kubelet plugin runs as, for any release name (the chart's
    # fullname: the release name when it holds the chart's name, else release-chart)
    render, dra = _collection()
    for release, ns in (('dra-driver-nvidia-gpu', 'dra-driver-nvidia-gpu'), ('dra', 'gpu-dra'),
                        ('my-dra-driver-nvidia-gpu-x', 'x')):
        docs = template(helm, chart, ours()['helm']['values'], tmp_path, release=release, namespace=ns)
        [ds] = [d for d in by_kind(docs, 'DaemonSet') if d['metadata']['name'].endswith('kubelet-plugin')]
        user = 'system:serviceaccount:%s:%s' % (ns, ds['spec']['template']['spec']['serviceAccountName'])
        assert dra.kubelet_plugin_account(release, ns) == user, (release, user)
        [ours_policy] = [m for m in ours({'release_name': release, 'namespace': ns})['manifests']
                         if m['kind'] == 'ValidatingAdmissionPolicy']
        assert ours_policy['spec']['matchConditions'][0]['expression'] == 'request.userInfo.username == "%s"' % user


def test_DRA_14_with_compute_domains_every_resourceslice_writer_is_the_account_the_policy_names(helm, chart, tmp_path):
    """With compute_domains on, the chart's compute-domain kubelet plugin is a container of the same kubelet plugin
    pod (one serviceAccountName), and the compute-domain daemon's account has no ResourceSlice rights: so every
    account the chart lets write ResourceSlices is the one the collection's policy names, and the policy covers the
    compute-domain plugin too. Read from the chart's RBAC as helm renders it (subjects of every binding to a role with
    create, update or delete on resourceslices)."""
    release, ns = 'dra', 'gpu-dra'
    out = ours({'release_name': release, 'namespace': ns, 'compute_domains': True})
    assert out['helm']['values']['resources']['computeDomains']['enabled'] is True
    docs = template(helm, chart, out['helm']['values'], tmp_path, release=release, namespace=ns)
    [ds] = [d for d in by_kind(docs, 'DaemonSet') if d['metadata']['name'].endswith('kubelet-plugin')]
    pod = ds['spec']['template']['spec']
    assert 'compute-domains' in [c['name'] for c in pod['containers']], [c['name'] for c in pod['containers']]
    writers = set()
    roles = set()
    for role in by_kind(docs, 'ClusterRole') + by_kind(docs, 'Role'):
        for rule in role.get('rules') or []:
            if ('resourceslices' in (rule.get('resources') or []) and 'resource.k8s.io' in (rule.get('apiGroups') or [])
                    and set(rule.get('verbs') or []) & {'create', 'update', 'patch', 'delete', 'deletecollection', '*'}):
                roles.add((role['kind'], role['metadata']['name']))
    assert roles, 'the chart grants no ResourceSlice writes: the test reads the wrong objects'
    for binding in by_kind(docs, 'ClusterRoleBinding') + by_kind(docs, 'RoleBinding'):
        if (binding['roleRef']['kind'], binding['roleRef']['name']) in roles:
            for s in binding.get('subjects') or []:
                writers.add('system:serviceaccount:%s:%s' % (s.get('namespace', ns), s['name'])
                            if s['kind'] == 'ServiceAccount' else '%s:%s' % (s['kind'], s['name']))
    account = _collection()[1].kubelet_plugin_account(release, ns)
    assert writers == {account} == {'system:serviceaccount:%s:%s' % (ns, pod['serviceAccountName'])}, writers
    [policy] = [m for m in out['manifests'] if m['kind'] == 'ValidatingAdmissionPolicy']
    assert policy['spec']['matchConditions'][0]['expression'] == 'request.userInfo.username == "%s"' % account


def test_DRA_10_image_through_the_mirror_with_the_chart_tag_and_pull_secrets(helm, chart, tmp_path):
    render, dra = _collection()
    with open(os.path.join(chart, 'values.yaml')) as f:
        defaults = yaml.safe_load(f)
    assert defaults['image']['repository'] == dra.CHARTS[(0, 5)]['image_repository']
    assert defaults['image']['tag'] == ''
    res = ours(registry='mirror.example.com/m', pull=['regcred'])
    docs = template(helm, chart, res['helm']['values'], tmp_path)
    pod = by_kind(docs, 'DaemonSet')[0]['spec']['template']['spec']
    images = sorted(set(c['image'] for c in pod['containers'] + pod.get('initContainers', [])))
    assert images == ['mirror.example.com/m/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.5.0'] == res['images'][:1]
    assert pod['imagePullSecrets'] == [{'name': 'regcred'}]
    plain = template(helm, chart, ours()['helm']['values'], tmp_path)
    pod = by_kind(plain, 'DaemonSet')[0]['spec']['template']['spec']
    assert pod['containers'][0]['image'] == dra.IMAGE


def test_DRA_11_resource_api_version_selects_the_device_class_api(helm, chart, tmp_path):
    for kube, api in (('v1.37.2', 'resource.k8s.io/v1'), ('v1.33.1', 'resource.k8s.io/v1beta2'),
                      ('v1.32.4', 'resource.k8s.io/v1beta1')):
        values = ours({'kube_dra_enabled': kube != 'v1.37.2'}, kube=kube)['helm']['values']
        assert values['resourceApiVersion'] == api
        docs = template(helm, chart, values, tmp_path, kube=kube)
        gpu = [d for d in by_kind(docs, 'DeviceClass') if d['metadata']['name'] == 'gpu.nvidia.com'][0]
        assert gpu['apiVersion'] == api
        # extendedResourceName (KEP 5004) only with resource.k8s.io/v1
        assert ('extendedResourceName' in gpu['spec']) == (api == 'resource.k8s.io/v1')


# ---------------------------------------------------------------------------------------- facts from the source

def test_DRA_03_feature_gates_prerelease_defaults_and_exclusions_are_upstream(module_dir):
    render, dra = _collection()
    text = src(module_dir, 'pkg', 'featuregates', 'featuregates.go')
    gates = dict((name, (pre.lower(), default == 'true')) for name, default, pre in re.findall(
        r'\n\t(\w+): \{\s*\{\s*Default:\s*(true|false),\s*PreRelease:\s*featuregate\.(\w+)', text))
    assert gates == dra.CHARTS[(0, 5)]['gates']
    exclusive = re.findall(r'Enabled\((\w+)\) && Enabled\((\w+)\) \{\s*return fmt\.Errorf\("feature gate %s is '
                           r'currently mutually exclusive', text)
    assert tuple(exclusive) == dra.CHARTS[(0, 5)]['exclusive']
    requires = re.findall(r'Enabled\((\w+)\) && !Enabled\((\w+)\) \{\s*return fmt\.Errorf\("feature gate %s requires',
                          text)
    assert tuple(requires) == dra.CHARTS[(0, 5)]['requires']


def test_DRA_05_opaque_claim_config_api_and_sharing_gates(module_dir):
    render, dra = _collection()
    base = ('api', 'nvidia.com', 'resource', 'v1beta1')
    api = src(module_dir, *base + ('api.go',))
    assert re.search(r'GroupName\s*=\s*"resource\.nvidia\.com"', api) and re.search(r'Version\s*=\s*"v1beta1"', api)
    assert dra.CONFIG_API_VERSION == 'resource.nvidia.com/v1beta1'
    assert re.search(r'GpuConfigKind\s*=\s*"%s"' % dra.GPU_CONFIG, api)
    sharing = src(module_dir, *base + ('sharing.go',))
    assert re.search(r'TimeSlicingStrategy\s*=\s*"TimeSlicing"', sharing) and re.search(r'MpsStrategy\s*=\s*"MPS"', sharing)
    intervals = re.findall(r'TimeSliceInterval = "(\w+)"', sharing)
    assert tuple(intervals) == dra.TIME_SLICE_INTERVALS
    for tag in ('strategy', 'timeSlicingConfig', 'mpsConfig', 'interval', 'defaultActiveThreadPercentage',
                'defaultPinnedDeviceMemoryLimit'):
        assert 'json:"%s' % tag in sharing, tag
    validate = src(module_dir, *base + ('validate.go',))
    assert re.search(r'TimeSlicingStrategy, featuregates\.TimeSlicingSettings', validate)
    assert re.search(r'MpsStrategy, featuregates\.MPSSupport', validate)


def test_DRA_06_device_attributes_the_claim_templates_select_on(module_dir):
    render, dra = _collection()
    plugin = ('cmd', 'gpu-kubelet-plugin')
    info = src(module_dir, *plugin + ('deviceinfo.go',))
    block = info[info.index('func (d *GpuInfo) Attributes()'):info.index('addDeviceAttribute(attrs, d.pciBusIDAttr)')]
    gpu = dict((n, t.lower()) for n, t in re.findall(r'"(\w+)": \{\s*(String|Version|Int|Bool)Value', block))
    assert gpu == dra.GPU_ATTRIBUTES
    mig = src(module_dir, *plugin + ('mig.go',))
    block = mig[mig.index('func CommonAttributesMig('):]
    block = block[:block.index('return attrs')]
    attrs = dict((n, t.lower()) for n, t in re.findall(r'"(\w+)": \{\s*(String|Version|Int|Bool)Value', block))
    assert dict(attrs, uuid='string') == dra.MIG_ATTRIBUTES  # uuid: GetDevice adds it to the common attributes
    assert 'attrs["uuid"]' in info
    assert '"memory": intcap(' in mig and '"memory": resourceapi.DeviceCapacity' in src(module_dir, *plugin + ('partitions.go',))
    # no GPU index attribute: the device name gpu-<minor> is all there is (CEL cannot read names)
    assert '"index"' not in info and 'fmt.Sprintf("gpu-%d", d.minor)' in info
    # what the claim templates write uses only these names
    res = _collection()[1].claim_templates([
        {'name': 'a', 'product_name': 'NVIDIA H100 80GB HBM3', 'architecture': 'Hopper', 'min_memory': '80Gi',
         'uuid': 'GPU-1'}, {'name': 'm', 'kind': 'mig', 'mig_profile': '1g.10gb'}], 'ml')
    used = set()
    for obj in res:
        for sel in obj['spec']['spec']['devices']['requests'][0]['exactly'].get('selectors', []):
            used.update(re.findall(r"\]\.(\w+)", sel['cel']['expression']))
    assert used <= set(dra.MIG_ATTRIBUTES) | {dra.MEMORY_CAPACITY}, used


# ----------------------------------------------------------------------------------- the real API server

def first_difference(want, have, path=''):
    """The first path where ``want`` is not in ``have`` (as kube/converger.is_subset reads it), with both values."""
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return path, want, have
        for k, v in want.items():
            d = first_difference(v, have.get(k), '%s.%s' % (path, k))
            if d:
                return d
        return None
    if isinstance(want, list):
        if not isinstance(have, list) or len(want) != len(have):
            return path, want, have
        for i, (a, b) in enumerate(zip(want, have)):
            d = first_difference(a, b, '%s[%d]' % (path, i))
            if d:
                return d
        return None
    return None if str(want) == str(have) else (path, want, have)


def _converger(kube_real, user_kubeconfig):
    from kubernetes import client, config, dynamic
    render, dra = _collection()
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube import converger
    conf = client.Configuration()
    config.load_kube_config(config_file=user_kubeconfig, client_configuration=conf)
    dyn = dynamic.DynamicClient(client.ApiClient(configuration=conf))
    params = {'labels_only_kinds': [], 'hash_annotation': '', 'backup': False, 'backup_namespace': '', 'delete_unmanaged': True,
              'field_manager': 'gpuops-k8s-gpu'}
    return lambda defs, state='present': converger.converge(converger.Converger(params, dyn), defs, state)


def _own_cluster_names(objs, suffix):
    """Give the cluster-scoped objects of ``objs`` whose names do not carry the release's namespace the name + ``suffix``
    and follow every reference to them (roleRef of a ClusterRole, policyName); {old name: kind} of those renamed."""
    namespaces = set(o['metadata']['namespace'] for o in objs if o['metadata'].get('namespace'))
    cluster = ('ClusterRole', 'ClusterRoleBinding', 'ValidatingAdmissionPolicy', 'ValidatingAdmissionPolicyBinding')
    renamed = {}
    for o in objs:
        name = o['metadata']['name']
        if o['kind'] in cluster and not any(name.endswith('-' + ns) for ns in namespaces):
            renamed.setdefault(name, []).append(o['kind'])
            o['metadata']['name'] = name + suffix
    for o in objs:
        ref = o.get('roleRef') or {}
        if ref.get('kind') == 'ClusterRole' and 'ClusterRole' in renamed.get(ref.get('name'), []):
            ref['name'] += suffix
        spec = o.get('spec') or {}
        if o['kind'] == 'ValidatingAdmissionPolicyBinding' and 'ValidatingAdmissionPolicy' in renamed.get(
                spec.get('policyName'), []):
            spec['policyName'] += suffix
    return renamed


def test_DRA_09_rendered_objects_and_claims_accepted_by_the_real_server_and_rerun_writes_nothing(
        kube_real, helm, chart, tmp_path):
    from kubernetes import client
    minor = int(kube_real.version.split('.')[1])
    kube = 'v%s' % kube_real.version.lstrip('v')
    user = 'gpuops-test-dra-%s' % SUFFIX
    kc = kube_real.user(user)
    core = client.CoreV1Api(kube_real.api())
    ns, claims_ns = 'dra-%s' % SUFFIX, 'dra-claims-%s' % SUFFIX
    from kubernetes import dynamic
    from kubernetes.dynamic.exceptions import ResourceNotFoundError
    dev = dynamic.DynamicClient(kube_real.api())
    try:
        classes = dev.resources.get(api_version='resource.k8s.io/v1', kind='DeviceClass')
    except ResourceNotFoundError as exc:
        pytest.fail('the real server (1.%d) does not serve resource.k8s.io/v1: %s' % (minor, exc))
    # The chart's DeviceClasses are cluster objects with fixed names that lab/tests/integration/test_dra_real.py creates
    # and deletes on the same shared cluster (make test runs files in parallel): they are checked by the server with a
    # dry-run server-side apply (full validation, CEL compilation, admission; nothing stored), the rest is applied.
    device_classes = []
    res = ours({'namespace': ns, 'release_name': 'dra-%s' % SUFFIX, 'claim_namespace': claims_ns, 'claim_templates': [
        {'name': 'full-h100', 'kind': 'gpu', 'product_name': 'NVIDIA H100 80GB HBM3', 'min_memory': '80Gi'},
        {'name': 'hopper-any', 'kind': 'gpu', 'architecture': 'Hopper', 'count': 2},
        {'name': 'one-gpu', 'kind': 'gpu', 'uuid': 'GPU-00000000-0000-0000-0000-000000000001'},
        {'name': 'mig-1g', 'kind': 'mig', 'mig_profile': '1g.10gb'},
        {'name': 'ts', 'kind': 'time-slicing', 'interval': 'Long'},
        {'name': 'ts-shared', 'kind': 'time-slicing', 'shared': True},
        {'name': 'mps', 'kind': 'mps', 'mps_active_thread_percentage': 50, 'mps_pinned_memory_limit': '10Gi'}],
        'feature_gates': {'TimeSlicingSettings': True, 'MPSSupport': True}},
        kube=kube, validation={'enabled': True, 'namespace': claims_ns})
    chart_objs = template(helm, chart, res['helm']['values'], tmp_path, release='dra-%s' % SUFFIX, namespace=ns,
                          kube=kube)
    # the chart renders env entries with value "" (e.g. an unset option): EnvVar.value is omitempty, so the server stores
    # them without it (docs/conformance/kubernetes-core.md K8S-12); sent as the server stores them, the objects are the
    # same, and the converger's read-compare sees what it sent
    for obj in chart_objs:
        for c in ((obj.get('spec') or {}).get('template') or {}).get('spec', {}).get('containers', []):
            for e in c.get('env') or []:
                if e.get('value') == '':
                    del e['value']
    device_classes = [o for o in chart_objs if o['kind'] == 'DeviceClass']
    chart_objs = [o for o in chart_objs if o['kind'] != 'DeviceClass']
    # The chart names its ClusterRoles, two ClusterRoleBindings and its ValidatingAdmissionPolicy and binding after the
    # chart, not the release or namespace (the same names for every release): the DRA release test_dra_real installs
    # on the same cluster has them too. Applied under those names, the two tests took each other's objects (this apply
    # updated the release's, the clean-up below deleted them, a helm upgrade changed them between this test's two
    # applies: CI of 98f1f47). They are applied here with this test's suffix, and every reference to them (a binding's
    # roleRef, the policy binding's policyName) follows; nothing else in them changes.
    renamed = _own_cluster_names(chart_objs, '-oracle-%s' % SUFFIX)
    assert sorted(renamed) == ['compute-domain-daemon-role', 'compute-domain-daemon-role-binding',
                               'dra-driver-nvidia-gpu-clusterrole-binding-kubeletplugin',
                               'dra-driver-nvidia-gpu-clusterrole-controller',
                               'dra-driver-nvidia-gpu-clusterrole-kubeletplugin',
                               'resourceslices-policy-dra-driver-nvidia-gpu'], renamed
    names = sorted(o['metadata']['name'] for o in device_classes)
    assert names == ['gpu.nvidia.com', 'mig.nvidia.com', 'vfio.gpu.nvidia.com']
    for dc in device_classes:
        accepted = dev.patch(classes, body=dc, name=dc['metadata']['name'], content_type='application/apply-patch+yaml',
                             field_manager='gpuops-dra-oracle', force_conflicts=True, dry_run='All').to_dict()
        assert accepted['spec']['selectors'] == dc['spec']['selectors'], accepted
    ours_objs = res['manifests'] + res['validation_manifests']
    assert [o['kind'] for o in ours_objs].count('ResourceClaimTemplate') == 7
    pod = [o for o in res['validation_manifests'] if o['kind'] == 'Pod'][0]
    assert [c['resources'] for c in pod['spec']['containers']] == [{'claims': [{'name': 'gpu'}]}]  # a claim, no limits
    apply = _converger(kube_real, kc)
    made = chart_objs + ours_objs
    for name in (ns, claims_ns):
        core.create_namespace({'metadata': {'name': name}})
    # the ServiceAccount admission plugin refuses the validation Pod until the controller-manager has made the
    # namespace's ServiceAccount default (a moment after the namespace; longer on a cluster that has just started)
    from conftest import wait_until
    wait_until('ServiceAccount %s/default' % claims_ns, lambda: [
        a for a in core.list_namespaced_service_account(claims_ns).items if a.metadata.name == 'default'], 60)
    try:
        start = kube_real.mark()
        first = apply(chart_objs + ours_objs)
        assert first['created'] + first['unchanged'] == len(chart_objs + ours_objs), first
        mid = kube_real.mark()
        second = apply(chart_objs + ours_objs)
        end = kube_real.mark()
        changed = [o for o in second['objects'] if o['action'] != 'unchanged']
        diffs = []
        for o in changed:
            sent = [d for d in chart_objs + ours_objs if (d['kind'], d['metadata']['name']) == (o['kind'], o['name'])][0]
            live = dev.get(dev.resources.get(api_version=sent['apiVersion'], kind=sent['kind']), name=o['name'],
                           namespace=o['namespace']).to_dict()
            diffs.append((o['kind'], o['name'], first_difference(sent, live)))
        assert second['created'] == second['updated'] == 0, diffs
        assert kube_real.writes(mid, end, user=user) == [], kube_real.writes(mid, end, user=user)
        assert len(kube_real.writes(start, mid, user=user)) >= len(made)
        counts = (kube, len(device_classes), len(chart_objs + ours_objs), len(chart_objs),
                  len(kube_real.writes(start, mid, user=user)))
        print('DRA-09 at %s: %d DeviceClasses accepted (dry run), %d objects applied (%d from the chart), first apply '
              '%d writes, re-run 0 writes' % counts)
        # what the server kept is what was sent (the CEL selectors compiled, the opaque config kept as written)
        tpl = dev.get(dev.resources.get(api_version='resource.k8s.io/v1', kind='ResourceClaimTemplate'), name='mps',
                      namespace=claims_ns).to_dict()
        sent = [o for o in ours_objs if o['metadata']['name'] == 'mps' and o['kind'] == 'ResourceClaimTemplate'][0]
        from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster.kube.converger import is_subset
        assert is_subset(sent['spec'], tpl['spec']), tpl['spec']
    finally:
        apply(made, 'absent')
        for name in (ns, claims_ns):
            core.delete_namespace(name)
