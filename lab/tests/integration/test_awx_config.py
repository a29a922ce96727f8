"""roles/awx_config checked without AWX: awx.awx options, surveys against the playbooks, credential injectors.

Run: .venv/bin/pytest -q lab/tests/integration/test_awx_config.py   (about 30 s; no Docker)

awx.awx cannot be installed here, so what its modules accept comes from lab/awx/awx_collection_facts.yml (recorded
from the modules' DOCUMENTATION in ansible/awx). What this cannot prove: that an AWX server accepts the objects
(no AWX API here), that the job templates launch, or that awx.awx reports changed=false on a re-run against a real AWX.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / 'lab' / 'awx'))
import awx_job  # noqa: E402  pylint: disable=wrong-import-position
from conftest import PLAY_TIMEOUT  # noqa: E402  pylint: disable=wrong-import-position

VENV_BIN = ROOT / '.venv' / 'bin'
ROLE = ROOT / 'roles' / 'awx_config'
FACTS = yaml.safe_load((ROOT / 'lab' / 'awx' / 'awx_collection_facts.yml').read_text())
K8S_CORE = ROOT / '.venv' / 'lib'
BOOL_WORDS = {'true', 'false', 'yes', 'no'}
TEXT_TYPES = {'text', 'textarea', 'password'}


def load_unsafe(path):
    loader = type('L', (yaml.SafeLoader,), {})
    loader.add_constructor('!unsafe', lambda ld, node: ld.construct_scalar(node))
    return yaml.load(Path(path).read_text(), Loader=loader)  # noqa: S506 - SafeLoader subclass


CATALOG = load_unsafe(ROLE / 'vars' / 'main.yml')
TEMPLATES = CATALOG['awx_config__job_template_catalog']


def walk_tasks(tasks, inherited=None):
    """Yield (task, module_defaults in force) for every task, inside blocks too."""
    for t in tasks or []:
        md = dict(inherited or {})
        md.update(t.get('module_defaults') or {})
        if 'block' in t:
            yield t, md
            for key in ('block', 'rescue', 'always'):
                for x in walk_tasks(t.get(key), md):
                    yield x
        else:
            yield t, md


def awx_tasks():
    tasks = yaml.safe_load((ROLE / 'tasks' / 'main.yml').read_text())
    out = []
    for t, md in walk_tasks(tasks):
        for k, v in t.items():
            if k.startswith('awx.awx.'):
                out.append((t, k.split('.', 2)[2], v or {}, md))
    return out


def documented(module):
    opts = dict(FACTS['auth_options'])
    opts.update(FACTS['modules'][module]['options'])
    names = {}
    for name, spec in opts.items():
        names[name] = spec
        for a in spec.get('aliases', []):
            names[a] = spec
    return opts, names


# ------------------------------------------------------------------------------------- awx.awx options

def test_every_awx_task_uses_documented_options_only():
    tasks = awx_tasks()
    assert {m for _, m, _, _ in tasks} == set(FACTS['modules']), 'facts file and role use different modules'
    problems = []
    for task, module, args, md in tasks:
        opts, names = documented(module)
        given = dict(md.get('awx.awx.' + module) or {})
        given.update(args)
        for k, v in given.items():
            if k not in names:
                problems.append('%s (%s): %s is not an option of awx.awx.%s' % (task['name'], module, k, module))
                continue
            choices = names[k].get('choices')
            if choices and not (isinstance(v, str) and '{{' in v) and v not in choices:
                problems.append('%s: %s=%r not in %s' % (task['name'], k, v, choices))
            typ = names[k]['type']
            if not (isinstance(v, str) and '{{' in v):
                ok = {'str': str, 'path': str, 'bool': bool, 'int': int, 'float': (int, float), 'dict': dict,
                      'list': list, 'raw': object}[typ]
                if not isinstance(v, ok):
                    problems.append('%s: %s=%r is not a %s' % (task['name'], k, v, typ))
        for name, spec in opts.items():
            if spec.get('required') and name not in given:
                problems.append('%s: required option %s missing' % (task['name'], name))
        if not md.get('awx.awx.' + module):
            problems.append('%s: no connection settings (module_defaults) for awx.awx.%s' % (task['name'], module))
    assert problems == []


def test_secrets_are_no_log_and_certs_are_validated_by_default():
    for task, module, args, md in awx_tasks():
        if module == 'credential':
            assert task.get('no_log') is True, task['name']
        assert md['awx.awx.' + module]['validate_certs'] == '{{ awx_config_validate_certs }}'
    defaults = yaml.safe_load((ROLE / 'defaults' / 'main.yml').read_text())
    assert defaults['awx_config_validate_certs'] is True
    specs = yaml.safe_load((ROLE / 'meta' / 'argument_specs.yml').read_text())['argument_specs']['main']['options']
    assert specs['awx_config_job_templates']['choices'] == sorted(TEMPLATES, key=list(TEMPLATES).index)


# ------------------------------------------------------------------------------------- surveys

def playbook_files(playbook):
    """The playbook and every playbook it imports."""
    seen, todo = [], [ROOT / playbook]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        for play in yaml.safe_load(p.read_text()) or []:
            if 'ansible.builtin.import_playbook' in play:
                todo.append(p.parent / play['ansible.builtin.import_playbook'])
    return seen


def roles_of(files):
    roles = set()
    for f in files:
        roles |= set(re.findall(r'gpuops\.k8s_gpu\.([a-z_]+)', f.read_text())) & {
            d.name for d in (ROOT / 'roles').iterdir()}
    return roles


def role_options(roles):
    opts = {}
    for r in roles:
        spec = yaml.safe_load((ROOT / 'roles' / r / 'meta' / 'argument_specs.yml').read_text())['argument_specs']
        for entry in spec.values():
            for k, v in (entry.get('options') or {}).items():
                opts[k] = (r, v)
    return opts


def ansible_doc(collections_path, module):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path)
    out = subprocess.run([str(VENV_BIN / 'ansible-doc'), '-j', module], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)[module]['doc']['options']


def module_options_fed_by(files, var):
    """(module, option) pairs where a task passes the variable straight to a module option."""
    pairs = []
    for f in files:
        for play in yaml.safe_load(f.read_text()) or []:
            for t, _ in walk_tasks(play.get('tasks') or []):
                for mod, args in t.items():
                    if mod.startswith('gpuops.k8s_gpu.') and isinstance(args, dict):
                        for opt, v in args.items():
                            if isinstance(v, str) and re.match(r'^\{\{\s*%s\b' % re.escape(var), v.strip()):
                                pairs.append((mod, opt))
    return pairs


def survey_rows():
    for key, jt in TEMPLATES.items():
        for q in jt['survey']['spec']:
            yield key, jt, q


def test_surveys_are_well_formed_and_never_override_the_inventory_silently():
    for key, jt, q in survey_rows():
        assert {'question_name', 'variable', 'type', 'required'} <= set(q), (key, q)
        assert q['type'] in awx_job.SURVEY_TYPES, (key, q)
        if q['type'] in ('multiplechoice', 'multiselect'):
            assert q.get('choices'), (key, q)
        if not q['required']:
            assert q.get('default') is None, '%s: optional question %s has a default (AWX would always send it)' % (
                key, q['variable'])
    for key, jt in TEMPLATES.items():
        assert jt['survey']['name'] and jt['survey']['description']
        assert (ROOT / jt['playbook']).is_file(), jt['playbook']
        assert len({q['variable'] for q in jt['survey']['spec']}) == len(jt['survey']['spec'])
        assert set(jt['credentials']) <= {'vcenter', 'kubeconfig'}


@pytest.mark.parametrize('key', list(TEMPLATES))
def test_survey_variables_are_variables_the_playbook_accepts(key, collections_path):
    jt = TEMPLATES[key]
    files = playbook_files(jt['playbook'])
    opts = role_options(roles_of(files))
    text = '\n'.join(f.read_text() for f in files)
    docs = '\n'.join(p.read_text() for p in (ROOT / 'docs').glob('*.md'))
    problems = []
    for q in jt['survey']['spec']:
        var, typ = q['variable'], q['type']
        choices = set(awx_job._choices(q))  # pylint: disable=protected-access
        if var in opts:
            role, spec = opts[var]
            otype = spec.get('type', 'str')
            if otype == 'bool':
                problems.append('%s: %s is a bool option of role %s; a survey can only send strings' % (key, var, role))
            elif otype in ('str', 'path'):
                if typ not in TEXT_TYPES | {'multiplechoice'}:
                    problems.append('%s: %s (str) asked as %s' % (key, var, typ))
                if spec.get('choices') and typ != 'multiplechoice':
                    problems.append('%s: %s has choices %s; ask it as multiplechoice' % (key, var, spec['choices']))
                if spec.get('choices') and not choices <= set(spec['choices']):
                    problems.append('%s: %s choices %s not all in %s' % (key, var, choices, spec['choices']))
            elif otype == 'int' and typ != 'integer' or otype == 'float' and typ not in ('integer', 'float'):
                problems.append('%s: %s (%s) asked as %s' % (key, var, otype, typ))
            elif otype == 'list' and (typ != 'multiselect' or (spec.get('choices') and not choices <= set(spec['choices']))):
                problems.append('%s: %s (list) asked as %s' % (key, var, typ))
            continue
        # a playbook variable: used by the playbook, documented, and used in a way that takes the survey's value
        uses = re.findall(r'%s\b[^\n}]*' % re.escape(var), text)
        if not uses:
            problems.append('%s: %s is neither a role option nor used by %s' % (key, var, jt['playbook']))
            continue
        commented = any(var in ln for f in files for ln in f.read_text().splitlines() if ln.lstrip().startswith('#'))
        if not (commented or var in docs):
            problems.append('%s: playbook variable %s is not documented (playbook comments or docs/)' % (key, var))
        if any(re.search(r'\bis\s+boolean\b', u) for u in uses):
            problems.append('%s: %s must be a real boolean (is boolean); a survey sends strings' % (key, var))
        as_bool = any(re.search(r'\|\s*bool\b', u) for u in uses)
        if typ == 'multiplechoice' and choices <= BOOL_WORDS and not as_bool:
            problems.append('%s: %s answers true/false but the playbook does not apply | bool' % (key, var))
        if as_bool and not (typ == 'multiplechoice' and choices <= BOOL_WORDS):
            problems.append('%s: %s is a boolean switch; ask it as multiplechoice true/false' % (key, var))
        for mod, opt in module_options_fed_by(files, var):
            ospec = ansible_doc(collections_path, mod)[opt]
            if ospec.get('choices') and not (typ == 'multiplechoice' and choices <= set(ospec['choices'])):
                problems.append('%s: %s feeds %s %s with choices %s' % (key, var, mod, opt, ospec['choices']))
            if ospec.get('type', 'str') in ('str', 'path') and typ not in TEXT_TYPES | {'multiplechoice'}:
                problems.append('%s: %s feeds %s %s (str) but is asked as %s' % (key, var, mod, opt, typ))
    assert problems == []


@pytest.mark.parametrize('key', list(TEMPLATES))
def test_survey_answers_become_extra_vars_as_awx_merges_them(key):
    spec = TEMPLATES[key]['survey']
    answers = {}
    for q in spec['spec']:
        if q['type'] in ('multiplechoice',):
            answers[q['variable']] = awx_job._choices(q)[0]  # pylint: disable=protected-access
        elif q['type'] == 'integer':
            answers[q['variable']] = int(q.get('min') or 1)
        else:
            answers[q['variable']] = '550.90.07' if 'version' in q['variable'] else '1'
    assert awx_job.survey_extra_vars(spec, answers) == answers
    required = [q['variable'] for q in spec['spec'] if q['required']]
    for var in required:
        with pytest.raises(awx_job.SurveyError, match=var):
            awx_job.survey_extra_vars(spec, dict((k, v) for k, v in answers.items() if k != var))
    # nothing answered: nothing sent (optional questions have no default), so the inventory decides
    if not required:
        assert awx_job.survey_extra_vars(spec, {}) == {}


# ------------------------------------------------------------------------------------- credentials

def test_kubeconfig_credential_injects_the_env_the_collection_reads(tmp_path):
    ctype = CATALOG['awx_config__kubeconfig_type_definition']
    assert ctype['kind'] in FACTS['modules']['credential_type']['options']['kind']['choices']
    content = 'apiVersion: v1\nkind: Config\ncurrent-context: lab\n'
    env, extra, files = awx_job.inject_custom(ctype, {'kubeconfig': content}, str(tmp_path))
    assert extra == {}
    assert set(env) == {'K8S_AUTH_KUBECONFIG'}
    path = Path(env['K8S_AUTH_KUBECONFIG'])
    assert path.parent == tmp_path / 'env' and path.read_text() == content and oct(path.stat().st_mode & 0o777) == '0o600'
    assert files == {'template.kubeconfig': str(path)}
    # who reads it: kubernetes.core's auth options, and the collection's own cluster modules
    kube = list(K8S_CORE.glob('python3*/site-packages/ansible_collections/kubernetes/core/plugins/doc_fragments/k8s_auth_options.py'))
    assert kube and 'K8S_AUTH_KUBECONFIG' in kube[0].read_text()
    # (the collection's modules take it through the one access layer, module_utils/_cluster/kube/access.py, and its doc fragment)
    access = (ROOT / 'plugins' / 'module_utils' / '_cluster' / 'kube' / 'access.py').read_text()
    assert "kubeconfig=dict(type='raw', fallback=('K8S_AUTH_KUBECONFIG',))" in access
    assert 'E(K8S_AUTH_KUBECONFIG)' in (ROOT / 'plugins' / 'doc_fragments' / 'k8s_auth_options.py').read_text()
    readers = [p.name for p in (ROOT / 'plugins' / 'modules').glob('*.py')
               if 'gpuops.k8s_gpu.k8s_auth_options' in p.read_text() and 'access' in p.read_text()]
    assert readers, 'no module of the collection reads K8S_AUTH_KUBECONFIG'
    # the kubeconfig field is secret (AWX encrypts it, and hides it in the API)
    field = ctype['inputs']['fields'][0]
    assert field['id'] == 'kubeconfig' and field['secret'] is True and ctype['inputs']['required'] == ['kubeconfig']


def test_vcenter_credential_env_is_what_the_esxi_module_reads():
    injected = set(FACTS['injectors']['managed']['vmware']['env'])
    src = (ROOT / 'plugins' / 'module_utils' / '_esxi' / 'esxi_vsphere.py').read_text()
    for var in ('VMWARE_HOST', 'VMWARE_USER', 'VMWARE_PASSWORD', 'VMWARE_VALIDATE_CERTS'):
        assert var in injected and "'%s'" % var in src, var
    env = awx_job.inject_vmware({'host': 'vc', 'username': 'u', 'password': 'p'})
    assert env == {'VMWARE_HOST': 'vc', 'VMWARE_USER': 'u', 'VMWARE_PASSWORD': 'p', 'VMWARE_VALIDATE_CERTS': 'False'}


def _esxi_play(tmp_path, collections_path, env_extra):
    inv = {'esxi_gpu_vms': {'hosts': {'vm1': {'esxi_gpu_passthrough_gpus': [{'model': 'T4'}]}},
                            'vars': {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
                                     'esxi_gpu_passthrough_port': 1}}}
    (tmp_path / 'inv.json').write_text(json.dumps(inv))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path, ANSIBLE_STDOUT_CALLBACK='ansible.builtin.default')
    for k in ('VMWARE_HOST', 'VMWARE_USER', 'VMWARE_PASSWORD'):
        env.pop(k, None)
    env.update(env_extra)
    return subprocess.run([str(VENV_BIN / 'ansible-playbook'), '-i', str(tmp_path / 'inv.json'), 'playbooks/esxi.yml'],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=PLAY_TIMEOUT)


def test_esxi_role_falls_back_to_the_vcenter_credential_env(tmp_path, collections_path):
    """Role variables empty: the module gets the AWX credential's VMWARE_* (it then fails to connect to port 1)."""
    cred = awx_job.inject_vmware({'host': '127.0.0.1', 'username': 'awx-user', 'password': 'awx-secret-pw'})
    r = _esxi_play(tmp_path, collections_path, cred)
    out = r.stdout + r.stderr
    assert r.returncode == 2, out[-3000:]
    assert 'cannot connect to 127.0.0.1:1' in out, out[-3000:]
    assert 'missing connection option' not in out
    assert 'awx-secret-pw' not in out
    # and without the credential the module says what is missing
    r = _esxi_play(tmp_path, collections_path, {})
    assert r.returncode == 2 and 'missing connection option(s): hostname, username, password' in r.stdout, r.stdout[-3000:]


