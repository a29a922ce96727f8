#!/usr/bin/env python3
"""Read-only check of the collection on a REAL NVIDIA GPU node (lab tool; the collection never imports it).

  lab/bin/real-gpu-check.sh [--reps N] [--out DIR]

1. gpu_info (the collection's module, through the ansible CLI on localhost) compared field by field with
   `nvidia-smi -q -x` (name, UUID, PCI bus and device id, memory, driver and CUDA versions, MIG mode, persistence),
   `nvidia-smi --query-gpu=pci.bus_id,compute_cap` (compute capability) and `nvidia-smi nvlink -s` (active NVLinks);
2. gpu_doctor (fail_on=never) and its findings;
3. the NVML probe timing of the probe benchmark (lab/bench/gpu_probe.py's snippet) against the real libnvidia-ml.

Changes nothing on the GPU: only queries (no -pm, -mig, -ac/-lgc, -r); the GPU state that a change would touch
(persistence, MIG current/pending, compute mode, application clocks) is read before and after and must be equal.
Refuses to run against the lab's NVML simulator. Writes report.md and report.json under --out (build/real-gpu).
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VENV_BIN = os.path.join(ROOT, '.venv', 'bin')

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


def _collections_path():
    return _run(['bash', os.path.join(ROOT, 'lab', 'bin', 'collections-path.sh')]).stdout.strip()


def _module(name, args, cpath):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=cpath, ANSIBLE_LOAD_CALLBACK_PLUGINS='1',
               ANSIBLE_STDOUT_CALLBACK='ansible.builtin.json', ANSIBLE_LOCALHOST_WARNING='0',
               ANSIBLE_PYTHON_INTERPRETER=os.path.join(VENV_BIN, 'python'))
    out = _run([os.path.join(VENV_BIN, 'ansible'), 'localhost', '-c', 'local', '-m', name, '-a', json.dumps(args)],
               env=env, check=False).stdout
    return json.loads(out)['plays'][0]['tasks'][0]['hosts']['localhost']


def simulator_in_use():
    if os.environ.get('NVML_SIM_INVENTORY') or os.environ.get('NVML_SIM_STATE'):
        return 'NVML_SIM_* variables are set'
    if os.path.exists('/etc/ld.so.conf.d/00-nvml-sim.conf') or os.path.exists('/etc/nvml-sim/inventory.json'):
        return 'the lab NVML simulator is installed on this machine (/etc/nvml-sim)'
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--reps', type=int, default=50, help='NVML probe repetitions (default 50)')
    ap.add_argument('--out', default=os.path.join(ROOT, 'build', 'real-gpu'))
    a = ap.parse_args(argv)
    why = simulator_in_use()
    if why or not shutil.which('nvidia-smi'):
        print('real-gpu-check: not a real GPU node here: %s' % (why or 'nvidia-smi not found'), file=sys.stderr)
        return 2
    env = dict((k, v) for k, v in os.environ.items() if k not in ('LD_LIBRARY_PATH', 'NVML_SIM_INVENTORY', 'NVML_SIM_STATE'))
    smi_before = parse_smi_xml(_run(['nvidia-smi', '-q', '-x'], env=env).stdout)
    caps_proc = _run(['nvidia-smi', '--query-gpu=pci.bus_id,compute_cap', '--format=csv,noheader'], env=env, check=False)
    caps = parse_compute_caps(caps_proc.stdout) if caps_proc.returncode == 0 else None
    link_proc = _run(['nvidia-smi', 'nvlink', '-s'], env=env, check=False)
    nvlinks = parse_nvlink_status(link_proc.stdout) if link_proc.returncode == 0 else {}
    cpath = _collections_path()
    info = _module('gpuops.k8s_gpu.gpu_info', {'mig_profiles': False}, cpath)
    doctor = _module('gpuops.k8s_gpu.gpu_doctor', {'fail_on': 'never'}, cpath)
    sys.path.insert(0, os.path.join(ROOT, 'lab', 'bench'))
    import gpu_probe  # noqa: E402  the probe benchmark's own snippet
    probe_out = _run([os.path.join(VENV_BIN, 'python'), '-c', gpu_probe.PROBE_SNIPPET, cpath, str(a.reps)], env=env)
    probe = json.loads(probe_out.stdout)
    smi_after = parse_smi_xml(_run(['nvidia-smi', '-q', '-x'], env=env).stdout)
    rows = compare(info, smi_before, caps, nvlinks)
    changes = state_changes(state_of(smi_before), state_of(smi_after))
    report = render(rows, doctor, probe, changes, os.uname()[1])
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, 'report.md'), 'w') as f:
        f.write(report)
    with open(os.path.join(a.out, 'report.json'), 'w') as f:
        json.dump({'rows': rows, 'doctor': doctor, 'probe': probe, 'state_changes': changes}, f, indent=1)
    sys.stdout.write(report)
    return 0 if all(r['ok'] for r in rows) and not changes else 1


if __name__ == '__main__':
    sys.exit(main())
