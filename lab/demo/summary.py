#!/usr/bin/env python3
"""LAB ONLY (make demo): read an ansible-playbook JSON log (ANSIBLE_STDOUT_CALLBACK=ansible.builtin.json).

    summary.py LOG --print "TASK NAME" [--print ...]   print the msg (a list of lines) of those debug tasks
    summary.py LOG --recap [--strict]                  print the per-host recap; --strict: exit 1 when any host
                                                       (localhost included) changed, failed or was unreachable
"""
import argparse
import json
import sys


def load(path):
    text = open(path).read()
    # the JSON callback prints one document; anything before it (warnings) is skipped
    return json.loads(text[text.index('{'):])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('log')
    ap.add_argument('--print', action='append', default=[], dest='tasks')
    ap.add_argument('--recap', action='store_true')
    ap.add_argument('--strict', action='store_true')
    a = ap.parse_args()
    doc = load(a.log)
    for want in a.tasks:
        for play in doc['plays']:
            for task in play['tasks']:
                if task['task']['name'] != want:
                    continue
                for host, res in sorted(task['hosts'].items()):
                    if res.get('skipped'):
                        continue
                    msg = res.get('msg', '')
                    lines = msg if isinstance(msg, list) else str(msg).splitlines()
                    if want.startswith('Print the findings'):
                        print('--- %s' % host)
                    print('\n'.join(line for line in lines if line.strip()))
    if a.recap:
        bad = []
        for host, s in sorted(doc['stats'].items()):
            print('%-12s ok=%-3d changed=%-3d failed=%-3d unreachable=%-3d skipped=%d'
                  % (host, s.get('ok', 0), s.get('changed', 0), s.get('failures', 0), s.get('unreachable', 0),
                     s.get('skipped', 0)))
            if s.get('changed', 0) or s.get('failures', 0) or s.get('unreachable', 0):
                bad.append(host)
        if a.strict and bad:
            for play in doc['plays']:
                for task in play['tasks']:
                    for host, res in task['hosts'].items():
                        if res.get('changed') or res.get('failed') or res.get('unreachable'):
                            print('  %s: %s: %s' % (host, task['task']['name'],
                                                    'changed' if res.get('changed') else res.get('msg', 'failed')))
            print('not idempotent / not clean: %s' % ', '.join(bad), file=sys.stderr)
            return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
