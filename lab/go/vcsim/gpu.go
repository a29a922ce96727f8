// GPU passthrough extension of the govmomi v0.52.0 simulator (gpuops lab), outside the simulator package: no patch.
// It adds NVIDIA PCI devices to hosts, a working HostPciPassthruSystem per host, RebootHost_Task (which activates
// pending passthrough changes) and the passthrough sections of EnvironmentBrowser.QueryConfigTarget. The last two
// are methods of wrapper objects that the registry's Handler hook (simulator.Registry.Handler, called for every
// method call) hands to the dispatcher in place of the simulator's HostSystem / EnvironmentBrowser.

package main

import (
	"crypto/sha1"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// GPUHexInt accepts a JSON number or a string such as "0x1EB8" / "7864".
type GPUHexInt int64

func (h *GPUHexInt) UnmarshalJSON(b []byte) error {
	s := strings.Trim(strings.TrimSpace(string(b)), `"`)
	if s == "" || s == "null" {
		*h = 0
		return nil
	}
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return fmt.Errorf("bad PCI id %q: %v", s, err)
	}
	*h = GPUHexInt(v)
	return nil
}

// GPUDevice describes one (or Count identical) PCI device(s) of a host.
type GPUDevice struct {
	ID              string     `json:"id,omitempty"` // PCI address "0000:3b:00.0"; auto-assigned when empty
	VendorID        *GPUHexInt `json:"vendorId,omitempty"`
	VendorName      string     `json:"vendorName,omitempty"`
	DeviceID        GPUHexInt  `json:"deviceId"`
	DeviceName      string     `json:"deviceName"`
	SubVendorID     *GPUHexInt `json:"subVendorId,omitempty"`
	SubDeviceID     GPUHexInt  `json:"subDeviceId,omitempty"`
	ClassID         *GPUHexInt `json:"classId,omitempty"`
	Count           int        `json:"count,omitempty"`
	PassthruCapable *bool      `json:"passthruCapable,omitempty"`
	PassthruEnabled bool       `json:"passthruEnabled,omitempty"`
	PassthruActive  bool       `json:"passthruActive,omitempty"`
	CustomLabel     string     `json:"customLabel,omitempty"`
	// ActivateNow: with applyNow, enabling passthrough is active at once, no host reboot (vSphere 7+, a device that allows it)
	ActivateNow bool `json:"activateNow,omitempty"`
}

// GPUConfig is the JSON document given with -gpus.
type GPUConfig struct {
	Devices []GPUDevice            `json:"devices"`         // every host not named in Hosts
	Hosts   map[string][]GPUDevice `json:"hosts,omitempty"` // per host name overrides
	BusBase GPUHexInt              `json:"busBase,omitempty"`
}

// DefaultGPUConfig: every host gets 2x Tesla T4, 4x A100-PCIE-40GB and 1x V100.
const DefaultGPUConfig = `{
  "devices": [
    {"deviceId": "0x1EB8", "deviceName": "TU104GL [Tesla T4]", "subDeviceId": "0x12A2", "count": 2},
    {"deviceId": "0x20F1", "deviceName": "GA100 [A100 PCIe 40GB]", "subDeviceId": "0x145F", "count": 4},
    {"deviceId": "0x1DB4", "deviceName": "GV100GL [Tesla V100 PCIe 16GB]", "subDeviceId": "0x1214", "count": 1}
  ]
}`

func ParseGPUConfig(data []byte) (*GPUConfig, error) {
	cfg := new(GPUConfig)
	if err := json.Unmarshal(data, cfg); err != nil {
		return nil, err
	}
	all := [][]GPUDevice{cfg.Devices}
	for _, d := range cfg.Hosts {
		all = append(all, d)
	}
	for _, list := range all {
		for _, d := range list {
			if d.DeviceID == 0 || d.DeviceName == "" {
				return nil, fmt.Errorf("gpu config: every device needs deviceId and deviceName")
			}
			if d.ID != "" && d.Count > 1 {
				return nil, fmt.Errorf("gpu config: id %s given with count %d", d.ID, d.Count)
			}
		}
	}
	return cfg, nil
}

// gpuHostState is the simulator-side passthrough state of one host.
type gpuHostState struct {
	host     *simulator.HostSystem
	systemID string
	info     []*types.HostPciPassthruInfo // pointers shared with host.Config.PciPassthruInfo
	labels   map[string]string            // pci id -> custom label (dynamic DirectPath)
	now      map[string]bool              // pci id -> passthrough changes apply without a reboot
	pss      *HostPciPassthruSystem
}

