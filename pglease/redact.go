package pglease

import (
	"errors"
	"strings"
)

// redactor removes the connection's password from errors.
type redactor struct {
	password string
}

// redacted is an error whose message had the password removed. It answers
// errors.Is and errors.As like the original but does not unwrap to it.
type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string        { return e.msg }
func (e *redacted) Is(target error) bool { return errors.Is(e.err, target) }
func (e *redacted) As(target any) bool   { return errors.As(e.err, target) }

// scrub removes the connection's password from an error's message.
func (r redactor) scrub(err error) error {
	if err == nil || r.password == "" || !strings.Contains(err.Error(), r.password) {
		return err
	}
	return &redacted{msg: strings.ReplaceAll(err.Error(), r.password, "xxxxx"), err: err}
}
