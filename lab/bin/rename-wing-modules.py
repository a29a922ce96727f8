#!/usr/bin/env python3
"""One-off (issue #39 target 4): the files inside the _cluster wings lose the prefix that restates their wing
(stacks/gpu_stack_nvidia.py -> stacks/nvidia.py, report/gpu_share_report_model.py -> report/model.py, ...).

Run from the repository root on a clean tree: `python3 lab/bin/rename-wing-modules.py` does `git mv` of every file in
RENAMES and rewrites the references in every tracked text file but changelogs/ (history):
  * Python code: the imports (`from <pkg>._cluster.<wing> import OLD` binds NEW, or `<wing>_NEW` where the file already
    uses the name NEW), the names an import bound, attributes `.OLD`, and the dotted and path references in strings and
    comments;
  * every other text: dotted (`_cluster.stacks.OLD`, `stacks.OLD`), path (`stacks/OLD.py`) and bare (`OLD.py`, `OLD`
    -> `stacks/NEW.py`, `stacks/NEW`) references.
Then `make generate` style generators rerun where they name a module. It prints what it could not place. Redo after a
merge: check out the merged tree, run it again (a file already renamed is skipped).
"""
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

CLUSTER = 'plugins/module_utils/_cluster'
PKG = 'ansible_collections.gpuops.k8s_gpu.plugins.module_utils._cluster'
RENAMES = {
    'stacks': {'gpu_stack_base': 'base', 'gpu_stack_common': 'common', 'gpu_stack_dra': 'dra',
               'gpu_stack_gpu_manager': 'gpu_manager', 'gpu_stack_gpushare': 'gpushare', 'gpu_stack_hami': 'hami',
               'gpu_stack_live': 'live', 'gpu_stack_nvidia': 'nvidia', 'gpu_stack_operator': 'operator',
               'gpu_stack_registry': 'registry', 'gpu_stack_render': 'render', 'gpu_stack_shared': 'shared',
               'gpu_stack_volcano': 'volcano'},
    'kube': {'k8s_access': 'access', 'k8s_converger': 'converger', 'k8s_read': 'read', 'k8s_rest': 'rest'},
    'report': {'gpu_share_report_kube': 'kube', 'gpu_share_report_model': 'model',
               'gpu_share_report_render': 'render'},
    'scheduler': {'kube_scheduler_adapters': 'adapters', 'kube_scheduler_plan': 'plan',
                  'kube_scheduler_render': 'render'},
    'remediation': {'remediation_kube': 'kube', 'remediation_plan': 'plan'},
}
OLD = dict((old, (wing, new)) for wing, names in RENAMES.items() for old, new in names.items())
ALT = '|'.join(sorted(OLD, key=len, reverse=True))
WINGS = '|'.join(RENAMES)


def text_refs(s):
    """Dotted, path and bare references in prose (docs, comments, strings)."""
    s = re.sub(r'\b(_cluster[./](?:%s)[./])(%s)\b' % (WINGS, ALT), lambda m: m.group(1) + OLD[m.group(2)][1], s)
    s = re.sub(r'(?<!\w)((?:%s)[./])(%s)\b' % (WINGS, ALT),
               lambda m: m.group(1) + OLD[m.group(2)][1] if OLD[m.group(2)][0] == m.group(1)[:-1] else m.group(0), s)
    s = re.sub(r'(?<![\w/.])(stacks/)?gpu_stack_<stack>', 'stacks/<stack>', s)
    s = re.sub(r'([\'"])(%s)(\.py)?\1' % ALT, lambda m: m.group(1) + OLD[m.group(2)][1] + (m.group(3) or '') + m.group(1), s)
    s = re.sub(r'(\bimport\s+)([\w, ]+)', lambda m: m.group(1) + re.sub(  # code in strings: import lists
        r'\b(%s)\b' % ALT, lambda n: OLD[n.group(1)][1], m.group(2)), s)
    s = re.sub(r'(?<![\w/.-])(%s)\b' % ALT, lambda m: '%s/%s' % OLD[m.group(1)], s)
    return s