# ------------------------------------------------------------------------------------- execution environment

def test_execution_environment_definition_has_the_collection_and_its_dependencies():
    """Static check of execution-environment.yml (ansible-builder itself is not run here: no container builds)."""
    ee = yaml.safe_load((ROOT / 'execution-environment.yml').read_text())
    galaxy = yaml.safe_load((ROOT / 'galaxy.yml').read_text())
    assert ee['version'] == 3 and ee['images']['base_image']['name']
    deps = ee['dependencies']
    reqs = {c['name'] for c in yaml.safe_load((ROOT / deps['galaxy']).read_text())['collections']}
    assert set(galaxy.get('dependencies') or {}) <= reqs, 'galaxy.yml dependencies missing from the EE'
    assert 'awx.awx' not in reqs
    py = (ROOT / deps['python']).read_text()
    for pkg in ('kubernetes', 'pyvmomi', 'jmespath'):
        assert re.search(r'^%s\b' % pkg, py, re.M), pkg
    assert (ROOT / deps['system']).is_file()
    tarball = '%s-%s-' % (galaxy['namespace'], galaxy['name'])
    assert [f for f in ee['additional_build_files'] if f['src'].startswith(tarball)]
    final = ' '.join(ee['additional_build_steps']['append_final'])
    assert 'ansible-galaxy collection install --offline' in final and tarball in final
    assert 'PIP_INDEX_URL' in ' '.join(ee['additional_build_steps']['prepend_base'])


