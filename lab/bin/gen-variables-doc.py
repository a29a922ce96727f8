#!/usr/bin/env python3
"""Generate docs/variables.md from every roles/*/meta/argument_specs.yml, or check it (lab tooling only).

    .venv/bin/python lab/bin/gen-variables-doc.py            # (re)write docs/variables.md
    .venv/bin/python lab/bin/gen-variables-doc.py --check    # fail on a stale page or on drift

--check fails (exit 1) when
  * docs/variables.md is not what this script would write now (stale), or
  * a role's defaults define a variable that no entry point of its argument_specs documents, or
  * an argument_specs option has a ``default`` that defaults/main.yml does not set, or sets to another value
    (Ansible never applies argument_specs defaults: the real default always comes from defaults/), or
  * a literal value in defaults/ does not match the option's ``type`` or ``choices``.
It prints one line per problem as ``path:line: variables-doc: message`` (the form lab/bin/lint.sh counts),
and warnings (``path:line: warning: ...``, not failing) for ``required: true`` options that defaults/ also
sets (unless the default is an empty placeholder that ``choices`` rejects): role argument validation sees the
default, so ``required`` can never fire for them.

Reads the collection's files only; never imports the collection.
"""
import argparse
import difflib
import glob
import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join('docs', 'variables.md')
REGEN = '.venv/bin/python lab/bin/gen-variables-doc.py'
SCALAR_TYPES = {
    'str': (str,), 'path': (str,), 'int': (int,), 'float': (int, float), 'bool': (bool,),
    'list': (list,), 'dict': (dict,),
}
MISSING = object()


# ---------------------------------------------------------------- reading

def set_root(path):
    global ROOT
    ROOT = os.path.abspath(path)


class ParseError(Exception):
    pass


def load_yaml(path):
    try:
        with open(path, encoding='utf-8') as f:
            return yaml.safe_load(f)
    except yaml.YAMLError as e:
        mark = getattr(e, 'problem_mark', None)
        raise ParseError('%s:%d: variables-doc: cannot parse YAML: %s' % (
            rel(path), mark.line + 1 if mark else 1, ' '.join(str(e).split())))


def defaults_files(role_dir):
    """defaults/main.yml, defaults/main.yaml, or every file of a defaults/main/ directory."""
    files = []
    for name in ('main.yml', 'main.yaml'):
        p = os.path.join(role_dir, 'defaults', name)
        if os.path.isfile(p):
            files.append(p)
    d = os.path.join(role_dir, 'defaults', 'main')
    if os.path.isdir(d):
        files.extend(sorted(glob.glob(os.path.join(d, '*.yml')) + glob.glob(os.path.join(d, '*.yaml'))))
    return files


def load_defaults(role_dir):
    """{variable: (value, file)} from the role's defaults."""
    out = {}
    for path in defaults_files(role_dir):
        data = load_yaml(path) or {}
        if not isinstance(data, dict):
            raise ParseError('%s:1: variables-doc: defaults must be a mapping' % rel(path))
        for k, v in data.items():
            out[k] = (v, path)
    return out


def load_specs(role_dir):
    """{entry point: spec} from meta/argument_specs.yml (or .yaml); None when the role has none."""
    for name in ('argument_specs.yml', 'argument_specs.yaml'):
        p = os.path.join(role_dir, 'meta', name)
        if os.path.isfile(p):
            data = load_yaml(p) or {}
            specs = data.get('argument_specs')
            if not isinstance(specs, dict):
                raise ParseError('%s:1: variables-doc: no argument_specs mapping' % rel(p))
            return p, specs
    return None, None


def rel(path):
    return os.path.relpath(path, ROOT)


def line_of(path, name, indented=False):
    """First line that defines `name:` (top level, or indented for argument_specs options)."""
    pat = re.compile(r'^%s%s\s*:' % (r'\s+' if indented else '', re.escape(name)))
    try:
        with open(path, encoding='utf-8') as f:
            for i, line in enumerate(f, 1):
                if pat.match(line):
                    return i
    except OSError:
        pass
    return 1


