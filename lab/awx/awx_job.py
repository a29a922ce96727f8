"""What AWX does between "launch job template" and ansible-runner, for the lab's tests (never part of the collection).

AWX itself cannot run here (no AWX API, no awx.awx collection), so this reproduces, from AWX's source
(lab/awx/awx_collection_facts.yml names where), the three steps that decide what a job's playbook sees:

* survey answers -> extra vars (SurveyJobTemplateMixin: defaults applied when not None and valid, answers on top,
  every answer validated against its question),
* credentials -> environment and files (CredentialType.inject_credential: custom types' `file` templates rendered
  into private files under env/, {{ tower.filename[.LABEL] }} pointing at them, `env` and `extra_vars` templates
  rendered with Jinja2's ImmutableSandboxedEnvironment; the built-in "VMware vCenter" type's fixed VMWARE_* variables),
* the private data dir ansible-runner gets (project/, inventory/hosts as an executable script printing the inventory
  JSON, env/extravars, env/envvars, env/settings).

Difference from AWX kept on purpose: AWX runs the job in an execution-environment container with the private data dir
mounted at /runner, so file paths it injects start with /runner; here the job runs on this machine (the lab's .venv
stands in for the EE), so the injected paths are the real ones under the private data dir.
"""
import json
import os
import shutil
import stat
import tempfile

import yaml
from jinja2 import sandbox

SURVEY_TYPES = ('text', 'textarea', 'password', 'integer', 'float', 'multiplechoice', 'multiselect')


class SurveyError(ValueError):
    pass


def _choices(q):
    c = q.get('choices') or []
    return c.split('\n') if isinstance(c, str) else list(c)


def survey_errors(q, data):
    """AWX's per-question validation (_survey_element_validation), returning a list of messages."""
    var, typ = q['variable'], q['type']
    if typ not in SURVEY_TYPES:
        return ["%s: unknown survey type %r" % (var, typ)]
    if var not in data:
        return ["'%s' value missing" % var] if q.get('required') else []
    v = data[var]
    errs = []
    lo, hi = q.get('min'), q.get('max')
    if typ in ('text', 'textarea', 'password'):
        if not isinstance(v, str):
            return ["Value %r for '%s' expected to be a string." % (v, var)]
        if lo not in ('', None) and len(v) < int(lo):
            errs.append("'%s' value %r is too small" % (var, v))
        if hi not in ('', None) and len(v) > int(hi):
            errs.append("'%s' value %r is too large" % (var, v))
    elif typ in ('integer', 'float'):
        ok = (int,) if typ == 'integer' else (int, float)
        if not isinstance(v, ok) or isinstance(v, bool):
            return ["Value %r for '%s' expected to be %s." % (v, var, typ)]
        if lo not in ('', None) and v < float(lo):
            errs.append("'%s' value %r is too small" % (var, v))
        if hi not in ('', None) and v > float(hi):
            errs.append("'%s' value %r is too large" % (var, v))
    elif typ == 'multiselect':
        if not isinstance(v, list):
            return ["'%s' value is expected to be a list." % var]
        errs += ["Value %r for '%s' expected to be one of %s." % (x, var, _choices(q)) for x in v if x not in _choices(q)]
    elif typ == 'multiplechoice':
        if v not in _choices(q):
            errs.append("Value %r for '%s' expected to be one of %s." % (v, var, _choices(q)))
    return errs


def survey_extra_vars(survey_spec, answers, jt_extra_vars=None):
    """Extra vars of a job launched with ``answers``: JT extra_vars, then valid survey defaults, then the answers."""
    if 'name' not in survey_spec or 'description' not in survey_spec:
        raise SurveyError("survey spec needs 'name' and 'description'")
    extra = dict(jt_extra_vars or {})
    known = set()
    for q in survey_spec['spec']:
        known.add(q['variable'])
        if q.get('default') is not None and not survey_errors(q, {q['variable']: q['default']}):
            extra[q['variable']] = q['default']
    errs = []
    for q in survey_spec['spec']:
        errs += survey_errors(q, answers)
    unknown = set(answers) - known
    if unknown:
        errs.append('answers for questions the survey does not have: %s' % sorted(unknown))
    if errs:
        raise SurveyError('; '.join(errs))
    extra.update(answers)
    return extra


class _Namespace(object):
    pass