var gpuHosts = map[types.ManagedObjectReference]*gpuHostState{}

// withFixes: the two v0.52.0 bugs below are worked around (bootOptionsVM, fetchPC); -without-fixes turns that off to
// show them (lab/tests/simulators/test_vcsim.py)
var withFixes = true

func i16(v GPUHexInt) int16 { return int16(uint16(v)) }

func esxSystemID(seed string) string {
	s := sha1.Sum([]byte("esx-system-id:" + seed))
	h := fmt.Sprintf("%x", s[:])
	return h[0:8] + "-" + h[8:16] + "-" + h[16:20] + "-" + h[20:32]
}

// ConfigureGPUs installs the GPU layout on every HostSystem of the registry and hooks the methods the extension
// implements. Call it after Model.Create() and before serving requests.
func ConfigureGPUs(m *simulator.Registry, cfg *GPUConfig) error {
	hosts := m.All("HostSystem")
	sort.Slice(hosts, func(i, j int) bool { return hosts[i].Entity().Name < hosts[j].Entity().Name })
	for _, e := range hosts {
		h := e.(*simulator.HostSystem)
		devs, ok := cfg.Hosts[h.Name]
		if !ok {
			devs = cfg.Devices
		}
		if err := configureHostGPUs(m, h, devs, cfg.BusBase, len(hosts)); err != nil {
			return fmt.Errorf("host %s: %v", h.Name, err)
		}
	}
	m.Handler = gpuHandler
	return nil
}

func configureHostGPUs(m *simulator.Registry, h *simulator.HostSystem, devs []GPUDevice, busBase GPUHexInt, nhosts int) error {
	if busBase == 0 {
		busBase = 0x3b
	}
	// Hardware may be shared with the template: give this host its own copy and slice.
	hw := *h.Hardware
	hw.PciDevice = append([]types.HostPciDevice(nil), h.Hardware.PciDevice...)
	h.Hardware = &hw

	uuid := ""
	if h.Hardware.SystemInfo.Uuid != "" {
		uuid = h.Hardware.SystemInfo.Uuid
	}
	st := &gpuHostState{host: h, systemID: esxSystemID(h.Self.Value + "/" + uuid + "/" + h.Name),
		labels: map[string]string{}, now: map[string]bool{}}

	seen := map[string]bool{}
	for _, d := range h.Hardware.PciDevice {
		seen[d.Id] = true
		// Existing (non-GPU) devices of the template: listed, not passthrough capable.
		st.info = append(st.info, &types.HostPciPassthruInfo{Id: d.Id, PassthruCapable: false})
	}

	bus := int(busBase)
	for _, d := range devs {
		n := d.Count
		if n <= 0 {
			n = 1
		}
		for i := 0; i < n; i++ {
			id := d.ID
			if id == "" {
				for {
					id = fmt.Sprintf("0000:%02x:00.0", bus&0xff)
					bus++
					if !seen[id] {
						break
					}
				}
			}
			if seen[id] {
				return fmt.Errorf("duplicate PCI id %s", id)
			}
			seen[id] = true
			var b, s, f int
			if _, err := fmt.Sscanf(id, "0000:%x:%x.%x", &b, &s, &f); err != nil {
				return fmt.Errorf("bad PCI id %q (want 0000:BB:SS.F)", id)
			}
			vendor, subVendor, class := GPUHexInt(0x10de), GPUHexInt(0x10de), GPUHexInt(0x0302)
			if d.VendorID != nil {
				vendor = *d.VendorID
			}
			if d.SubVendorID != nil {
				subVendor = *d.SubVendorID
			}
			if d.ClassID != nil {
				class = *d.ClassID
			}
			vname := d.VendorName
			if vname == "" {
				vname = "NVIDIA Corporation"
			}
			hw.PciDevice = append(hw.PciDevice, types.HostPciDevice{
				Id: id, ClassId: i16(class), Bus: byte(b), Slot: byte(s), Function: byte(f),
				VendorId: i16(vendor), SubVendorId: i16(subVendor), VendorName: vname,
				DeviceId: i16(d.DeviceID), SubDeviceId: i16(d.SubDeviceID), DeviceName: d.DeviceName,
			})
			capable := d.PassthruCapable == nil || *d.PassthruCapable
			st.info = append(st.info, &types.HostPciPassthruInfo{
				Id:              id,
				PassthruCapable: capable,
				PassthruEnabled: capable && (d.PassthruEnabled || d.PassthruActive),
				PassthruActive:  capable && d.PassthruActive,
			})
			if d.CustomLabel != "" {
				st.labels[id] = d.CustomLabel
			}
			if d.ActivateNow {
				st.now[id] = true
			}
		}
	}

	// the host's config is its own object per host in v0.52.0; its pciPassthruInfo lists every device
	cfg := h.Config
	cfg.PciPassthruInfo = nil
	for _, p := range st.info {
		cfg.PciPassthruInfo = append(cfg.PciPassthruInfo, p)
	}

	pss := &HostPciPassthruSystem{state: st}
	pss.PciPassthruInfo = cfg.PciPassthruInfo
	if h.ConfigManager.PciPassthruSystem != nil && m.Get(*h.ConfigManager.PciPassthruSystem) == nil && nhosts == 1 {
		pss.Self = *h.ConfigManager.PciPassthruSystem // standalone ESX: keep "ha-pcipassthrusystem"
	}
	ref := m.Put(pss).Reference()
	h.ConfigManager.PciPassthruSystem = &ref
	st.pss = pss
	gpuHosts[h.Self] = st
	return nil
}

