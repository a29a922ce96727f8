#!/usr/bin/env python3
"""make bench: run every benchmark under lab/bench/ and write docs/benchmarks.md.

Benchmarks (each prints a Markdown section and accepts --smoke):
  lab/bench/gpu_probe.py       GPU probe: NVML part for 1/8/16 GPUs, gpu_info vs ping task cost
  lab/bench/node/bench.py      node layer on a lab node container: first converge vs no-op re-converge per role
  lab/bench/cluster/bench.py   cluster layer: Kubernetes API reads/writes per sharing strategy (emulator request log)
  lab/bench/cluster_scale/bench.py  cluster.yml --check over 10/100/1000 GPU nodes: controller CPU per node, API requests
  lab/bench/cluster_real/bench.py   cluster.yml, report.yml, the doctor's cluster play and the upgrade roll's drain on
                               the real API server with 100/1,000 kwok GPU nodes (5,000: make bench-scale)
  lab/bench/fleet/bench.py     check mode over 1/10/50 simulated hosts, forks/pipelining/fact cache/gather subsets
  lab/bench/esxi/bench.py      ESXi passthrough for 1/5/20 VMs: this collection vs the community.vmware chain
  lab/bench/report_usage.py    the report's usage join at 100/1,000/5,000 nodes of 8 GPUs, the metrics render per pool
Any other lab/bench/<name>.py or lab/bench/<name>/bench.py is run after these (files starting with _ are helpers).

Benchmarks never gate CI. `make test` runs `run.py --smoke` (one repetition, small sizes; output to
build/bench/smoke.md, not docs/) only to prove the scripts still work; a failing smoke run fails that step.
  .venv/bin/python lab/bench/run.py [--smoke] [--only node,cluster]
Env: GPUOPS_BENCH_PREFIX (default gpuops-bench) prefixes every container, simulator and emulator name.
"""
import argparse
import datetime
import glob
import json
import os
import platform
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = os.path.join(ROOT, '.venv', 'bin', 'python')
ORDER = ['gpu_probe.py', 'node/bench.py', 'cluster/bench.py', 'cluster_scale/bench.py', 'cluster_real/bench.py',
         'fleet/bench.py', 'esxi/bench.py']

NOT_MEASURED = '''## Real GPU

No machine with an NVIDIA GPU was available for this work (no GPU device was lent to the task that added the check),
so there are no real-GPU numbers on this page - none are estimated. On a GPU node with the driver loaded,
`lab/bin/real-gpu-check.sh` (docs/lab.md, "Check on a real GPU") compares gpu_info with `nvidia-smi` field by
field, runs gpu_doctor and times `nvml_probe.probe()` against the real `libnvidia-ml.so.1` (the probe benchmark's
snippet); it changes nothing on the GPU. Put its `build/real-gpu/report.md` here, with the GPU model and driver.

## What could not be measured here and how to run this on real hardware

| not measured in the lab | why | how to measure it on real hardware |
|---|---|---|
| real GPU / NVML timings | the NVML simulator answers from a JSON file in microseconds; a real driver takes milliseconds per call (more with persistence mode off, when every `nvmlInit` wakes the GPUs) | on a GPU node with the driver loaded: `lab/bin/real-gpu-check.sh` (read-only; gpu_info vs nvidia-smi, the doctor, the probe timing), or `LD_LIBRARY_PATH= NVML_SIM_INVENTORY= .venv/bin/python lab/bench/gpu_probe.py` which measures `nvml_probe.probe()` and gpu_info vs ping against the real `libnvidia-ml.so.1` (unset the simulator variables; the inventory names in the table then do not apply) |
| MIG changes, persistence daemon, MPS on real GPUs | the simulator applies MIG at once (`mig_apply_immediately`); a real A100/H100 needs an idle GPU and a GPU reset, which takes seconds to minutes | run playbooks/node.yml twice against a real node of a MIG pool: `ANSIBLE_STDOUT_CALLBACK=ansible.builtin.json ansible-playbook -i INVENTORY playbooks/node.yml > run1.json` (then run2.json), and group the task times by role with `by_role()` of `lab/bench/node/bench.py` |
| real package downloads, dkms builds, reboots | the node bench installs from a local .deb cache; a container builds no kernel module (no headers for the host kernel) and never reboots | on a fresh machine (VM snapshot reverted per repetition) run the node playbook above with your mirror in `gpuops_mirror.apt` (or none); the first converge then includes downloads (hundreds of MB for the driver), the dkms build (minutes) and the reboot (`nvidia_driver_reboot: true`) |
| a real API server with admission, controllers and etcd | the emulator has no admission webhooks, controllers or etcd latency; request counts are exact, latencies are not | point `K8S_AUTH_KUBECONFIG` at a test cluster and run `lab/bench/cluster/bench.py`'s play (or playbooks/cluster.yml) with the API server's audit log on: count requests per user agent between runs; counts should match this table, wall time will not |
| real vCenter latency | vcsim answers each task at once; vCenter tasks take 0.5-5 s and a power cycle of a real guest much longer | `lab/bench/esxi/bench.py` needs vcsim; on a real vCenter run `lab/bench/esxi/gpuops_module.yml` and `community_chain.yml` with the same inventory variables (bench_vc_host, bench_vc_user, ...) against test VMs and time them; count tasks in vCenter's task list |
| a real fleet over SSH | the fleet bench uses a local connection on one 2-core machine, so module CPU and controller CPU compete; over SSH the modules run on the nodes and the controller pays for connections instead | run `lab/bench/fleet/fleet.yml --check` against your inventory (group gpu_nodes with pool-ts / pool-mig children) with the same settings (forks, pipelining, `ANSIBLE_CACHE_PLUGIN=jsonfile`, gather_subset) and compare |
'''


