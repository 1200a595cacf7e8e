package randflake

import (
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// ID is an encrypted Randflake ID for use in applications. Its text form is
// the base32hex string of EncodeString; in JSON it is that string, since
// encrypted IDs exceed 2^53 and lose digits as JavaScript numbers (a JSON
// number is accepted on input). In SQL it is a BIGINT.
//
// The zero ID is a valid value ("0"): a generator may issue it, as rarely
// as any other value.
type ID int64

// ParseID parses the string form of an ID (see DecodeString). An error
// wraps ErrInvalidID and quotes the input, cut to its first 64 bytes.
func ParseID(s string) (ID, error) {
	v, err := DecodeString(s)
	return ID(v), err
}

// String returns the base32hex form of the ID.
func (id ID) String() string { return EncodeString(int64(id)) }

// Int64 returns the ID as the int64 that Generate returns.
func (id ID) Int64() int64 { return int64(id) }

// MarshalText implements encoding.TextMarshaler.
func (id ID) MarshalText() ([]byte, error) {
	return AppendString(make([]byte, 0, maxEncodedLen), int64(id)), nil
}

// AppendText implements encoding.TextAppender.
func (id ID) AppendText(b []byte) ([]byte, error) {
	return AppendString(b, int64(id)), nil
}

// UnmarshalText implements encoding.TextUnmarshaler. An error wraps
// ErrInvalidID and quotes the input, as DecodeString's.
func (id *ID) UnmarshalText(b []byte) error {
	v, ok := decodeBase32hex(b)
	if !ok {
		return invalidID(b)
	}
	*id = ID(v)
	return nil
}

// MarshalJSON encodes the ID as a JSON string.
func (id ID) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, maxEncodedLen+2)
	b = append(b, '"')
	b = AppendString(b, int64(id))
	return append(b, '"'), nil
}

// UnmarshalJSON accepts the ID as a JSON string in its text form, or as a
// JSON integer (the int64 value). null leaves the ID unchanged.
func (id *ID) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		return id.UnmarshalText(b[1 : len(b)-1])
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("randflake: ID from JSON %.40q: %w", b, ErrInvalidID)
	}
	*id = ID(v)
	return nil
}

// MarshalBinary encodes the ID as 8 bytes, big-endian.
func (id ID) MarshalBinary() ([]byte, error) {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(id)), nil
}

// AppendBinary implements encoding.BinaryAppender.
func (id ID) AppendBinary(b []byte) ([]byte, error) {
	return binary.BigEndian.AppendUint64(b, uint64(id)), nil
}

// UnmarshalBinary decodes the 8-byte form of MarshalBinary.
func (id *ID) UnmarshalBinary(b []byte) error {
	if len(b) != 8 {
		return fmt.Errorf("randflake: binary ID of %d bytes, want 8: %w", len(b), ErrInvalidID)
	}
	*id = ID(binary.BigEndian.Uint64(b))
	return nil
}

// Value implements database/sql/driver.Valuer: the ID is stored as a BIGINT.
func (id ID) Value() (driver.Value, error) { return int64(id), nil }

// Scan implements database/sql.Scanner. It accepts an int64 (BIGINT), and
// text or []byte holding either the string form or a decimal integer.
func (id *ID) Scan(src any) error {
	switch v := src.(type) {
	case int64:
		*id = ID(v)
		return nil
	case string:
		return id.scanText([]byte(v))
	case []byte:
		return id.scanText(v)
	case nil:
		return errors.New("randflake: cannot scan NULL into ID")
	default:
		return fmt.Errorf("randflake: cannot scan %T into ID", src)
	}
}

// scanText accepts a decimal integer (as some drivers return BIGINT
// columns) or the base32hex form. A string of decimal digits is read as a
// decimal integer.
func (id *ID) scanText(b []byte) error {
	if v, err := strconv.ParseInt(string(b), 10, 64); err == nil {
		*id = ID(v)
		return nil
	}
	return id.UnmarshalText(b)
}
