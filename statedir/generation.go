package statedir

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// The directory's generation counts the writes of its state file. Each
// write first records the new generation in the lock file, durably, then
// writes the state file, whose fleet marker names the same generation. The
// lock file is opened in place and never replaced, so a state file put
// back from an older copy (alone, without the lock file) names an older
// generation than the lock file: BlockSource sees the store's identity
// changed, and waits its history out. A crash between the two writes
// leaves the lock file one generation ahead: one wait, never trust in a
// stale file. The lock file holds one line:
//
//	gen N
//
// An empty lock file is generation 0: a new directory, or one whose lock
// file was removed (its state file then names a later generation, which
// counts as a mismatch too).

// maxGenerationFile bounds what is read of the lock file.
const maxGenerationFile = 64

// generationUnreadable is the identity of a directory whose lock file
// holds something else than a generation: it matches no marker.
const generationUnreadable = "lock file unreadable"

// readGeneration reads the generation in the lock file f. It returns -1
// if f holds something else than a generation.
func readGeneration(f *os.File) (int64, error) {
	buf := make([]byte, maxGenerationFile+1)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("statedir: reading %s: %w", f.Name(), err)
	}
	if n > maxGenerationFile {
		return -1, nil
	}
	text := strings.TrimSpace(string(buf[:n]))
	if text == "" {
		return 0, nil
	}
	num, ok := strings.CutPrefix(text, "gen ")
	if !ok {
		return -1, nil
	}
	g, err := strconv.ParseInt(num, 10, 64)
	if err != nil || g < 0 || num != strconv.FormatInt(g, 10) {
		return -1, nil
	}
	return g, nil
}

// writeGeneration records gen in the lock file f, durably.
func writeGeneration(f *os.File, gen int64) error {
	line := []byte(fmt.Sprintf("gen %d\n", gen))
	_, err := f.WriteAt(line, 0)
	if err == nil {
		err = f.Truncate(int64(len(line)))
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return fmt.Errorf("statedir: recording the generation in %s: %w", f.Name(), err)
	}
	return nil
}

// generationID is the store identity of generation g.
func generationID(g int64) string {
	if g < 0 {
		return generationUnreadable
	}
	return "gen " + strconv.FormatInt(g, 10)
}
