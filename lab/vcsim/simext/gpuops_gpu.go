// Project extension to the govmomi 0.24.2 simulator (gpuops lab).
// This file is copied into github.com/vmware/govmomi/simulator by lab/vcsim/build.sh.
// It adds NVIDIA PCI devices to hosts, a working HostPciPassthruSystem per host,
// RebootHost_Task (which activates pending passthrough changes) and the passthrough
// sections of EnvironmentBrowser.QueryConfigTarget.

package simulator

import (
	"crypto/sha1"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

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
	systemID string
	info     []*types.HostPciPassthruInfo // pointers shared with host.Config.PciPassthruInfo
	labels   map[string]string            // pci id -> custom label (dynamic DirectPath)
	now      map[string]bool              // pci id -> passthrough changes apply without a reboot
	pss      *HostPciPassthruSystem
}

var gpuHosts = map[types.ManagedObjectReference]*gpuHostState{}

func i16(v GPUHexInt) int16 { return int16(uint16(v)) }

func esxSystemID(seed string) string {
	s := sha1.Sum([]byte("esx-system-id:" + seed))
	h := fmt.Sprintf("%x", s[:])
	return h[0:8] + "-" + h[8:16] + "-" + h[16:20] + "-" + h[20:32]
}

// ConfigureGPUs installs the GPU layout on every HostSystem in the inventory.
// Call it after Model.Create() and before serving requests.
func ConfigureGPUs(cfg *GPUConfig) error {
	hosts := Map.All("HostSystem")
	sort.Slice(hosts, func(i, j int) bool { return hosts[i].Entity().Name < hosts[j].Entity().Name })
	for _, e := range hosts {
		h := e.(*HostSystem)
		devs, ok := cfg.Hosts[h.Name]
		if !ok {
			devs = cfg.Devices
		}
		if err := configureHostGPUs(h, devs, cfg.BusBase); err != nil {
			return fmt.Errorf("host %s: %v", h.Name, err)
		}
	}
	return nil
}

func configureHostGPUs(h *HostSystem, devs []GPUDevice, busBase GPUHexInt) error {
	if busBase == 0 {
		busBase = 0x3b
	}
	// Hardware is a shallow copy of esx.HostHardwareInfo: give this host its own slice.
	hw := *h.Hardware
	hw.PciDevice = append([]types.HostPciDevice(nil), h.Hardware.PciDevice...)
	h.Hardware = &hw

	uuid := ""
	if h.Hardware.SystemInfo.Uuid != "" {
		uuid = h.Hardware.SystemInfo.Uuid
	}
	st := &gpuHostState{systemID: esxSystemID(h.Self.Value + "/" + uuid + "/" + h.Name), labels: map[string]string{}, now: map[string]bool{}}

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

	cfg := h.Config
	cfg.PciPassthruInfo = nil
	for _, p := range st.info {
		cfg.PciPassthruInfo = append(cfg.PciPassthruInfo, p)
	}

	pss := &HostPciPassthruSystem{host: h, state: st}
	pss.PciPassthruInfo = cfg.PciPassthruInfo
	if h.ConfigManager.PciPassthruSystem != nil && Map.Get(*h.ConfigManager.PciPassthruSystem) == nil &&
		len(Map.All("HostSystem")) == 1 {
		pss.Self = *h.ConfigManager.PciPassthruSystem // standalone ESX: keep "ha-pcipassthrusystem"
	}
	ref := Map.Put(pss).Reference()
	h.ConfigManager.PciPassthruSystem = &ref
	st.pss = pss
	gpuHosts[h.Self] = st
	return nil
}

// HostPciPassthruSystem implements the vSphere managed object of the same name.
type HostPciPassthruSystem struct {
	mo.HostPciPassthruSystem

	host  *HostSystem
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

func (p *HostPciPassthruSystem) publish() {
	list := make([]types.BaseHostPciPassthruInfo, 0, len(p.state.info))
	for _, i := range p.state.info {
		list = append(list, i)
	}
	p.PciPassthruInfo = list
	Map.Update(p.host, []types.PropertyChange{{Name: "config.pciPassthruInfo", Val: list}})
}

// UpdatePassthruConfig enables/disables passthrough. Like ESXi (without applyNow support),
// the change is pending (passthruEnabled) until the host reboots (passthruActive); for a device
// configured with activateNow (vSphere 7+ where the device allows it) and a config with applyNow
// it is active at once.
func (p *HostPciPassthruSystem) UpdatePassthruConfig(ctx *Context, req *types.UpdatePassthruConfig) soap.HasFault {
	body := new(methods.UpdatePassthruConfigBody)
	for i, c := range req.Config {
		cfg := c.GetHostPciPassthruConfig()
		info := p.infoByID(cfg.Id)
		if info == nil {
			body.Fault_ = Fault(fmt.Sprintf("PCI device %q not found", cfg.Id),
				&types.InvalidArgument{InvalidProperty: fmt.Sprintf("config[%d].id", i)})
			return body
		}
		if cfg.PassthruEnabled && !info.PassthruCapable {
			body.Fault_ = Fault(fmt.Sprintf("PCI device %s is not passthrough capable", cfg.Id),
				&types.HostConfigFault{})
			return body
		}
	}
	Map.WithLock(p.host, func() {
		for _, c := range req.Config {
			cfg := c.GetHostPciPassthruConfig()
			info := p.infoByID(cfg.Id)
			info.PassthruEnabled = cfg.PassthruEnabled
			if p.state.now[cfg.Id] && cfg.ApplyNow != nil && *cfg.ApplyNow {
				info.PassthruActive = cfg.PassthruEnabled && info.PassthruCapable
			}
		}
		p.publish()
	})
	body.Res = new(types.UpdatePassthruConfigResponse)
	return body
}

func (p *HostPciPassthruSystem) Refresh(req *types.Refresh) soap.HasFault {
	Map.WithLock(p.host, p.publish)
	return &methods.RefreshBody{Res: new(types.RefreshResponse)}
}

// gpuReboot applies pending passthrough changes, as an ESXi reboot does.
func gpuReboot(h *HostSystem) {
	st := gpuHosts[h.Self]
	now := time.Now()
	h.Runtime.BootTime = &now
	if st == nil {
		return
	}
	for _, i := range st.info {
		i.PassthruActive = i.PassthruEnabled && i.PassthruCapable
	}
	st.pss.publish()
}

// RebootHostTask: ESXi refuses a reboot outside maintenance mode unless force is set.
func (h *HostSystem) RebootHostTask(req *types.RebootHost_Task) soap.HasFault {
	task := CreateTask(h, "rebootHost", func(t *Task) (types.AnyType, types.BaseMethodFault) {
		if !h.Runtime.InMaintenanceMode && !req.Force {
			return nil, &types.InvalidState{}
		}
		gpuReboot(h)
		return nil, nil
	})
	return &methods.RebootHost_TaskBody{Res: &types.RebootHost_TaskResponse{Returnval: task.Run()}}
}

// gpuConfigTarget fills the passthrough sections of a ConfigTarget for one host.
func gpuConfigTarget(h *HostSystem, target *types.ConfigTarget, dynSeen map[string]bool) {
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
