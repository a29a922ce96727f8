// gpuops lab vSphere simulator: a small vcsim front end over the govmomi v0.52.0
// simulator library (module proxy) and the GPU extension in gpu.go. Built by lab/go/build.sh vcsim (via
// lab/vcsim/build.sh); started by lab/vcsim/start.sh.
package main

import (
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/simulator/esx"
	"github.com/vmware/govmomi/simulator/vpx"
)

type stateFile struct {
	Name       string `json:"name"`
	Model      string `json:"model"`
	URL        string `json:"url"`
	Host       string `json:"host"`
	Port       int    `json:"port"`
	Username   string `json:"username"`
	Password   string `json:"password"`
	Pid        int    `json:"pid"`
	APIVersion string `json:"api_version"`
	GPUConfig  string `json:"gpu_config"`
}

func main() {
	log.SetFlags(log.LstdFlags)
	addr := flag.String("l", "127.0.0.1:0", "listen address (host:port, port 0 picks a free port); must be loopback")
	modelName := flag.String("model", "vcenter", "inventory model: vcenter or esx")
	name := flag.String("name", "", "instance name (default: the model name); used for the state file")
	user := flag.String("username", "user", "login user name")
	pass := flag.String("password", "pass", "login password")
	apiVersion := flag.String("api-version", "7.0.3.0", "API version announced in ServiceContent.about and vimServiceVersions.xml")
	hosts := flag.Int("hosts", 3, "vcenter model: hosts in the cluster")
	vms := flag.Int("vms", 2, "vcenter model: VMs per host/cluster resource pool (vcsim Machine count)")
	poweredOn := flag.Bool("powered-on", false, "leave VMs powered on (default: powered off)")
	gpus := flag.String("gpus", "", "GPU layout JSON file (default: built-in 2x T4, 4x A100, 1x V100 per host)")
	stateDir := flag.String("state-dir", "", "directory for <name>.json (URL, credentials, pid); empty: do not write")
	urlFile := flag.String("url-file", "", "also write the SDK URL to this file")
	noTLS := flag.Bool("no-tls", false, "serve plain http instead of https (self-signed)")
	withoutFixes := flag.Bool("without-fixes", false, "leave govmomi v0.52.0's Fetch and bootOptions bugs unfixed (to show them)")
	flag.Parse()
	withFixes = !*withoutFixes

	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		log.Fatalf("bad -l %q: %v", *addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		log.Fatalf("refusing to listen on %q: only loopback addresses are allowed", host)
	}
	if *name == "" {
		*name = *modelName
	}

	gpuJSON := []byte(DefaultGPUConfig)
	if *gpus != "" {
		if gpuJSON, err = os.ReadFile(*gpus); err != nil {
			log.Fatal(err)
		}
	}
	gpuCfg, err := ParseGPUConfig(gpuJSON)
	if err != nil {
		log.Fatalf("%s: %v", *gpus, err)
	}

	// The API version has to be set on the templates before the model copies them.
	esx.ServiceContent.About.ApiVersion = *apiVersion
	vpx.ServiceContent.About.ApiVersion = *apiVersion

	var model *simulator.Model
	switch *modelName {
	case "vcenter", "vpx":
		model = simulator.VPX()
		model.Datacenter = 1
		model.Cluster = 1
		model.ClusterHost = *hosts
		model.Host = 0
		model.Machine = *vms
	case "esx":
		model = simulator.ESX()
		model.Machine = *vms
	default:
		log.Fatalf("unknown -model %q (vcenter|esx)", *modelName)
	}
	model.Autostart = *poweredOn
	model.ServiceContent.About.ApiVersion = *apiVersion

	if err := model.Create(); err != nil {
		log.Fatal(err)
	}
	if err := ConfigureGPUs(model.Map(), gpuCfg); err != nil {
		log.Fatal(err)
	}

	model.Service.Listen = &url.URL{Host: *addr, User: url.UserPassword(*user, *pass)}
	if !*noTLS {
		model.Service.TLS = new(tls.Config)
	}
	s := model.Service.NewServer()

	u := *s.URL
	u.User = nil
	port := 0
	if _, p, err := net.SplitHostPort(u.Host); err == nil {
		fmt.Sscanf(p, "%d", &port)
	}
	st := stateFile{Name: *name, Model: *modelName, URL: u.String(), Host: u.Hostname(), Port: port,
		Username: *user, Password: *pass, Pid: os.Getpid(), APIVersion: *apiVersion, GPUConfig: *gpus}

	fmt.Printf("VCSIM_URL=%s\nVCSIM_USERNAME=%s\nVCSIM_PASSWORD=%s\nVCSIM_PID=%d\n", st.URL, *user, *pass, st.Pid)
	os.Stdout.Sync()

	var stateFileName string
	if *stateDir != "" {
		if err := os.MkdirAll(*stateDir, 0o755); err != nil {
			log.Fatal(err)
		}
		stateFileName = filepath.Join(*stateDir, *name+".json")
		b, _ := json.MarshalIndent(st, "", "  ")
		tmp := stateFileName + ".tmp"
		if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
			log.Fatal(err)
		}
		if err := os.Rename(tmp, stateFileName); err != nil {
			log.Fatal(err)
		}
	}
	if *urlFile != "" {
		if err := os.WriteFile(*urlFile, []byte(st.URL+"\n"), 0o600); err != nil {
			log.Fatal(err)
		}
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	log.Printf("shutting down")
	if stateFileName != "" {
		// only remove the state file if it is still ours
		if b, err := os.ReadFile(stateFileName); err == nil {
			var cur stateFile
			if json.Unmarshal(b, &cur) == nil && cur.Pid == os.Getpid() {
				os.Remove(stateFileName)
			}
		}
	}
	s.Close()
	model.Remove()
}
