package loadclient

import (
	"context"
	binenc "encoding/binary"
	"errors"
	"fmt"

	"github.com/randflake/randflake"
)

// maxIDText is the longest ID a run accepts in text and JSON answers: the
// string form has at most 13 characters.
const maxIDText = 16

// idSink decodes the IDs of one answer as its body arrives, in the
// answer's format, and checks each write's IDs against the run's
// duplicate window. It keeps no more than one write's IDs, so a verified
// run's memory does not grow with the answers' size, and a body cut off
// at the run's deadline stops being decoded at once.
type idSink struct {
	ctx    context.Context // the run's: decoding stops at its deadline
	format string
	dups   *dupWindow
	n      int64   // IDs decoded
	bytes  int64   // bytes written
	part   []byte  // an ID split across writes
	inStr  bool    // json: inside a string
	strs   int     // json: strings seen (the first is the key "ids")
	ids    []int64 // this write's IDs
}

// reset prepares s for the next answer.
func (s *idSink) reset() {
	s.n, s.bytes, s.part, s.inStr, s.strs = 0, 0, s.part[:0], false, 0
}

// errMalformed is an answer a run cannot read.
var errMalformed = errors.New("malformed answer")

// sinkChunk is how much of a write is decoded between two looks at the
// run's deadline, so that no decoding outlasts it by more than a moment.
const sinkChunk = 4 << 10

// Write decodes p, a chunk at a time, until the run's deadline.
func (s *idSink) Write(p []byte) (int, error) {
	for i := 0; i < len(p); i += sinkChunk {
		if err := s.ctx.Err(); err != nil {
			return i, err
		}
		if _, err := s.write(p[i:min(i+sinkChunk, len(p))]); err != nil {
			return i, err
		}
	}
	return len(p), nil
}

// write decodes p.
func (s *idSink) write(p []byte) (int, error) {
	s.bytes += int64(len(p))
	s.ids = s.ids[:0]
	var err error
	switch s.format {
	case "binary":
		err = s.binary(p)
	case "text":
		err = s.text(p)
	default:
		err = s.json(p)
	}
	if err != nil {
		return 0, err
	}
	return len(p), s.check()
}

// check adds this write's IDs to the window.
func (s *idSink) check() error {
	s.n += int64(len(s.ids))
	if id, dup := s.dups.add(s.ids); dup {
		return fmt.Errorf("duplicate ID %d (%s)", id, randflake.EncodeString(id))
	}
	return nil
}

// binary decodes 8 bytes, big-endian, an ID.
func (s *idSink) binary(p []byte) error {
	if len(s.part) > 0 {
		k := min(8-len(s.part), len(p))
		s.part, p = append(s.part, p[:k]...), p[k:]
		if len(s.part) < 8 {
			return nil
		}
		s.ids = append(s.ids, int64(binenc.BigEndian.Uint64(s.part)))
		s.part = s.part[:0]
	}
	for ; len(p) >= 8; p = p[8:] {
		s.ids = append(s.ids, int64(binenc.BigEndian.Uint64(p)))
	}
	s.part = append(s.part, p...)
	return nil
}

// text decodes one ID in string form a line.
func (s *idSink) text(p []byte) error {
	for _, c := range p {
		if c != '\n' {
			if len(s.part) == maxIDText {
				return fmt.Errorf("%w: a line longer than an ID", errMalformed)
			}
			s.part = append(s.part, c)
			continue
		}
		if err := s.token(); err != nil {
			return err
		}
	}
	return nil
}

// json decodes {"ids":["ID",...]}: every string after the key is an ID.
func (s *idSink) json(p []byte) error {
	for _, c := range p {
		switch {
		case !s.inStr && c == '"':
			s.inStr = true
		case !s.inStr:
		case c == '"':
			s.inStr = false
			if s.strs++; s.strs == 1 {
				if string(s.part) != "ids" {
					return fmt.Errorf("%w: want {\"ids\":[...]}", errMalformed)
				}
				s.part = s.part[:0]
				continue
			}
			if err := s.token(); err != nil {
				return err
			}
		case len(s.part) == maxIDText:
			return fmt.Errorf("%w: a string longer than an ID", errMalformed)
		default:
			s.part = append(s.part, c)
		}
	}
	return nil
}

// token decodes the ID in part.
func (s *idSink) token() error {
	id, err := randflake.DecodeString(string(s.part))
	if err != nil {
		return fmt.Errorf("%w: %q is not an ID", errMalformed, s.part)
	}
	s.ids = append(s.ids, id)
	s.part = s.part[:0]
	return nil
}

// finish checks that the answer ended where an ID ends.
func (s *idSink) finish() error {
	if len(s.part) > 0 || s.inStr {
		return fmt.Errorf("%w: it ends inside an ID", errMalformed)
	}
	return nil
}
