package lease_test

import (
	"flag"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	// The engine's parallel tests spend most of their time waiting out
	// lease seconds, not computing: unless -test.parallel was given, let
	// more of them wait at once than there are processors (8, as in the
	// root package).
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", "8")
	}
	os.Exit(m.Run())
}
