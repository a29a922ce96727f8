#!/usr/bin/env bash
# Run molecule for the collection-level scenarios in molecule/<scenario>/ with the lab's shared config.
#   lab/docker/molecule.sh test -s lab_smoke
#   lab/docker/molecule.sh converge -s lab_smoke ; lab/docker/molecule.sh login -s lab_smoke -h NODE
# Uses the repo's .venv, starts the Docker engine if needed (lab/docker/engine.sh up) and loads
# molecule/_shared/config.yml as molecule's base config.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
[ -x "$ROOT/.venv/bin/molecule" ] && export PATH="$ROOT/.venv/bin:$PATH"
"$ROOT/lab/docker/engine.sh" up
exec molecule --base-config "$ROOT/molecule/_shared/config.yml" "$@"
