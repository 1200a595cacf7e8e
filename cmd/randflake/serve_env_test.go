package main

import (
	"flag"
	"slices"
	"strings"
	"testing"
	"time"
)

// Every serve flag takes its RANDFLAKE_* variable unless the command line
// sets it; empty variables count as unset.
func TestServeEnv(t *testing.T) {
	vars := map[string]string{
		"RANDFLAKE_LISTEN":           "0.0.0.0:9999",
		"RANDFLAKE_MAX_COUNT":        "77",
		"RANDFLAKE_NODE_SOURCE":      "statefulset",
		"RANDFLAKE_NODES_PER_POD":    "256",
		"RANDFLAKE_ACCESS_LOG":       "true",
		"RANDFLAKE_SHUTDOWN_TIMEOUT": "3s",
		"RANDFLAKE_IDLE_TIMEOUT":     "",
		"RANDFLAKE_LOG_FORMAT":       "xml", // the command line wins
	}
	c := new(serveCmd)
	fs := newFlags("serve")
	c.flags(fs)
	if _, err := parseFlags(fs, []string{"--log-format", "json"}, false); err != nil {
		t.Fatal(err)
	}
	fromEnv, err := applyEnv(fs, func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"access-log", "listen", "max-count", "node-source", "nodes-per-pod", "shutdown-timeout"}
	if !slices.Equal(fromEnv, want) {
		t.Errorf("set from the environment: %q, want %q", fromEnv, want)
	}
	if c.listen != "0.0.0.0:9999" || c.maxCount != 77 || c.gen.lease.source != "statefulset" ||
		c.gen.lease.nodesPerPod != 256 || !c.accessLog || c.grace != 3*time.Second ||
		c.idleTimeout != 60*time.Second || c.logFormat != "json" {
		t.Errorf("got listen %q, max-count %d, node-source %q, nodes-per-pod %d, access-log %v, shutdown-timeout %v, idle-timeout %v, log-format %q",
			c.listen, c.maxCount, c.gen.lease.source, c.gen.lease.nodesPerPod, c.accessLog, c.grace, c.idleTimeout, c.logFormat)
	}
}

// Every serve flag has its variable in its usage text, and no other
// command reads variables for its flags.
func TestServeEnvUsage(t *testing.T) {
	fs := newFlags("serve")
	new(serveCmd).flags(fs)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		if v := "$" + envVar(f.Name); !strings.Contains(f.Usage, v) {
			t.Errorf("--%s: usage %q does not name %s", f.Name, f.Usage, v)
		}
	})
	if n < 15 {
		t.Errorf("serve has %d flags", n)
	}
	if _, ok := subcommand(new(genCmd)).(envConfigured); ok {
		t.Errorf("gen reads its flags from the environment")
	}
}

func TestMentionsFlag(t *testing.T) {
	for _, c := range []struct {
		msg, name string
		want      bool
	}{
		{"--nodes is for --node-source static", "nodes", true},
		{"--nodes-per-pod 0: want 1 to 131072", "nodes", false},
		{"--nodes-per-pod 0: want 1 to 131072", "nodes-per-pod", true},
		{"with --nodes-per-pod or --nodes", "nodes", true},
		{"nothing", "nodes", false},
	} {
		if got := mentionsFlag(c.msg, c.name); got != c.want {
			t.Errorf("mentionsFlag(%q, %q) = %v", c.msg, c.name, got)
		}
	}
}
