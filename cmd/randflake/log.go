package main

import (
	"context"
	"io"
	"log/slog"
	"slices"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newLogger returns a logger writing to w in format "text" or "json".
func newLogger(w io.Writer, format string, level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usagef("--log-format must be text or json")
}

// zapToSlog returns a zap logger, for the etcd client, that hands its
// entries at warning level and above to log, so that they come out in the
// process's log format.
func zapToSlog(log *slog.Logger) *zap.Logger {
	return zap.New(&slogCore{log: log, level: zapcore.WarnLevel})
}

// slogCore is a zapcore.Core writing to a slog.Logger.
type slogCore struct {
	log    *slog.Logger
	level  zapcore.Level
	fields []zapcore.Field
}

// Enabled reports whether entries at l are passed on.
func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= c.level }

// With returns a core that adds fields to every entry.
func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, level: c.level, fields: slices.Concat(c.fields, fields)}
}

// Check adds the core to ce if the entry's level is enabled.
func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

// Write logs the entry with its fields, sorted by key.
func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	args := make([]any, 0, 2*len(keys)+2)
	if e.LoggerName != "" {
		args = append(args, "logger", e.LoggerName)
	}
	for _, k := range keys {
		args = append(args, k, enc.Fields[k])
	}
	level := slog.LevelWarn
	if e.Level >= zapcore.ErrorLevel {
		level = slog.LevelError
	}
	c.log.Log(context.Background(), level, e.Message, args...)
	return nil
}

// Sync does nothing: slog handlers write at once.
func (c *slogCore) Sync() error { return nil }