def roles():
    out = []
    for d in sorted(glob.glob(os.path.join(ROOT, 'roles', '*'))):
        if os.path.isdir(d):
            out.append((os.path.basename(d), d))
    return out


def entry_points(specs):
    names = sorted(specs)
    if 'main' in names:
        names.remove('main')
        names.insert(0, 'main')
    return names


# ---------------------------------------------------------------- rendering

MARKUP = re.compile(r'\b([CVOEMIBUPLR])\(([^()]*)\)')


def markup(text):
    """Ansible doc markup to Markdown."""
    def sub(m):
        kind, body = m.group(1), m.group(2)
        if kind == 'I':
            return '*%s*' % body
        if kind == 'B':
            return '**%s**' % body
        if kind == 'U':
            return body
        if kind in ('L', 'R'):
            label, _sep, target = body.partition(',')
            target = target.strip()
            return '[%s](%s)' % (label.strip(), target) if kind == 'L' and target else label.strip()
        if kind == 'O' and '#' in body and ':' in body:
            body = body.rsplit(':', 1)[1]
        if kind == 'P':  # P(gpuops.k8s_gpu.gpu_probe#role): the plugin's or role's name
            body = body.split('#', 1)[0]
        return '`%s`' % body
    prev = None
    while prev != text:  # nested markup, innermost first
        prev, text = text, MARKUP.sub(sub, text)
    return text


def cell(text):
    return str(text).replace('\n', ' ').replace('|', '\\|').strip()


def desc(value):
    if value is None:
        return ''
    if isinstance(value, list):
        return ' '.join(markup(str(v)) for v in value)
    return markup(str(value))


def inline_yaml(value):
    """A value as one line of YAML flow style (strings bare unless YAML would read them as something else)."""
    if isinstance(value, str) and '\n' not in value:
        try:
            plain = value != '' and yaml.safe_load(value) == value and not value.startswith(('{{', '{%'))
        except yaml.YAMLError:
            plain = False
        if plain or value.startswith(('{{', '{%')):
            return value
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30, sort_keys=False).strip()
    return text[:-3].strip() if text.endswith('...') else text


def code(value):
    text = inline_yaml(value)
    fence = '``' if '`' in text else '`'
    pad = ' ' if '`' in text else ''
    return '%s%s%s%s%s' % (fence, pad, text, pad, fence)


def templated(value):
    if isinstance(value, str):
        return '{{' in value or '{%' in value
    if isinstance(value, list):
        return any(templated(v) for v in value)
    if isinstance(value, dict):
        return any(templated(v) for v in value.values())
    return False


def default_cell(name, opt, defaults, top):
    if 'default' in opt and opt['default'] is not None:
        return ('computed: ' if templated(opt['default']) else '') + code(opt['default'])
    if top and name in defaults:
        value = defaults[name][0]
        if value is None:
            return '`null`'
        if templated(value):
            return 'computed: %s' % code(value)
        return code(value)
    return ''


def type_cell(opt):
    t = opt.get('type', 'str')
    if t in ('list', 'dict') and opt.get('elements'):
        return '%s of %s' % (t, opt['elements'])
    return t


def option_rows(options, defaults, prefix='', top=True):
    rows = []
    for name, opt in (options or {}).items():
        opt = opt or {}
        full = prefix + name
        choices = opt.get('choices')
        rows.append('| `%s` | %s | %s | %s | %s | %s |' % (
            full, cell(type_cell(opt)), cell(default_cell(name, opt, defaults, top)),
            cell(', '.join(code(c) for c in choices)) if choices else '',
            'yes' if opt.get('required') else '',
            cell(desc(opt.get('description')))))
        if opt.get('options'):
            rows.extend(option_rows(opt['options'], defaults, full + '.', top=False))
    return rows


