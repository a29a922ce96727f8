module gpuops.lab/go/prometheus-operator

go 1.26.0

require github.com/prometheus-operator/prometheus-operator v0.85.0