// HostPciPassthruSystem implements the vSphere managed object of the same name.
type HostPciPassthruSystem struct {
	mo.HostPciPassthruSystem

	state *gpuHostState
}

func (p *HostPciPassthruSystem) infoByID(id string) *types.HostPciPassthruInfo {
	for _, i := range p.state.info {
		if i.Id == id {
			return i
		}
	}
	return nil
}

func (p *HostPciPassthruSystem) publish(ctx *simulator.Context) {
	list := make([]types.BaseHostPciPassthruInfo, 0, len(p.state.info))
	for _, i := range p.state.info {
		list = append(list, i)
	}
	p.PciPassthruInfo = list
	ctx.Map.Update(ctx, p.state.host, []types.PropertyChange{{Name: "config.pciPassthruInfo", Val: list}})
}

// UpdatePassthruConfig enables/disables passthrough. Like ESXi (without applyNow support),
// the change is pending (passthruEnabled) until the host reboots (passthruActive); for a device
// configured with activateNow (vSphere 7+ where the device allows it) and a config with applyNow
// it is active at once.
func (p *HostPciPassthruSystem) UpdatePassthruConfig(ctx *simulator.Context, req *types.UpdatePassthruConfig) soap.HasFault {
	body := new(methods.UpdatePassthruConfigBody)
	for i, c := range req.Config {
		cfg := c.GetHostPciPassthruConfig()
		info := p.infoByID(cfg.Id)
		if info == nil {
			body.Fault_ = simulator.Fault(fmt.Sprintf("PCI device %q not found", cfg.Id),
				&types.InvalidArgument{InvalidProperty: fmt.Sprintf("config[%d].id", i)})
			return body
		}
		if cfg.PassthruEnabled && !info.PassthruCapable {
			body.Fault_ = simulator.Fault(fmt.Sprintf("PCI device %s is not passthrough capable", cfg.Id),
				&types.HostConfigFault{})
			return body
		}
	}
	ctx.WithLock(p.state.host, func() {
		for _, c := range req.Config {
			cfg := c.GetHostPciPassthruConfig()
			info := p.infoByID(cfg.Id)
			info.PassthruEnabled = cfg.PassthruEnabled
			if p.state.now[cfg.Id] && cfg.ApplyNow != nil && *cfg.ApplyNow {
				info.PassthruActive = cfg.PassthruEnabled && info.PassthruCapable
			}
		}
		p.publish(ctx)
	})
	body.Res = new(types.UpdatePassthruConfigResponse)
	return body
}

func (p *HostPciPassthruSystem) Refresh(ctx *simulator.Context, req *types.Refresh) soap.HasFault {
	ctx.WithLock(p.state.host, func() { p.publish(ctx) })
	return &methods.RefreshBody{Res: new(types.RefreshResponse)}
}

// gpuReboot applies pending passthrough changes, as an ESXi reboot does.
func gpuReboot(ctx *simulator.Context, h *simulator.HostSystem) {
	st := gpuHosts[h.Self]
	now := time.Now()
	h.Runtime.BootTime = &now
	if st == nil {
		return
	}
	for _, i := range st.info {
		i.PassthruActive = i.PassthruEnabled && i.PassthruCapable
	}
	st.pss.publish(ctx)
}

