#!/usr/bin/env python3
"""Read-only check of the collection on a REAL NVIDIA GPU node (lab tool; the collection never imports it).

  lab/bin/real-gpu-check.sh [--reps N] [--out DIR] [--kernel-log PATH]

Needs only python3 with nvidia-ml-py and ansible-core importable (a venv, or wheels unpacked on PYTHONPATH): the
modules run as Ansible runs them on a node (python3 MODULE.py ARGS.json, the collection on PYTHONPATH), without the
ansible CLI, a callback plugin or any other collection.

1. gpu_info (the collection's module, run directly) compared field by field with
   `nvidia-smi -q -x` (name, UUID, PCI bus and device id, memory, driver and CUDA versions, MIG mode, persistence),
   `nvidia-smi --query-gpu=pci.bus_id,compute_cap` (compute capability) and `nvidia-smi nvlink -s` (active NVLinks);
2. gpu_doctor (fail_on=never) for every node strategy, with the health checks (NVML and the kernel log);
3. the GPU-instance profiles NVML answers against the collection's catalogue (gpu_info mig_profiles: true);
4. the NVML probe timing of the probe benchmark (lab/bench/gpu_probe.py's snippet) against the real libnvidia-ml.

Changes nothing on the GPU: only queries (no -pm, -mig, -ac/-lgc, -r); the GPU state that a change would touch
(persistence, MIG current/pending, compute mode, application clocks) is read before and after and must be equal.
Refuses to run against the lab's NVML simulator. Writes report.md, report.json and each module's JSON answer under
--out (default build/real-gpu).
Exit status: 0 all fields agree and the state is unchanged, 1 a mismatch or a changed state, 2 cannot run here.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import xml.etree.ElementTree as ET

import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = sys.executable
NODE_STRATEGIES = ('exclusive', 'time-slicing', 'mps', 'mig', 'gpushare', 'volcano', 'hami', 'gpu-manager')

# ------------------------------------------------------------------------------------------------ parsing


def _text(node, path):
    el = node.find(path)
    if el is None or el.text is None:
        return None
    value = el.text.strip()
    return None if value in ('', 'N/A', '[N/A]', 'Not Supported', '[Not Supported]') else value


def _mib(value):
    if value is None:
        return None
    m = re.match(r'^\s*(\d+)\s*MiB\s*$', value)
    return int(m.group(1)) if m else None


def _on_off(value):
    if value is None:
        return None
    return {'enabled': True, 'disabled': False}.get(value.strip().lower())


def norm_bus_id(value):
    """'00000000:3B:00.0' / '0000:3b:00.0' -> '0000:3b:00.0' (NVML and nvidia-smi pad the domain differently)."""
    if not value:
        return None
    m = re.match(r'^(?:([0-9a-fA-F]+):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$', value.strip())
    if not m:
        return value.strip().lower()
    return '%04x:%s:%s.%s' % (int(m.group(1) or '0', 16) & 0xFFFF, m.group(2).lower(), m.group(3).lower(), m.group(4))


def parse_smi_xml(text):
    """`nvidia-smi -q -x` -> {'driver_version', 'cuda_version', 'gpus': [{field: value}]} (fields named as gpu_info's)."""
    root = ET.fromstring(text)
    out = {'driver_version': _text(root, 'driver_version'), 'cuda_version': _text(root, 'cuda_version'), 'gpus': []}
    for gpu in root.findall('gpu'):
        dev = _text(gpu, 'pci/pci_device_id')  # 0x20F110DE: device id in the upper 16 bits, vendor below
        dev_id = None
        if dev:
            try:
                dev_id = '0x%04x' % ((int(dev, 16) >> 16) & 0xFFFF)
            except ValueError:
                dev_id = None
        out['gpus'].append({
            'pci_bus_id': norm_bus_id(gpu.get('id') or _text(gpu, 'pci/pci_bus_id')),
            'name': _text(gpu, 'product_name'),
            'uuid': _text(gpu, 'uuid'),
            'pci_device_id': dev_id,
            'memory_total_mib': _mib(_text(gpu, 'fb_memory_usage/total')),
            'memory_reserved_mib': _mib(_text(gpu, 'fb_memory_usage/reserved')),
            'mig_current': _on_off(_text(gpu, 'mig_mode/current_mig')),
            'mig_pending': _on_off(_text(gpu, 'mig_mode/pending_mig')),
            'persistence_mode': _on_off(_text(gpu, 'persistence_mode')),
            'compute_mode': _text(gpu, 'compute_mode'),
            'applications_clocks': (_text(gpu, 'applications_clocks/graphics_clock'),
                                    _text(gpu, 'applications_clocks/mem_clock')),
        })
    return out


def parse_compute_caps(text):
    """`nvidia-smi --query-gpu=pci.bus_id,compute_cap --format=csv,noheader` -> {bus id: '9.0'}."""
    out = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(',')]
        if len(parts) == 2 and parts[1] not in ('', '[N/A]', 'N/A'):
            out[norm_bus_id(parts[0])] = parts[1]
    return out


