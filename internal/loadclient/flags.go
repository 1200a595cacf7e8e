package loadclient

import (
	"flag"
	"fmt"
	"net/url"
	"time"
)

// Flags registers on fs the flags of a run that randflake load and the
// benchmark's load generator share, each setting its field of c: url,
// format, batch, concurrency, duration, requests, rate and verify, with
// their defaults (a JSON request of 1 ID on 4 connections for 5 s, IDs
// verified, at http://127.0.0.1:8080). dash is how the program writes a
// flag in its usage: "--" or "-".
func (c *Config) Flags(fs *flag.FlagSet, dash string) {
	fs.StringVar(&c.URL, "url", "http://127.0.0.1:8080", "base URL of the service (loopback only)")
	fs.StringVar(&c.Format, "format", "json", "answer format asked for: json, text (both with IDs in string form) or binary")
	fs.IntVar(&c.Batch, "batch", 1, "IDs per request")
	fs.IntVar(&c.Concurrency, "concurrency", 4, fmt.Sprintf("concurrent connections (at most %d)", MaxConcurrency))
	fs.DurationVar(&c.Duration, "duration", 5*time.Second, fmt.Sprintf("how long to run (at most %ds)", int(MaxDuration.Seconds())))
	fs.IntVar(&c.Requests, "requests", 0, "stop after this many requests (0: run for "+dash+"duration)")
	fs.Float64Var(&c.Rate, "rate", 0, "requests per second in total (0: as fast as possible)")
	fs.BoolVar(&c.Verify, "verify", true, "decode every ID and check for duplicates (false: count bytes and IDs only)")
}

// UsageError is a flag's value that Check refuses: its message names the
// flag and what it must be, as a usage line shows it.
type UsageError string

func (e UsageError) Error() string { return string(e) }

// Check checks the values Flags set, and writes c.URL back in its
// normal form. httpsOK allows an https URL. A value out of bounds, or a
// URL off this machine (127.0.0.1, localhost or ::1), is a UsageError
// naming the flag, written with dash.
func (c *Config) Check(dash string, httpsOK bool) error {
	u, err := url.Parse(c.URL)
	switch {
	case httpsOK && (err != nil || u.Scheme != "http" && u.Scheme != "https"):
		return UsageError(dash + "url must be an http or https URL")
	case !httpsOK && (err != nil || u.Scheme != "http"):
		return UsageError(dash + "url must be an http URL")
	}
	if h := u.Hostname(); h != "127.0.0.1" && h != "localhost" && h != "::1" {
		return UsageError(dash + "url must point at this machine (127.0.0.1, localhost or ::1)")
	}
	c.URL = u.String()
	if c.Batch < 1 || c.Duration <= 0 || c.Duration > MaxDuration || c.Requests < 0 || c.Rate < 0 {
		return UsageError(fmt.Sprintf("%[1]sbatch must be positive, %[1]sduration in (0, %[2]ds], %[1]srequests and %[1]srate not negative", dash, int(MaxDuration.Seconds())))
	}
	if c.Concurrency < 1 || c.Concurrency > MaxConcurrency {
		return UsageError(fmt.Sprintf("%sconcurrency must be between 1 and %d", dash, MaxConcurrency))
	}
	if c.Format != "json" && c.Format != "text" && c.Format != "binary" {
		return UsageError(dash + "format must be json, text or binary")
	}
	return nil
}
