"""One check the scenarios' testinfra files share (each imports it from molecule/_shared)."""
import os

import yaml


def assert_checks_name_the_scenarios_hosts(host, test_file, checked_hosts):
    """Checks of a scenario's test file run on one host each and return at once on the others: were a host renamed or
    dropped from molecule.yml, they would all return and pass having checked nothing. The hosts they name
    (``checked_hosts``) must be exactly the scenario's platforms, and ``host`` one of them."""
    path = os.path.join(os.path.dirname(os.path.abspath(test_file)), os.pardir, "molecule.yml")
    with open(path) as f:
        names = sorted(p["name"] for p in yaml.safe_load(f)["platforms"])
    assert names == sorted(checked_hosts), names
    assert host.backend.get_hostname() in names