def parse_nvlink_status(text):
    """`nvidia-smi nvlink -s` -> {GPU UUID: number of active links} ('Link N: <speed>', inactive: '<inactive>')."""
    out, uuid = {}, None
    for line in text.splitlines():
        m = re.match(r'^GPU \d+: .*\(UUID: (GPU-[0-9a-fA-F-]+)\)', line.strip())
        if m:
            uuid = m.group(1)
            out[uuid] = 0
            continue
        m = re.match(r'^Link \d+: (.*)$', line.strip())
        if m and uuid:
            if 'inactive' not in m.group(1).lower() and re.search(r'\d', m.group(1)):
                out[uuid] += 1
    return out


# ------------------------------------------------------------------------------------------------ comparing

def _cuda(value):
    """'12.4' / 12040 -> '12.4'."""
    if value is None:
        return None
    text = str(value).strip()
    if re.match(r'^\d{4,5}$', text):
        n = int(text)
        return '%d.%d' % (n // 1000, (n % 1000) // 10)
    return text


def compare(info, smi, caps=None, nvlinks=None):
    """gpu_info's result vs nvidia-smi's. Returns rows {gpu, field, gpu_info, nvidia_smi, ok}, one per field."""
    rows = []

    def row(gpu, field, ours, theirs, ok=None):
        rows.append({'gpu': gpu, 'field': field, 'gpu_info': ours, 'nvidia_smi': theirs,
                     'ok': (ours == theirs) if ok is None else ok})

    nvml = info.get('nvml') or {}
    row('-', 'nvml.status', nvml.get('status'), 'ok')
    row('-', 'driver_version', nvml.get('driver_version'), smi.get('driver_version'))
    row('-', 'cuda_driver_version', _cuda(nvml.get('cuda_driver_version')), _cuda(smi.get('cuda_version')))
    row('-', 'gpu_count', info.get('gpu_count'), len(smi['gpus']))
    theirs = dict((g['pci_bus_id'], g) for g in smi['gpus'])
    for g in info.get('gpus') or []:
        bus = norm_bus_id(g.get('pci_bus_id'))
        label = '%s %s' % (g.get('index'), bus)
        s = theirs.pop(bus, None)
        if s is None:
            row(label, 'pci_bus_id', bus, None)
            continue
        row(label, 'pci_bus_id', bus, s['pci_bus_id'])
        for field in ('name', 'uuid', 'mig_current', 'persistence_mode'):
            row(label, field, g.get(field), s[field])
        row(label, 'pci_device_id', (g.get('pci_device_id') or '').lower() or None, s['pci_device_id'])
        # nvidia-smi lists the memory the driver reserves apart (<reserved>); whether a total counts it depends on the
        # NVML call (nvmlMemory_v2 or v1) and the driver: the same memory either way
        ours, total, reserved = g.get('memory_total_mib'), s['memory_total_mib'], s['memory_reserved_mib'] or 0
        row(label, 'memory_total_mib', ours, total,
            ok=ours is not None and total is not None and ours in (total, total - reserved, total + reserved))
        if caps is not None:
            row(label, 'compute_capability', g.get('compute_capability'), caps.get(bus))
        if nvlinks is not None:
            row(label, 'nvlinks', g.get('nvlinks') or 0, nvlinks.get(s['uuid'], 0))
    for bus in sorted(theirs):
        row('? %s' % bus, 'pci_bus_id', None, bus)
    return rows


STATE_FIELDS = ('persistence_mode', 'mig_current', 'mig_pending', 'compute_mode', 'applications_clocks')


def state_of(smi):
    """What a change to the GPU would touch, per GPU: must be the same before and after the check."""
    return dict((g['pci_bus_id'], dict((f, g[f]) for f in STATE_FIELDS)) for g in smi['gpus'])


def state_changes(before, after):
    out = []
    for bus in sorted(set(before) | set(after)):
        b, a = before.get(bus), after.get(bus)
        if b != a:
            out.append('%s: %s -> %s' % (bus, b, a))
    return out


def render(rows, doctor, probe, changes, host):
    bad = [r for r in rows if not r['ok']]
    lines = ['## Real GPU check (%s)' % host, '',
             'gpu_info vs nvidia-smi: %d field(s) compared, %d differ.' % (len(rows), len(bad)), '',
             '| GPU | field | gpu_info | nvidia-smi | same |', '|---|---|---|---|---|']
    for r in rows:
        lines.append('| %s | %s | %s | %s | %s |' % (r['gpu'], r['field'], r['gpu_info'], r['nvidia_smi'],
                                                    'yes' if r['ok'] else '**no**'))
    lines += ['', 'gpu_doctor: %s' % ('healthy' if doctor.get('healthy') else 'findings'), '']
    for f in doctor.get('findings') or []:
        lines.append('* %s: %s' % (f.get('severity', '?'), f.get('summary', '')))
    if probe:
        lines += ['', 'NVML probe (nvml_probe.probe(), real libnvidia-ml, %d GPU(s), %d repetitions): median %.2f ms '
                  '(min %.2f, max %.2f).' % (probe['gpus'], len(probe['times_ms']), statistics.median(probe['times_ms']),
                                            min(probe['times_ms']), max(probe['times_ms']))]
    lines += ['', 'GPU state before/after (persistence, MIG, compute mode, application clocks): %s.'
              % ('unchanged' if not changes else 'CHANGED: ' + '; '.join(changes))]
    return '\n'.join(lines) + '\n'


# ------------------------------------------------------------------------------------------------ running

def _run(cmd, env=None, check=True):
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if check and proc.returncode != 0:
        raise RuntimeError('%s failed (rc=%s): %s' % (' '.join(cmd), proc.returncode, (proc.stderr or proc.stdout)[-2000:]))
    return proc


def _collections_path(tmp):
    """A collections root whose ansible_collections/gpuops/k8s_gpu is this checkout (a link; nothing is copied)."""
    ns = os.path.join(tmp, 'ansible_collections', 'gpuops')
    os.makedirs(ns)
    os.symlink(ROOT, os.path.join(ns, 'k8s_gpu'))
    return tmp


def _module(name, args, cpath, env=None):
    """Run plugins/modules/NAME.py as Ansible does on a node: python3 MODULE ARGS_FILE, the collection importable."""
    argfile = os.path.join(cpath, 'args-%s.json' % name)
    with open(argfile, 'w') as f:
        json.dump({'ANSIBLE_MODULE_ARGS': args}, f)
    e = dict(env or os.environ)
    e['PYTHONPATH'] = os.pathsep.join([cpath] + [p for p in e.get('PYTHONPATH', '').split(os.pathsep) if p])
    start = time.time()
    proc = _run([PYTHON, os.path.join(ROOT, 'plugins', 'modules', name + '.py'), argfile], env=e, check=False)
    try:
        res = json.loads(proc.stdout)
    except ValueError:
        res = {'failed': True, 'msg': 'no JSON from %s (rc=%s)' % (name, proc.returncode),
               'stdout': proc.stdout[-4000:], 'stderr': proc.stderr[-4000:]}
    res['_seconds'] = round(time.time() - start, 3)
    return res


def compare_profiles(info):
    """GPU-instance profiles NVML answered vs the catalogue's, per GPU: rows {gpu, profile, nvml, catalog, ok}."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(ROOT)))
    rows = []
    for g in info.get('gpus') or []:
        if not g.get('mig_capable'):
            continue
        nvml = dict((p['name'], p) for p in g.get('mig_profiles') or [] if p.get('source') == 'nvml')
        catalog = dict((p['name'], p) for p in g.get('mig_catalog_profiles') or [])
        for name in sorted(set(nvml) | set(catalog)):
            a, b = nvml.get(name), catalog.get(name)
            keys = ('id', 'max_instances', 'memory_mib', 'slices')
            ours = dict((k, a.get(k)) for k in keys) if a else None
            theirs = dict((k, b.get(k)) for k in keys if k in b) if b else None
            ok = ours is not None and theirs is not None and all(ours[k] == theirs[k] for k in theirs)
            rows.append({'gpu': g.get('index'), 'profile': name, 'nvml': ours, 'catalog': theirs, 'ok': ok})
    return rows


def simulator_in_use():
    if os.environ.get('NVML_SIM_INVENTORY') or os.environ.get('NVML_SIM_STATE'):
        return 'NVML_SIM_* variables are set'
    if os.path.exists('/etc/ld.so.conf.d/00-nvml-sim.conf') or os.path.exists('/etc/nvml-sim/inventory.json'):
        return 'the lab NVML simulator is installed on this machine (/etc/nvml-sim)'
    return None


def _catalog_profiles(info, cpath):
    """The catalogue's profiles for each GPU (gpu_catalog.mig_catalog_facts with no NVML answer)."""
    sys.path.insert(0, cpath)
    from ansible_collections.gpuops.k8s_gpu.plugins.module_utils._common.gpu_catalog import mig_catalog_facts
    for g in info.get('gpus') or []:
        if g.get('mig_capable'):
            dev = int(g['pci_device_id'], 16) << 16 | 0x10de if g.get('pci_device_id') else None
            g['mig_catalog_profiles'] = mig_catalog_facts(g.get('name'), dev, []).get('mig_profiles') or []


def probe_snippet():
    """The probe benchmark's own snippet (lab/bench/gpu_probe.py PROBE_SNIPPET), read from its source: importing the
    benchmark would need PyYAML, which a bare node may lack."""
    with open(os.path.join(ROOT, 'lab', 'bench', 'gpu_probe.py')) as f:
        m = re.search(r"PROBE_SNIPPET = r\'\'\'(.*?)\'\'\'", f.read(), re.S)
    return m.group(1)


def _write(out, name, data):
    with open(os.path.join(out, name), 'w') as f:
        json.dump(data, f, indent=1, sort_keys=True, default=str)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--reps', type=int, default=50, help='NVML probe repetitions (default 50)')
    ap.add_argument('--out', default=os.path.join(ROOT, 'build', 'real-gpu'))
    ap.add_argument('--kernel-log', default='/dev/kmsg', help='kernel log for the doctor (default /dev/kmsg)')
    a = ap.parse_args(argv)
    why = simulator_in_use()
    if why or not shutil.which('nvidia-smi'):
        print('real-gpu-check: not a real GPU node here: %s' % (why or 'nvidia-smi not found'), file=sys.stderr)
        return 2
    for mod in ('pynvml', 'ansible.module_utils.basic'):
        try:
            __import__(mod)
        except ImportError as exc:
            print('real-gpu-check: %s cannot import %s (%s): install nvidia-ml-py and ansible-core for it, or put '
                  'their wheels on PYTHONPATH' % (PYTHON, mod, exc), file=sys.stderr)
            return 2
    os.makedirs(a.out, exist_ok=True)
    env = dict((k, v) for k, v in os.environ.items() if k not in ('LD_LIBRARY_PATH', 'NVML_SIM_INVENTORY', 'NVML_SIM_STATE'))
    smi_before_text = _run(['nvidia-smi', '-q', '-x'], env=env).stdout
    smi_before = parse_smi_xml(smi_before_text)
    caps_proc = _run(['nvidia-smi', '--query-gpu=pci.bus_id,compute_cap', '--format=csv,noheader'], env=env, check=False)
    caps = parse_compute_caps(caps_proc.stdout) if caps_proc.returncode == 0 else None
    link_proc = _run(['nvidia-smi', 'nvlink', '-s'], env=env, check=False)
    nvlinks = parse_nvlink_status(link_proc.stdout) if link_proc.returncode == 0 else {}
    tmp = tempfile.mkdtemp(prefix='real-gpu-check-')
    cpath = _collections_path(tmp)
    info = _module('gpu_info', {'mig_profiles': False}, cpath, env)
    info_profiles = _module('gpu_info', {'mig_profiles': True}, cpath, env)
    _write(a.out, 'gpu_info.json', info)
    _write(a.out, 'gpu_info-mig_profiles.json', info_profiles)
    doctors = {}
    for strategy in NODE_STRATEGIES:
        doctors[strategy] = _module('gpu_doctor', {'fail_on': 'never', 'strategy': strategy,
                                                   'kernel_log': a.kernel_log}, cpath, env)
        _write(a.out, 'gpu_doctor-%s.json' % strategy, doctors[strategy])
    doctor = doctors['exclusive']
    _catalog_profiles(info_profiles, cpath)
    profile_rows = compare_profiles(info_profiles)
    probe_out = _run([PYTHON, '-c', probe_snippet(), cpath, str(a.reps)], env=env, check=False)
    try:
        probe = json.loads(probe_out.stdout)
    except ValueError:
        probe = None
    smi_after_text = _run(['nvidia-smi', '-q', '-x'], env=env).stdout
    smi_after = parse_smi_xml(smi_after_text)
    with open(os.path.join(a.out, 'nvidia-smi-q-x.before.xml'), 'w') as f:
        f.write(smi_before_text)
    rows = compare(info, smi_before, caps, nvlinks)
    changes = state_changes(state_of(smi_before), state_of(smi_after))
    report = render(rows, doctor, probe, changes, os.uname()[1])
    report += '\ngpu_doctor per strategy (critical / warning / info):\n\n'
    for strategy in NODE_STRATEGIES:
        d = doctors[strategy]
        counts = d.get('counts') or {}
        report += '* %s: %s / %s / %s%s\n' % (strategy, counts.get('critical', '?'), counts.get('warning', '?'),
                                             counts.get('info', '?'),
                                             ('  FAILED: %s' % d.get('msg')) if d.get('failed') else
                                             ' (%s)' % ', '.join(f['id'] for f in d.get('findings') or []))
    bad_profiles = [r for r in profile_rows if not r['ok']]
    report += '\nMIG profiles, NVML vs the catalogue: %d compared, %d differ%s.\n' % (
        len(profile_rows), len(bad_profiles),
        (': ' + '; '.join('%s %s nvml=%s catalog=%s' % (r['gpu'], r['profile'], r['nvml'], r['catalog'])
                          for r in bad_profiles)) if bad_profiles else '')
    with open(os.path.join(a.out, 'report.md'), 'w') as f:
        f.write(report)
    _write(a.out, 'report.json', {'rows': rows, 'doctor': doctor, 'probe': probe, 'state_changes': changes,
                                  'profiles': profile_rows, 'python': PYTHON, 'python_version': sys.version})
    shutil.rmtree(tmp, ignore_errors=True)
    sys.stdout.write(report)
    return 0 if all(r['ok'] for r in rows) and not changes else 1


if __name__ == '__main__':
    sys.exit(main())
