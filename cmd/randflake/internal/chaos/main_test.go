//go:build chaos

package chaos

import (
	"errors"
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

// skipWithout skips t when err says binaries the test needs are missing
// (notFound), outside CI; under CI, or for any other error, it fails t.
func skipWithout(t *testing.T, err, notFound error, required bool) {
	t.Helper()
	if errors.Is(err, notFound) && !required {
		t.Skip(err)
	}
	t.Fatal(err)
}

// baseEnv is the environment of the test without the variables that
// would configure the processes it starts behind its back (randflake's,
// etcd's and etcdctl's, libpq's).
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "RANDFLAKE_") || strings.HasPrefix(kv, "ETCD_") || strings.HasPrefix(kv, "ETCDCTL_") || strings.HasPrefix(kv, "PG") {
			continue
		}
		env = append(env, kv)
	}
	return env
}
