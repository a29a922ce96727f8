"""lab/bin/cpu-split.py: a process accounting file (dump-acct's text) split into classes, parents found by pid and
start time although pids are reused."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
_spec = importlib.util.spec_from_file_location('cpu_split', os.path.join(ROOT, 'lab', 'bin', 'cpu-split.py'))
cpu_split = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cpu_split)


def line(comm, cpu, elapsed, pid, ppid, start):
    """A dump-acct line (v3): CPU split half user, half system, times in ticks."""
    ticks = cpu * 100 / 2
    return '%-16s|v3|%9.2f|%9.2f|%9.2f|     0|     0|  1000.00|     0.00|%8d|%8d|     |       0|__      |%s' % (
        comm, ticks, ticks, elapsed * 100, pid, ppid, 'Mon Nov 30 18:%02d:%02d 2026' % divmod(start, 60))


TEXT = '\n'.join([
    line('ansible-playboo', 0.02, 1, 101, 100, 10),      # a task worker of 100 (ended first, written first)
    line('python', 0.25, 1, 102, 103, 11),               # a module run: python <- sh <- the worker 103
    line('sh', 0.0, 1, 103, 104, 11),
    line('ansible-playboo', 0.03, 2, 104, 100, 11),
    line('ansible-playboo', 0.8, 30, 100, 50, 0),        # the main process, its parent a pytest worker
    line('python3', 0.15, 1, 200, 201, 20),              # in a container: python3 <- sh <- containerd-shim
    line('sh', 0.01, 1, 201, 202, 20),
    line('containerd-shim', 0.1, 100, 202, 1, 0),
    # pid 101 again, later: another program whose parent 101 is the reused pid, not the old worker
    line('apt-get', 1.0, 5, 300, 101, 40),
    line('bash', 0.01, 20, 101, 1, 39),
    line('kube-apiserver', 5.0, 600, 400, 1, 0),
    line('python', 2.0, 600, 50, 1, 0),
])


def test_classes_and_parents_by_pid_and_start_time():
    recs = cpu_split.link(cpu_split.parse(TEXT))
    assert len(recs) == 12
    kinds = {(r['comm'], r['pid']): cpu_split.kind(r) for r in recs}
    assert kinds[('ansible-playboo', 100)] == 'ansible-playbook main'
    assert kinds[('ansible-playboo', 101)] == kinds[('ansible-playboo', 104)] == 'ansible-playbook worker'
    assert kinds[('python', 102)] == 'module run on the controller'
    assert kinds[('python3', 200)] == 'module run in a container'
    assert kinds[('sh', 201)] == 'other process in a container'
    assert kinds[('apt-get', 300)] == 'other: apt-get'          # its parent is the later bash, not the worker
    assert [r for r in recs if r['pid'] == 300][0]['parent']['comm'] == 'bash'
    assert kinds[('kube-apiserver', 400)] == 'control plane: kube-apiserver'
    assert kinds[('python', 50)] == 'other: python'


def test_split_sums_every_process_once():
    rows, total = cpu_split.split(cpu_split.link(cpu_split.parse(TEXT)))
    assert total == round(sum(r['cpu'] for r in cpu_split.parse(TEXT)), 1) == 9.4
    assert sum(n for _k, n, _c in rows) == 12
    assert rows[0][0] == 'control plane: kube-apiserver' and rows[0][2] == 5.0
    assert ['ansible-playbook main', 1, 0.8] in rows and ['ansible-playbook worker', 2, 0.1] in rows
