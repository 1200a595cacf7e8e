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
	"sort"
	"strconv"
	"strings"

	"github.com/randflake/randflake"
)

// The state file records, per block of node IDs, the newest second any ID
// on it may carry. It is self-checking, so that a truncated, edited or
// partly lost file is never read as "free":
//
//	randflake statedir 2
//	# comments
//	history own|external   whose IDs the history is complete for: the
//	                       directory's own secret, or a secret from outside
//	unrecorded UNTIL       no ID on a block without a line carries a later second
//	BLOCK AT UNTIL         one line per block, each block at most once
//	sum HEX                SHA-256 of every byte before this line
//
// AT is the newest clock reading written with the block (a clock found
// behind it at start-up stepped back). Every second lies in
// [randflake.Epoch, randflake.MaxTimestamp].
const (
	stateHeader    = "randflake statedir 2"
	stateHeaderOld = "randflake statedir 1"
	maxStateFile   = 1 << 20
)

// ErrCorruptState: the state file passes its checksum but holds values
// this package never writes (a second outside the lifetime of Randflake
// IDs, a block twice or out of range). Someone forged it; nothing is
// issued until a person looks.
var ErrCorruptState = errors.New("statedir: the state file is well-formed but holds impossible values (forged?)")

// errUnverified: the state file cannot be trusted (no checksum, a wrong
// one, truncated, malformed); its history is unknown.
var errUnverified = errors.New("state file fails its check")

// record is the state of one block.
type record struct {
	at    int64 // the newest clock reading written with it
	until int64 // no ID on the block carries a later second
}

// state is the content of the state file.
type state struct {
	// unrecorded bounds the seconds of blocks without a record: after the
	// file was lost or found corrupt, the longest any earlier holder can
	// have promised; randflake.Epoch in a directory whose history is
	// complete.
	unrecorded int64
	// external: the history is complete for a secret from outside the
	// directory (someone waited out what came before); otherwise only for
	// the directory's own secret.
	external bool
	recs     map[int]record
}

// until returns the newest second block b may have been used in.
func (st *state) until(b int) int64 {
	if r, ok := st.recs[b]; ok {
		return max(r.until, st.unrecorded)
	}
	return st.unrecorded
}

// newest returns the newest clock reading recorded.
func (st *state) newest() int64 {
	var n int64
	for _, r := range st.recs {
		n = max(n, r.at)
	}
	return n
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
	st := state{recs: map[int]record{}}
	text := string(data)
	first, _, _ := strings.Cut(text, "\n")
	if first == stateHeaderOld {
		return st, fmt.Errorf("%w: written by an older version, without a checksum", errUnverified)
	}
	if first != stateHeader {
		return st, fmt.Errorf("%w: not a state file (first line %.40q)", errUnverified, first)
	}
	body, sumLine, ok := cutLastLine(text)
	sum := sha256.Sum256([]byte(body))
	if !ok || sumLine != "sum "+hex.EncodeToString(sum[:]) {
		return st, fmt.Errorf("%w: truncated or edited (checksum)", errUnverified)
	}
	seenUnrecorded, seenHistory := false, false
	for n, line := range strings.Split(body, "\n")[1:] {
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "history" && !seenHistory && (f[1] == "own" || f[1] == "external") {
			st.external, seenHistory = f[1] == "external", true
			continue
		}
		if len(f) == 2 && f[0] == "unrecorded" && !seenUnrecorded {
			v, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || !inLifetime(v) {
				return st, fmt.Errorf("%w: line %d: unrecorded second %q outside %d-%d", ErrCorruptState, n+2, f[1], int64(randflake.Epoch), int64(randflake.MaxTimestamp))
			}
			st.unrecorded, seenUnrecorded = v, true
			continue
		}
		var v [3]int64
		ok := len(f) == 3
		for i := 0; ok && i < 3; i++ {
			var err error
			v[i], err = strconv.ParseInt(f[i], 10, 64)
			ok = err == nil
		}
		switch {
		case !ok:
			return st, fmt.Errorf("%w: line %d: malformed %.60q", ErrCorruptState, n+2, line)
		case v[0] < 0 || v[0] > randflake.MaxNode/BlockSize:
			return st, fmt.Errorf("%w: line %d: no block %d", ErrCorruptState, n+2, v[0])
		case !inLifetime(v[1]) || !inLifetime(v[2]):
			return st, fmt.Errorf("%w: line %d: block %d: second outside %d-%d", ErrCorruptState, n+2, v[0], int64(randflake.Epoch), int64(randflake.MaxTimestamp))
		}
		if _, dup := st.recs[int(v[0])]; dup {
			return st, fmt.Errorf("%w: line %d: block %d recorded twice", ErrCorruptState, n+2, v[0])
		}
		st.recs[int(v[0])] = record{at: v[1], until: v[2]}
	}
	if !seenUnrecorded || !seenHistory {
		return st, fmt.Errorf("%w: no unrecorded or history line", ErrCorruptState)
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

func historyName(external bool) string {
	if external {
		return "external"
	}
	return "own"
}

func inLifetime(sec int64) bool {
	return sec >= randflake.Epoch && sec <= randflake.MaxTimestamp
}

// formatState writes st in the state file's format. It refuses values
// parseState would refuse, so the file is never rewritten into a state
// that later starts refuse.
func formatState(st state) ([]byte, error) {
	if !inLifetime(st.unrecorded) {
		return nil, fmt.Errorf("statedir: internal error: unrecorded second %d outside the lifetime", st.unrecorded)
	}
	blocks := make([]int, 0, len(st.recs))
	for b, r := range st.recs {
		if b < 0 || b > randflake.MaxNode/BlockSize || !inLifetime(r.at) || !inLifetime(r.until) {
			return nil, fmt.Errorf("statedir: internal error: record %d %d %d out of range", b, r.at, r.until)
		}
		blocks = append(blocks, b)
	}
	sort.Ints(blocks)
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "%s\n# unrecorded UNTIL: no ID on a block without a line carries a second after UNTIL.\n"+
		"# BLOCK AT UNTIL: no ID on node IDs %d*BLOCK to %d*BLOCK+%d carries a second after UNTIL\n"+
		"# (Unix seconds); AT is the newest clock reading written. The last line is a\n"+
		"# checksum: a file edited by hand fails it, and its history counts as unknown.\nhistory %s\nunrecorded %d\n",
		stateHeader, BlockSize, BlockSize, BlockSize-1, historyName(st.external), st.unrecorded)
	for _, b := range blocks {
		fmt.Fprintf(&buf, "%d %d %d\n", b, st.recs[b].at, st.recs[b].until)
	}
	sum := sha256.Sum256(buf.Bytes())
	fmt.Fprintf(&buf, "sum %s\n", hex.EncodeToString(sum[:]))
	return buf.Bytes(), nil
}

// writeState replaces the state file durably.
func (d *Dir) writeState(st state) error {
	data, err := formatState(st)
	if err != nil {
		return err
	}
	return writeDurably(d.statePath(), data)
}
