// Package nvfm is the lab's stand-in for github.com/NVIDIA/go-nvfm, which the Go module proxy does not serve
// (403 "This module version is not available." for v0.1.0 and @latest). It is our code, not upstream's: only the
// names sigs.k8s.io/dra-driver-nvidia-gpu v0.5.0 pkg/fabricmanager/client_nvfm.go uses, and every call answers
// ERROR_LIBRARY_NOT_FOUND, as a node without NVIDIA Fabric Manager does. The GPU kubelet plugin opens Fabric Manager
// only on a node whose driver root shows an NVSwitch fabric; the lab's simulated nodes have none.
package nvfm

// Return is a Fabric Manager status code.
type Return int32

// The status codes the stand-in answers.
const (
	SUCCESS                 Return = 0
	ERROR_LIBRARY_NOT_FOUND Return = -1
)

func (r Return) String() string {
	if r == SUCCESS {
		return "SUCCESS"
	}
	return "ERROR_LIBRARY_NOT_FOUND (lab stand-in for go-nvfm: no Fabric Manager)"
}

// FabricPartitionId names a fabric partition.
type FabricPartitionId uint32

// FabricPartitionGpuInfo is one GPU of a partition.
type FabricPartitionGpuInfo struct {
	PhysicalId          uint32
	Uuid                [80]int8
	PciBusId            [32]int8
	NumNvLinksAvailable uint32
	MaxNumNvLinks       uint32
	NvlinkLineRateMBps  uint32
}

// FabricPartitionInfo is one partition.
type FabricPartitionInfo struct {
	PartitionId uint32
	IsActive    uint32
	NumGpus     uint32
	GpuInfo     [8]FabricPartitionGpuInfo
}

// FabricPartitionList is the partitions Fabric Manager supports.
type FabricPartitionList struct {
	NumPartitions uint32
	PartitionInfo [64]FabricPartitionInfo
}

// Handle is a connection.
type Handle interface {
	Disconnect() Return
	GetSupportedFabricPartitions() (FabricPartitionList, Return)
	ActivateFabricPartition(FabricPartitionId) Return
	DeactivateFabricPartition(FabricPartitionId) Return
}

// Interface is the library.
type Interface interface {
	Init() Return
	Shutdown() Return
	Connect(...ConnectOption) (Handle, Return)
}

// LibraryOption configures New.
type LibraryOption func()

// ConnectOption configures Connect.
type ConnectOption func()

// WithLibraryPath names the library (ignored).
func WithLibraryPath(string) LibraryOption { return func() {} }

// WithUnixSocket connects over a unix socket (ignored).
func WithUnixSocket(string) ConnectOption { return func() {} }

// WithAddress connects over TCP (ignored).
func WithAddress(string) ConnectOption { return func() {} }

// WithTimeoutMs sets the connect timeout (ignored).
func WithTimeoutMs(uint32) ConnectOption { return func() {} }

type none struct{}

// New returns a library that no call succeeds on.
func New(...LibraryOption) Interface { return none{} }

func (none) Init() Return                              { return ERROR_LIBRARY_NOT_FOUND }
func (none) Shutdown() Return                          { return ERROR_LIBRARY_NOT_FOUND }
func (none) Connect(...ConnectOption) (Handle, Return) { return nil, ERROR_LIBRARY_NOT_FOUND }
