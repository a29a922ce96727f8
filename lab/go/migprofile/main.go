// migprofile: the lab's oracle program for MIG profile names (gpuops lab; our code over go-nvlib's device package).
// stdin: JSON lines {"gi": NVML_GPU_INSTANCE_PROFILE_* value, "ci_slices": n, "mem_mb": profile memory in MiB,
// "total_bytes": device memory} or {"parse": "1g.10gb+me"}; stdout: one JSON line each, {"name": go-nvlib's canonical
// String()} or {"valid": true|false, "error": "..."} (AssertValidMigProfileFormat). No NVML call is made.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

type request struct {
	GI         *int   `json:"gi"`
	CISlices   int    `json:"ci_slices"`
	MemMB      uint64 `json:"mem_mb"`
	TotalBytes uint64 `json:"total_bytes"`
	Parse      string `json:"parse"`
}

var ciProfile = map[int]int{
	1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
	3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, 4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
	6: nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE, 7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
	8: nvml.COMPUTE_INSTANCE_PROFILE_8_SLICE,
}

func main() {
	lib := device.New(nvml.New())
	in := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var r request
		res := map[string]any{}
		if err := json.Unmarshal(in.Bytes(), &r); err != nil {
			res["error"] = err.Error()
		} else if r.GI != nil {
			ci, ok := ciProfile[r.CISlices]
			if !ok {
				res["error"] = fmt.Sprintf("no compute instance profile of %d slices", r.CISlices)
			} else if p, err := lib.NewMigProfile(*r.GI, ci, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, r.MemMB, r.TotalBytes); err != nil {
				res["error"] = err.Error()
			} else {
				res["name"] = p.String()
			}
		} else {
			err := lib.AssertValidMigProfileFormat(r.Parse)
			res["valid"] = err == nil
			if err != nil {
				res["error"] = err.Error()
			}
		}
		if err := out.Encode(res); err != nil {
			os.Exit(1)
		}
	}
}
