// kubelet-registrar: the lab's stand-in for the kubelet's side of the device plugin API (gpuops lab; our code over
// k8s.io/kubelet's pkg/apis/deviceplugin/v1beta1). It serves the Registration service on -socket, and for every
// plugin that registers it dials the plugin's endpoint (in the socket's directory, as the kubelet does), calls
// GetDevicePluginOptions and reads the first ListAndWatch answer. When no plugin has registered for -settle after the
// last one (or -timeout passed), it prints one JSON line per resource and exits:
//   {"resource": ..., "version": ..., "endpoint": ..., "options": {...}, "devices": [{"id": ..., "health": ...}], "error": ...}
// With -allocate N it also asks the plugin to allocate the first N devices of every resource (one container) and
// records the answer's environment (or the error). A resource registered again is reported by its last registration.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type device struct {
	ID     string `json:"id"`
	Health string `json:"health"`
}

type result struct {
	Resource string            `json:"resource"`
	Version  string            `json:"version"`
	Endpoint string            `json:"endpoint"`
	Options  map[string]any    `json:"options,omitempty"`
	Devices  []device          `json:"devices"`
	AllocEnv map[string]string `json:"allocate_env,omitempty"`
	AllocErr string            `json:"allocate_error,omitempty"`
	Error    string            `json:"error,omitempty"`
}

type registrar struct {
	pluginapi.UnimplementedRegistrationServer
	dir      string
	allocate int
	mu       sync.Mutex
	wg       sync.WaitGroup
	last     time.Time
	results  []*result
}

func (r *registrar) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	res := &result{Resource: req.ResourceName, Version: req.Version, Endpoint: req.Endpoint, Devices: []device{}}
	if o := req.Options; o != nil {
		res.Options = map[string]any{"pre_start_required": o.PreStartRequired,
			"get_preferred_allocation_available": o.GetPreferredAllocationAvailable}
	}
	r.mu.Lock()
	// a plugin registers again after it restarts (it does when the kubelet socket is made anew); the kubelet then
	// serves the new endpoint and drops the old one: keep the last registration of each resource
	kept := r.results[:0]
	for _, old := range r.results {
		if old.Resource != res.Resource {
			kept = append(kept, old)
		}
	}
	r.results = append(kept, res)
	r.last = time.Now()
	r.mu.Unlock()
	r.wg.Add(1)
	// the plugin starts serving only after Register returns: talk to it from another goroutine, as the kubelet does
	go func() { defer r.wg.Done(); r.list(res) }()
	return &pluginapi.Empty{}, nil
}

func (r *registrar) list(res *result) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+filepath.Join(r.dir, res.Endpoint),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		res.Error = err.Error()
		return
	}
	defer conn.Close()
	client := pluginapi.NewDevicePluginClient(conn)
	stream, err := client.ListAndWatch(ctx, &pluginapi.Empty{}, grpc.WaitForReady(true))
	if err != nil {
		res.Error = "ListAndWatch: " + err.Error()
		return
	}
	first, err := stream.Recv()
	if err != nil {
		res.Error = "ListAndWatch: " + err.Error()
		return
	}
	for _, d := range first.Devices {
		res.Devices = append(res.Devices, device{ID: d.ID, Health: d.Health})
	}
	sort.Slice(res.Devices, func(i, j int) bool { return res.Devices[i].ID < res.Devices[j].ID })
	if r.allocate > 0 && len(res.Devices) >= r.allocate {
		ids := []string{}
		for _, d := range res.Devices[:r.allocate] {
			ids = append(ids, d.ID)
		}
		resp, err := client.Allocate(ctx, &pluginapi.AllocateRequest{
			ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
		if err != nil {
			res.AllocErr = err.Error()
		} else if len(resp.ContainerResponses) == 1 {
			res.AllocEnv = resp.ContainerResponses[0].Envs
		}
	}
}

func main() {
	socket := flag.String("socket", "", "the kubelet socket to serve Registration on")
	settle := flag.Duration("settle", 2*time.Second, "exit this long after the last registration")
	timeout := flag.Duration("timeout", 30*time.Second, "exit after this long in any case")
	allocate := flag.Int("allocate", 0, "also allocate this many devices of every resource")
	flag.Parse()
	r := &registrar{dir: filepath.Dir(*socket), allocate: *allocate}
	os.Remove(*socket)
	lis, err := net.Listen("unix", *socket)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, r)
	go srv.Serve(lis)
	start := time.Now()
	for {
		time.Sleep(100 * time.Millisecond)
		r.mu.Lock()
		done := (!r.last.IsZero() && time.Since(r.last) > *settle) || time.Since(start) > *timeout
		r.mu.Unlock()
		if done {
			break
		}
	}
	r.wg.Wait()
	srv.Stop()
	out := json.NewEncoder(os.Stdout)
	sort.Slice(r.results, func(i, j int) bool { return r.results[i].Resource < r.results[j].Resource })
	for _, res := range r.results {
		out.Encode(res)
	}
	if len(r.results) == 0 {
		fmt.Fprintln(os.Stderr, "kubelet-registrar: no plugin registered")
		os.Exit(3)
	}
}