// gpuHost: the HostSystem with RebootHost_Task (the v0.52.0 simulator has none).
type gpuHost struct {
	*simulator.HostSystem
	prev mo.Reference
}

// RebootHostTask: ESXi refuses a reboot outside maintenance mode unless force is set.
func (h *gpuHost) RebootHostTask(ctx *simulator.Context, req *types.RebootHost_Task) soap.HasFault {
	unhook(ctx, h.Self, h.prev)
	host := h.HostSystem
	task := simulator.CreateTask(host, "rebootHost", func(t *simulator.Task) (types.AnyType, types.BaseMethodFault) {
		if !host.Runtime.InMaintenanceMode && !req.Force {
			return nil, &types.InvalidState{}
		}
		ctx.WithLock(host, func() { gpuReboot(ctx, host) })
		return nil, nil
	})
	return &methods.RebootHost_TaskBody{Res: &types.RebootHost_TaskResponse{Returnval: task.Run(ctx)}}
}

// maintenanceHost: EnterMaintenanceMode_Task as on a host whose powered-on VMs cannot move (a standalone host, or a
// cluster without fully automated DRS). govmomi v0.52.0 enters maintenance mode at once whatever runs; vSphere waits
// until no powered-on VM is left. With powered-on VMs on the host the task stays running until its timeout (the
// vSphere API: then a Timedout fault; 0 or less: no timeout) or until it is cancelled (Task.CancelTask: the simulator
// marks it cancelled, the task ends with RequestCanceled); the host does not enter maintenance mode. Without any it
// is the simulator's own task. DRS evacuation is not modelled.
type maintenanceHost struct {
	*simulator.HostSystem
	prev mo.Reference
}

func poweredOnVMs(ctx *simulator.Context, h *simulator.HostSystem) []string {
	var names []string
	for _, ref := range h.Vm {
		if vm, ok := ctx.Map.Get(ref).(*simulator.VirtualMachine); ok &&
			vm.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOn {
			names = append(names, vm.Name)
		}
	}
	return names
}

