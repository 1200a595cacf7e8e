package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Pods of a StatefulSet, configured by the environment only, each with
// its ordinal in RANDFLAKE_ORDINAL, get disjoint node ranges of
// --nodes-per-pod node IDs, which their lease metrics show and their IDs
// carry; together they issue no duplicate.
func TestServeStatefulSetPods(t *testing.T) {
	t.Parallel()
	const pods, perPod = 4, 8
	base := append(slicesClone(secretEnv), "RANDFLAKE_NODE_SOURCE=statefulset", "RANDFLAKE_NODES_PER_POD="+strconv.Itoa(perPod))
	procs := make([]*serveProcess, pods)
	for k := range pods {
		procs[k] = startServeEnv(t, append(slicesClone(base), "RANDFLAKE_ORDINAL=web-"+strconv.Itoa(k)))
	}
	var all []string
	for k, p := range procs {
		mfs := scrape(t, p.url)
		first, ok1 := metricValue(mfs, "randflake_lease_first_node")
		last, ok2 := metricValue(mfs, "randflake_lease_last_node")
		if !ok1 || !ok2 || first != float64(k*perPod) || last != float64(k*perPod+perPod-1) {
			t.Errorf("pod %d: lease metrics say nodes %v-%v (present: %v, %v), want %d-%d", k, first, last, ok1, ok2, k*perPod, k*perPod+perPod-1)
		}
		if !strings.Contains(p.logs.String(), "nodes=\"statefulset node IDs "+strconv.Itoa(k*perPod)+"-"+strconv.Itoa(k*perPod+perPod-1)) {
			t.Errorf("pod %d: the serving line does not name its nodes: %s", k, p.logs.String())
		}
		var ids []string
		for range 5 {
			ids = append(ids, fetch(t, p, 2000)...)
		}
		for node := range nodesOf(t, secretEnv, ids[:200]) {
			if node < int64(k*perPod) || node > int64(k*perPod+perPod-1) {
				t.Errorf("pod %d issued an ID on node %d, outside %d-%d", k, node, k*perPod, k*perPod+perPod-1)
			}
		}
		all = append(all, ids...)
	}
	checkUnique(t, all, pods*5*2000, nil)
}

// The last pod that fits at the default 1,024 node IDs per pod, 127, gets
// the top of the node IDs; the flag wins over the variable.
func TestServeStatefulSetLastPod(t *testing.T) {
	t.Parallel()
	p := startServeEnv(t, append(slicesClone(secretEnv), "RANDFLAKE_ORDINAL=127", "RANDFLAKE_NODE_SOURCE=etcd"), "--node-source", "statefulset")
	mfs := scrape(t, p.url)
	first, _ := metricValue(mfs, "randflake_lease_first_node")
	last, _ := metricValue(mfs, "randflake_lease_last_node")
	if first != 130048 || last != 131071 {
		t.Errorf("pod 127: nodes %v-%v, want 130048-131071", first, last)
	}
}

// ordinalRule is the rule the ordinal's errors state.
const ordinalRule = "want a pod name ending in -ORDINAL, or ORDINAL alone, where ORDINAL is 0 or a decimal number without a sign or a leading zero, and the name before the dash ends in a letter or digit"

// A pod without a usable ordinal, with one past the node IDs, or without
// the fleet's secret does not start, and says why.
func TestServeStatefulSetRefused(t *testing.T) {
	t.Parallel()
	noSecret := []string{"RANDFLAKE_SECRET=", "RANDFLAKE_SECRET_FILE=", "RANDFLAKE_STATE_DIR=" + t.TempDir(), "RANDFLAKE_ORDINAL=0"}
	cases := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"unparsable ordinal", []string{"RANDFLAKE_ORDINAL=web-x"}, nil,
			`--node-source statefulset: randflake: StatefulSet ordinal from $RANDFLAKE_ORDINAL \"web-x\": want a pod name ending in -ORDINAL, or ORDINAL alone, where ORDINAL is 0 or a decimal number without a sign or a leading zero, and the name before the dash ends in a letter or digit (the ordinal comes from $RANDFLAKE_ORDINAL, else from a host name ending in -ORDINAL; at 1024 node IDs per pod, ordinals 0 to 127 fit)`},
		{"negative ordinal", []string{"RANDFLAKE_ORDINAL=-1"}, nil, `\"-1\": ` + ordinalRule},
		{"leading zero", []string{"RANDFLAKE_ORDINAL=01"}, nil, `\"01\": ` + ordinalRule},
		{"pod name with a leading zero", []string{"RANDFLAKE_ORDINAL=web-01"}, nil, `\"web-01\": ` + ordinalRule},
		{"pod name with a sign", []string{"RANDFLAKE_ORDINAL=web--1"}, nil, `\"web--1\": ` + ordinalRule},
		{"ordinal past the node IDs", []string{"RANDFLAKE_ORDINAL=web-128"}, nil,
			`--node-source statefulset: randflake: StatefulSet ordinal 128 x 1024 node IDs per pod exceeds the 131072 node IDs`},
		{"ordinal past the node IDs at 8192 per pod", []string{"RANDFLAKE_ORDINAL=16"}, []string{"--nodes-per-pod", "8192"},
			`StatefulSet ordinal 16 x 8192 node IDs per pod exceeds the 131072 node IDs (the ordinal comes from $RANDFLAKE_ORDINAL, else from a host name ending in -ORDINAL; at 8192 node IDs per pod, ordinals 0 to 15 fit)`},
		{"no secret", noSecret, nil,
			`--node-source statefulset needs the fleet's shared secret: --secret-file, $RANDFLAKE_SECRET_FILE or $RANDFLAKE_SECRET`},
	}
	// Without RANDFLAKE_ORDINAL the host name tells; this one has none
	// unless it ends in -NUMBER.
	if h, _ := os.Hostname(); !regexp.MustCompile(`-[0-9]+$`).MatchString(h) {
		cases = append(cases, struct {
			name string
			env  []string
			args []string
			want string
		}{"no ordinal", []string{"RANDFLAKE_ORDINAL="}, nil,
			`StatefulSet ordinal from host name \"` + h + `\": ` + ordinalRule})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := append(slicesClone(secretEnv), c.env...)
			args := append([]string{"serve", "--listen", "127.0.0.1:0", "--node-source", "statefulset"}, c.args...)
			r := runBinaryTimeout(t, 30*time.Second, env, args...)
			// A missing secret is a command-line mistake (status 2); a
			// bad ordinal is the pod's environment (status 1).
			code := 1
			if c.name == "no secret" {
				code = 2
			}
			if r.code != code || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, "msg=serving") {
				t.Errorf("exit status %d, stderr:\n%s\nwant status %d and %s", r.code, r.stderr, code, c.want)
			}
			if strings.Contains(r.stderr, testSecretHex) {
				t.Errorf("the secret was printed")
			}
		})
	}
}