def render():
    out = [
        '# Role variables',
        '',
        '<!-- Generated by lab/bin/gen-variables-doc.py from roles/*/meta/argument_specs.yml. Do not edit. -->',
        '',
        'Every variable of every role, generated from the roles\' `meta/argument_specs.yml` (the same specs Ansible',
        'validates when a role starts). Regenerate after changing a role:',
        '',
        '```sh',
        REGEN,
        '```',
        '',
        '`%s --check` (run by `bash lab/bin/lint.sh`, so by `make test`) fails when this page is stale, when a' % REGEN,
        'role\'s `defaults/main.yml` defines a variable its argument_specs do not document, or when an argument_specs',
        'default, type or choice disagrees with `defaults/main.yml`.',
        '',
        'Columns: **default** is the argument_specs default; where the specs give none it is the value from',
        '`defaults/main.yml` (`computed:` marks a Jinja expression evaluated at run time, often from `gpuops_mirror`).',
        'Sub-options of a dictionary or list-of-dictionaries option are listed as `option.sub_option`; their defaults',
        'are applied by the role or module that reads them, not by Ansible. Collection-wide variables (`gpuops_mirror`,',
        '`gpuops_kubeconfig`, `gpuops_sharing_strategy`, the layer switches) are described in [index.md](index.md).',
        '',
    ]
    body = []
    toc = []
    for role, d in roles():
        spec_path, specs = load_specs(d)
        defaults = load_defaults(d)
        toc.append('- [`gpuops.k8s_gpu.%s`](#%s)' % (role, role))
        body.append('## %s' % role)
        body.append('')
        if specs is None:
            body.append('No `meta/argument_specs.yml` (every role must have one).')
            body.append('')
            continue
        for ep in entry_points(specs):
            spec = specs[ep] or {}
            ep_title = 'entry point `%s`' % ep + ('' if ep == 'main' else ' (`tasks_from: %s`)' % ep)
            body.append('### %s — %s' % (role, ep_title))
            body.append('')
            if spec.get('short_description'):
                body.append('%s.' % desc(spec['short_description']).rstrip('.'))
                body.append('')
            for para in (spec.get('description') or []) if isinstance(spec.get('description'), list) else \
                    [spec.get('description')] if spec.get('description') else []:
                body.append('- %s' % desc(para))
            if spec.get('description'):
                body.append('')
            rows = option_rows(spec.get('options'), defaults)
            if rows:
                body.append('| name | type | default | choices | required | description |')
                body.append('|---|---|---|---|---|---|')
                body.extend(rows)
            else:
                body.append('No options.')
            body.append('')
            body.append('Source: `%s`.' % rel(spec_path))
            body.append('')
    out.extend(toc)
    out.append('')
    out.extend(body)
    while out and out[-1] == '':
        out.pop()
    return '\n'.join(out) + '\n'


# ---------------------------------------------------------------- checking

def same(spec_value, value, typ):
    if spec_value == value and type(spec_value) is type(value):
        return True
    if typ in ('str', 'path') and not isinstance(spec_value, (list, dict, bool)) \
            and not isinstance(value, (list, dict, bool)) and spec_value is not None and value is not None:
        return str(spec_value) == str(value)
    if typ == 'float' and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (spec_value, value)):
        return float(spec_value) == float(value)
    return False


def type_ok(value, typ):
    allowed = SCALAR_TYPES.get(typ)
    if allowed is None:  # raw, bits, bytes, json...: anything
        return True
    if isinstance(value, bool) and bool not in allowed:
        return False
    return isinstance(value, allowed)


