//go:build chaos

package chaos

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var seedFlag = flag.Int64("chaos.seed", 0, "seed of the chaos schedules (0: $RANDFLAKE_CHAOS_SEED, else time-based)")

var (
	// binary is the randflake command, built once by TestMain.
	binary string
	// seed drives every random choice of the schedules.
	seed int64
)

func TestMain(m *testing.M) {
	flag.Parse()
	seed = *seedFlag
	if v := os.Getenv("RANDFLAKE_CHAOS_SEED"); seed == 0 && v != "" {
		s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || s == 0 {
			fmt.Fprintf(os.Stderr, "RANDFLAKE_CHAOS_SEED=%q: want a non-zero integer\n", v)
			os.Exit(2)
		}
		seed = s
	}
	if seed == 0 {
		seed = time.Now().UnixNano()%1_000_000_000 + 1
	}
	fmt.Printf("chaos: seed %d (replay: cd cmd/randflake && RANDFLAKE_CHAOS_SEED=%d go test -tags chaos -count=1 -v ./internal/chaos/)\n", seed, seed)

	dir, err := os.MkdirTemp("", "randflake-chaos")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "randflake")
	build := exec.Command("go", "build", "-o", binary, "github.com/randflake/randflake/cmd/randflake")
	build.Dir = filepath.Join("..", "..") // the cmd/randflake module
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the randflake command: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needEtcd returns the path of the etcd binary. Without one the test fails
// under CI and is skipped elsewhere.
func needEtcd(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("etcd")
	if err == nil {
		return path
	}
	msg := "the etcd binary is not on PATH: install it (Debian: apt-get install etcd-server) to run the etcd chaos test"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// baseEnv is the environment of the test without the variables that
// would configure the processes it starts behind its back.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "RANDFLAKE_") || strings.HasPrefix(kv, "ETCD_") || strings.HasPrefix(kv, "ETCDCTL_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}
