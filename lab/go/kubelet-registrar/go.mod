module gpuops.lab/go/kubelet-registrar

go 1.26.0

require (
	google.golang.org/grpc v1.79.3
	k8s.io/kubelet v0.35.4
)

require (
	golang.org/x/net v0.48.0 // indirect
	golang.org/x/sys v0.39.0 // indirect
	golang.org/x/text v0.32.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20251202230838-ff82c1b0f217 // indirect
	google.golang.org/protobuf v1.36.10 // indirect
)
