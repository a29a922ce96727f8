# gpuops.k8s_gpu - the two commands users need first:
#   make demo   bring up the lab (simulated GPUs, vCenter and cluster) and run playbooks/site.yml on it
#   make test   lint, sanity (ansible-core 2.21 and 2.16), unit tests, lab tests, molecule scenarios
SHELL := /bin/bash
PY := .venv/bin/python

.PHONY: all setup test test-only test-kube demo bench bench-scale lab-down clean help generate
all: help

help:
	@echo "make demo      run site.yml against the lab (everything simulated; see README)"
	@echo "make test      the whole test suite (what CI runs)"
	@echo "make test-only STEPS='units lab'   run some steps of the suite"
	@echo "make test-kube KUBE_VERSION=1.34   the real-control-plane tests at another Kubernetes minor (make test: 1.37; 1.33: strategy dra there)"
	@echo "make bench     run the benchmarks, write docs/benchmarks.md"
	@echo "make bench-scale SCALE_SIZES=100,1000,5000   the cluster layer on the real API server with that many kwok GPU nodes"
	@echo "make lab-down  stop the lab containers/simulators (and dockerd if the lab started it)"
	@echo "make generate  rewrite every file part generated from the homes in plugins/module_utils/_common (then commit)"

setup:
	@bash lab/bin/bootstrap.sh
	@bash lab/bin/collections-path.sh >/dev/null

test: setup
	$(PY) lab/bin/run-tests.py

test-only: setup
	$(PY) lab/bin/run-tests.py $(STEPS)

# Every restatement of a home (kube_versions.py, pins.py, platforms.py, gpu_strategy.py and the renderers' schemas):
# the marked parts gen-from-model.py writes (argument_specs options and choices, module choices, the AWX survey,
# roles' metadata platforms, Kubernetes ranges in the docs, the report's resource table), then the role READMEs and
# docs/variables.md from the argument_specs. lab/tests/tooling (test_gen_from_model, test_gen_variables_doc) fails
# while any is stale.
generate: setup
	$(PY) lab/bin/gen-from-model.py
	$(PY) lab/bin/gen-role-readmes.py
	$(PY) lab/bin/gen-variables-doc.py

# The lab tests that run against the real control plane (lab/kube/real.py), at the minor KUBE_VERSION (1.37 or 1.34;
# make test runs them at 1.37): builds that minor's programs once per machine, then one cluster for these files.
KUBE_VERSION ?= 1.34
# (the fast files; test_playbooks, test_uninstall and the upgrade files, which also use it, need node containers or the
# NVML simulator and run in make test)
KUBE_REAL_TESTS := lab/tests/simulators/test_kube_real.py lab/tests/integration/test_gpu_sharing_stack_real.py \
	lab/tests/integration/test_kube_scheduler_real.py lab/tests/integration/test_gpu_node_drain_real.py \
	lab/tests/integration/test_dra_real.py \
	lab/tests/oracles/test_dra_driver_chart.py lab/tests/integration/test_gpu_sharing_stack_dra_real.py \
	lab/tests/integration/test_faults_real.py \
	lab/tests/integration/test_gpu_node_labels.py lab/tests/integration/test_gpu_share_report.py \
	lab/tests/integration/test_hami_webhook_real.py \
	lab/tests/integration/test_doctor_dra_real.py \
	lab/tests/simulators/test_node_real.py lab/tests/integration/test_node_device_plugin_real.py \
	lab/tests/integration/test_node_dra_real.py lab/tests/integration/test_node_runtime_real.py \
	lab/tests/integration/test_node_daemonset_real.py
# 1.33: only the file that needs that minor (strategy dra on resource.k8s.io v1beta1/v1beta2, its own control plane);
# make test leaves it out (lab/bin/run-tests.py NOT_IN_MAKE_TEST: a third k8s.io/kubernetes build)
ifeq ($(KUBE_VERSION),1.33)
KUBE_REAL_TESTS := lab/tests/integration/test_dra_kube133_real.py
endif
test-kube: setup
	GPUOPS_KUBE_VERSION=$(KUBE_VERSION) $(PY) lab/kube/real.py build
	env -u GPUOPS_KUBE_REAL_STATE GPUOPS_KUBE_VERSION=$(KUBE_VERSION) .venv/bin/pytest -q -p no:xdist \
		--junitxml build/test-results/kube-$(KUBE_VERSION).xml $(KUBE_REAL_TESTS)

demo: setup
	bash lab/bin/demo.sh

# BENCH_ARGS: e.g. BENCH_ARGS='--only node,cluster' (written to build/bench/partial.md) or --smoke
bench: setup
	$(PY) lab/bench/run.py $(BENCH_ARGS)

# make bench runs lab/bench/cluster_real at 100 and 1,000 nodes (22 minutes on the shared 2-core lab machine, load 13-20);
# this target chooses the sizes. 5,000 is opt-in: its cluster.yml converge and re-run cost 85-95 CPU-s each there
# (about 17-19 ms of controller CPU per node) and took 5 and 3.5 minutes at load 7 (docs/benchmarks.md).
# Output: build/bench/cluster_real.md and .json
SCALE_SIZES ?= 100,1000,5000
bench-scale: setup
	$(PY) lab/bench/cluster_real/bench.py --sizes $(SCALE_SIZES) --json build/bench/cluster_real.json

lab-down:
	bash lab/bin/demo.sh down

clean: lab-down
	rm -rf build tests/output lab/.state