def drift():
    """(errors, warnings): lists of 'path:line: ...' lines."""
    errors, warnings = [], []
    for role, d in roles():
        spec_path, specs = load_specs(d)
        defaults = load_defaults(d)
        if specs is None:
            errors.append('roles/%s/meta/argument_specs.yml:1: variables-doc: role %s has no argument_specs' % (role, role))
            continue
        options = {}
        for ep in entry_points(specs):
            for name, opt in ((specs[ep] or {}).get('options') or {}).items():
                options.setdefault(name, (ep, opt or {}))
        for name, (value, path) in defaults.items():
            where = '%s:%d' % (rel(path), line_of(path, name))
            if name not in options:
                errors.append('%s: variables-doc: %s is defined in defaults but no argument_specs entry point of role %s '
                              'documents it (add it to %s)' % (where, name, role, rel(spec_path)))
                continue
            ep, opt = options[name]
            typ = opt.get('type', 'str')
            placeholder = opt.get('required') and value in ('', None)  # "must be set" placeholder of a required option
            if value is not None and not templated(value) and not placeholder:
                if not type_ok(value, typ):
                    errors.append('%s: variables-doc: %s = %s in defaults is a %s, argument_specs (%s) says type %s'
                                  % (where, name, inline_yaml(value), type(value).__name__, ep, typ))
                elif opt.get('choices'):
                    vals = value if typ == 'list' and isinstance(value, list) else [value]
                    bad = [v for v in vals if v not in opt['choices']]
                    if bad:
                        errors.append('%s: variables-doc: %s = %s in defaults is not one of the argument_specs choices %s'
                                      % (where, name, inline_yaml(value), inline_yaml(opt['choices'])))
            if 'default' in opt and opt['default'] is not None and not same(opt['default'], value, typ):
                errors.append('%s: variables-doc: %s defaults to %s in defaults but argument_specs (%s, %s:%d) says '
                              'default %s' % (where, name, inline_yaml(value), ep, rel(spec_path),
                                              line_of(spec_path, name, indented=True), inline_yaml(opt['default'])))
            if opt.get('required') and not (placeholder and opt.get('choices')):
                # with choices, validation rejects the '' placeholder ("must be one of"), so required still works
                warnings.append('%s: warning: %s is required in argument_specs (%s) but defaults set it to %s, so role '
                                'argument validation never reports it missing' % (where, name, ep, inline_yaml(value)))
        for name, (ep, opt) in options.items():
            if name in defaults:
                continue
            if 'default' in opt and opt['default'] is not None:
                errors.append('%s:%d: variables-doc: %s has default %s in argument_specs (%s) but defaults/main.yml does '
                              'not set it; Ansible never applies argument_specs defaults, so the variable is undefined '
                              'unless set' % (rel(spec_path), line_of(spec_path, name, indented=True), name,
                                              inline_yaml(opt['default']), ep))
    return errors, warnings


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--check', action='store_true', help='fail when docs/variables.md is stale or roles drift')
    ap.add_argument('--root', default=ROOT, help='collection root (default: this repository)')
    args = ap.parse_args()
    set_root(args.root)
    try:
        text = render()
    except ParseError as e:
        print(e)
        print('variables-doc: nothing generated or checked until the file parses')
        return 1
    path = os.path.join(ROOT, DOC)
    if not args.check:
        old = None
        if os.path.exists(path):
            with open(path, encoding='utf-8') as f:
                old = f.read()
        if old != text:
            with open(path, 'w', encoding='utf-8') as f:
                f.write(text)
            print('wrote %s' % DOC)
        else:
            print('%s is up to date' % DOC)
        errors, warnings = drift()
        for line in warnings + errors:
            print(line)
        return 0
    errors, warnings = drift()
    old = ''
    if os.path.exists(path):
        with open(path, encoding='utf-8') as f:
            old = f.read()
    if old != text:
        diff = list(difflib.unified_diff(old.splitlines(), text.splitlines(), DOC + ' (now)', DOC + ' (generated)',
                                         lineterm='', n=0))
        first = next((int(m.group(1)) for m in (re.match(r'^@@ -(\d+)', l) for l in diff) if m), 1)
        errors.insert(0, '%s:%d: variables-doc: %s is stale (%s); regenerate it with: %s'
                      % (DOC, max(first, 1), DOC, 'missing' if not old else '%d changed lines' % sum(
                          1 for l in diff if l[:1] in '+-' and l[:3] not in ('+++', '---')), REGEN))
        for l in diff[:40]:
            print('    ' + l)
    for line in warnings + errors:
        print(line)
    n_roles = len(roles())
    print('variables-doc: %d roles, %d errors, %d warnings' % (n_roles, len(errors), len(warnings)))
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
