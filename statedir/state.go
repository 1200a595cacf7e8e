package statedir

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/randflake/randflake"
)

// The state file holds what the lease engine (lease.BlockSource)
// keeps in the directory, in a frame of the directory's own:
//
//	randflake statedir 3
//	# comments
//	generation N         the write that made the file (see generation.go)
//	history own|external whose IDs the history is complete for: the
//	                     directory's own secret only, or secrets from
//	                     outside too (someone waited out what came before)
//	fresh                only in a file no fleet marker was written to yet
//	marker BYTES         the engine's fleet marker, as it gave it
//	record FIRST BYTES   the engine's record of the block from node FIRST
//	sum HEX              SHA-256 of every byte before this line
//
// The marker and the records are the engine's, stored verbatim and signed
// by it under a key derived from the directory's secret; the frame only
// says which block each record belongs to. The checksum guards against torn
// writes and careless edits: a file that fails it, or is of an older
// version, is read as holding no history at all (no marker, no records,
// not fresh), which the engine waits out. A file that passes it but holds
// values this package never writes is refused (ErrCorruptState).
const (
	stateHeader = "randflake statedir 3"
	// Older formats, read as unknown history.
	stateHeaderV2 = "randflake statedir 2"
	stateHeaderV1 = "randflake statedir 1"
	maxStateFile  = 1 << 20
	// maxStoredValue bounds a record or the marker.
	maxStoredValue = 4096
)

// ErrCorruptState: the state file passes its checksum but holds values
// this package never writes (a block twice or out of range, a malformed
// line). Someone forged it; nothing is issued until a person looks.
var ErrCorruptState = errors.New("statedir: the state file is well-formed but holds impossible values (forged?)")

// errUnverified: the state file cannot be trusted (no checksum, a wrong
// one, truncated, malformed, an older version); its history is unknown.
var errUnverified = errors.New("the state file fails its check")

// state is the content of the state file.
type state struct {
	generation int64
	// external: the history is complete for secrets from outside the
	// directory too; otherwise only for the directory's own secret.
	external bool
	// fresh: written by Open with a new secret, and no marker since.
	fresh   bool
	marker  []byte           // nil: none
	records map[int64][]byte // by first node ID
}

func (d *Dir) statePath() string { return filepath.Join(d.path, "state") }

// readStateFile returns the state file's bytes, or nil if there is none.
// The file must be a regular file of ours that others cannot write.
func (d *Dir) readStateFile() ([]byte, error) {
	f, err := openOwned(d.statePath(), os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, maxStateFile+1)); err != nil {
		return nil, fmt.Errorf("statedir: reading %s: %w", f.Name(), err)
	}
	if buf.Len() > maxStateFile {
		return nil, fmt.Errorf("statedir: %s is larger than %d bytes: it is not a state file; move it away (the next start waits out the horizon)", f.Name(), maxStateFile)
	}
	return buf.Bytes(), nil
}

// parseState reads a state file. A file that fails its check wraps
// errUnverified; one that passes it but holds impossible values wraps
// ErrCorruptState.
func parseState(data []byte) (state, error) {
	st := state{records: map[int64][]byte{}}
	text := string(data)
	first, _, _ := strings.Cut(text, "\n")
	switch first {
	case stateHeader:
	case stateHeaderV2, stateHeaderV1:
		return st, fmt.Errorf("%w: written by an older version (%s)", errUnverified, first)
	default:
		return st, fmt.Errorf("%w: not a state file (first line %.40q)", errUnverified, first)
	}
	body, sumLine, ok := cutLastLine(text)
	sum := sha256.Sum256([]byte(body))
	if !ok || sumLine != "sum "+hex.EncodeToString(sum[:]) {
		return st, fmt.Errorf("%w: truncated or edited (checksum)", errUnverified)
	}
	seen := map[string]bool{}
	for n, line := range strings.Split(body, "\n")[1:] {
		if line == "" || line[0] == '#' {
			continue
		}
		key, rest, _ := strings.Cut(line, " ")
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: line %d: %s", ErrCorruptState, n+2, fmt.Sprintf(format, args...))
		}
		if key != "record" {
			if seen[key] {
				return st, bad("%q twice", key)
			}
			seen[key] = true
		}
		switch key {
		case "generation":
			g, err := strconv.ParseInt(rest, 10, 64)
			if err != nil || g < 0 || rest != strconv.FormatInt(g, 10) {
				return st, bad("generation %.30q", rest)
			}
			st.generation = g
		case "history":
			if rest != "own" && rest != "external" {
				return st, bad("history %.30q", rest)
			}
			st.external = rest == "external"
		case "fresh":
			if rest != "" {
				return st, bad("malformed %.60q", line)
			}
			st.fresh = true
		case "marker":
			if len(rest) > maxStoredValue {
				return st, bad("a marker of %d bytes", len(rest))
			}
			st.marker = []byte(rest)
		case "record":
			num, raw, ok := strings.Cut(rest, " ")
			f, err := strconv.ParseInt(num, 10, 64)
			switch {
			case !ok || err != nil || num != strconv.FormatInt(f, 10):
				return st, bad("malformed %.60q", line)
			case f < 0 || f > randflake.MaxNode || f%BlockSize != 0:
				return st, bad("no block starts at node %d", f)
			case len(raw) > maxStoredValue:
				return st, bad("a record of %d bytes", len(raw))
			}
			if _, dup := st.records[f]; dup {
				return st, bad("block %d recorded twice", f)
			}
			st.records[f] = []byte(raw)
		default:
			return st, bad("malformed %.60q", line)
		}
	}
	switch {
	case !seen["generation"] || !seen["history"]:
		return st, fmt.Errorf("%w: no generation or history line", ErrCorruptState)
	case st.fresh && (st.marker != nil || len(st.records) > 0):
		return st, fmt.Errorf("%w: a fresh state with history in it", ErrCorruptState)
	}
	return st, nil
}