def test_only_the_node_template_is_sliced():
    """Job slicing (docs/awx.md): the job_template task sets job_slice_count on every template, from
    awx_config_node_job_slice_count for the templates marked `slice` and 1 for the others; only `node` is marked (its
    playbook is the node layer alone: each host's work is its own), and the role refuses a count below 1."""
    import jinja2
    assert [n for n, t in TEMPLATES.items() if t.get('slice')] == ['node']
    assert TEMPLATES['node']['playbook'] == 'playbooks/node.yml'
    task = [v for _t, mod, v, _md in awx_tasks() if mod == 'job_template' and v.get('state') == 'present']
    assert len(task) == 1, task
    expr = task[0]['job_slice_count']
    env = jinja2.Environment()
    for name, jt in TEMPLATES.items():
        got = env.from_string(expr).render(awx_config_node_job_slice_count='4', awx_config__job_template=jt)
        assert got == ('4' if name == 'node' else '1'), (name, got)
    checks = yaml.safe_load((ROLE / 'tasks' / 'main.yml').read_text())[0]['ansible.builtin.assert']['that']
    assert 'awx_config_node_job_slice_count | int >= 1' in checks
    specs = yaml.safe_load((ROLE / 'meta' / 'argument_specs.yml').read_text())['argument_specs']['main']['options']
    assert specs['awx_config_node_job_slice_count'] == dict(specs['awx_config_node_job_slice_count'], type='int', default=1)