def scripts():
    found = [os.path.join(ROOT, 'lab', 'bench', s) for s in ORDER]
    extra = sorted(glob.glob(os.path.join(ROOT, 'lab', 'bench', '*.py')))
    extra += sorted(glob.glob(os.path.join(ROOT, 'lab', 'bench', '*', 'bench.py')))
    for s in extra:
        base = os.path.basename(s)
        if s not in found and base != 'run.py' and not base.startswith('_'):
            found.append(s)
    return [s for s in found if os.path.exists(s)]


def out_of(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ''


def machine():
    cpu = '?'
    try:
        with open('/proc/cpuinfo') as f:
            m = re.search(r'^model name\s*:\s*(.+)$', f.read(), re.M)
            cpu = m.group(1) if m else platform.processor()
    except IOError:
        pass
    mem = '?'
    try:
        with open('/proc/meminfo') as f:
            mem = '%.1f GiB' % (int(f.readline().split()[1]) / 1024.0 / 1024.0)
    except (IOError, ValueError):
        pass
    core = out_of([os.path.join(ROOT, '.venv', 'bin', 'ansible'), '--version']).splitlines()
    version = '?'
    with open(os.path.join(ROOT, 'galaxy.yml')) as f:
        m = re.search(r'^version:\s*"?([^"\s]+)', f.read(), re.M)
        version = m.group(1) if m else '?'
    cols = out_of([os.path.join(ROOT, '.venv', 'bin', 'ansible-galaxy'), 'collection', 'list', '--format', 'json'])
    deps = {}
    try:
        for path, items in sorted(json.loads(cols).items()):
            for name, info in sorted(items.items()):
                if name in ('kubernetes.core', 'community.vmware', 'community.docker'):
                    deps.setdefault(name, '%s %s' % (name, info.get('version')))
    except ValueError:
        pass
    deps = [deps[k] for k in sorted(deps)]
    return [
        ('date', datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')),
        ('CPU', '%s, %d cores' % (cpu, os.cpu_count())),
        ('memory', mem),
        ('OS / kernel', platform.platform()),
        ('load average at start (1/5/15 min)', '%.2f / %.2f / %.2f' % os.getloadavg()),
        ('python (controller)', platform.python_version()),
        ('ansible-core', core[0] if core else '?'),
        ('gpuops.k8s_gpu', version),
        ('collections used', ', '.join(deps) or '?'),
        ('docker (lab engine)', out_of(['docker', 'version', '--format', '{{.Server.Version}}']) or 'not running'),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--smoke', action='store_true')
    ap.add_argument('--only', default='', help='comma-separated benchmark names (gpu_probe, node, cluster, fleet, esxi)')
    ap.add_argument('--jobs', type=int, default=1, help='benchmarks run at once in smoke mode (the full run: one)')
    args = ap.parse_args()
    only = [x for x in args.only.split(',') if x]
    head_rows = machine()
    os.makedirs(os.path.join(ROOT, 'build', 'bench'), exist_ok=True)
    sections, failed, timings = [], [], []
    todo = []
    for script in scripts():
        name = os.path.basename(os.path.dirname(script)) if script.endswith('bench.py') else os.path.basename(script)[:-3]
        if not only or name in only:
            todo.append((name, script))
    # the full run measures one benchmark at a time; the smoke run (a functional check inside make test) runs --jobs
    # at once (default one: inside make test every lane already competes for the 2 cores, and more processes at once
    # cost more CPU in all, docs/lab.md)
    jobs = max(1, args.jobs if args.smoke else 1)
    t_start = time.monotonic()
    running = []
    results = {}
    while todo or running:
        while todo and len(running) < jobs:
            name, script = todo.pop(0)
            cmd = [PY, script] + (['--smoke'] if args.smoke else [])
            print('== %s' % ' '.join(cmd), flush=True)
            out = open(os.path.join(ROOT, 'build', 'bench', name + ('.smoke' if args.smoke else '') + '.out'), 'w+')
            # progress on stderr passes through
            running.append((name, script, subprocess.Popen(cmd, cwd=ROOT, stdout=out, text=True), out, time.monotonic()))
        time.sleep(0.2)
        for item in list(running):
            name, script, proc, out, t0 = item
            if proc.poll() is None:
                continue
            running.remove(item)
            out.seek(0)
            results[script] = (name, proc.returncode, out.read(), time.monotonic() - t0)
            out.close()
            print('   %s: %.0f s%s' % (name, results[script][3], '' if proc.returncode == 0 else ' FAILED'), flush=True)
    for script in scripts():
        if script not in results:
            continue
        name, rc, stdout, secs = results[script]
        timings.append((name, secs))
        if rc != 0:
            failed.append(script)
            sys.stderr.write(stdout)
            continue
        sections.append(stdout.strip())
    timings.append(('total', time.monotonic() - t_start))
    head = ['# Benchmarks', '',
            'Generated by `make bench` (`lab/bench/run.py%s`). Everything runs in the lab (docs/lab.md): simulated '
            'GPUs, vSphere and Kubernetes API, Docker node containers. Figures are medians with their spread '
            '(min-max) and the number of repetitions; comparisons are ratios measured side by side in the same '
            'run. This machine was shared with other jobs while it ran (see the load average), so the spread is '
            'wide; re-run `make bench` on a quiet machine for tighter figures.'
            % (' --smoke' if args.smoke else ''), '',
            '| machine | value |', '|---|---|']
    head += ['| %s | %s |' % kv for kv in head_rows]
    head += ['| load average at end | %.2f / %.2f / %.2f |' % os.getloadavg(),
             '| benchmark wall time | %s |' % ', '.join('%s %.0f s' % t for t in timings), '']
    text = '\n'.join(head) + '\n' + '\n\n'.join(sections) + '\n\n' + NOT_MEASURED
    target = os.path.join(ROOT, 'build', 'bench', 'smoke.md') if args.smoke else os.path.join(ROOT, 'docs', 'benchmarks.md')
    if only and not args.smoke:
        target = os.path.join(ROOT, 'build', 'bench', 'partial.md')
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, 'w') as f:
        f.write(text)
    print('wrote %s (%s)' % (os.path.relpath(target, ROOT), ', '.join('%s %.0f s' % t for t in timings)))
    if failed:
        print('benchmarks failed: %s' % ', '.join(failed))
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
