"""kubernetes-validate sits beside the lab venv's packages (.venv/kv), not on its import path.

kubernetes.dynamic imports kubernetes_validate whenever it can, so with the package importable every module run that
imports the kubernetes client paid for it in the lab and not on users' controllers. These checks hold the layout
that lab/bin/bootstrap.sh builds: the client alone does not load it, the lab's validator and the emulator's pruning
find it where bootstrap put it.
"""
import os
import subprocess

from conftest import ROOT

VENV_PY = os.path.join(ROOT, '.venv', 'bin', 'python')
KV = os.path.join(os.path.realpath(os.path.join(ROOT, '.venv')), 'kv')


def py(code):
    proc = subprocess.run([VENV_PY, '-c', code], capture_output=True, text=True, cwd=ROOT,
                          env={k: v for k, v in os.environ.items() if k not in ('GPUOPS_KV', 'PYTHONPATH')})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_the_kubernetes_client_does_not_import_kubernetes_validate():
    assert py('import sys, kubernetes, kubernetes.dynamic; print("kubernetes_validate" in sys.modules)') == 'False'
    assert py('import importlib.util; print(importlib.util.find_spec("kubernetes_validate"))') == 'None'


def test_the_lab_validator_loads_kubernetes_validate_from_venv_kv():
    where = py('import sys; sys.path.insert(0, "lab/kube"); import validate; print(validate.kv.__file__, '
               'validate.kv.__version__)')
    path, version = where.split()
    assert os.path.realpath(path).startswith(KV + os.sep), where
    assert version == '1.37.0'


def test_the_emulator_prunes_with_the_schemas_in_venv_kv():
    out = py('import sys; sys.path.insert(0, "lab/kube"); import emulator; p = emulator.Pruner("v1.37.0"); '
             'print(p.dir)')
    assert os.path.realpath(out).startswith(KV + os.sep) and out.endswith('v1.37.0-local'), out
