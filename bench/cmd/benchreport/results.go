package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// schemaVersion is written into every results file; the renderer refuses
// files of other versions than it reads (oldestSchema to schemaVersion)
// rather than misreading them. Version 2 added the service suite
// (RunInfo.Service, Benchmark.Command); files of version 1 lack it, and
// Local, and read as not measured there.
const (
	schemaVersion = 2
	oldestSchema  = 1
)

// Results is everything one run of the tool measured on one machine. It is
// saved as bench/results/<machine id>.json, beside the raw benchmark output.
type Results struct {
	Schema     int          `json:"schema"`
	Machine    Machine      `json:"machine"`
	Run        RunInfo      `json:"run"`
	Benchmarks []*Benchmark `json:"benchmarks"`
}

// RunInfo describes how the benchmarks were run.
type RunInfo struct {
	Date      string `json:"date"`       // start, RFC 3339, UTC
	Seconds   int    `json:"seconds"`    // wall time of the whole run
	Count     int    `json:"count"`      // rounds; every benchmark runs once per round
	Benchtime string `json:"benchtime"`  // -test.benchtime
	Short     bool   `json:"short"`      // smoke mode: the figures mean nothing
	Raw       string `json:"raw"`        // raw output, benchstat-compatible, beside the JSON file
	LoadStart string `json:"load_start"` // /proc/loadavg before the run, when known
	LoadEnd   string `json:"load_end"`   // and after it
	Note      string `json:"note,omitempty"`
	// Service is set when the run measured the service suite.
	Service *ServiceInfo `json:"service,omitempty"`
}

// ServiceInfo describes the service that the service suite measured, once
// per run: randflake serve on loopback, its own state directory.
type ServiceInfo struct {
	Serve   string `json:"serve"`    // the command that started it, $PORT for its port
	NodeIDs int    `json:"node_ids"` // node IDs it claimed
}

// Benchmark is one benchmark (one full sub-benchmark name) under one forced
// kernel, with every metric it reported.
type Benchmark struct {
	// Suite is "cipher" (EncryptIDs, DecryptIDs, Sparx64Block in the library),
	// "generator" (Sharded, Local, Generator in the library), "peers" (the
	// bench module's comparison harness) or "service" (randflake serve under
	// the load generator, one sample per run).
	Suite string `json:"suite"`
	// Name is the benchmark name without the "Benchmark" prefix and the
	// GOMAXPROCS suffix, e.g. "EncryptIDs/kernel=avx2/n=1024".
	Name string `json:"name"`
	// Kernel is the value of RANDFLAKE_KERNEL for the run. The cipher
	// benchmarks call every kernel directly (kernel=NAME in Name), whatever
	// this says.
	Kernel  string    `json:"kernel"`
	Procs   int       `json:"procs"` // GOMAXPROCS
	Metrics []*Metric `json:"metrics"`
	// Command is the command that measured a service benchmark, $PORT for
	// the service's port.
	Command string `json:"command,omitempty"`
}

// Metric is one unit of one benchmark: every sample and their summary.
type Metric struct {
	Unit    string    `json:"unit"`
	Median  float64   `json:"median"`
	Lo      float64   `json:"lo"` // 95% confidence interval of the median,
	Hi      float64   `json:"hi"` // or min and max when CI is false
	CI      bool      `json:"ci"` // whether Lo, Hi are a 95% confidence interval
	Samples []float64 `json:"samples"`
}

// Metric returns the metric with the given unit, or nil.
func (b *Benchmark) Metric(unit string) *Metric {
	for _, m := range b.Metrics {
		if m.Unit == unit {
			return m
		}
	}
	return nil
}

// PerID returns the time per ID: the ns/ID metric of batch benchmarks, else
// ns/op (one ID, or one block, per op).
func (b *Benchmark) PerID() *Metric {
	if m := b.Metric("ns/ID"); m != nil {
		return m
	}
	return b.Metric("ns/op")
}

// Find returns the benchmark of the given suite, name and kernel, or nil. An
// empty kernel matches any.
func (r *Results) Find(suite, name, kernel string) *Benchmark {
	for _, b := range r.Benchmarks {
		if b.Suite == suite && b.Name == name && (kernel == "" || b.Kernel == kernel) {
			return b
		}
	}
	return nil
}

// marshal writes r as JSON with one benchmark a line, so that the files stay
// short and diff well.
func (r *Results) marshal() ([]byte, error) {
	var buf bytes.Buffer
	field := func(name string, v any, last bool) error {
		b, err := json.MarshalIndent(v, "  ", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(&buf, "  %q: %s", name, b)
		if !last {
			buf.WriteByte(',')
		}
		buf.WriteByte('\n')
		return nil
	}
	buf.WriteString("{\n")
	if err := field("schema", r.Schema, false); err != nil {
		return nil, err
	}
	if err := field("machine", r.Machine, false); err != nil {
		return nil, err
	}
	if err := field("run", r.Run, false); err != nil {
		return nil, err
	}
	buf.WriteString("  \"benchmarks\": [")
	for i, b := range r.Benchmarks {
		line, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString("\n    ")
		buf.Write(line)
	}
	buf.WriteString("\n  ]\n}\n")
	return buf.Bytes(), nil
}

// Save writes r to dir/<machine id>.json, replacing an earlier run.
func (r *Results) Save(dir string) (string, error) {
	b, err := r.marshal()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, r.Machine.ID+".json")
	return path, os.WriteFile(path, b, 0o644)
}

// LoadResults reads every *.json file in dir, sorted by machine id.
func LoadResults(dir string) ([]*Results, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var all []*Results
	for _, p := range paths {
		r, err := loadResults(p)
		if err != nil {
			return nil, err
		}
		all = append(all, r)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Machine.ID < all[j].Machine.ID })
	for i := 1; i < len(all); i++ {
		if all[i].Machine.ID == all[i-1].Machine.ID {
			return nil, fmt.Errorf("two results files in %s for machine %s", dir, all[i].Machine.ID)
		}
	}
	return all, nil
}

func loadResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Results
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if r.Schema < oldestSchema || r.Schema > schemaVersion {
		return nil, fmt.Errorf("%s: schema %d, this tool reads %d to %d", path, r.Schema, oldestSchema, schemaVersion)
	}
	if r.Machine.ID == "" || strings.ContainsAny(r.Machine.ID, `/\ `) {
		return nil, fmt.Errorf("%s: bad machine id %q", path, r.Machine.ID)
	}
	if want := r.Machine.ID + ".json"; filepath.Base(path) != want {
		return nil, fmt.Errorf("%s: machine %s belongs in %s", path, r.Machine.ID, want)
	}
	for _, bm := range r.Benchmarks {
		if bm.PerID() == nil {
			return nil, fmt.Errorf("%s: %s has no ns/op", path, bm.Name)
		}
	}
	return &r, nil
}
