# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Speed only: ansible-test units runs every test in its own fork (its ansible_forked plugin, always on). A forked
child that runs Python's cyclic garbage collector walks every object the parent holds (all collected test modules,
ansible, the kubernetes client) and so touches, and copies, the parent's memory pages one by one. Freezing the
parent's objects once collection is over (gc.freeze: they move to a generation the collector never walks) lets each
child share them; what a test creates is still collected. Tests see no difference: nothing here runs in a test."""
import gc


def pytest_collection_finish(session):  # pylint: disable=unused-argument
    gc.collect()
    gc.freeze()