// cutLastLine splits text ending in "\n" into everything up to and
// including the newline before its last line, and the last line.
func cutLastLine(text string) (body, last string, ok bool) {
	if !strings.HasSuffix(text, "\n") {
		return "", "", false
	}
	i := strings.LastIndexByte(text[:len(text)-1], '\n')
	if i < 0 {
		return "", "", false
	}
	return text[:i+1], text[i+1 : len(text)-1], true
}

// checkStored checks that raw can be stored as the rest of a line, so
// that the file reads back exactly what was written.
func checkStored(what string, raw []byte) error {
	if len(raw) > maxStoredValue || bytes.IndexByte(raw, '\n') >= 0 {
		return fmt.Errorf("statedir: %s of %d bytes cannot be stored: at most %d bytes on one line", what, len(raw), maxStoredValue)
	}
	return nil
}

// formatState writes st in the state file's format. It refuses what
// parseState would refuse, so the file is never rewritten into a state
// that later starts refuse.
func formatState(st state) ([]byte, error) {
	if st.generation < 0 || (st.fresh && (st.marker != nil || len(st.records) > 0)) {
		return nil, fmt.Errorf("statedir: internal error: state generation %d, fresh %v with history", st.generation, st.fresh)
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "%s\n"+
		"# The node-ID claims of this directory's processes. \"marker\" and \"record\"\n"+
		"# lines are the lease engine's, signed under a key derived from the secret:\n"+
		"# \"record FIRST ...\" bounds the seconds of node IDs FIRST to FIRST+%d.\n"+
		"# The last line is a checksum: a file edited by hand fails it, and then\n"+
		"# every block's history counts as unknown and is waited out.\n"+
		"generation %d\nhistory %s\n", stateHeader, BlockSize-1, st.generation, historyName(st.external))
	if st.fresh {
		buf.WriteString("fresh\n")
	}
	if st.marker != nil {
		if err := checkStored("a marker", st.marker); err != nil {
			return nil, err
		}
		fmt.Fprintf(&buf, "marker %s\n", st.marker)
	}
	firsts := make([]int64, 0, len(st.records))
	for f := range st.records {
		firsts = append(firsts, f)
	}
	slices.Sort(firsts)
	for _, f := range firsts {
		raw := st.records[f]
		if f < 0 || f > randflake.MaxNode || f%BlockSize != 0 {
			return nil, fmt.Errorf("statedir: internal error: a record for node %d", f)
		}
		if err := checkStored("a record", raw); err != nil {
			return nil, err
		}
		fmt.Fprintf(&buf, "record %d %s\n", f, raw)
	}
	sum := sha256.Sum256(buf.Bytes())
	fmt.Fprintf(&buf, "sum %s\n", hex.EncodeToString(sum[:]))
	return buf.Bytes(), nil
}

func historyName(external bool) string {
	if external {
		return "external"
	}
	return "own"
}

// writeState replaces the state file durably.
func (d *Dir) writeState(st state) error {
	data, err := formatState(st)
	if err != nil {
		return err
	}
	return writeDurably(d.statePath(), data)
}

// writeFresh writes the state of a directory whose secret was just made:
// no marker, no records, fresh, at the next generation. Any state file
// there was is of another secret's IDs, which cannot collide with the new
// secret's.
func (d *Dir) writeFresh(lock *os.File) error {
	gen, err := readGeneration(lock)
	if err != nil {
		return err
	}
	next := gen + 1
	if data, err := d.readStateFile(); err == nil {
		if st, err := parseState(data); err == nil {
			next = max(next, st.generation+1)
		}
	}
	if err := writeGeneration(lock, next); err != nil {
		return err
	}
	return d.writeState(state{generation: next, fresh: true, records: map[int64][]byte{}})
}