def python(path, s):
    """Rewrite one Python file: imports and bound names by tokens, the rest as prose in strings and comments."""
    import ast
    tree = ast.parse(s)
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            used.add(node.name)
        elif isinstance(node, ast.arg):
            used.add(node.arg)
        elif isinstance(node, ast.alias):
            used.add(node.asname or node.name.split('.')[0])
    local = {}  # old bound name -> new local name
    alias_at = {}  # (line, col) of an imported OLD name -> replacement text
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level or node.module is None:
            continue
        mod = node.module
        wing = mod[len(PKG) + 1:] if mod.startswith(PKG + '.') else None
        if wing not in RENAMES:
            continue
        for a in node.names:
            if a.name not in RENAMES[wing]:
                continue
            new = RENAMES[wing][a.name]
            if a.asname:
                alias_at[a.name, node.lineno] = new
                continue
            name = new if new not in used else '%s_%s' % (wing, new)
            if name == new:
                used.add(new)
            local[a.name] = name
            alias_at[a.name, node.lineno] = new if name == new else '%s as %s' % (new, name)
    out = []
    toks = list(tokenize.generate_tokens(io.StringIO(s).readline))
    pending = dict(alias_at)
    stmt_start = None
    for i, t in enumerate(toks):
        if t.type == tokenize.NAME and t.string == 'from' and (i == 0 or toks[i - 1].type in (
                tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT)):
            stmt_start = t.start[0]
        text = t.string
        prev = toks[i - 1].string if i else ''
        if t.type == tokenize.NAME and text in OLD:
            if prev == '.':
                text = OLD[text][1]
            elif stmt_start is not None and (text, stmt_start) in pending:
                text = pending[(text, stmt_start)]
            elif text in local:
                text = local[text]
            else:
                print('%s:%d: name %s left (not bound by an import of its wing)' % (path, t.start[0], text),
                      file=sys.stderr)
        elif t.type in (tokenize.STRING, tokenize.COMMENT):
            text = text_refs(text)
        if t.type == tokenize.NEWLINE:
            stmt_start = None
        out.append((t.type, text, t.start, t.end, t.line))
    new = untokenize(s, toks, out)
    # `import gpu_stack_dra as dra` became `import dra as dra`: the alias goes (pylint useless-import-alias)
    news = '|'.join(sorted(set(n for names in RENAMES.values() for n in names.values())))
    new = re.sub(r'\b(%s) as \1\b' % news, r'\1', new)
    return realign(s, new)


def untokenize(src, toks, out):
    """Put the changed token texts back into the source, keeping every other character."""
    lines = src.splitlines(keepends=True)
    offs = [0]
    for ln in lines:
        offs.append(offs[-1] + len(ln))
    res = []
    pos = 0
    for t, (_, text, start, end, _) in zip(toks, out):
        if t.string == text or t.type == tokenize.ENDMARKER:
            continue
        a = offs[start[0] - 1] + start[1]
        b = offs[end[0] - 1] + end[1]
        res.append(src[pos:a])
        res.append(text)
        pos = b
    res.append(src[pos:])
    return ''.join(res)


SKIP = (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)


def aligned_lines(toks):
    """{line: (index of the bracket token, indent)} for each continuation line that starts inside a bracket whose
    first item stands on the bracket's line (a visual indent), with the line's indent."""
    out = {}
    stack = []
    for i, t in enumerate(toks):
        if i and t.start[0] != toks[i - 1].end[0] and t.type not in SKIP and stack and t.start[0] not in out:
            out[t.start[0]] = (stack[-1], t.start[1])
        if t.type == tokenize.OP and t.string in '([{':
            stack.append(i)
        elif t.type == tokenize.OP and t.string in ')]}' and stack:
            stack.pop()
    return out


def visual(toks, i):
    """The column of the first item after bracket token i on its own line, or None (a hanging indent)."""
    n = toks[i + 1]
    return n.start[1] if n.start[0] == toks[i].start[0] and n.type not in SKIP else None


def realign(old, new):
    """Continuation lines that were aligned with their bracket's first item stay aligned where a name before that
    bracket changed length (pycodestyle E127/E128)."""
    otoks = list(tokenize.generate_tokens(io.StringIO(old).readline))
    oal = aligned_lines(otoks)
    keep = set(ln for ln, (i, col) in oal.items() if visual(otoks, i) == col)
    for _ in range(10):
        ntoks = list(tokenize.generate_tokens(io.StringIO(new).readline))
        lines = new.splitlines(keepends=True)
        changed = False
        for ln, (i, col) in aligned_lines(ntoks).items():
            want = visual(ntoks, i)
            if ln in keep and want is not None and want != col:
                lines[ln - 1] = ' ' * want + lines[ln - 1].lstrip(' ')
                changed = True
        new = ''.join(lines)
        if not changed:
            return new
    raise SystemExit('realign did not settle')


def main():
    root = Path(subprocess.check_output(['git', 'rev-parse', '--show-toplevel']).decode().strip())
    for wing, names in RENAMES.items():
        for old, new in names.items():
            src = root / CLUSTER / wing / (old + '.py')
            if src.exists():
                subprocess.check_call(['git', 'mv', str(src), str(root / CLUSTER / wing / (new + '.py'))], cwd=root)
    files = subprocess.check_output(['git', 'grep', '-lIE', r'\b(%s)\b' % ALT, '--', '.', ':!changelogs',
                                     ':!lab/bin/rename-wing-modules.py'], cwd=root).decode().split()
    for f in files:
        p = root / f
        s = p.read_text(encoding='utf-8')
        t = python(f, s) if f.endswith('.py') else text_refs(s)
        if t != s:
            p.write_text(t, encoding='utf-8')
    subprocess.check_call([sys.executable, 'lab/bin/gen-from-model.py'], cwd=root)


if __name__ == '__main__':
    main()