func (h *maintenanceHost) EnterMaintenanceModeTask(ctx *simulator.Context, req *types.EnterMaintenanceMode_Task) soap.HasFault {
	unhook(ctx, h.Self, h.prev)
	host := h.HostSystem
	if len(poweredOnVMs(ctx, host)) == 0 {
		return host.EnterMaintenanceModeTask(ctx, req)
	}
	start := time.Now()
	limit := time.Duration(req.Timeout) * time.Second
	task := simulator.CreateTask(host, "enterMaintenanceMode", func(t *simulator.Task) (types.AnyType, types.BaseMethodFault) {
		for {
			cancelled := false
			ctx.Map.WithLock(&simulator.Context{}, t, func() { cancelled = t.Info.Cancelled })
			if cancelled {
				return nil, &types.RequestCanceled{}
			}
			if req.Timeout > 0 && time.Since(start) >= limit {
				return nil, &types.Timedout{}
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	return &methods.EnterMaintenanceMode_TaskBody{Res: &types.EnterMaintenanceMode_TaskResponse{Returnval: task.Run(ctx)}}
}

// gpuEnvBrowser: QueryConfigTarget with the passthrough sections.
type gpuEnvBrowser struct {
	*simulator.EnvironmentBrowser
	prev mo.Reference
}

// browserHosts: the hosts of the compute resource (cluster or standalone host) that owns the environment browser.
func browserHosts(ctx *simulator.Context, self types.ManagedObjectReference) []types.ManagedObjectReference {
	for _, kind := range []string{"ClusterComputeResource", "ComputeResource"} {
		for _, e := range ctx.Map.All(kind) {
			var cr *mo.ComputeResource
			switch c := e.(type) {
			case *simulator.ClusterComputeResource:
				cr = &c.ComputeResource
			case *mo.ComputeResource:
				cr = c
			}
			if cr != nil && cr.EnvironmentBrowser != nil && *cr.EnvironmentBrowser == self {
				return cr.Host
			}
		}
	}
	return nil
}

func (b *gpuEnvBrowser) QueryConfigTarget(ctx *simulator.Context, req *types.QueryConfigTarget) soap.HasFault {
	unhook(ctx, b.Self, b.prev)
	res := b.EnvironmentBrowser.QueryConfigTarget(ctx, req)
	body, ok := res.(*methods.QueryConfigTargetBody)
	if !ok || body.Res == nil || body.Res.Returnval == nil {
		return res
	}
	hosts := browserHosts(ctx, b.Self)
	if req.Host != nil {
		hosts = []types.ManagedObjectReference{*req.Host}
	}
	dynSeen := map[string]bool{}
	for _, ref := range hosts {
		if h, ok := ctx.Map.Get(ref).(*simulator.HostSystem); ok {
			gpuConfigTarget(h, body.Res.Returnval, dynSeen)
		}
	}
	return body
}

// gpuHandler is the registry's Handler hook (simulator.Registry.Handler, called before every method call): the
// wrappers in this file answer their methods; every other call goes to the simulator's own object (nil: no
// substitute). In v0.52.0 the dispatcher (Service.call) replaces the substitute by Session.Get(ref) when the call has
// a session, and Session.Get reads the session's own registry first, then the global one; so the wrapper is also put
// into the session's registry and takes itself out again (restoring what was there) as soon as its method runs,
// leaving every other call of the session on the simulator's own object.
func gpuHandler(ctx *simulator.Context, m *simulator.Method) (mo.Reference, types.BaseMethodFault) {
	var prev mo.Reference // the session's own object for m.This (the per-session PropertyCollector), if any
	if ctx.Session != nil {
		prev = ctx.Session.Registry.Get(m.This)
	}
	var w mo.Reference
	switch {
	case m.Name == "RebootHost_Task" && m.This.Type == "HostSystem":
		if h, ok := ctx.Map.Get(m.This).(*simulator.HostSystem); ok {
			w = &gpuHost{h, prev}
		}
	case m.Name == "EnterMaintenanceMode_Task" && m.This.Type == "HostSystem":
		if h, ok := ctx.Map.Get(m.This).(*simulator.HostSystem); ok {
			w = &maintenanceHost{h, prev}
		}
	case m.Name == "QueryConfigTarget" && m.This.Type == "EnvironmentBrowser":
		if b, ok := ctx.Map.Get(m.This).(*simulator.EnvironmentBrowser); ok {
			w = &gpuEnvBrowser{b, prev}
		}
	case m.Name == "ReconfigVM_Task" && m.This.Type == "VirtualMachine" && withFixes:
		if vm, ok := ctx.Map.Get(m.This).(*simulator.VirtualMachine); ok {
			w = &bootOptionsVM{vm, prev}
		}
	case m.Name == "Fetch" && m.This.Type == "PropertyCollector" && withFixes:
		pc := prev
		if ctx.Session != nil && pc == nil {
			pc = ctx.Session.Get(m.This) // creates the session's PropertyCollector, as the dispatcher would
			prev = pc
		}
		if pc == nil {
			pc = ctx.Map.Get(m.This)
		}
		if pc != nil {
			w = &fetchPC{pc, prev}
		}
	}
	if w != nil && ctx.Session != nil {
		ctx.Session.Registry.Put(w)
	}
	return w, nil
}

// unhook takes a wrapper out of the session's registry again, putting back what was there (see gpuHandler).
func unhook(ctx *simulator.Context, ref types.ManagedObjectReference, prev mo.Reference) {
	if ctx.Session == nil {
		return
	}
	if prev != nil {
		ctx.Session.Registry.Put(prev)
	} else {
		ctx.Session.Registry.Remove(ctx, ref)
	}
}

// bootOptionsVM: ReconfigVM_Task merging bootOptions field by field, as vSphere does. govmomi v0.52.0 (like 0.24.2)
// replaces the whole VirtualMachineBootOptions object (simulator/virtual_machine.go configure), dropping for example
// efiSecureBootEnabled when only bootDelay is sent. Limitation: bootDelay/bootRetryDelay are plain ints in the Go
// type, so an explicit 0 cannot be told from "unset" and keeps the current value.
type bootOptionsVM struct {
	*simulator.VirtualMachine
	prev mo.Reference
}

func (v *bootOptionsVM) ReconfigVMTask(ctx *simulator.Context, req *types.ReconfigVM_Task) soap.HasFault {
	unhook(ctx, v.Self, v.prev)
	if spec := req.Spec.BootOptions; spec != nil && v.Config != nil && v.Config.BootOptions != nil {
		merged := *v.Config.BootOptions
		dst := reflect.ValueOf(&merged).Elem()
		src := reflect.ValueOf(spec).Elem()
		for i := 0; i < src.NumField(); i++ {
			if src.Type().Field(i).Anonymous {
				continue // DynamicData
			}
			if f := src.Field(i); !f.IsZero() {
				dst.Field(i).Set(f)
			}
		}
		req.Spec.BootOptions = &merged
	}
	return v.VirtualMachine.ReconfigVMTask(ctx, req)
}

// fetchPC: PropertyCollector.Fetch (what pyVmomi uses to read obj.prop) answering an existing but unset property
// (vm.snapshot, vm.parentVApp) with an empty returnval, as vSphere does. govmomi v0.52.0 answers with the body of
// its internal RetrievePropertiesEx call instead (simulator/property_collector.go Fetch: `return res`), which pyVmomi
// cannot read (AttributeError); 0.24.2 panicked on it and dropped the connection.
type fetchPC struct {
	pc   mo.Reference
	prev mo.Reference
}

func (p *fetchPC) Reference() types.ManagedObjectReference { return p.pc.Reference() }

type fetchResponse struct {
	Returnval types.AnyType `xml:"returnval,omitempty,typeattr"`
}

type fetchBody struct {
	Res    *fetchResponse `xml:"FetchResponse,omitempty"`
	Fault_ *soap.Fault    `xml:"http://schemas.xmlsoap.org/soap/envelope/ Fault,omitempty"`
}

func (b *fetchBody) Fault() *soap.Fault { return b.Fault_ }

// Fetch takes the request as types.AnyType: its type lives in govmomi's internal package.
func (p *fetchPC) Fetch(ctx *simulator.Context, req types.AnyType) soap.HasFault {
	unhook(ctx, p.pc.Reference(), p.prev)
	out := reflect.ValueOf(p.pc).MethodByName("Fetch").Call(
		[]reflect.Value{reflect.ValueOf(ctx), reflect.ValueOf(req)})[0].Interface().(soap.HasFault)
	if _, ok := out.(*methods.RetrievePropertiesExBody); ok && out.Fault() == nil {
		return &fetchBody{Res: &fetchResponse{}}
	}
	return out
}

// gpuConfigTarget fills the passthrough sections of a ConfigTarget for one host.
func gpuConfigTarget(h *simulator.HostSystem, target *types.ConfigTarget, dynSeen map[string]bool) {
	st := gpuHosts[h.Self]
	if st == nil {
		return
	}
	for _, info := range st.info {
		if !info.PassthruActive {
			continue
		}
		var dev *types.HostPciDevice
		for i := range h.Hardware.PciDevice {
			if h.Hardware.PciDevice[i].Id == info.Id {
				dev = &h.Hardware.PciDevice[i]
			}
		}
		if dev == nil {
			continue
		}
		target.PciPassthrough = append(target.PciPassthrough, &types.VirtualMachinePciPassthroughInfo{
			VirtualMachineTargetInfo: types.VirtualMachineTargetInfo{Name: dev.DeviceName},
			PciDevice:                *dev,
			SystemId:                 st.systemID,
		})
		label := st.labels[info.Id]
		key := fmt.Sprintf("%x/%x/%s", uint16(dev.VendorId), uint16(dev.DeviceId), label)
		if dynSeen[key] {
			continue
		}
		dynSeen[key] = true
		target.DynamicPassthrough = append(target.DynamicPassthrough, types.VirtualMachineDynamicPassthroughInfo{
			VirtualMachineTargetInfo: types.VirtualMachineTargetInfo{Name: dev.DeviceName},
			VendorName:               dev.VendorName,
			DeviceName:               dev.DeviceName,
			CustomLabel:              label,
			VendorId:                 int32(uint16(dev.VendorId)),
			DeviceId:                 int32(uint16(dev.DeviceId)),
		})
	}
}

// Get: should a wrapper stay in a session's registry (its method never ran), the PropertyCollector still reads the
// simulator's own object (simulator/property_collector.go getObject honours a Get() mo.Reference method).
func (h *gpuHost) Get() mo.Reference       { return h.HostSystem }
func (b *gpuEnvBrowser) Get() mo.Reference { return b.EnvironmentBrowser }
func (v *bootOptionsVM) Get() mo.Reference { return v.VirtualMachine }
func (p *fetchPC) Get() mo.Reference       { return p.pc }