def inject_custom(cred_type, inputs, private_data_dir):
    """Render a custom credential type's injectors as AWX does. Returns (env, extra_vars, files)."""
    injectors = cred_type.get('injectors') or {}
    fields = (cred_type.get('inputs') or {}).get('fields', [])
    namespace = {}
    for k, v in inputs.items():
        if isinstance(v, bool) or len(v):
            namespace[k] = v
    for f in fields:
        if f.get('type') == 'boolean' and f['id'] not in inputs:
            namespace[f['id']] = False
    tower = _Namespace()
    namespace['tower'] = tower
    env_dir = os.path.join(private_data_dir, 'env')
    os.makedirs(env_dir, exist_ok=True)
    jinja = sandbox.ImmutableSandboxedEnvironment()
    files = {}
    for label, tmpl in (injectors.get('file') or {}).items():
        data = jinja.from_string(tmpl).render(**namespace)
        fd, path = tempfile.mkstemp(dir=env_dir)
        with os.fdopen(fd, 'w') as f:
            f.write(data)
        os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
        files[label] = path
        if '.' not in label:
            tower.filename = path
        else:
            if not isinstance(getattr(tower, 'filename', None), _Namespace):
                tower.filename = _Namespace()
            setattr(tower.filename, label.split('.', 1)[1], path)
    env = dict((k, jinja.from_string(t).render(**namespace)) for k, t in (injectors.get('env') or {}).items())
    extra = dict((k, jinja.from_string(t).render(**namespace)) for k, t in (injectors.get('extra_vars') or {}).items())
    return env, extra, files


def inject_vmware(inputs, validate_certs_setting=False):
    """The built-in "VMware vCenter" credential (AWX's injectors.vmware; AWX's VMWARE_VALIDATE_CERTS setting)."""
    return {'VMWARE_USER': inputs.get('username', ''), 'VMWARE_PASSWORD': inputs.get('password', ''),
            'VMWARE_HOST': inputs.get('host', ''), 'VMWARE_VALIDATE_CERTS': str(validate_certs_setting)}


def inventory_script_data(inventory):
    """Turn a YAML-style inventory ({all: {children: ...}}) into AWX's script JSON (groups, _meta.hostvars)."""
    groups, hostvars = {}, {}

    def walk(name, node):
        node = node or {}
        g = groups.setdefault(name, {'hosts': [], 'children': [], 'vars': {}})
        g['vars'].update(node.get('vars') or {})
        for h, hv in (node.get('hosts') or {}).items():
            if h not in g['hosts']:
                g['hosts'].append(h)
            hostvars.setdefault(h, {}).update(hv or {})
        for c, cn in (node.get('children') or {}).items():
            if c not in g['children']:
                g['children'].append(c)
            walk(c, cn)

    walk('all', inventory['all'])
    data = dict(groups)
    data['_meta'] = {'hostvars': hostvars}
    return data


def slice_script_data(data, number, count):
    """The inventory script JSON of slice ``number`` of ``count`` (1-based), as AWX builds a sliced job's inventory
    (ansible/awx 24.6.1, awx/main/models/inventory.py: get_script_data orders the enabled hosts by name and
    get_sliced_hosts keeps hosts[number - 1::count]; every group stays, with its variables and children, but lists only
    the slice's hosts, and _meta.hostvars holds only theirs). Slice jobs share nothing else (docs/job_slicing.md there)."""
    if count < 2 or number < 1:
        return data
    keep = set(sorted(data['_meta']['hostvars'])[number - 1::count])
    out = {}
    for name, g in data.items():
        if name == '_meta':
            continue
        out[name] = dict(g, hosts=[h for h in g.get('hosts', []) if h in keep])
    out['_meta'] = {'hostvars': dict((h, v) for h, v in data['_meta']['hostvars'].items() if h in keep)}
    return out


def build_private_data_dir(pdd, project_src, inventory, extravars, envvars, settings, job_slice=None):
    """Lay out a private data dir as AWX does for a job (credential files are already under env/); ``job_slice``
    (number, count) gives the job the inventory of that slice, as AWX does for the jobs of a sliced job template."""
    os.makedirs(os.path.join(pdd, 'env'), exist_ok=True)
    os.makedirs(os.path.join(pdd, 'inventory'), exist_ok=True)
    # project/: the synced project (here: the collection's playbooks, as a project checkout has them)
    proj = os.path.join(pdd, 'project')
    shutil.copytree(os.path.join(project_src, 'playbooks'), os.path.join(proj, 'playbooks'))
    # inventory/hosts: an executable script printing the inventory JSON
    inv = os.path.join(pdd, 'inventory', 'hosts')
    with open(inv, 'w') as f:
        data = inventory_script_data(inventory)
        if job_slice:
            data = slice_script_data(data, *job_slice)
        f.write('#! /usr/bin/env python3\n# -*- coding: utf-8 -*-\nprint(%r)\n' % json.dumps(data))
    os.chmod(inv, stat.S_IRUSR | stat.S_IXUSR | stat.S_IWUSR)
    for name, data in (('extravars', extravars), ('envvars', envvars), ('settings', settings)):
        with open(os.path.join(pdd, 'env', name), 'w') as f:
            yaml.safe_dump(data, f, default_flow_style=False)
