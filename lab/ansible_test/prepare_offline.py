#!/usr/bin/env python3
"""Make ansible-test of *this* interpreter's environment work without ci-files.testing.ansible.com.

Run with the venv's python:  <venv>/bin/python lab/ansible_test/prepare_offline.py --work-dir build/ansible_test_cache

What ansible-test fetches from outside PyPI (verified by reading ansible_test in the venvs):
  * ansible_test/_util/target/setup/requirements.py  bootstrap():
      https://ci-files.testing.ansible.com/ansible-test/get-pip-<pip_version>.py
      cached as ~/.ansible/test/cache/get_pip_<pip_version with _>.py  (download skipped when the file exists)
    <pip_version> comes from ansible_test._internal.python_requirements.get_venv_packages()
    (2.16: pip 23.1.2 + setuptools 67.7.2 + wheel 0.37.1;  2.21: pip 25.2 only).
Everything else (sanity requirement pins) is installed with pip from the configured index (PyPI).

This script asks the installed ansible-test for its pip version and writes the cache file with a stand-in
built by make_get_pip.py around a pip wheel: pip==<version> downloaded from PyPI with pip (no-deps,
binary only), or, failing that, the pip wheel bundled with this Python's ensurepip.
An existing cache file is kept (upstream script or earlier stand-in) unless --force is given.
Exits non-zero (loudly) if no stand-in could be produced.
"""
from __future__ import annotations

import argparse
import glob
import os
import pathlib
import subprocess
import sys
import types

HERE = pathlib.Path(__file__).resolve().parent


def ansible_test_pip_packages() -> dict[str, str]:
    try:
        from ansible_test._internal.python_requirements import get_venv_packages
    except Exception as ex:  # pragma: no cover - loud failure
        sys.exit(f'ERROR: cannot import ansible_test from {sys.executable}: {ex}')
    py = types.SimpleNamespace(version=f'{sys.version_info[0]}.{sys.version_info[1]}', path=sys.executable)
    return get_venv_packages(py)  # type: ignore[arg-type]


def find_wheel(pip_version: str, work: pathlib.Path) -> pathlib.Path | None:
    wheels = work / 'wheels'
    wheels.mkdir(parents=True, exist_ok=True)
    hits = sorted(wheels.glob(f'pip-{pip_version}-*.whl'))
    if hits:
        return hits[0]
    cmd = [sys.executable, '-m', 'pip', 'download', '--disable-pip-version-check', '-q', '--no-deps',
           '--only-binary', ':all:', '-d', str(wheels), f'pip=={pip_version}']
    print('+ ' + ' '.join(cmd), file=sys.stderr)
    if subprocess.call(cmd) == 0:
        hits = sorted(wheels.glob(f'pip-{pip_version}-*.whl'))
        if hits:
            return hits[0]
    print(f'WARNING: could not download pip=={pip_version}; falling back to the ensurepip wheel', file=sys.stderr)
    try:
        import ensurepip
        bundled = sorted(glob.glob(os.path.join(os.path.dirname(ensurepip.__file__), '_bundled', 'pip-*.whl')))
    except ImportError:
        bundled = []
    return pathlib.Path(bundled[-1]) if bundled else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument('--work-dir', type=pathlib.Path, required=True, help='where downloaded pip wheels are kept')
    ap.add_argument('--force', action='store_true', help='rewrite the cache file even if present')
    a = ap.parse_args()

    pkgs = ansible_test_pip_packages()
    pip_version = pkgs['pip']
    cache = pathlib.Path(os.path.expanduser('~/.ansible/test/cache/get_pip_%s.py' % pip_version.replace('.', '_')))
    print(f'ansible-test bootstrap packages for Python {sys.version_info[0]}.{sys.version_info[1]}: {pkgs}')
    if cache.exists() and not a.force:
        print(f'{cache} already present (kept)')
        return 0
    wheel = find_wheel(pip_version, a.work_dir.resolve())
    if not wheel:
        print(f'ERROR: no pip wheel available to build {cache}; sanity tests cannot bootstrap their venvs', file=sys.stderr)
        return 1
    rc = subprocess.call([sys.executable, str(HERE / 'make_get_pip.py'), '--pip-version', pip_version,
                          '--wheel', str(wheel), '--output', str(cache)])
    if rc or not cache.exists():
        print(f'ERROR: failed to write {cache}', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
