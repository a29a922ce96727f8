// grafana-dashboard-check: the lab's oracle for the collection's Grafana dashboard model (our code) over Grafana's
// own dashboard schema types, github.com/grafana/grafana-foundation-sdk/go v0.0.22 (package dashboard, generated from
// Grafana's schemas, with every panel and data query type registered).
//
// `grafana-dashboard-check --schema-version` prints the schema version of the SDK's dashboard (what its types
// describe) and exits. Otherwise it reads one dashboard JSON model on stdin. Exit 1 with the SDK's errors when its strict decoder refuses it (a field
// the schema does not know, a required one missing, a wrong type, in the dashboard, its panels, their options and
// queries, its variables) or when Validate fails; else exit 0 and print the model as the SDK writes it back, for the
// caller to compare with what it sent.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--schema-version" {
		fmt.Println(dashboard.NewDashboard().SchemaVersion)
		return
	}
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	plugins.RegisterDefaultPlugins()
	var strict dashboard.Dashboard
	if err := strict.UnmarshalJSONStrict(raw); failed(err) {
		fmt.Fprintln(os.Stderr, "strict:", err)
		os.Exit(1)
	}
	// The round trip goes through the ordinary decoder: v0.0.22's strict one returns a nested decoder's empty error
	// list as an error (a typed nil) and so leaves out what decoded well (panels, their queries and options). It has
	// reported every real error above.
	var d dashboard.Dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		fmt.Fprintln(os.Stderr, "decode:", err)
		os.Exit(1)
	}
	if err := d.Validate(); failed(err) {
		fmt.Fprintln(os.Stderr, "validate:", err)
		os.Exit(1)
	}
	out, err := json.Marshal(&d)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	_, _ = os.Stdout.Write(out)
}

// failed: the SDK returns its error list (cog.BuildErrors) typed, also when it is empty.
func failed(err error) bool {
	var list cog.BuildErrors
	if errors.As(err, &list) {
		return len(list) > 0
	}
	return err != nil
}
