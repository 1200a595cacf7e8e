package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/randflake/randflake"
)

// version is the release this binary is, set by release builds with
// -ldflags "-X main.version=v0.2.0". When set it wins over the module
// version of the build information, which is "(devel)" or a
// pseudo-version for a build in a working tree.
var version string

const versionUsage = `version

Prints the version on the first line ("randflake v0.2.0"), then the module
and its version, the VCS revision and time (and whether the working tree
was modified), the Go version and the cipher kernel in use. --version is
the same.`

// versionCmd is randflake version: what this binary is.
type versionCmd struct{ noFlags }

func (c *versionCmd) run(e *env, args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	bi, _ := debug.ReadBuildInfo()
	writeVersion(e.stdout, version, bi)
	return nil
}

// writeVersion prints the version report of a binary stamped with
// stamped (main.version) and built as bi, which may be nil.
func writeVersion(w io.Writer, stamped string, bi *debug.BuildInfo) {
	if bi == nil {
		bi = new(debug.BuildInfo)
	}
	v := stamped
	if v == "" {
		v = bi.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	fmt.Fprintf(w, "randflake %s\n", v)
	if bi.Main.Path != "" {
		fmt.Fprintf(w, "module    %s %s\n", bi.Main.Path, orUnknown(bi.Main.Version))
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		fmt.Fprintf(w, "revision  %s", rev)
		if t := settings["vcs.time"]; t != "" {
			fmt.Fprintf(w, " %s", t)
		}
		if settings["vcs.modified"] == "true" {
			fmt.Fprint(w, " (modified)")
		}
		fmt.Fprintln(w)
	} else if rev := pseudoRevision(bi.Main.Version); rev != "" {
		fmt.Fprintf(w, "revision  %s (the commit prefix in the module's pseudo-version; the build recorded no VCS information)\n", rev)
	} else {
		fmt.Fprintln(w, "revision  unknown (the build recorded no VCS information: built outside a VCS checkout, with -buildvcs=false, or by go run or go test)")
	}
	gov := bi.GoVersion
	if gov == "" {
		gov = runtime.Version()
	}
	fmt.Fprintf(w, "go        %s %s/%s\n", gov, runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "kernel    %s", randflake.Kernel())
	if randflake.KernelOverrideError() != nil {
		fmt.Fprint(w, " ($RANDFLAKE_KERNEL not honoured)")
	}
	fmt.Fprintln(w)
}

// pseudoRevision returns the commit prefix of a pseudo-version
// (v0.0.0-20260801120000-0123456789ab, or with a +incompatible or
// pre-release before it), or "" if v is not one.
func pseudoRevision(v string) string {
	v = strings.TrimSuffix(v, "+incompatible")
	i := strings.LastIndexByte(v, '-')
	if i < 0 {
		return ""
	}
	rev, rest := v[i+1:], v[:i]
	if len(rev) != 12 || strings.Trim(rev, "0123456789abcdef") != "" {
		return ""
	}
	// The timestamp before it: 14 digits after '-' or '.'.
	j := max(strings.LastIndexByte(rest, '-'), strings.LastIndexByte(rest, '.'))
	if ts := rest[j+1:]; j < 0 || len(ts) != 14 || strings.Trim(ts, "0123456789") != "" {
		return ""
	}
	return rev
}

// orUnknown returns s, or "unknown" if it is empty.
func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
