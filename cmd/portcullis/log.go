package main

import "log/slog"

// Environment variables that shape every command's log.
const (
	envLogFormat = "PORTCULLIS_LOG_FORMAT"
	envLogLevel  = "PORTCULLIS_LOG_LEVEL"
)

// newLogger logs JSON to stderr (text with PORTCULLIS_LOG_FORMAT=text) at
// PORTCULLIS_LOG_LEVEL (debug, info — the default —, warn, error).
func newLogger(env *environment) (*slog.Logger, error) {
	var level slog.Level
	if v := env.getenv(envLogLevel); v != "" {
		if err := level.UnmarshalText([]byte(v)); err != nil {
			return nil, usagef("%s: %v", envLogLevel, err)
		}
	}
	opts := &slog.HandlerOptions{Level: level}
	if env.getenv(envLogFormat) == "text" {
		return slog.New(slog.NewTextHandler(env.stderr, opts)), nil
	}
	return slog.New(slog.NewJSONHandler(env.stderr, opts)), nil
}
