#!/usr/bin/env python3
"""The lab's container registry: distribution v3 (the CNCF registry, lab/go set `registry`) serving plain HTTP on
127.0.0.1, filesystem storage in a directory of the caller's. Images the lab builds (OCI archives of lab/node/node.py)
are pushed with the registry's HTTP API (distribution's spec: blob upload POST+PUT, manifest PUT); a node's
containerd reaches it as the collection's mirror (`gpuops_mirror.registry`) through a hosts.toml (node.py up
--mirror HOST=URL), so a pod's image named through the mirror is pulled for real, as on an air-gapped site.

    registry = Registry(directory); registry.start(); registry.push(archive, 'nvcr/nvidia/k8s-device-plugin', 'v0.20.0')
"""
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), 'kube'))
import real  # noqa: E402  pylint: disable=wrong-import-position

CONFIG = '''version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: %(root)s
  delete:
    enabled: true
http:
  addr: 127.0.0.1:%(port)d
  debug:
    addr: ""
'''


class Registry(object):
    def __init__(self, directory):
        self.dir = directory
        self.port = 0
        self.proc = None
        self.url = None

    def start(self, timeout=60):
        binary = os.path.join(real.built_dir('registry'), 'registry')
        os.makedirs(os.path.join(self.dir, 'storage'), exist_ok=True)
        self.port = real.free_port()
        conf = os.path.join(self.dir, 'config.yml')
        with open(conf, 'w') as f:
            f.write(CONFIG % {'root': os.path.join(self.dir, 'storage'), 'port': self.port})
        log = open(os.path.join(self.dir, 'registry.log'), 'ab')
        self.proc = subprocess.Popen([binary, 'serve', conf], stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.url = 'http://127.0.0.1:%d' % self.port
        end = time.time() + timeout
        while time.time() < end:
            if self.proc.poll() is not None:
                raise RuntimeError('registry exited %s: %s' % (self.proc.returncode, self.log_tail()))
            try:
                with urllib.request.urlopen(self.url + '/v2/', timeout=2) as r:
                    if r.status == 200:
                        return self.url
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        raise RuntimeError('registry not serving in %d s: %s' % (timeout, self.log_tail()))

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self):
        try:
            with open(os.path.join(self.dir, 'registry.log')) as f:
                return f.read()[-3000:]
        except OSError:
            return ''

    def _req(self, method, path, data=None, headers=None):
        req = urllib.request.Request(path if path.startswith('http') else self.url + path, data=data,
                                     method=method, headers=headers or {})
        return urllib.request.urlopen(req, timeout=60)

    def push(self, archive, repo, tag):
        """Push the single-manifest OCI archive (node.py oci_archive) as REPO:TAG; returns the manifest digest."""
        with tarfile.open(archive) as tar:
            files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
        index = json.loads(files['index.json'])
        man_desc = index['manifests'][0]
        manifest = files['blobs/sha256/' + man_desc['digest'].split(':', 1)[1]]
        doc = json.loads(manifest)
        for desc in [doc['config']] + doc['layers']:
            digest = desc['digest']
            try:
                self._req('HEAD', '/v2/%s/blobs/%s' % (repo, digest)).close()
                continue
            except urllib.error.HTTPError as exc:
                if exc.code != 404:
                    raise
            with self._req('POST', '/v2/%s/blobs/uploads/' % repo) as r:
                location = r.headers['Location']
            sep = '&' if '?' in location else '?'
            blob = files['blobs/sha256/' + digest.split(':', 1)[1]]
            self._req('PUT', location + sep + 'digest=' + digest, data=blob,
                      headers={'Content-Type': 'application/octet-stream'}).close()
        with self._req('PUT', '/v2/%s/manifests/%s' % (repo, tag), data=manifest,
                       headers={'Content-Type': doc['mediaType']}) as r:
            got = r.headers.get('Docker-Content-Digest')
        want = 'sha256:' + hashlib.sha256(manifest).hexdigest()
        if got != want:
            raise RuntimeError('registry stored manifest %s, pushed %s' % (got, want))
        return want
